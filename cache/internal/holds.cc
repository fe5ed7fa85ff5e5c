#include "cache/internal/holds.h"

#include <algorithm>
#include <atomic>

#include "base/log.h"
#include "cache/internal/lifecycle.h"

namespace regcache::cache::internal {

#ifndef NDEBUG
std::atomic<void (*)(HookPoint)> test_hook{nullptr};
#endif

// --- Records ----------------------------------------------------------------------------------

Record* AllocateRecord(Tenant& t) {
  base::MutexLock il(&t.index_mu);
  Record* r = t.slab.Allocate();
  if (r == nullptr) return nullptr;
  r->klm_entries = 0;
  r->handle = 0;
  r->pooled = PooledKey{};
  r->parent = nullptr;
  r->life = KeyLifecycle();
  r->windows.clear();
  r->backings.clear();
  // A stale lock-free reader may still look at this record. The fence orders the state it had
  // (not published) before the new range written next, so such a reader's CAS fails.
  std::atomic_thread_fence(std::memory_order_release);
  return r;
}

bool HitExact(Tenant& t, uint64_t va, uint64_t length, hca::AccessFlags access, KeyGrant& g) {
  HoldTable* mine = t.holds.Mine();
  return t.index.Find(RangeHash(va, length), [&](uint32_t slot) {
    HotRecord* h = t.slab.Hot(slot);
    if (h == nullptr) return false;
    bool busy = mine == nullptr;
    uint64_t s = busy ? 0 : HoldLocal(t, mine, slot, h, va, length, access, busy);
    if (s == 0 && busy) s = HoldShared(h, va, length, access);
    if (s == 0) return false;
    FillGrant(g, *h, MakeHandle(t.slot, state::Gen(s), slot), /*hit=*/true);
    return true;
  });
}

bool HitCover(Tenant& t, uint64_t va, uint64_t length, hca::AccessFlags access, KeyGrant& g) {
  if (t.cover.empty()) return false;
  const uint64_t end = va + length;
  auto it = CoverFrom(t.cover, va + 1);  // past every entry starting at va
  int scanned = 0;
  while (it != t.cover.begin() && scanned++ < kCoverScanLimit) {
    --it;
    Record* r = it->second;
    const uint64_t rva = r->hot->va.load(std::memory_order_relaxed);
    const uint64_t rlen = r->hot->length.load(std::memory_order_relaxed);
    if (end - rva > t.max_length) break;  // nothing further left can reach `end`
    if (rva + rlen < end) continue;
    // Records in `cover` are not recycled while the tenant mutex is held.
    if (HoldShared(r->hot, rva, rlen, access) == 0) continue;
    FillGrant(g, *r->hot, r->handle, /*hit=*/true);
    return true;
  }
  return false;
}

void SetRange(Record* r, uint64_t va, uint64_t length, hca::AccessFlags access, hca::Key key) {
  r->hot->va.store(va, std::memory_order_relaxed);
  r->hot->length.store(length, std::memory_order_relaxed);
  r->hot->access.store(access, std::memory_order_relaxed);
  r->hot->key.store(key, std::memory_order_relaxed);
}

void Publish(Tenant& t, Record* r, bool window) {
  const uint32_t gen = (state::Gen(r->hot->state.load(std::memory_order_relaxed)) + 1) & kGenMask;
  r->handle = MakeHandle(t.slot, gen, r->slot);
  const uint64_t flags = state::kPublished | (window ? state::kWindow : 0);
  r->hot->state.store((uint64_t{gen} << state::kGenShift) | flags | 1, std::memory_order_release);
}

void Recycle(Tenant& t, Record* r) {
  const uint64_t s = r->hot->state.load(std::memory_order_acquire);
  RC_DCHECK((s & state::kPublished) == 0);
  // Keeps the generation (the next publication bumps it) and drops every flag.
  r->hot->state.store(uint64_t{state::Gen(s)} << state::kGenShift, std::memory_order_release);
  t.slab.Free(r);
}

// --- Counting holders --------------------------------------------------------------------------

LocalHoldCounts CountLocalHolds(const Tenant& t) {
  LocalHoldCounts local;
  t.holds.ForEachHold([&](uint32_t slot, uint32_t gen, uint32_t count) {
    local[HoldTable::KeyOf(slot, gen)] += count;
  });
  return local;
}

int64_t HoldersFrom(const LocalHoldCounts& local, uint32_t slot, uint64_t s) {
  int64_t n = state::SharedHolders(s);
  if (auto it = local.find(HoldTable::KeyOf(slot, state::Gen(s))); it != local.end()) {
    n += it->second;
  }
  return n;
}

// --- Release and unpublish ----------------------------------------------------------------------

void Unpublish(Tenant& t, uint32_t slot, uint32_t gen) {
  base::MutexLock il(&t.index_mu);
  HotRecord* h = t.slab.Hot(slot);
  uint64_t s = h->state.load(std::memory_order_acquire);
  for (;;) {
    const bool dead_here = state::PublishedAs(s, gen) && (s & state::kDead) != 0;
    // Not ours to unpublish (already unpublished, or a stop that undid its mark), or held.
    if (!dead_here || Holders(t, slot, s) > 0) return;
    if (h->state.compare_exchange_weak(s, s & ~state::kPublished, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      break;
    }
  }
  // The lifecycle is done with it: recycle it here (else the lifecycle will when it ends).
  if ((s & state::kDone) != 0) Recycle(t, t.slab.At(slot));
}

absl::Status DropHold(Tenant& t, uint32_t slot, uint32_t gen, Handle handle, bool user_release) {
  HotRecord* h = t.slab.Hot(slot);
  if (h == nullptr) return NoSuchHandle(handle);
  uint64_t s = h->state.load(std::memory_order_acquire);
  uint64_t next;
  for (;;) {
    if (!state::PublishedAs(s, gen)) return NoSuchHandle(handle);
    // Over-release: the shared count can be negative (holds released by another thread than
    // the one that took them), so look at every holder. A snapshot: exact unless a hit on the
    // same registration races this release.
    if (state::SharedHolders(s) <= 0 && Holders(t, slot, s) <= 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("handle 0x%x has no holders left to release", handle));
    }
    if (state::SharedHolders(s) == INT32_MIN) {
      return absl::ResourceExhaustedError("the registration has the most releases it can count");
    }
    next = state::WithShared(s, state::SharedHolders(s) - 1);
    if (h->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      break;
    }
  }
  if (user_release) {
    t.stats().releases.Inc();
    if ((s & state::kRevoked) != 0) t.stats().releases_after_revoke.Inc();
  }
  if ((s & state::kDead) != 0) {
    // Dead: the last holder unpublishes it, and recycles it if the lifecycle is done with it.
    Unpublish(t, slot, gen);
  } else if ((s & state::kWindow) != 0 && state::SharedHolders(next) == 0) {
    // Windows are not cached (and all their holds are shared): the last release retires one.
    Stopped stopped;
    {
      base::MutexLock il(&t.index_mu);
      stopped = StopReference(t, t.slab.At(slot), /*only_unheld=*/true, gen);
    }
    if (stopped != Stopped::kNo) Retire(t, t.slab.At(slot));
  }
  // Otherwise the registration stays cached, for the CLOCK to find if nobody hits it again.
  return absl::OkStatus();
}

// --- Stop-reference ----------------------------------------------------------------------------

namespace {

// The stop's first half, before the HeavyFence: marks the record DEAD. Returns the state word
// before the mark, or 0 if it did not mark it.
uint64_t MarkDead(Record* r, bool only_unheld, uint32_t gen) {
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  for (;;) {
    if (!state::Live(s) || (gen != kAnyGen && state::Gen(s) != gen)) return 0;
    // A cheap refusal (a shared holder); the threads' entries are summed after the fence.
    if (only_unheld && state::SharedHolders(s) > 0) return 0;
    if (r->hot->state.compare_exchange_weak(s, s | state::kDead, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      return s;
    }
  }
}

// The stop's second half, after the HeavyFence: counts the holders and unpublishes, revokes or
// (if `only_unheld` and held) takes the mark back. `before`: MarkDead's answer.
// `unindex`: take it out of the range index (else the caller clears the whole index).
Stopped CountAndSettle(Tenant& t, Record* r, uint64_t before, bool only_unheld, bool unindex = true)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu) {
  // Dead now, so only releases (and hits undoing themselves) change the count: each of those
  // that this sum misses sees DEAD and calls Unpublish, which runs after this (index_mu).
  Stopped result;
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  for (;;) {
    RC_DCHECK((s & state::kDead) != 0 && state::Gen(s) == state::Gen(before));
    uint64_t next;
    if (Holders(t, r->slot, s) <= 0) {
      next = s & ~state::kPublished;  // unheld: the handle goes now
      result = Stopped::kUnheld;
    } else if (only_unheld) {
      next = s & ~state::kDead;  // a hit got in before the mark: not a victim after all
      result = Stopped::kNo;
    } else {
      next = s | state::kRevoked;  // the handle stays for Release/Query until the last holder
      result = Stopped::kRevoked;
    }
    if (r->hot->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      break;
    }
  }
  if (unindex && result != Stopped::kNo && (before & state::kWindow) == 0) {
    const bool erased = t.index.Erase(RangeHash(r->hot->va.load(std::memory_order_relaxed),
                                                r->hot->length.load(std::memory_order_relaxed)),
                                      r->slot);
    RC_CHECK(erased) << "range index: stopped record " << r->slot << " was not indexed";
  }
  return result;
}

}  // namespace

Stopped StopReference(Tenant& t, Record* r, bool only_unheld, uint32_t gen) {
  const uint64_t before = MarkDead(r, only_unheld, gen);
  if (before == 0) return Stopped::kNo;
  RC_CACHE_TEST_HOOK(kStopMarked);
  base::ReaperFence();  // every hit that will succeed has its hold visible from here on
  return CountAndSettle(t, r, before, only_unheld);
}

namespace {

// A fence per this many records: the state words before the marks stay a small array.
constexpr size_t kStopChunk = 4096;

void Stop(Tenant& t, std::vector<Record*>& rs, bool unindex)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu) {
  std::vector<uint64_t> before;
  before.reserve(std::min(rs.size(), kStopChunk));
  size_t kept = 0;
  for (size_t lo = 0; lo < rs.size(); lo += kStopChunk) {
    const size_t hi = std::min(rs.size(), lo + kStopChunk);
    before.clear();
    const size_t first = kept;
    for (size_t i = lo; i < hi; ++i) {
      const uint64_t s = MarkDead(rs[i], /*only_unheld=*/false, kAnyGen);
      if (s == 0) continue;
      rs[kept++] = rs[i];
      before.push_back(s);
    }
    if (before.empty()) continue;
    base::ReaperFence();  // one for the chunk
    for (size_t i = 0; i < before.size(); ++i) {
      (void)CountAndSettle(t, rs[first + i], before[i], /*only_unheld=*/false, unindex);
    }
  }
  rs.resize(kept);
}

}  // namespace

void StopReferences(Tenant& t, std::vector<Record*>& rs) { Stop(t, rs, /*unindex=*/true); }

void StopEveryReference(Tenant& t, std::vector<Record*>& windows, std::vector<Record*>& parents) {
  Stop(t, windows, /*unindex=*/false);
  Stop(t, parents, /*unindex=*/false);
  // Every live record is dead now, and every other one was out of the index already.
  t.index.Clear();
}

// --- Sole holder --------------------------------------------------------------------------------

Sole MarkSole(Tenant& t, Record* r, uint32_t gen) {
  const uint64_t before = MarkDead(r, /*only_unheld=*/false, gen);
  if (before == 0) return Sole::kNotLive;
  base::ReaperFence();  // as StopReference: every hold that will succeed is counted below
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  for (;;) {
    const int64_t holders = Holders(t, r->slot, s);
    // One holder: keep the mark and add the re-registration's hold. Else take the mark back;
    // a hit that saw it undid itself, and its Unpublish (after index_mu) finds the record live.
    const uint64_t next =
        holders == 1 ? state::WithShared(s, state::SharedHolders(s) + 1) : s & ~state::kDead;
    if (r->hot->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      if (holders == 1) return Sole::kMarked;
      return holders <= 0 ? Sole::kNone : Sole::kShared;
    }
  }
}

void ReviveSole(Tenant& /*t*/, Record* r) {
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  for (;;) {
    RC_DCHECK((s & state::kDead) != 0 && (s & state::kRevoked) == 0);
    const uint64_t epoch = (s + state::kEpochOne) & state::kEpoch;
    const uint64_t next =
        (state::WithShared(s, state::SharedHolders(s) - 1) & ~(state::kDead | state::kEpoch)) |
        epoch;
    // Release: the rewritten range and rights, before a hit can see the record live again.
    if (r->hot->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      return;
    }
  }
}

Stopped RevokeSole(Tenant& t, Record* r) {
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  while (!r->hot->state.compare_exchange_weak(s, state::WithShared(s, state::SharedHolders(s) - 1),
                                              std::memory_order_acq_rel,
                                              std::memory_order_acquire)) {
  }
  // Dead since MarkSole, so the count settles as a stop's would: revoked while the caller holds
  // it, unpublished if it released meanwhile.
  return CountAndSettle(t, r, s, /*only_unheld=*/false);
}

}  // namespace regcache::cache::internal