#include "cache/internal/introspect.h"

#include <algorithm>

#include "base/status_macros.h"
#include "cache/internal/holds.h"

namespace regcache::cache::internal {

namespace {

// `s`: the record's state word, read by the caller; `holders`: all of them (Holders(), or a sum
// the caller made for many records at once).
RegistrationInfo InfoOf(const Tenant& t, const Record& r, uint64_t s, int64_t holders)
    ABSL_SHARED_LOCKS_REQUIRED(t.mu) {
  RegistrationInfo info;
  info.handle = r.handle;
  info.key = r.hot->key.load(std::memory_order_relaxed);
  info.va = r.hot->va.load(std::memory_order_relaxed);
  info.length = r.hot->length.load(std::memory_order_relaxed);
  info.access = r.hot->access.load(std::memory_order_relaxed);
  info.holders = static_cast<uint32_t>(std::max<int64_t>(0, holders));
  info.revoked = (s & state::kRevoked) != 0;
  info.is_window = (s & state::kWindow) != 0;
  info.parent = r.parent != nullptr ? r.parent->handle : 0;
  info.windows = static_cast<uint32_t>(r.windows.size());
  info.klm_entries = r.klm_entries;
  info.key_capacity = t.pool != nullptr ? t.pool->capacity(r.pooled.cls) : 0;
  info.key_state = r.life.state();
  return info;
}

}  // namespace

absl::StatusOr<RegistrationInfo> QueryRecord(Tenant& t, Handle handle) {
  ASSIGN_OR_RETURN(Record * r, Resolve(t, handle));
  base::ReaderMutexLock lock(&t.mu);  // keeps the record from being reallocated
  const uint64_t s = r->hot->state.load(std::memory_order_acquire);
  if (!state::PublishedAs(s, HandleGen(handle))) return NoSuchHandle(handle);
  return InfoOf(t, *r, s, Holders(t, r->slot, s));
}

bool HandleRevoked(const Tenant& t, Handle handle) {
  // CheckHandleTenant's test, without the status it would make (this runs per grant recorded).
  if (handle == 0 || HandleTenantSlot(handle) != t.slot) return true;
  const HotRecord* h = t.slab.Hot(HandleSlot(handle));
  if (h == nullptr) return true;
  // kRevoked, not kDead: a stop that finds the record unheld may take its mark back, while
  // kRevoked is set only once the lifecycle is sure to run (after the stop's fence).
  const uint64_t s = h->state.load(std::memory_order_acquire);
  return !state::PublishedAs(s, HandleGen(handle)) || (s & state::kRevoked) != 0;
}

std::vector<RegistrationInfo> ListRecords(Tenant& t) {
  std::vector<RegistrationInfo> out;
  base::ReaderMutexLock lock(&t.mu);
  base::MutexLock il(&t.index_mu);
  const LocalHoldCounts local = CountLocalHolds(t);
  for (uint32_t i = 0; i < t.slab.size(); ++i) {
    const Record* r = t.slab.At(i);
    const uint64_t s = r->hot->state.load(std::memory_order_acquire);
    if ((s & state::kPublished) != 0) out.push_back(InfoOf(t, *r, s, HoldersFrom(local, i, s)));
  }
  return out;
}

TenantUsage UsageOf(Tenant& t) {
  TenantUsage u;
  u.pd = t.pd;
  base::ReaderMutexLock lock(&t.mu);
  u.live_registrations = t.live;
  u.backings = t.backings.size();
  u.backed_bytes = t.backings.total_bytes();
  u.pool_free = t.pool->free_keys();
  u.pool_quarantined = t.pool->quarantined_keys();
  u.pool_outstanding = t.pool->outstanding_keys();
  u.pool_total = t.pool->total_keys();
  base::MutexLock il(&t.index_mu);
  const LocalHoldCounts local = CountLocalHolds(t);
  for (uint32_t i = 0; i < t.slab.size(); ++i) {
    const uint64_t s = t.slab.Hot(i)->state.load(std::memory_order_acquire);
    if (state::Live(s) && (s & state::kWindow) == 0 && HoldersFrom(local, i, s) <= 0) {
      u.cached_unreferenced++;
    }
    if ((s & state::kPublished) != 0 && (s & state::kRevoked) != 0) u.revoked_held++;
  }
  return u;
}

}  // namespace regcache::cache::internal