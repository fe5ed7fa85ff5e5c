#include "cache/internal/tenant.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "cache/backing_observer.h"
#include "cache/internal/gates.h"
#include "cache/internal/holds.h"
#include "cache/internal/lifecycle.h"

namespace regcache::cache::internal {

namespace {

constexpr int kDetachAttempts = 8;

// Tells CacheOptions::backing_observer (if any) about memory just attached, or about to be
// deregistered (cache/backing_observer.h).
void NotifyAdded(const Tenant& t, const BackingRecord& b) {
  if (BackingObserver* o = t.ctx->options.backing_observer) {
    o->OnBackingAdded(BackingEvent{t.id, b.id, b.va, b.device, b.access});
  }
}
void NotifyRemoving(const Tenant& t, const BackingRecord& b) {
  if (BackingObserver* o = t.ctx->options.backing_observer) {
    o->OnBackingRemoving(BackingEvent{t.id, b.id, b.va, b.device, b.access});
  }
}

}  // namespace

absl::Status NoSuchHandle(Handle handle) {
  return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
}

absl::Status TooManyRecords() {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant has %d registrations, the most one tenant may have", Slab::kMaxSlots));
}

absl::Status CheckHandleTenant(const Tenant& t, Handle handle) {
  if (handle == 0) return absl::InvalidArgumentError("handle 0 is never valid");
  // Another session's handle and a made-up one read the same: whether a handle is someone
  // else's is not this session's to learn.
  if (HandleTenantSlot(handle) != t.slot) {
    return base::WithReason(
        absl::NotFoundError(absl::StrFormat("handle 0x%x is not one of this session's", handle)),
        base::reason::kHandleNotOwned, {{"handle", std::to_string(handle)}});
  }
  return absl::OkStatus();
}

absl::StatusOr<Record*> Resolve(const Tenant& t, Handle handle) {
  RETURN_IF_ERROR(CheckHandleTenant(t, handle));
  // The hot half only: the cold one stays out of the cache on the release path.
  if (const HotRecord* h = t.slab.Hot(HandleSlot(handle))) {
    const uint64_t s = h->state.load(std::memory_order_acquire);
    if (state::PublishedAs(s, HandleGen(handle))) return t.slab.At(HandleSlot(handle));
  }
  return NoSuchHandle(handle);
}

namespace {

// The device half of AttachMemory: registers the memory mapped here, or imports the tenant's own
// region (BackingSpec::region) narrowed to the attached range.
absl::StatusOr<hca::Backing> DeviceBacking(Tenant& t, const BackingSpec& spec,
                                           hca::AccessFlags access, BackingRecord* rec) {
  if (spec.region.has_value()) {
    const hca::ImportedRegion& region = *spec.region;
    if (spec.on_demand) {
      return absl::InvalidArgumentError(
          "a client's own region cannot be attached on demand: it pages as it was registered");
    }
    if (spec.va < region.iova || spec.va - region.iova > region.length ||
        spec.length > region.length - (spec.va - region.iova)) {
      return absl::OutOfRangeError(
          absl::StrFormat("[0x%x, +0x%x) is not within memory region %d [0x%x, +0x%x)", spec.va,
                          spec.length, region.handle, region.iova, region.length));
    }
    hca::ImportedRegion r = region;
    r.access = access;
    ASSIGN_OR_RETURN(hca::Backing b, t.device()->ImportBacking(t.pd, r));
    // The key speaks the region's addresses, which are the tenant's: the attached range is
    // [va, +length) of it, and that is all the cache (and the fault servicer) may use.
    b.addr = spec.va;
    b.length = spec.length;
    b.num_entries = static_cast<uint32_t>(((spec.va & 4095) + spec.length + 4095) / 4096);
    rec->device_addr = spec.va;
    return b;
  }
  if (spec.dmabuf.has_value()) {
    if (spec.on_demand) {
      return absl::InvalidArgumentError(
          "a dma-buf cannot be attached on demand: its exporter pins it while registered");
    }
    ASSIGN_OR_RETURN(hca::Backing b, t.device()->RegisterDmabufBacking(
                                         t.pd, *spec.dmabuf, spec.length, spec.va, access));
    rec->device_addr = b.addr;  // the tenant's address, or where the sim mapped it
    return b;
  }
  hca::BackingOptions bo;
  bo.on_demand = spec.on_demand;
  bo.log_page_size = spec.log_page_size;
  const uint64_t local = rec->device_addr;
  if (t.device()->capabilities().memory_windows) {
    // A window's addresses are its backing's: the backing speaks the tenant's addresses, and
    // layouts name them (BackingRecord::device_addr is the key's address of va).
    bo.iova = spec.va;
    rec->device_addr = spec.va;
  }
  return t.device()->RegisterBacking(t.pd, local, spec.length, access, bo);
}

}  // namespace

absl::StatusOr<BackingId> AttachMemory(Tenant& t, const BackingSpec& spec) {
  if (spec.length == 0) return absl::InvalidArgumentError("memory length 0");
  if (spec.va + spec.length < spec.va) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory [0x%x, +0x%x) wraps around the address space", spec.va, spec.length));
  }
  if (spec.local_addr == nullptr && !spec.region.has_value() && !spec.dmabuf.has_value()) {
    return absl::InvalidArgumentError("memory not mapped here");
  }
  ASSIGN_OR_RETURN(hca::AccessFlags access, NormalizeAccess(spec.access));
  base::MutexLock lock(&t.mu);
  if (t.options.max_backed_bytes != 0 &&
      t.backings.total_bytes() + spec.length > t.options.max_backed_bytes) {
    t.stats().quota_refusals.Inc();
    return base::WithReason(absl::ResourceExhaustedError(absl::StrFormat(
                                "memory quota: %d bytes attached + %d > limit %d",
                                t.backings.total_bytes(), spec.length, t.options.max_backed_bytes)),
                            base::reason::kMemoryQuotaExceeded,
                            {{"limit_bytes", std::to_string(t.options.max_backed_bytes)},
                             {"used_bytes", std::to_string(t.backings.total_bytes())},
                             {"requested_bytes", std::to_string(spec.length)}});
  }
  if (t.options.max_attached != 0 && t.backings.by_va().size() >= t.options.max_attached) {
    t.stats().quota_refusals.Inc();
    return base::WithReason(absl::ResourceExhaustedError(absl::StrFormat(
                                "memory quota: %d memories attached, the most one session may have",
                                t.backings.by_va().size())),
                            base::reason::kMemoryQuotaExceeded,
                            {{"limit_memories", std::to_string(t.options.max_attached)},
                             {"used_memories", std::to_string(t.backings.by_va().size())}});
  }
  BackingRecord rec;
  rec.id = t.next_backing++;
  rec.va = spec.va;
  rec.length = spec.length;
  rec.device_addr = reinterpret_cast<uint64_t>(spec.local_addr);
  rec.access = access;
  RETURN_IF_ERROR(t.backings.CheckFree(spec.va, spec.length));  // before touching the device
  ASSIGN_OR_RETURN(rec.device, DeviceBacking(t, spec, access, &rec));
  if (UsesGates(t)) {
    absl::StatusOr<hca::Key> gate = OpenGate(t, rec);
    if (!gate.ok()) {
      (void)t.device()->DestroyKey(rec.device.key);
      return gate.status();
    }
    rec.gate = *gate;
  }
  absl::Status added = t.backings.Add(rec);
  if (!added.ok()) {
    if (rec.gate != 0) (void)DestroyGate(t, rec.gate);
    (void)t.device()->DestroyKey(rec.device.key);
    return added;
  }
  t.stats().backed_bytes.Add(static_cast<int64_t>(spec.length));
  NotifyAdded(t, rec);
  return rec.id;
}

absl::Status DetachMemory(Tenant& t, BackingId backing) {
  for (int attempt = 0; attempt < kDetachAttempts; ++attempt) {
    std::vector<Record*> victims;
    {
      base::MutexLock lock(&t.mu);
      BackingRecord* b = t.backings.Find(backing);
      if (b == nullptr) {
        return absl::NotFoundError(absl::StrFormat("no attached memory with id %d", backing));
      }
      t.backings.MarkRemoving(*b);  // new layouts refuse it from now on
      if (b->users == 0) {
        auto rec = t.backings.Remove(backing);
        t.stats().backed_bytes.Sub(static_cast<int64_t>(rec->length));
        NotifyRemoving(t, *rec);
        // No live key names the gate: every registration over the memory is retired.
        if (rec->gate != 0) {
          if (absl::Status g = DestroyGate(t, rec->gate); !g.ok()) {
            RC_LOG(WARNING) << "detach: destroying the gate of memory " << backing << ": " << g;
          }
        }
        return t.device()->DestroyKey(rec->device.key);
      }
      // Registrations over it: those whose range intersects it.
      const uint64_t lo = b->va > t.max_length ? b->va - t.max_length : 0;
      for (auto it = CoverFrom(t.cover, lo); it != t.cover.end() && it->first < b->va + b->length;
           ++it) {
        Record* r = it->second;
        if (r->hot->va + r->hot->length <= b->va) continue;
        victims.push_back(r);
      }
      base::MutexLock il(&t.index_mu);
      StopReferences(t, victims);
    }
    RetireBatch(t, victims);
    if (victims.empty()) absl::SleepFor(absl::Microseconds(100));  // a map in flight
  }
  return absl::UnavailableError(
      absl::StrFormat("attached memory %d is still in use by registrations being mapped", backing));
}

absl::Status CloseTenant(Tenant& t) {
  // Every registration through the lifecycle: windows first (a parent waits for its windows).
  std::vector<Record*> windows, parents;
  {
    base::MutexLock lock(&t.index_mu);
    parents.reserve(t.slab.size());  // windows are the few
    for (uint32_t i = 0; i < t.slab.size(); ++i) {
      Record* r = t.slab.At(i);
      (r->is_window() ? windows : parents).push_back(r);
    }
    StopEveryReference(t, windows, parents);
  }
  {
    // No hit finds a stopped record, and every one goes: the cover index empties at once,
    // not entry by entry (StartDraining's erase then finds nothing).
    base::MutexLock lock(&t.mu);
    // Freeing its nodes is the reaper's work too (ReapTenant).
    t.closed_cover.swap(t.cover);
  }
  // With gates, one UMR per attached memory refuses every key; else one per key.
  bool shut = false;
  if (UsesGates(t)) {
    std::vector<hca::Key> gates;
    {
      base::MutexLock lock(&t.mu);
      for (const auto& [va, b] : t.backings.by_va()) gates.push_back(b.gate);
    }
    absl::Status s = ShutGates(t, gates);
    shut = s.ok();
    if (!shut) RC_LOG(WARNING) << "close: " << s << "; invalidating every key instead";
  }
  if (shut) {
    {
      base::MutexLock lock(&t.mu);
      t.pool->ReserveDoomed(windows.size() + parents.size());
    }
    RetireShut(t, windows);
    RetireShut(t, parents);
  } else {
    RetireBatch(t, windows);
    RetireBatch(t, parents);
  }

  absl::Status first;
  {
    base::MutexLock refill(&t.refill_mu);  // no refill is creating keys for the pool now
    base::MutexLock lock(&t.mu);
    t.closing = true;
    std::vector<BackingId> ids;
    for (auto& [va, b] : t.backings.by_va()) ids.push_back(b.id);
    for (BackingId id : ids) {
      auto b = t.backings.Remove(id);
      NotifyRemoving(t, *b);
      // Pool keys may still name the gate (shut, or in front of invalidated keys): it goes
      // after them, in ReapTenant. The registration behind it can go now.
      if (b->gate != 0) t.shut_gates.push_back(b->gate);
      absl::Status s = t.device()->DestroyKey(b->device.key);
      if (!s.ok() && first.ok()) first = s;
      t.stats().backed_bytes.Sub(static_cast<int64_t>(b->length));
    }
  }
  return first;
}

bool ReapTenant(Tenant& t, size_t max_keys, absl::Status& first) {
  RC_CACHE_TEST_HOOK(kReaping);
  std::vector<PooledKey> keys;
  KeyPool* pool = nullptr;
  {
    base::MutexLock refill(&t.refill_mu);
    base::MutexLock lock(&t.mu);
    RC_DCHECK(t.closing);
    if (t.pool != nullptr) {
      keys = t.pool->TakeForTeardown(max_keys);
      if (keys.empty()) {
        t.pool.reset();  // empty: keys still handed out (none after CloseTenant) stay lost
      } else {
        pool = t.pool.get();  // stays: only this thread reaps the tenant
      }
    }
  }
  if (pool != nullptr) {
    absl::Status s = pool->DestroyKeys(keys);
    if (!s.ok() && first.ok()) first = s;
    return false;
  }
  std::vector<hca::Key> gates;
  {
    base::MutexLock lock(&t.mu);
    gates.swap(t.shut_gates);
    t.closed_cover.clear();
  }
  for (hca::Key g : gates) {
    absl::Status s = DestroyGate(t, g);
    if (!s.ok() && first.ok()) first = s;
  }
  // Records still held (revoked) die with the tenant's slab: their handles go with it.
  t.engine.reset();
  absl::Status s = t.device()->DeallocPd(t.pd);
  if (!s.ok() && first.ok()) first = s;
  return true;
}

}  // namespace regcache::cache::internal