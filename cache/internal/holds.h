// The hold protocol: how a registration gains and loses holders without a lock, and how the
// cache stops references to it (the first step of its lifecycle) without losing a hold.
// Internal to cache/. The records, hold tables and state word it works on are in
// cache/internal/index.h; the lifecycle that follows a stop is in cache/internal/lifecycle.h.
//
// Holders are counted in two places: a signed count in the record's state word (the shared
// holds: misses, windows, cross-thread releases, and hits that found their thread's entry taken
// by another registration), and per-thread hold tables, each written by its thread only. A
// registration's holders are the shared count plus every thread's entry for it.
//
// This is the daemon's instance of the hold protocol; docs/hold-protocol.md is its account (the
// proof, and how the client's grant cache runs the same steps). Here:
//   hold (a hit): read state (live, generation g) and range; entry[slot] += 1 (plain store);
//          HolderFence; read state again: still live with generation g → held. Else undo.
//   stop:  CAS state → DEAD (no new hold can succeed from here); ReaperFence; sum the shared
//          count and every thread's entry for (slot, g). Zero → unpublish; else → revoke.
//   release (own entry): entry[slot] -= 1; HolderFence; read state: DEAD → Unpublish (under the
//          index mutex, after any stop in progress: sum again, unpublish at zero).
// So a registration is never unpublished (and its key never evicted or recycled) while someone
// holds it, and the last release of a revoked one always finds out that it was the last.
//
// A hold taken in one thread's table and released from another is +1 there and -1 in the
// shared count. While a record's shared count is negative, hits on it take shared holds, so a
// server that releases on other threads than it hits on stays balanced.
//
// A record's life, one verb per step (cache/lifecycle.h has the key's states):
//   AllocateRecord  a free record, for a key being mapped                  (kMapping)
//   Publish         it gets a handle and its first holder                  (kActive)
//   Hold / Release  holders come and go; a release of the last leaves it cached
//   StopReference   no new holders; unheld → unpublished now, held → revoked (kDraining)
//   Unpublish       the last holder of a revoked record is gone: its handle goes
//   Retire          (lifecycle.h) fence, invalidate, unmap, quarantine the key, then
//   Recycle         the record back to the slab, once unpublished and retired
#ifndef REGCACHE_CACHE_INTERNAL_HOLDS_H_
#define REGCACHE_CACHE_INTERNAL_HOLDS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/hold_protocol.h"
#include "cache/internal/index.h"
#include "cache/internal/tenant.h"
#include "hca/device.h"

namespace regcache::cache::internal {

// Test hooks: points where a test stalls a thread to force an interleaving the protocol must
// survive (cache/holds_test.cc, and a miss whose memory changes under it in
// cache/register_batch_test.cc), or to hold the reaper back (cache/gates_test.cc). Compiled out
// under NDEBUG, so release builds pay nothing; the dev, asan and tsan builds keep them.
enum class HookPoint {
  kHitRead,       // a hit read the state word (live), before its entry store
  kReleaseStore,  // a local release stored its entry, before its state read
  kStopMarked,    // a stop marked the record dead, before its fence and count
  kReaping,       // ReapTenant is about to destroy a closed tenant's leftovers
  kPlanned,       // a miss laid its range out, before it takes the tenant's lock to bind it
};
#ifndef NDEBUG
extern std::atomic<void (*)(HookPoint)> test_hook;
#define RC_CACHE_TEST_HOOK(point)                                                            \
  do {                                                                                       \
    if (auto* hook = ::regcache::cache::internal::test_hook.load(std::memory_order_acquire)) \
      hook(::regcache::cache::internal::HookPoint::point);                                   \
  } while (0)
#else
#define RC_CACHE_TEST_HOOK(point) \
  do {                            \
  } while (0)
#endif

// --- Records: allocate, publish, recycle -----------------------------------------------------

// A free record for a new registration or window, its cold fields reset; nullptr when the
// tenant has Slab::kMaxSlots records.
Record* AllocateRecord(Tenant& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu);

// Writes the range a record will be published with (before Publish).
void SetRange(Record* r, uint64_t va, uint64_t length, hca::AccessFlags access, hca::Key key);

// Gives `r` its next generation and handle, published with one shared holder (the caller).
void Publish(Tenant& t, Record* r, bool window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);

// Back to the slab's free list. REQUIRES: unpublished, and nobody will touch it again.
void Recycle(Tenant& t, Record* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);

// Writes the grant of the record whose hot half is `h` field by field into `g` (the hit path's
// `g` is the caller's StatusOr, so nothing is copied after).
inline void FillGrant(KeyGrant& g, const HotRecord& h, Handle handle, bool hit) {
  g.handle = handle;
  g.lkey = g.rkey = h.key.load(std::memory_order_relaxed);
  g.va = h.va.load(std::memory_order_relaxed);
  g.length = h.length.load(std::memory_order_relaxed);
  g.access = h.access.load(std::memory_order_relaxed);
  g.hit = hit;
}

// --- Counting holders --------------------------------------------------------------------------

// Every holder of the record at `slot` in state `s` (generation Gen(s)): shared + per thread.
inline int64_t Holders(const Tenant& t, uint32_t slot, uint64_t s) {
  return state::SharedHolders(s) + t.holds.Count(slot, state::Gen(s));
}

// For callers that need the holders of many records: every thread's holds in one pass over
// their tables (Holders() costs a load per thread for each record), keyed by HoldTable::KeyOf.
using LocalHoldCounts = absl::flat_hash_map<uint64_t, int64_t>;
LocalHoldCounts CountLocalHolds(const Tenant& t);
int64_t HoldersFrom(const LocalHoldCounts& local, uint32_t slot, uint64_t s);

// --- Hold -------------------------------------------------------------------------------------

// Whether `r`, whose state word read `s`, is a live registration (not a window) of exactly
// [va, +length) with at least `access`. The range is read after `s`; a caller that acts on the
// answer re-checks the state word afterwards (a recycle changes the generation).
inline bool Matches(const HotRecord* r, uint64_t s, uint64_t va, uint64_t length,
                    hca::AccessFlags access) {
  return state::Live(s) && (s & state::kWindow) == 0 &&
         r->va.load(std::memory_order_relaxed) == va &&
         r->length.load(std::memory_order_relaxed) == length &&
         (access & ~r->access.load(std::memory_order_relaxed)) == 0;
}

// One more shared holder for `r` if it is a live registration of exactly [va, +length) with at
// least `access`. Returns the state word before the hold, or 0 if it took none. The CAS expects
// the state read before the range: if it wins, the record was that registration throughout.
inline uint64_t HoldShared(HotRecord* r, uint64_t va, uint64_t length, hca::AccessFlags access) {
  uint64_t s = r->state.load(std::memory_order_acquire);
  for (;;) {
    if (!Matches(r, s, va, length, access) || state::SharedHolders(s) == INT32_MAX) return 0;
    std::atomic_thread_fence(std::memory_order_acquire);  // the range loads above, before the CAS
    const uint64_t next = state::WithShared(s, state::SharedHolders(s) + 1) | state::kReferenced;
    if (r->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      return s;
    }
  }
}

// Called by whoever drops a hold on a dead record (a release, or a hit that lost its race):
// once every holder is gone, unpublishes it, and recycles it if its lifecycle is done. Takes
// index_mu, so it runs after any stop in progress.
void Unpublish(Tenant& t, uint32_t slot, uint32_t gen);

// One more holder for the record at `slot` (hot half `h`) in this thread's table `mine`, if it
// is a live registration of exactly [va, +length) with at least `access`: the hit's half of the
// protocol. Returns the state word it held, or 0 if it took nothing; sets `busy` when the hold
// must be shared instead (the thread's entry belongs to another registration, or the record's
// shared count is negative).
inline uint64_t HoldLocal(Tenant& t, HoldTable* mine, uint32_t slot, HotRecord* h, uint64_t va,
                          uint64_t length, hca::AccessFlags access, bool& busy) {
  const uint64_t s = h->state.load(std::memory_order_acquire);
  if (!Matches(h, s, va, length, access)) return 0;
  if (state::SharedHolders(s) < 0) [[unlikely]] {
    busy = true;  // releases from other threads outstanding: keep the shared count balanced
    return 0;
  }
  RC_CACHE_TEST_HOOK(kHitRead);
  const uint32_t gen = state::Gen(s);
  const uint64_t key = HoldTable::KeyOf(slot, gen);
  std::atomic<uint64_t>& entry = mine->At(slot);
  const uint64_t e = entry.load(std::memory_order_relaxed);  // this thread is its only writer
  uint64_t held;
  if (HoldTable::KeyOfEntry(e) == key && HoldTable::CountOf(e) < HoldTable::kCount) {
    held = e + 1;
  } else if (HoldTable::CountOf(e) == 0) {
    held = key | 1;
  } else {
    // Taken by a registration this thread still holds, unless that one is gone: a hold taken
    // here and released from another thread leaves +1 here and -1 in the shared count, and
    // once the record is recycled nobody counts the entry again.
    const HotRecord* other = t.slab.Hot(HoldTable::SlotOf(e));
    const uint64_t os = other->state.load(std::memory_order_acquire);
    if (state::PublishedAs(os, HoldTable::GenOf(e))) {
      busy = true;
      return 0;
    }
    held = key | 1;
  }
  entry.store(held, std::memory_order_relaxed);
  base::HolderFence();  // the entry and the range loads, before the recheck
  const uint64_t now = h->state.load(std::memory_order_relaxed);
  if (state::SameLive(s, now)) [[likely]] {
    // CLOCK's referenced bit: a shared write only when the hand has cleared it.
    if ((now & state::kReferenced) == 0)
      h->state.fetch_or(state::kReferenced, std::memory_order_relaxed);
    return s;
  }
  // Stopped (or recycled) since the first read: undo. A stop that counted this hold before the
  // undo revoked the record instead of unpublishing it; Unpublish finds that out.
  entry.store(held - 1, std::memory_order_release);
  base::HolderFence();
  const uint64_t after = h->state.load(std::memory_order_acquire);
  if ((after & state::kDead) != 0 && state::PublishedAs(after, gen)) Unpublish(t, slot, gen);
  return 0;
}

// --- Release ------------------------------------------------------------------------------------

// Drops one holder of the record at `slot`, published with generation `gen`, from the shared
// count. The last holder of a revoked record unpublishes it; the last of a window retires the
// window. `user_release`: a RegCache::Release (counted in the stats), not the cache's own hold
// (a window's on its parent). kNotFound, kFailedPrecondition (no holder left) as Release.
absl::Status DropHold(Tenant& t, uint32_t slot, uint32_t gen, Handle handle, bool user_release);

// A hit: a hold on the registration of exactly [va, va + length), found without a lock, held
// in this thread's table (else shared); fills `g`. False: none, or none with `access`.
bool HitExact(Tenant& t, uint64_t va, uint64_t length, hca::AccessFlags access, KeyGrant& g);
// A hit on a wider registration that covers the range (or the exact one, if HitExact raced
// with a writer moving its bucket), a shared hold; gives up (false) after kCoverScanLimit
// candidates.
inline constexpr int kCoverScanLimit = 64;
bool HitCover(Tenant& t, uint64_t va, uint64_t length, hca::AccessFlags access, KeyGrant& g)
    ABSL_SHARED_LOCKS_REQUIRED(t.mu);

// RegCache::Release after the handle's tenant was checked: a hold this thread took is given
// back in its own table (the release's half of the protocol), any other from the shared count.
inline absl::Status ReleaseHold(Tenant& t, Handle handle) {
  const uint32_t slot = HandleSlot(handle);
  const uint32_t gen = HandleGen(handle);
  if (HoldTable* mine = t.holds.MineIfAny()) {
    std::atomic<uint64_t>& entry = mine->At(slot);
    const uint64_t e = entry.load(std::memory_order_relaxed);
    if (HoldTable::KeyOfEntry(e) == HoldTable::KeyOf(slot, gen) && HoldTable::CountOf(e) > 0) {
      HotRecord* h = t.slab.Hot(slot);
      const uint64_t before = h->state.load(std::memory_order_acquire);
      if (!state::PublishedAs(before, gen)) [[unlikely]] {
        // The publication is over: this entry's holds were all released from other threads
        // (each +1 here was balanced by a -1 in the shared count). Nobody counts it any more.
        entry.store(0, std::memory_order_relaxed);
        return NoSuchHandle(handle);
      }
      // Published with this generation and held here, so it stays published until this
      // store is seen: a stop in between counts the hold and revokes instead.
      entry.store(e - 1, std::memory_order_release);
      RC_CACHE_TEST_HOOK(kReleaseStore);
      base::HolderFence();  // the entry, before the state read
      const uint64_t s = h->state.load(std::memory_order_acquire);
      if (state::SharedHolders(s) < 0 && state::PublishedAs(s, gen) && Holders(t, slot, s) < 0)
          [[unlikely]] {
        // Released once more than held: this thread's hold was already released from another
        // thread. Put the count back and refuse, as the shared path does.
        entry.store(e, std::memory_order_relaxed);
        return absl::FailedPreconditionError(
            absl::StrFormat("handle 0x%x has no holders left to release", handle));
      }
      t.stats().releases.Inc();
      if ((s & state::kDead) != 0) [[unlikely]] {
        if ((s & state::kRevoked) != 0) t.stats().releases_after_revoke.Inc();
        Unpublish(t, slot, gen);
      }
      return absl::OkStatus();
    }
  }
  return DropHold(t, slot, gen, handle, /*user_release=*/true);
}

// --- Stop-reference ---------------------------------------------------------------------------

// What StopReference did.
enum class Stopped {
  kNo,       // not live (already stopped, or not published), or `only_unheld` and held, or
             // `gen` given and not its generation
  kUnheld,   // nobody held it: its handle is gone now
  kRevoked,  // held: its handle lives until the last holder releases it
};
inline constexpr uint32_t kAnyGen = UINT32_MAX;

// After this no one can become a holder, and the record leaves the range index. Costs a
// HeavyFence; StopReferences stops many for one.
Stopped StopReference(Tenant& t, Record* r, bool only_unheld = false, uint32_t gen = kAnyGen)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);
// The same for every record in `rs`; keeps in `rs` those it stopped.
void StopReferences(Tenant& t, std::vector<Record*>& rs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);
// StopReferences for every record of the tenant (a close), its windows and the rest: the range
// index is swept at once rather than entry by entry. A hit racing the sweep misses, or finds a
// dead record.
void StopEveryReference(Tenant& t, std::vector<Record*>& windows, std::vector<Record*>& parents)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);

// --- Sole holder (re-registering: cache/internal/rereg.h) --------------------------------------

// What MarkSole found.
enum class Sole {
  kNotLive,  // not a live registration published as `gen` (invalidated, stopped, or gone)
  kNone,     // live, but nobody holds it
  kShared,   // live, held by more than one
  kMarked,   // held by exactly one (the caller): marked, see MarkSole
};

// Stops new holds on `r` (a registration published as `gen`) the way StopReference does, and
// counts its holders after the fence. With exactly one (the caller's) it returns kMarked and
// leaves `r` dead but published and indexed, with one more shared hold (the re-registration's
// own, so a release meanwhile never unpublishes it); the caller ends the mark with ReviveSole
// or RevokeSole. Otherwise it takes the mark back (as a stop that found a holder does).
Sole MarkSole(Tenant& t, Record* r, uint32_t gen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);

// Ends a kMarked record's mark after its key was rewritten in place: drops the
// re-registration's hold, clears the mark and bumps the rewrite epoch (a hit that read the old
// range before the mark fails its recheck). The caller re-indexed the record first.
void ReviveSole(Tenant& t, Record* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);

// Ends a kMarked record's mark by revoking it, as Invalidate's stop does (out of the range
// index; the handle lives until its last holder releases), and drops the re-registration's
// hold. The caller then Retires it.
Stopped RevokeSole(Tenant& t, Record* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_HOLDS_H_
