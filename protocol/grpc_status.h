// absl::Status <-> grpc::Status. The canonical codes have the same numeric values on both sides
// (absl::StatusCode and grpc::StatusCode both follow google.rpc.Code), so the mapping is 1:1 and
// the message is preserved. Codes outside the canonical range become UNKNOWN.
//
// Error reasons (base/error_reason.h) cross too: an absl::Status with a reason payload becomes a
// grpc::Status whose error_details (the grpc-status-details-bin trailer) is a serialized
// google.rpc.Status {code, message, details: [google.rpc.ErrorInfo {reason, domain
// kErrorDomain, metadata}]}, the convention every gRPC client library reads; FromGrpcStatus
// turns such an ErrorInfo (of our domain) back into the payload, so api::ErrorReason
// (include/regcache/client.h) sees what the daemon attached. Both messages are encoded by hand
// (protocol/proto_wire.h), not by google.rpc's generated code, which the client library
// must not carry (a program with its own copy would abort at load).
#ifndef REGCACHE_PROTOCOL_GRPC_STATUS_H_
#define REGCACHE_PROTOCOL_GRPC_STATUS_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/status.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/error_reason.h"

namespace regcache::protocol {

// google.rpc.ErrorInfo.domain of every reason regcached sends.
inline constexpr absl::string_view kErrorDomain = "regcache.io";

// The type URL of google.rpc.ErrorInfo in a google.protobuf.Any.
inline constexpr absl::string_view kErrorInfoTypeUrl = "type.googleapis.com/google.rpc.ErrorInfo";

// A serialized google.rpc.Status {code, message, details: [Any{ErrorInfo{reason, domain
// kErrorDomain, metadata}]}.
std::string EncodeErrorDetails(int code, absl::string_view message,
                               const base::ErrorReason& reason);
// The first ErrorInfo of our domain (with a reason) in a serialized google.rpc.Status; nullopt
// when there is none or the bytes do not parse. Metadata comes back in key order (a proto map
// has none of its own).
std::optional<base::ErrorReason> DecodeErrorDetails(absl::string_view bytes);

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// A unary call of `method` ("/pkg.Service/Method") with the serialized request `bytes`, waited
// for; the context's deadline bounds the wait. The reply's bytes land in `response`.
grpc::Status BlockingRawCall(grpc::GenericStub& stub, grpc::ClientContext* ctx,
                             const std::string& method, const std::string& bytes,
                             grpc::ByteBuffer* response);

}  // namespace regcache::protocol
#endif  // REGCACHE_PROTOCOL_GRPC_STATUS_H_
