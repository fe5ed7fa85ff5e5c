// Observers: control connections that only look (regcachectl's status, stats, sessions, keys).
// An observer is authenticated like a session (SO_PEERCRED, the allow-list) and gets a token
// from the sessions' id and token spaces, but holds nothing: no cache tenant (PD, pool, quotas),
// no shared files, no ring worker. Its token serves the read-only calls only; the daemon refuses
// every other call with kPermissionDenied (ObserverRefusal). Observers are counted in no session
// count (Status, Sessions, the sessions_* stats, max_sessions); kMaxObservers bounds them.
// Internal to service/: callers use service/daemon.h (Daemon::OpenObserver).
#ifndef REGCACHE_SERVICE_INTERNAL_OBSERVERS_H_
#define REGCACHE_SERVICE_INTERNAL_OBSERVERS_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "service/types.h"

namespace regcache::service::internal {

// Observers open at once; more are refused with kResourceExhausted. A probe holds one for the
// length of one command, so this is far above any honest use and bounds a misbehaving one.
inline constexpr size_t kMaxObservers = 256;

struct DeviceSlot;  // service/internal/device_set.h

struct Observer {
  SessionId id = 0;
  std::string token;
  PeerCredentials peer;
  bool admin = false;  // decided as a session's is, on the peer's credentials
};

// The open observers, by id and by token. Thread-safe.
class ObserverTable {
 public:
  // A new observer with id `id` (from the sessions' ids) for `peer`, on `device` (the grant
  // names it, for the caller's information; an error is returned as it is): its grant
  // (observer = true, a new token, no fds). kResourceExhausted past kMaxObservers; errno-based
  // errors making the token.
  absl::StatusOr<SessionGrant> Open(SessionId id, const PeerCredentials& peer, bool admin,
                                    absl::StatusOr<DeviceSlot*> device) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<Observer> Find(SessionId id) const ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<SessionId> FindToken(absl::string_view token) const ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets it; false when no observer has this id.
  bool Remove(SessionId id) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable base::Mutex mu_;
  absl::flat_hash_map<SessionId, Observer> by_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, SessionId> by_token_ ABSL_GUARDED_BY(mu_);
};

// The kPermissionDenied answer to a call an observer may not make: it names the observer and
// says what the caller needs instead.
absl::Status ObserverRefusal(SessionId id);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_OBSERVERS_H_
