#include "base/errno_status.h"

#include <string.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace regcache::base {

std::string ErrnoName(int err) {
  // strerrorname_np (glibc >= 2.32) is thread-safe and returns nullptr for unknown values.
  const char* name = ::strerrorname_np(err);
  if (name == nullptr) return absl::StrCat("errno=", err);
  return name;
}

absl::Status ErrnoToStatus(int err, absl::string_view context) {
  if (err == 0) {
    return absl::InternalError(absl::StrCat(context, ": failed but errno is 0"));
  }
  const char* text = ::strerrordesc_np(err);
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(context, ": ", ErrnoName(err), " (",
                                   text != nullptr ? text : "unknown error", ")"));
}

}  // namespace regcache::base