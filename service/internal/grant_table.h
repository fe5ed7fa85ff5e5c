// The grants a session holds, for the fast path's state file (protocol/shm_protocol.h): per
// handle, its grant state slot, the daemon's own count of the session's holds on it, its range
// and, for a window, its parent. Internal to service/.
//
// The daemon calls it around every cache call that hands out, gives back or revokes a key of
// the session, whichever transport the call came from:
//   Granted     after Register / CreateWindow returned: the handle's slot (a free one for a
//               handle the session did not hold yet) and one more hold; then, with the grant
//               recorded, whether the cache revoked the key meanwhile: if so the grant is
//               revoked here (bit and event) as if it had been recorded in time. On
//               kResourceExhausted the reclaim counter goes up instead;
//   Released    after a Release succeeded: one hold less; at 0 the slot is freed (generation
//               + 1, revoked bit clear) and the handle forgotten;
//   Revoke*     BEFORE the cache invalidates: the revoked bit of the handle's slot (and its
//               windows' slots) is set and a RevocationEvent appended, so a client that checks
//               its word never hands out a key whose revocation had begun; and AGAIN after the
//               cache returned, for grants recorded in between (the cache held the key for a
//               call that had not recorded it yet). With Granted's check this closes the
//               window: a grant recorded before the second pass is marked by it; one recorded
//               after it finds the key revoked in the cache (docs/fast_path.md, "The
//               revocation invariant");
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
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
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
  // Revoked before it was handed out (its word says so): the cache revoked the key between the
  // hold and the grant record. A registration is retried by the caller; others go out marked.
  bool revoked = false;
};

class GrantTable {
 public:
  // Writes the slot words and events of `shm`'s state file, which must outlive the table.
  explicit GrantTable(SessionShm* shm);

  // The hook after Register (parent 0) or CreateWindow (parent = the window's parent) returned
  // `grant`: OK grants get their slot and one more hold, and are revoked here when `revoked`
  // (asked with the grant recorded, under the table's lock) says the cache revoked the handle
  // meanwhile; kResourceExhausted raises reclaim. Returns `grant`'s status unchanged.
  absl::StatusOr<SlottedGrant> Granted(absl::StatusOr<cache::KeyGrant> grant, cache::Handle parent,
                                       absl::FunctionRef<bool(cache::Handle)> revoked)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Granted (parent 0) for each of a batch of registrations, the OK ones recorded under one
  // hold of the table's lock per kLockRun; answers in the order of `grants` (moved from).
  static constexpr size_t kLockRun = base::kBatchLockRun;
  std::vector<absl::StatusOr<SlottedGrant>> GrantedBatch(
      absl::Span<absl::StatusOr<cache::KeyGrant>> grants,
      absl::FunctionRef<bool(cache::Handle)> revoked) ABSL_LOCKS_EXCLUDED(mu_);
  // After a successful Release of `handle`. Unknown handles are ignored.
  void Released(cache::Handle handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Before invalidating `handle`: it (kInvalidated, or `reason`) and every window of it
  // (kParentInvalidated). Unknown handles are ignored.
  void RevokeHandle(cache::Handle handle,
                    shm::RevokeReason reason = shm::RevokeReason::kInvalidated)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Before detaching memory [va, va + length): every held grant whose range overlaps it.
  void RevokeRange(uint64_t va, uint64_t length) ABSL_LOCKS_EXCLUDED(mu_);
  // RevokeRange, then `detach` (the cache's RemoveBacking), then RevokeRange again (the second
  // pass). Returns what `detach` returned.
  absl::Status RevokeRangeAround(uint64_t va, uint64_t length,
                                 absl::FunctionRef<absl::Status()> detach) ABSL_LOCKS_EXCLUDED(mu_);
  // The session's cache::TenantOptions::reclaiming: RevokeHandle with reason kReclaimed. The
  // table must outlive the tenant (the daemon closes the tenant first).
  std::function<void(cache::Handle)> Reclaimer();
  // Before the session closes or the daemon drains it; `reason_number` tells the client why
  // (protocol/reason_numbers.h; 0: the session's own end).
  void Closing(uint32_t reason_number = 0);
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
  // Granted's work for an OK grant, under the lock.
  SlottedGrant RecordLocked(const cache::KeyGrant& grant, cache::Handle parent,
                            absl::FunctionRef<bool(cache::Handle)> revoked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
