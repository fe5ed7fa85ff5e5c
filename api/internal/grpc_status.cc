#include "api/internal/grpc_status.h"

#include <string>

namespace regcache::api {
namespace {

constexpr int kLastCanonicalCode = 16;  // UNAUTHENTICATED
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) == kLastCanonicalCode);
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) == kLastCanonicalCode);
static_assert(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED) ==
              static_cast<int>(absl::StatusCode::kResourceExhausted));

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  int code = static_cast<int>(status.code());
  if (code < 0 || code > kLastCanonicalCode) code = static_cast<int>(grpc::StatusCode::UNKNOWN);
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  if (code < 0 || code > kLastCanonicalCode) code = static_cast<int>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace regcache::api