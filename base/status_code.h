// Status codes off a wire. Every transport of the project (gRPC, the control socket, the
// fast path's rings, batch items) carries the canonical codes of google.rpc.Code, which
// absl::StatusCode and grpc::StatusCode share; a peer may still send any number, so each
// receiver maps what it got through here.
//
// Thread safety: pure functions.
#ifndef REGCACHE_BASE_STATUS_CODE_H_
#define REGCACHE_BASE_STATUS_CODE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace regcache::base {

// `wire` as a canonical code: 0 (kOk) through 16 (kUnauthenticated); anything else is kUnknown.
inline absl::StatusCode CanonicalCode(int64_t wire) {
  if (wire < 0 || wire > static_cast<int64_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCode::kUnknown;
  }
  return static_cast<absl::StatusCode>(wire);
}

}  // namespace regcache::base
#endif  // REGCACHE_BASE_STATUS_CODE_H_
