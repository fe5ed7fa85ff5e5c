// absl::Status <-> grpc::Status. The canonical codes have the same numeric values on both sides
// (absl::StatusCode and grpc::StatusCode both follow google.rpc.Code), so the mapping is 1:1 and
// the message is preserved. Codes outside the canonical range become UNKNOWN.
#ifndef REGCACHE_API_GRPC_STATUS_H_
#define REGCACHE_API_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace regcache::api {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace regcache::api
#endif  // REGCACHE_API_GRPC_STATUS_H_
