#include "cache/internal/lifecycle.h"

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

// kDraining: out of the cover index, and every window on `r` stopped and retired first (a
// parent's key is invalidated only after every window on it is). Waits out windows that are
// still being mapped, or retired by another thread.
void Drain(Tenant& t, Record* r) {
  for (int round = 0;; ++round) {
    std::vector<Record*> stopped;
    bool waiting = false;
    {
      base::MutexLock lock(&t.mu);
      if (round == 0) {
        r->life.Transition(KeyState::kDraining);
        if (!r->is_window()) {
          auto [lo, hi] = t.cover.equal_range(r->hot->va.load(std::memory_order_relaxed));
          for (auto it = lo; it != hi; ++it) {
            if (it->second == r) {
              t.cover.erase(it);
              break;
            }
          }
        }
      }
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
    for (Record* w : stopped) Retire(t, w);
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

}  // namespace

void Retire(Tenant& t, Record* r) {
  Drain(t, r);
  {
    base::MutexLock lock(&t.mu);
    r->life.Transition(KeyState::kFencing);
    r->life.Transition(KeyState::kInvalidating);
  }
  // One WQE: the fence bit makes it wait for everything posted before it on the queue.
  const hca::Key key = r->hot->key.load(std::memory_order_relaxed);
  UmrOp op = UmrOp::Invalidate(key, /*fence=*/true);
  UmrOp* ops[] = {&op};
  t.engine->Execute(ops);
  if (!op.result.ok()) {
    RC_LOG(WARNING) << "invalidate of key " << absl::StrFormat("0x%08x", key)
                    << " failed: " << op.result << "; recovering";
    {
      base::MutexLock lock(&t.mu);
      r->life.Transition(KeyState::kRecovery);
    }
    Recover(t, r, key);
  }
  Record* parent = nullptr;
  {
    base::MutexLock lock(&t.mu);
    if (r->life.state() == KeyState::kInvalidating) {
      r->life.Transition(KeyState::kUnmapped);
      r->life.Transition(KeyState::kQuarantined);
      t.pool->Quarantine(PooledKey{FreeKey(t, r->pooled.key), r->pooled.cls}, base::MonotonicNow());
    }
    // Unmapped (or destroyed): only now do backing references and quota go.
    for (BackingId id : r->backings) {
      if (BackingRecord* b = t.backings.Find(id)) b->users--;
    }
    t.live--;
    if (r->is_window()) {
      std::erase(r->parent->windows, r);
      parent = r->parent;
    }
  }
  t.stats().invalidations.Inc();
  t.stats().live_registrations.Sub();
  if (parent != nullptr) {
    // The window's hold on its parent (taken when the window was mapped; the parent's
    // generation cannot change while it is held).
    (void)DropHold(t, parent->slot, HandleGen(parent->handle), parent->handle,
                   /*user_release=*/false);
  }
  // Done: a revoked handle lives until its last holder releases it, so whichever of the two
  // comes second (this, or the release that unpublishes it) recycles the record.
  const uint64_t before = r->hot->state.fetch_or(state::kDone, std::memory_order_acq_rel);
  if ((before & state::kPublished) == 0) {
    base::MutexLock il(&t.index_mu);
    Recycle(t, r);
  }
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