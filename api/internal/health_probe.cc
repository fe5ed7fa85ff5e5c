#include "api/internal/health_probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internal/grpc_status.h"
#include "base/mutex.h"

namespace regcache::api::internal {
namespace {

bool ReadVarint(absl::string_view* in, uint64_t* out) {
  *out = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in->empty()) return false;
    const uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<uint64_t> ParseHealthResponse(absl::string_view bytes) {
  uint64_t status = 0;
  while (!bytes.empty()) {
    uint64_t tag;
    if (!ReadVarint(&bytes, &tag)) return absl::InternalError("health response: bad tag");
    uint64_t value;
    switch (tag & 7) {
      case 0:  // varint
        if (!ReadVarint(&bytes, &value)) return absl::InternalError("health response: bad varint");
        if (tag >> 3 == 1) status = value;
        break;
      case 2:  // length-delimited: skipped
        if (!ReadVarint(&bytes, &value) || value > bytes.size()) {
          return absl::InternalError("health response: bad length");
        }
        bytes.remove_prefix(value);
        break;
      case 1:  // 64-bit, 32-bit: skipped
      case 5: {
        const size_t n = (tag & 7) == 1 ? 8 : 4;
        if (bytes.size() < n) return absl::InternalError("health response: truncated");
        bytes.remove_prefix(n);
        break;
      }
      default:
        return absl::InternalError(absl::StrCat("health response: wire type ", tag & 7));
    }
  }
  return status;
}

absl::StatusOr<std::string> CheckHealth(const std::string& target, absl::string_view service,
                                        absl::Duration timeout) {
  // HealthCheckRequest{string service = 1}: nothing at all for "".
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes += '\x0a';
    uint64_t n = service.size();
    while (n >= 0x80) {
      request_bytes += static_cast<char>((n & 0x7f) | 0x80);
      n >>= 7;
    }
    request_bytes += static_cast<char>(n);
    absl::StrAppend(&request_bytes, service);
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::ByteBuffer response;
  grpc::Status result =
      BlockingRawCall(stub, &ctx, "/grpc.health.v1.Health/Check", request_bytes, &response);
  if (!result.ok()) return FromGrpcStatus(result);
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

}  // namespace regcache::api::internal
