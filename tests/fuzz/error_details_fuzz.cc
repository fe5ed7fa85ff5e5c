// Fuzz target: the error details codec (protocol/grpc_status.h over protocol/proto_wire.h),
// which reads the grpc-status-details-bin trailer of whatever answers on the
// daemon's gRPC socket. Any bytes decode to nothing or to a reason, never past the input; and
// a reason with metadata built from the input survives an encode and decode unchanged (keys in
// order, a repeated key's last value).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "protocol/grpc_status.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  std::optional<regcache::base::ErrorReason> any = regcache::protocol::DecodeErrorDetails(in);
  if (any.has_value()) Check(!any->reason.empty());

  // The input as "reason\0key\0value\0key\0value...".
  std::vector<std::string> parts = absl::StrSplit(in, absl::ByChar('\0'));
  regcache::base::ErrorReason reason{parts[0], {}};
  std::map<std::string, std::string> want;
  for (size_t i = 1; i + 1 < parts.size(); i += 2) {
    reason.metadata.emplace_back(parts[i], parts[i + 1]);
    want[parts[i]] = parts[i + 1];
  }
  const std::string bytes = regcache::protocol::EncodeErrorDetails(8, in, reason);
  std::optional<regcache::base::ErrorReason> back = regcache::protocol::DecodeErrorDetails(bytes);
  if (reason.reason.empty()) {
    Check(!back.has_value());  // no reason: nothing to report
    return 0;
  }
  Check(back.has_value() && back->reason == reason.reason);
  Check(std::map<std::string, std::string>(back->metadata.begin(), back->metadata.end()) == want);
  Check(back->metadata.size() == want.size());
  return 0;
}
