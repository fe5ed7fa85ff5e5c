// absl::Status <-> grpc::Status. The canonical codes have the same numeric values on both sides
// (absl::StatusCode and grpc::StatusCode both follow google.rpc.Code), so the mapping is 1:1 and
// the message is preserved. Codes outside the canonical range become UNKNOWN.
#ifndef REGCACHE_API_GRPC_STATUS_H_
#define REGCACHE_API_GRPC_STATUS_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace regcache::api {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// A unary call of `method` ("/pkg.Service/Method") with the serialized request `bytes`, waited
// for; the context's deadline bounds the wait. The reply's bytes land in `response`.
grpc::Status BlockingRawCall(grpc::GenericStub& stub, grpc::ClientContext* ctx,
                             const std::string& method, const std::string& bytes,
                             grpc::ByteBuffer* response);

}  // namespace regcache::api
#endif  // REGCACHE_API_GRPC_STATUS_H_
