// Who may do what on regcached, from the peer credentials the kernel reports for a client
// (SO_PEERCRED: pid, uid and primary gid), and the log of what was refused.
//
//   - Opening a session: a uid in allow_uids or a gid in allow_gids; both lists empty, root and
//     the daemon's own uid (DaemonConfig).
//   - Admin (Sessions, Drain, acting on another session's keys or endpoints): a uid in admin_uids
//     or a gid in admin_gids, and nothing else. Root is not admin unless listed: a container that
//     runs as root and mounts the socket directory must not be able to drain the node's daemon.
//
// Every refusal is logged with the peer's credentials, once: a client that retries in a loop
// (a crash-looping pod) gets one line per `interval` per (uid, gid, what), and the next line
// after a quiet spell says how many were not logged. Internal to service/.
#ifndef REGCACHE_SERVICE_INTERNAL_ACCESS_POLICY_H_
#define REGCACHE_SERVICE_INTERNAL_ACCESS_POLICY_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "service/types.h"

namespace regcache::service::internal {

class AccessPolicy {
 public:
  // `self`: the daemon's own uid (getuid()), allowed sessions by default.
  AccessPolicy(const DaemonConfig& config, uid_t self);

  bool MayOpenSession(const PeerCredentials& peer) const;
  // OK, or PERMISSION_DENIED (reason PEER_NOT_ALLOWED, the uid and gid) when `peer` may not open
  // a session or an observer.
  absl::Status CheckMayOpenSession(const PeerCredentials& peer) const;
  bool IsAdmin(const PeerCredentials& peer) const;
  // For the startup log: who is admin ("admin: uids [0] gids []", or that nobody is).
  std::string DescribeAdmins() const;

 private:
  std::vector<uint32_t> allow_uids_;
  std::vector<uint32_t> allow_gids_;
  std::vector<uint32_t> admin_uids_;
  std::vector<uint32_t> admin_gids_;
  uid_t self_;
};

// RESOURCE_EXHAUSTED (reason SESSION_LIMIT_REACHED) for a session limit of `limit`: the
// daemon's (`device` empty) or one device's.
absl::Status SessionLimitReached(uint32_t limit, absl::string_view device);

class RefusalLog {
 public:
  using Clock = std::function<absl::Time()>;
  // Entries kept at most; past it, the ones older than `interval` are forgotten (a client
  // forgotten that way is logged again at its next refusal, which is the point anyway).
  static constexpr size_t kMaxEntries = 4096;

  explicit RefusalLog(absl::Duration interval = absl::Seconds(10), Clock now = &absl::Now);

  // Logs (WARNING) "<what> refused: pid P uid U gid G: <why>", unless the same uid, gid and
  // `what` was logged less than `interval` ago, in which case it is only counted. Returns
  // whether it logged.
  bool Refused(const PeerCredentials& peer, absl::string_view what, absl::string_view why);

 private:
  struct Entry {
    absl::Time logged;
    uint64_t unlogged = 0;
  };
  using Key = std::tuple<uid_t, gid_t, std::string>;

  const absl::Duration interval_;
  const Clock now_;
  base::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_ACCESS_POLICY_H_
