#include "cache/internal/lifecycle.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/log.h"
#include "cache/internal/holds.h"
#include "cache/lifecycle.h"
#include "cache/umr_engine.h"

namespace regcache::cache::internal {

namespace {

// kDraining, and out of the cover index: no hit finds `r` from here on.
void StartDraining(Tenant& t, Record* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  r->life.Transition(KeyState::kDraining);
  // Empty already when the whole tenant closes.
  if (!r->is_window() && !t.cover.empty())
    t.cover.erase({r->hot->va.load(std::memory_order_relaxed), r});
}

// kDraining: out of the cover index, and every window on `r` stopped and retired first (a
// parent's key is invalidated only after every window on it is). Waits out windows that are
// still being mapped, or retired by another thread.
void Drain(Tenant& t, Record* r) {
  for (int round = 0;; ++round) {
    std::vector<Record*> stopped;
    bool waiting = false;
    {
      base::MutexLock lock(&t.mu);
      if (round == 0) StartDraining(t, r);
      for (Record* w : r->windows) {
        if (w->life.state() != KeyState::kActive) {
          waiting = true;  // mapping, or retiring on another thread
          continue;
        }
        base::MutexLock il(&t.index_mu);
        if (StopReference(t, w) != Stopped::kNo) {
          stopped.push_back(w);
        } else {
          waiting = true;
        }
      }
      if (stopped.empty() && !waiting) return;
    }
    RetireBatch(t, stopped);
    if (stopped.empty() && waiting) absl::SleepFor(absl::Microseconds(50));
  }
}

// The value a key has once invalidated: the same on a UMR device; on a memory-window device the
// zero-length bind moved it to a new variant, which the device knows (hca/device.h).
hca::Key FreeKey(Tenant& t, hca::Key invalidated) {
  if (!t.device()->capabilities().memory_windows) return invalidated;
  absl::StatusOr<hca::KeyInfo> info = t.device()->QueryKey(invalidated);
  return info.ok() ? info->key : hca::NextVariant(invalidated);
}

// The first step of Drain for records with no windows, all under one hold of the tenant's lock:
// kDraining, out of the cover index. Returns those with windows, which Drain takes one by one.
std::vector<Record*> DrainWindowless(Tenant& t, absl::Span<Record* const> rs) {
  std::vector<Record*> with_windows;
  base::MutexLock lock(&t.mu);
  for (Record* r : rs) {
    if (!r->windows.empty()) {
      with_windows.push_back(r);
      continue;
    }
    StartDraining(t, r);
  }
  return with_windows;
}

// After the invalidates `ops` of `rs` have their results: recovery for each that failed, then
// (every key unmapped or destroyed) the backing references, the quota slots, the windows' holds
// on their parents, and each record once its last holder is gone too. One hold of each lock for
// the batch.
// No ops: every key is refused already, behind shut gates (RetireShut); the keys are doomed
// rather than quarantined (KeyPool::Doom).
void Finish(Tenant& t, absl::Span<Record* const> rs, absl::Span<const UmrOp> ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].result.ok()) continue;
    RC_LOG(WARNING) << "invalidate of key " << absl::StrFormat("0x%08x", ops[i].key)
                    << " failed: " << ops[i].result << "; recovering";
    {
      base::MutexLock lock(&t.mu);
      rs[i]->life.Transition(KeyState::kRecovery);
    }
    Recover(t, rs[i], ops[i].key);
  }
  std::vector<Record*> parents;
  std::vector<PooledKey> quarantined;
  quarantined.reserve(rs.size());
  {
    const absl::Time now = base::MonotonicNow();
    base::MutexLock lock(&t.mu);
    BackingId last_id = 0;  // ids start at 1
    BackingRecord* last = nullptr;
    for (Record* r : rs) {
      if (r->life.state() == KeyState::kInvalidating) {
        r->life.Transition(KeyState::kUnmapped);
        r->life.Transition(KeyState::kQuarantined);
        quarantined.push_back(PooledKey{FreeKey(t, r->pooled.key), r->pooled.cls});
      }
      // Unmapped (or destroyed): only now do backing references and quota go.
      for (BackingId id : r->backings) {
        // Neighbouring records mostly share their memory: one lookup per change of it.
        if (id != last_id) {
          last = t.backings.Find(id);
          last_id = id;
        }
        if (last != nullptr) last->users--;
      }
      t.live--;
      if (r->is_window()) {
        std::erase(r->parent->windows, r);
        parents.push_back(r->parent);
      }
    }
    if (ops.empty()) {
      t.pool->Doom(quarantined);
    } else {
      t.pool->Quarantine(quarantined, now);
    }
  }
  t.stats().invalidations.Inc(rs.size());
  t.stats().live_registrations.Sub(static_cast<int64_t>(rs.size()));
  for (Record* parent : parents) {
    // A window's hold on its parent (taken when the window was mapped; the parent's generation
    // cannot change while it is held).
    (void)DropHold(t, parent->slot, HandleGen(parent->handle), parent->handle,
                   /*user_release=*/false);
  }
  // Done: a revoked handle lives until its last holder releases it, so whichever of the two
  // comes second (this, or the release that unpublishes it) recycles the record.
  std::vector<Record*> unpublished;
  for (Record* r : rs) {
    const uint64_t before = r->hot->state.fetch_or(state::kDone, std::memory_order_acq_rel);
    if ((before & state::kPublished) == 0) unpublished.push_back(r);
  }
  if (!unpublished.empty()) {
    base::MutexLock il(&t.index_mu);
    for (Record* r : unpublished) Recycle(t, r);
  }
}

}  // namespace

void Retire(Tenant& t, Record* r) {
  Record* const one[] = {r};
  RetireBatch(t, one);
}

void RetireBatch(Tenant& t, absl::Span<Record* const> rs) {
  if (rs.empty()) return;
  // Windows before parents: a parent's key is invalidated only after every window on it is.
  const auto is_window = [](const Record* r) { return r->is_window(); };
  if (std::any_of(rs.begin(), rs.end(), is_window) &&
      !std::all_of(rs.begin(), rs.end(), is_window)) {
    std::vector<Record*> windows, parents;
    for (Record* r : rs) (r->is_window() ? windows : parents).push_back(r);
    RetireBatch(t, windows);
    RetireBatch(t, parents);
    return;
  }
  // A bounded batch at a time, so that the ops' storage stays small.
  if (rs.size() > kRetireBatch) {
    for (size_t i = 0; i < rs.size(); i += kRetireBatch) {
      RetireBatch(t, rs.subspan(i, std::min(kRetireBatch, rs.size() - i)));
    }
    return;
  }
  for (Record* r : DrainWindowless(t, rs)) Drain(t, r);
  std::vector<UmrOp> ops(rs.size());
  std::vector<UmrOp*> posted(rs.size());
  {
    base::MutexLock lock(&t.mu);
    for (size_t i = 0; i < rs.size(); ++i) {
      rs[i]->life.Transition(KeyState::kFencing);
      rs[i]->life.Transition(KeyState::kInvalidating);
      // One fence for the batch: the first invalidate on each queue waits for everything
      // posted before it there (UmrEngine::ExecuteSpread).
      ops[i] = UmrOp::Invalidate(rs[i]->hot->key.load(std::memory_order_relaxed), i == 0);
      posted[i] = &ops[i];
    }
  }
  t.engine->ExecuteSpread(posted);
  Finish(t, rs, ops);
}

void RetireShut(Tenant& t, absl::Span<Record* const> rs) {
  if (rs.size() > kRetireBatch) {  // a bounded hold of the locks at a time
    for (size_t i = 0; i < rs.size(); i += kRetireBatch) {
      RetireShut(t, rs.subspan(i, std::min(kRetireBatch, rs.size() - i)));
    }
    return;
  }
  // A parent whose windows are not all settled yet waits for them as RetireBatch's would.
  for (Record* r : DrainWindowless(t, rs)) Drain(t, r);
  {
    base::MutexLock lock(&t.mu);
    for (Record* r : rs) {
      // The fence and the invalidation were the gates': every key is refused already.
      r->life.Transition(KeyState::kFencing);
      r->life.Transition(KeyState::kInvalidating);
    }
  }
  Finish(t, rs, {});
  t.stats().revoked_by_gates.Inc(rs.size());
}

void Recover(Tenant& t, Record* r, hca::Key previous_key) {
  t.stats().keys_recovered.Inc();
  {
    base::MutexLock lock(&t.mu);
    if (r->life.state() == KeyState::kMapping) r->life.Transition(KeyState::kRecovery);
  }
  // The key's variant is the old or the new one, depending on how far the failed UMR got.
  for (hca::Key k : {r->hot->key.load(std::memory_order_relaxed), previous_key}) {
    UmrOp op = UmrOp::Invalidate(k, /*fence=*/true);
    UmrOp* ops[] = {&op};
    t.engine->Execute(ops);
    if (op.result.ok()) {
      base::MutexLock lock(&t.mu);
      r->life.Transition(KeyState::kUnmapped);
      r->life.Transition(KeyState::kQuarantined);
      t.pool->Quarantine(PooledKey{FreeKey(t, k), r->pooled.cls}, base::MonotonicNow());
      return;
    }
    if (k == previous_key) break;
  }
  const hca::Key gone = r->hot->key.load(std::memory_order_relaxed);
  if (t.ctx->ledger != nullptr) t.ctx->ledger->Destroyed(gone);
  absl::Status s = t.device()->DestroyKey(gone);
  if (!s.ok()) RC_LOG(ERROR) << "recovery could not destroy key: " << s;
  t.stats().keys_destroyed_in_recovery.Inc();
  t.stats().keys_destroyed.Inc();
  base::MutexLock lock(&t.mu);
  r->life.Transition(KeyState::kDestroyed);
  t.pool->Forget(r->pooled);
}

}  // namespace regcache::cache::internal