#include "base/status_macros.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace regcache::base {

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok() || context.empty()) return s;
  absl::Status out(s.code(), absl::StrCat(context, ": ", s.message()));
  s.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace regcache::base