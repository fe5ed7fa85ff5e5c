// What every regcached gRPC service does around a call (server/grpc_service.h): the deadline check,
// the session token, and the admin rule for calls that name another session. Shared by
// RegCacheService (server/grpc_service.cc) and SimPeerService
// (server/internal/sim_peer_service.cc).
#ifndef REGCACHE_SERVER_INTERNAL_GRPC_CALLS_H_
#define REGCACHE_SERVER_INTERNAL_GRPC_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protocol/grpc_status.h"
#include "service/daemon.h"

namespace regcache::server::internal {

// A call with less than this left counts as past its deadline. gRPC carries a deadline as a
// whole number of milliseconds, rounded up, so a call sent with no time left arrives with up to
// a millisecond "left"; work done then would be answered after the client gave up on it.
inline constexpr std::chrono::milliseconds kDeadlineMargin{2};

// OK while the call still has time; DEADLINE_EXCEEDED (reason DEADLINE_TOO_SHORT) otherwise.
// Deliberately not ServerContext::IsCancelled(): on the sync server it plucks the call's
// completion queue, which measured at ~80 us per call here — more than the whole empty RPC. A
// cancelled client gets no reply anyway; the deadline is what bounds the work.
absl::Status CheckDeadline(grpc::ServerContext* ctx);

class SessionCalls {
 public:
  explicit SessionCalls(service::Daemon* daemon) : daemon_(daemon) {}

  // The session named by the call's token: UNAUTHENTICATED (SESSION_TOKEN_MISSING or
  // SESSION_UNKNOWN) without a valid one.
  absl::StatusOr<service::SessionId> Authenticate(grpc::ServerContext* ctx);

  // The session a call acts on: the caller's (`named` 0 or the caller), or, for an admin
  // session only, the one it names (PERMISSION_DENIED, reason ADMIN_REQUIRED, otherwise).
  absl::StatusOr<service::SessionId> Target(service::SessionId caller, uint64_t named);

  // PERMISSION_DENIED (ADMIN_REQUIRED) unless `s` is an admin session (--admin_uids,
  // --admin_gids); `what` names the call. Daemon::RequireAdmin, which logs the refusal.
  absl::Status RequireAdmin(service::SessionId s, absl::string_view what);

  // Checks the deadline, authenticates, and runs fn(session) -> absl::Status.
  template <typename Fn>
  grpc::Status Run(grpc::ServerContext* ctx, Fn&& fn) {
    absl::Status s = CheckDeadline(ctx);
    if (s.ok()) {
      absl::StatusOr<service::SessionId> session = Authenticate(ctx);
      s = session.ok() ? std::forward<Fn>(fn)(*session) : session.status();
    }
    return protocol::ToGrpcStatus(s);
  }

 private:
  service::Daemon* daemon_;
};

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_GRPC_CALLS_H_
