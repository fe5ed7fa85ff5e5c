#include "api/internal/grpc_status.h"

#include <string>
#include <utility>

#include "base/mutex.h"
#include "base/status_code.h"

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
  const absl::StatusCode code = base::CanonicalCode(static_cast<int>(status.code()));
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(base::CanonicalCode(status.error_code()), status.error_message());
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
