#include "tools/internal/health_probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "protocol/grpc_status.h"
#include "protocol/proto_wire.h"

namespace regcache::tools::internal {

absl::StatusOr<uint64_t> ParseHealthResponse(absl::string_view bytes) {
  // HealthCheckResponse{ServingStatus status = 1}
  uint64_t status = 0;
  protocol::wire::Reader r(bytes);
  protocol::wire::Reader::Field f;
  while (r.Next(&f)) {
    if (f.number == 1 && f.wire_type == 0) status = f.varint;
  }
  if (!r.ok()) return absl::InternalError("health response: does not parse");
  return status;
}

absl::StatusOr<std::string> CheckHealth(const std::string& target, absl::string_view service,
                                        absl::Duration timeout) {
  // HealthCheckRequest{string service = 1}: nothing at all for "".
  std::string request_bytes;
  if (!service.empty()) protocol::wire::AppendBytesField(&request_bytes, 1, service);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::ByteBuffer response;
  grpc::Status result = protocol::BlockingRawCall(stub, &ctx, "/grpc.health.v1.Health/Check",
                                                  request_bytes, &response);
  if (!result.ok()) return protocol::FromGrpcStatus(result);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("health response: unreadable");
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  absl::StatusOr<uint64_t> status = ParseHealthResponse(bytes);
  if (!status.ok()) return status.status();
  switch (*status) {
    case 0:
      return std::string("UNKNOWN");
    case 1:
      return std::string("SERVING");
    case 2:
      return std::string("NOT_SERVING");
    case 3:
      return std::string("SERVICE_UNKNOWN");
    default:
      return absl::StrCat(*status);
  }
}

}  // namespace regcache::tools::internal
