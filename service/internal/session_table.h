// The daemon's sessions: what one session holds (its cache tenant, its shareable memory, its
// peer port, its target endpoints), the pin that keeps a session open for the length of one call,
// and the table that finds a session by id or by token. Internal to service/: callers use
// service/daemon.h.
//
// Locks, in the order they are taken: a session's `ops` (shared by its calls in flight,
// exclusive while it closes), then its `mu`. The table's mutex is taken alone: nothing else is
// locked while it is held.
#ifndef REGCACHE_SERVICE_INTERNAL_SESSION_TABLE_H_
#define REGCACHE_SERVICE_INTERNAL_SESSION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "cache/backing_set.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "service/internal/endpoints.h"
#include "service/internal/grant_table.h"
#include "service/internal/memory_budget.h"
#include "service/internal/ring_server.h"
#include "service/internal/session_shm.h"
#include "service/internal/shared_memory.h"
#include "service/internal/tenant_stats.h"
#include "service/types.h"

namespace regcache::service::internal {

// Shareable memory of one session: mapped by the daemon, registered with the device once the
// client attached it at its own address.
struct Memory {
  MemoryId id = 0;
  std::unique_ptr<SharedMemory> mem;
  bool attached = false;
  bool attaching = false;  // AttachMemory is registering it, without the session's lock
  bool on_demand = false;
  bool daemon_allocated = false;
  uint64_t client_va = 0;
  cache::BackingId backing = 0;
  uint32_t log_page_size = 0;  // the backing's translation page (2^n), set when attached
  MemoryCharge charge;         // its bytes in the daemon-wide budget, until it is unmapped
};

// A region the client registered itself and attached (Daemon::AttachRegion): nothing mapped.
struct ClientRegionRecord {
  MemoryId id = 0;
  uint32_t handle = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  cache::BackingId backing = 0;
};

struct DeviceSlot;  // service/internal/device_set.h

struct Session {
  // A device context of the session's own (Daemon::OpenSession's own_context), or null. First:
  // it goes last, after everything below that lives on it.
  std::shared_ptr<DeviceSlot> own_device;
  SessionId id = 0;
  // The device it lives on, set before the session is added to the table: own_device, or one
  // of the daemon's devices, which outlive every session.
  DeviceSlot* device = nullptr;
  std::string token;
  PeerCredentials peer;
  bool admin = false;
  absl::Time opened;
  cache::TenantId tenant = 0;

  // Calls in flight hold it shared; CloseSession takes it exclusively.
  base::Mutex ops;
  bool closed ABSL_GUARDED_BY(ops) = false;

  base::Mutex mu;  // memory, the peer port and the endpoints
  std::map<MemoryId, Memory> memories ABSL_GUARDED_BY(mu);
  MemoryId next_memory ABSL_GUARDED_BY(mu) = 1;
  uint64_t mapped_bytes ABSL_GUARDED_BY(mu) = 0;
  // Ids from next_memory too; the cache forgets them (unimports) when the tenant closes.
  std::map<MemoryId, ClientRegionRecord> regions ABSL_GUARDED_BY(mu);
  std::unique_ptr<hca::Peer> peer_port ABSL_GUARDED_BY(mu);
  // Set when the session opens; emptied when it closes, before its PD goes.
  std::unique_ptr<SessionEndpoints> endpoints ABSL_GUARDED_BY(mu);

  // The fast path (protocol/shm_protocol.h), set up before the session is added to the table
  // and constant after: the shared files, the grant state table over them, and the worker
  // (declared last: it stops before the files go).
  std::unique_ptr<SessionShm> shm;
  std::unique_ptr<GrantTable> grants;
  std::unique_ptr<RingServer> ring;
};

// A session pinned for the duration of one call: it cannot close underneath. A scoped lock: it
// holds the session's `ops` shared from construction to destruction.
class ABSL_SCOPED_LOCKABLE SessionRef {
 public:
  SessionRef(std::shared_ptr<Session> s) ABSL_SHARED_LOCK_FUNCTION(s->ops) : s_(std::move(s)) {
    s_->ops.ReaderLock();
  }
  ~SessionRef() ABSL_UNLOCK_FUNCTION() { s_->ops.ReaderUnlock(); }
  SessionRef(const SessionRef&) = delete;
  SessionRef& operator=(const SessionRef&) = delete;
  Session* operator->() const { return s_.get(); }
  Session& operator*() const { return *s_; }

 private:
  std::shared_ptr<Session> s_;
};

// A new session token: 16 bytes from getrandom, as 32 hex digits.
absl::StatusOr<std::string> NewToken();

// The open sessions, by id and by token. Thread-safe.
class SessionTable {
 public:
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // A new session id, never given out again.
  SessionId NewId() ABSL_LOCKS_EXCLUDED(mu_);
  // Makes `s` findable by its id (from NewId; 0: the next one is given) and by its token.
  // Returns the id.
  SessionId Add(std::shared_ptr<Session> s) ABSL_LOCKS_EXCLUDED(mu_);
  // kNotFound if no session has this id.
  absl::StatusOr<std::shared_ptr<Session>> Find(SessionId id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The session, pinned against closing for the caller's scope. kNotFound if unknown or closed.
  absl::StatusOr<std::unique_ptr<SessionRef>> Pin(SessionId id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The session whose token this is; nullopt if none.
  std::optional<SessionId> FindToken(absl::string_view token) const ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the session out of the table: neither its id nor its token finds it any more.
  // kNotFound if no session has this id.
  absl::StatusOr<std::shared_ptr<Session>> Remove(SessionId id) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::shared_ptr<Session>> All() const ABSL_LOCKS_EXCLUDED(mu_);
  // Each session's peer uid, mapped bytes and memories (tenant_stats.h), each read under its
  // own lock, briefly (attach_memory.h).
  std::vector<TenantSession> TenantUse() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<SessionId> Ids() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable base::Mutex mu_;
  absl::flat_hash_map<SessionId, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, SessionId> by_token_ ABSL_GUARDED_BY(mu_);
  SessionId next_session_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_SESSION_TABLE_H_
