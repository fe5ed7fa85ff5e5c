// The grants a session holds, for the fast path's state file (protocol/shm_protocol.h): per
// handle, its grant state slot, the daemon's own count of the session's holds on it, its range
// and, for a window, its parent. Internal to service/.
//
// The daemon calls it around every cache call that hands out, gives back or revokes a key of
// the session, whichever transport the call came from:
//   Granted     after Register / CreateWindow returned: the handle's slot (a free one for a
//               handle the session did not hold yet) and one more hold; on kResourceExhausted
//               the reclaim counter goes up instead;
//   Released    after a Release succeeded: one hold less; at 0 the slot is freed (generation
//               + 1, revoked bit clear) and the handle forgotten;
//   Revoke*     BEFORE the cache invalidates: the revoked bit of the handle's slot (and its
//               windows' slots) is set and a RevocationEvent appended, so a client that checks
//               its word never hands out a key whose revocation had begun;
//   Closing     before the session closes: StateHeader::session_state = kSessionClosing.
// The hold counts are the daemon's: nothing the client writes is read here. A grant that found
// no free slot carries kNoSlot (the client then does not cache it) and is still tracked, so
// that its revocation is reported as an event.
//
// Thread safety: every method may be called from any thread; one internal mutex.
#ifndef REGCACHE_SERVICE_INTERNAL_GRANT_TABLE_H_
#define REGCACHE_SERVICE_INTERNAL_GRANT_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "cache/reg_cache.h"
#include "protocol/shm_protocol.h"
#include "service/internal/session_shm.h"

namespace regcache::service::internal {

namespace shm = ::regcache::protocol::shm;

// A grant with the state slot it holds while the session holds the handle.
struct SlottedGrant {
  cache::KeyGrant grant;
  uint32_t slot = shm::kNoSlot;
  uint32_t generation = 0;
};

class GrantTable {
 public:
  // Writes the slot words and events of `shm`'s state file, which must outlive the table.
  explicit GrantTable(SessionShm* shm);

  // The hook after Register (parent 0) or CreateWindow (parent = the window's parent) returned
  // `grant`: OK grants get their slot and one more hold; kResourceExhausted raises reclaim.
  // Returns `grant`'s status unchanged.
  absl::StatusOr<SlottedGrant> Granted(absl::StatusOr<cache::KeyGrant> grant, cache::Handle parent)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After a successful Release of `handle`. Unknown handles are ignored.
  void Released(cache::Handle handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Before invalidating `handle`: it (kInvalidated, or `reason`) and every window of it
  // (kParentInvalidated). Unknown handles are ignored.
  void RevokeHandle(cache::Handle handle,
                    shm::RevokeReason reason = shm::RevokeReason::kInvalidated)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Before detaching memory [va, va + length): every held grant whose range overlaps it.
  void RevokeRange(uint64_t va, uint64_t length) ABSL_LOCKS_EXCLUDED(mu_);
  // Before the session closes or the daemon drains it.
  void Closing();
  // The session's key quota or the device's pool is under pressure.
  void RaiseReclaim();

  // The session's holds of `handle` (0 if it holds none).
  uint32_t Holds(cache::Handle handle) const ABSL_LOCKS_EXCLUDED(mu_);
  // Handles the session holds (tests and introspection).
  size_t held() const ABSL_LOCKS_EXCLUDED(mu_);
  // Slots in use.
  size_t slots_in_use() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint32_t slot = shm::kNoSlot;
    uint32_t holds = 0;
    uint32_t key = 0;
    uint64_t va = 0;
    uint64_t length = 0;
    cache::Handle parent = 0;
    bool revoked = false;
  };

  uint32_t AllocateSlot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeSlot(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the entry's revoked bit and appends its event (once per entry).
  void RevokeEntry(cache::Handle handle, Entry& e, shm::RevokeReason reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendEvent(const shm::RevocationEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SessionShm* const shm_;
  mutable base::Mutex mu_;
  absl::flat_hash_map<cache::Handle, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Held windows by parent handle (whether or not the session holds the parent itself).
  absl::flat_hash_map<cache::Handle, std::vector<cache::Handle>> windows_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);  // freed slots, reused first
  uint32_t next_fresh_slot_ ABSL_GUARDED_BY(mu_) = 0;      // slots never used: [this, slots)
  uint64_t events_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_GRANT_TABLE_H_
