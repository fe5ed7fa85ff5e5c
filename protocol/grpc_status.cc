#include "protocol/grpc_status.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "base/error_reason.h"
#include "base/mutex.h"
#include "base/status_code.h"
#include "protocol/proto_wire.h"

namespace regcache::protocol {
namespace {

constexpr int kLastCanonicalCode = 16;  // UNAUTHENTICATED
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) == kLastCanonicalCode);
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) == kLastCanonicalCode);
static_assert(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED) ==
              static_cast<int>(absl::StatusCode::kResourceExhausted));

}  // namespace

std::string EncodeErrorDetails(int code, absl::string_view message,
                               const base::ErrorReason& reason) {
  // google.rpc.ErrorInfo {string reason = 1; string domain = 2; map<string, string> metadata = 3}
  // (a map is a repeated entry message {key = 1; value = 2}).
  std::string info;
  wire::AppendBytesField(&info, 1, reason.reason);
  wire::AppendBytesField(&info, 2, kErrorDomain);
  for (const auto& [key, value] : reason.metadata) {
    std::string entry;
    wire::AppendBytesField(&entry, 1, key);
    wire::AppendBytesField(&entry, 2, value);
    wire::AppendBytesField(&info, 3, entry);
  }
  // google.protobuf.Any {string type_url = 1; bytes value = 2}
  std::string any;
  wire::AppendBytesField(&any, 1, kErrorInfoTypeUrl);
  wire::AppendBytesField(&any, 2, info);
  // google.rpc.Status {int32 code = 1; string message = 2; repeated Any details = 3}
  std::string out;
  if (code != 0) wire::AppendVarintField(&out, 1, static_cast<uint64_t>(code));
  if (!message.empty()) wire::AppendBytesField(&out, 2, message);
  wire::AppendBytesField(&out, 3, any);
  return out;
}

namespace {

// An ErrorInfo's fields; nullopt if it does not parse.
std::optional<base::ErrorReason> DecodeErrorInfo(absl::string_view bytes, std::string* domain) {
  base::ErrorReason out;
  std::map<std::string, std::string> metadata;  // a later entry for a key wins, as in a map
  wire::Reader r(bytes);
  wire::Reader::Field f;
  while (r.Next(&f)) {
    if (f.wire_type != 2) continue;
    if (f.number == 1) out.reason = std::string(f.bytes);
    if (f.number == 2) *domain = std::string(f.bytes);
    if (f.number != 3) continue;
    std::string key, value;
    wire::Reader e(f.bytes);
    wire::Reader::Field ef;
    while (e.Next(&ef)) {
      if (ef.wire_type != 2) continue;
      if (ef.number == 1) key = std::string(ef.bytes);
      if (ef.number == 2) value = std::string(ef.bytes);
    }
    if (!e.ok()) return std::nullopt;
    metadata[std::move(key)] = std::move(value);
  }
  if (!r.ok()) return std::nullopt;
  out.metadata.assign(metadata.begin(), metadata.end());
  return out;
}

}  // namespace

std::optional<base::ErrorReason> DecodeErrorDetails(absl::string_view bytes) {
  wire::Reader r(bytes);
  wire::Reader::Field f;
  while (r.Next(&f)) {
    if (f.number != 3 || f.wire_type != 2) continue;  // details: Any
    absl::string_view type_url, value;
    wire::Reader a(f.bytes);
    wire::Reader::Field af;
    while (a.Next(&af)) {
      if (af.wire_type != 2) continue;
      if (af.number == 1) type_url = af.bytes;
      if (af.number == 2) value = af.bytes;
    }
    // Any's rule: the type is the URL's last path segment, whatever the host before it.
    if (!a.ok() || !absl::EndsWith(type_url, "/google.rpc.ErrorInfo")) continue;
    std::string domain;
    std::optional<base::ErrorReason> reason = DecodeErrorInfo(value, &domain);
    if (reason.has_value() && domain == kErrorDomain && !reason->reason.empty()) return reason;
  }
  return std::nullopt;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const absl::StatusCode code = base::CanonicalCode(static_cast<int>(status.code()));
  std::string message(status.message());
  std::optional<base::ErrorReason> reason = base::GetErrorReason(status);
  if (!reason.has_value()) return grpc::Status(static_cast<grpc::StatusCode>(code), message);
  std::string details = EncodeErrorDetails(static_cast<int>(code), message, *reason);
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::move(message), std::move(details));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(base::CanonicalCode(status.error_code()), status.error_message());
  std::optional<base::ErrorReason> reason = DecodeErrorDetails(status.error_details());
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

}  // namespace regcache::protocol
