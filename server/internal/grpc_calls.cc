#include "server/internal/grpc_calls.h"

#include "absl/strings/str_cat.h"
#include "base/error_reason.h"
#include "base/status_macros.h"
#include "protocol/control_protocol.h"

namespace regcache::server::internal {

absl::Status CheckDeadline(grpc::ServerContext* ctx) {
  if (ctx->deadline() - std::chrono::system_clock::now() < kDeadlineMargin) {
    return base::WithReason(
        absl::DeadlineExceededError(
            "the deadline passed (or less than 2 ms was left) before the work was done"),
        base::reason::kDeadlineTooShort, {{"margin_ms", std::to_string(kDeadlineMargin.count())}});
  }
  return absl::OkStatus();
}

absl::StatusOr<service::SessionId> SessionCalls::Authenticate(grpc::ServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(protocol::kSessionMetadataKey);
  if (it == md.end()) {
    return base::WithReason(
        absl::UnauthenticatedError(absl::StrCat("missing ", protocol::kSessionMetadataKey,
                                                " metadata (connect the control socket "
                                                "first and present its token)")),
        base::reason::kSessionTokenMissing);
  }
  if (md.count(protocol::kSessionMetadataKey) != 1) {
    return base::WithReason(absl::UnauthenticatedError("more than one session token"),
                            base::reason::kSessionTokenMissing);
  }
  return daemon_->Authenticate(absl::string_view(it->second.data(), it->second.size()));
}

absl::Status SessionCalls::RequireAdmin(service::SessionId s, absl::string_view what) {
  return daemon_->RequireAdmin(s, what);  // refusals logged there, once per peer
}

absl::StatusOr<service::SessionId> SessionCalls::Target(service::SessionId caller, uint64_t named) {
  if (named == 0 || named == caller) return caller;
  RETURN_IF_ERROR(RequireAdmin(caller, "acting on another session"));
  return named;
}

}  // namespace regcache::server::internal
