#include "hca/device.h"

#include "absl/strings/str_join.h"

namespace regcache::hca {

const char* KeyBoundsName(KeyBounds b) {
  switch (b) {
    case KeyBounds::kUnknown:
      return "unknown";
    case KeyBounds::kKey:
      return "key";
    case KeyBounds::kCut:
      return "cut";
    case KeyBounds::kAttachment:
      return "attachment";
  }
  return "invalid";
}

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