#include "hca/device.h"

#include "absl/strings/str_join.h"

namespace regcache::hca {

std::string AccessToString(AccessFlags access) {
  std::vector<absl::string_view> parts;
  if (access & kLocalRead) parts.push_back("lr");
  if (access & kLocalWrite) parts.push_back("lw");
  if (access & kRemoteRead) parts.push_back("rr");
  if (access & kRemoteWrite) parts.push_back("rw");
  if (access & kRemoteAtomic) parts.push_back("a");
  if (parts.empty()) return "none";
  return absl::StrJoin(parts, "|");
}

}  // namespace regcache::hca