#include "api/internal/grpc_status.h"

#include <optional>
#include <string>
#include <utility>

#include "base/error_reason.h"
#include "base/mutex.h"
#include "base/status_code.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace regcache::api {
namespace {

constexpr int kLastCanonicalCode = 16;  // UNAUTHENTICATED
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) == kLastCanonicalCode);
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) == kLastCanonicalCode);
static_assert(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED) ==
              static_cast<int>(absl::StatusCode::kResourceExhausted));

// The google.rpc.Status carrying `reason` as an ErrorInfo, serialized.
std::string ErrorDetails(int code, const std::string& message, const base::ErrorReason& reason) {
  google::rpc::ErrorInfo info;
  info.set_reason(reason.reason);
  info.set_domain(std::string(kErrorDomain));
  for (const auto& [key, value] : reason.metadata) (*info.mutable_metadata())[key] = value;
  google::rpc::Status details;
  details.set_code(code);
  details.set_message(message);
  details.add_details()->PackFrom(info);
  return details.SerializeAsString();
}

// The ErrorInfo of our domain in a status's details, if there is one.
std::optional<base::ErrorReason> ReasonOf(const grpc::Status& status) {
  if (status.error_details().empty()) return std::nullopt;
  google::rpc::Status details;
  if (!details.ParseFromString(status.error_details())) return std::nullopt;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    if (!any.Is<google::rpc::ErrorInfo>() || !any.UnpackTo(&info)) continue;
    if (info.domain() != kErrorDomain || info.reason().empty()) continue;
    base::ErrorReason out{info.reason(), {}};
    for (const auto& [key, value] : info.metadata()) out.metadata.emplace_back(key, value);
    return out;
  }
  return std::nullopt;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const absl::StatusCode code = base::CanonicalCode(static_cast<int>(status.code()));
  std::string message(status.message());
  std::optional<base::ErrorReason> reason = base::GetErrorReason(status);
  if (!reason.has_value()) return grpc::Status(static_cast<grpc::StatusCode>(code), message);
  std::string details = ErrorDetails(static_cast<int>(code), message, *reason);
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::move(message), std::move(details));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(base::CanonicalCode(status.error_code()), status.error_message());
  std::optional<base::ErrorReason> reason = ReasonOf(status);
  if (!reason.has_value()) return out;
  return base::WithReason(std::move(out), reason->reason, std::move(reason->metadata));
}

grpc::Status BlockingRawCall(grpc::GenericStub& stub, grpc::ClientContext* ctx,
                             const std::string& method, const std::string& bytes,
                             grpc::ByteBuffer* response) {
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  base::Mutex mu;
  base::CondVar cv;
  bool done = false;    // guarded by mu
  grpc::Status result;  // guarded by mu
  stub.UnaryCall(ctx, method, grpc::StubOptions(), &request, response, [&](grpc::Status s) {
    base::MutexLock l(&mu);
    result = std::move(s);
    done = true;
    cv.SignalAll();
  });
  base::MutexLock l(&mu);
  while (!done) cv.Wait(&mu);  // the call's deadline bounds the wait
  return result;
}

}  // namespace regcache::api
