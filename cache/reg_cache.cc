#include "cache/reg_cache.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/asymmetric_fence.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "cache/backing_observer.h"
#include "cache/internal/index.h"
#include "cache/key_pool.h"
#include "cache/umr_engine.h"

namespace cache {

namespace {
// What NormalizeAccess accepts, without building a Status.
bool AccessIsValid(hca::AccessFlags access) {
  return (access & ~hca::kAllAccess) == 0 &&
         ((access & (hca::kRemoteWrite | hca::kRemoteAtomic)) == 0 ||
          (access & hca::kLocalWrite) != 0);
}
}  // namespace

absl::StatusOr<hca::AccessFlags> NormalizeAccess(hca::AccessFlags access) {
  if (AccessIsValid(access)) return access | hca::kLocalRead;
  if ((access & ~hca::kAllAccess) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown access bits 0x%x", access & ~hca::kAllAccess));
  }
  // Known bits, so the other rule failed.
  return absl::InvalidArgumentError(absl::StrFormat(
      "access %s: remote write and remote atomic need local write", hca::AccessToString(access)));
}

namespace {

using namespace ::cache::internal;  // NOLINT: the index is this file's own machinery

constexpr uint32_t kMaxTenantSlots = 1u << 16;
constexpr int kCoverScanLimit = 64;  // cover lookups give up (miss) after this many candidates
constexpr int kEvictionAttempts = 8;

struct Tenant {
  TenantId id = 0;
  uint32_t slot = 0;
  TenantOptions options;
  hca::Pd pd;
  std::unique_ptr<UmrEngine> engine;

  base::Mutex mu;  // the slow path: backings, pool, cover index, quota, lifecycles
  BackingSet backings ABSL_GUARDED_BY(mu);
  std::unique_ptr<KeyPool> pool ABSL_GUARDED_BY(mu);
  absl::btree_multimap<uint64_t, Registration*> cover ABSL_GUARDED_BY(mu);
  uint64_t max_length ABSL_GUARDED_BY(mu) = 0;
  uint64_t live ABSL_GUARDED_BY(mu) = 0;  // quota-counted keys: from take to unmapped
  BackingId next_backing ABSL_GUARDED_BY(mu) = 1;
  bool closing ABSL_GUARDED_BY(mu) = false;

  // The registration index (cache/internal/index.h). Hits and releases read it without a lock;
  // everything that allocates, publishes, stops or recycles a record, or changes the range
  // index, holds index_mu. Lock order: mu, then index_mu.
  base::Mutex index_mu ABSL_ACQUIRED_AFTER(mu);
  Slab slab;         // At() is lock-free; Allocate/Free under index_mu
  RangeIndex index;  // Find() is lock-free; Insert/Erase under index_mu
  HoldTables holds;  // each thread writes its own; stop-reference and Settle sum them
  uint32_t clock_hand ABSL_GUARDED_BY(index_mu) = 0;
};

// Writes the grant field by field into `g` (the hit path's `g` is the caller's StatusOr, so
// nothing is copied after).
void FillGrant(KeyGrant& g, const HotRecord& h, Handle handle, bool hit) {
  g.handle = handle;
  g.lkey = g.rkey = h.key.load(std::memory_order_relaxed);
  g.va = h.va.load(std::memory_order_relaxed);
  g.length = h.length.load(std::memory_order_relaxed);
  g.access = h.access.load(std::memory_order_relaxed);
  g.hit = hit;
}

KeyGrant GrantOf(const Registration& r, bool hit) {
  KeyGrant g;
  FillGrant(g, *r.hot, r.handle, hit);
  return g;
}

// A record for a new registration or window, its cold fields reset.
Registration* AllocateRecord(Tenant* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu) {
  base::MutexLock il(&t->index_mu);
  Registration* r = t->slab.Allocate();
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

void SetRange(Registration* r, uint64_t va, uint64_t length, hca::AccessFlags access,
              hca::Key key) {
  r->hot->va.store(va, std::memory_order_relaxed);
  r->hot->length.store(length, std::memory_order_relaxed);
  r->hot->access.store(access, std::memory_order_relaxed);
  r->hot->key.store(key, std::memory_order_relaxed);
}

// Gives `r` its next generation and handle, published with one holder (the caller).
void Publish(Tenant* t, Registration* r, bool window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->index_mu) {
  const uint32_t gen = (st::Gen(r->hot->state.load(std::memory_order_relaxed)) + 1) & kGenMask;
  r->handle = MakeHandle(t->slot, gen, r->slot);
  const uint64_t flags = st::kPublished | (window ? st::kWindow : 0);
  r->hot->state.store((uint64_t{gen} << st::kGenShift) | flags | 1, std::memory_order_release);
}

// Whether `r`, whose state word read `s`, is a live registration (not a window) of exactly
// [va, +length) with at least `access`. The range is read after `s`; a caller that acts on the
// answer re-checks the state word afterwards (a recycle changes the generation).
bool Matches(const HotRecord* r, uint64_t s, uint64_t va, uint64_t length,
             hca::AccessFlags access) {
  return st::Live(s) && (s & st::kWindow) == 0 && r->va.load(std::memory_order_relaxed) == va &&
         r->length.load(std::memory_order_relaxed) == length &&
         (access & ~r->access.load(std::memory_order_relaxed)) == 0;
}

// Lock-free: one more shared holder for `r` if it is a live registration of exactly
// [va, +length) with at least `access`. Returns the state word before the hold, or 0 if it took
// none. The CAS expects the state read before the range: if it wins, the record was that
// registration the whole time.
uint64_t TryHoldShared(HotRecord* r, uint64_t va, uint64_t length, hca::AccessFlags access) {
  uint64_t s = r->state.load(std::memory_order_acquire);
  for (;;) {
    if (!Matches(r, s, va, length, access) || st::SharedHolders(s) == INT32_MAX) return 0;
    std::atomic_thread_fence(std::memory_order_acquire);  // the range loads above, before the CAS
    const uint64_t next = st::WithShared(s, st::SharedHolders(s) + 1) | st::kReferenced;
    if (r->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      return s;
    }
  }
}

class RegCacheImpl final : public RegCache {
 public:
  RegCacheImpl(hca::Device* device, const CacheOptions& options,
               base::stats::Registry* registry)
      : device_(device),
        options_(options),
        tenants_(new std::atomic<Tenant*>[kMaxTenantSlots]),
        generations_(kMaxTenantSlots, 0) {
    for (uint32_t i = 0; i < kMaxTenantSlots; ++i) tenants_[i].store(nullptr);
    for (uint32_t i = kMaxTenantSlots - 1; i >= 1; --i) free_slots_.push_back(i);
    if (registry != nullptr) registration_ = base::stats::Registration(*registry, "cache", &stats_);
    if (options_.background_maintenance) {
      maintenance_ = std::thread([this] { MaintenanceLoop(); });
    }
  }

  ~RegCacheImpl() override {
    {
      base::MutexLock lock(&stop_mu_);
      stop_ = true;
      stop_cv_.SignalAll();
    }
    if (maintenance_.joinable()) maintenance_.join();
    std::vector<TenantId> ids;
    {
      base::MutexLock lock(&tenants_mu_);
      for (auto& [id, t] : live_tenants_) ids.push_back(id);
    }
    for (TenantId id : ids) {
      absl::Status s = CloseTenant(id);
      if (!s.ok()) RC_LOG(WARNING) << "closing tenant " << id << " at shutdown: " << s;
    }
  }

  absl::StatusOr<TenantId> OpenTenant(const TenantOptions& options) override;
  absl::Status CloseTenant(TenantId tenant) override;
  absl::StatusOr<BackingId> AddBacking(TenantId tenant, const BackingSpec& spec) override;
  absl::Status RemoveBacking(TenantId tenant, BackingId backing) override;
  absl::StatusOr<KeyGrant> Register(TenantId tenant, uint64_t va, uint64_t length,
                                    hca::AccessFlags access) override;
  absl::StatusOr<KeyGrant> CreateWindow(TenantId tenant, Handle parent, uint64_t offset,
                                        uint64_t length, hca::AccessFlags access) override;
  absl::Status Release(TenantId tenant, Handle handle) override;
  absl::Status Invalidate(TenantId tenant, Handle handle) override;
  absl::StatusOr<RegistrationInfo> Query(TenantId tenant, Handle handle) override;
  absl::StatusOr<TenantUsage> Usage(TenantId tenant) override;
  absl::StatusOr<std::vector<RegistrationInfo>> List(TenantId tenant) override;
  void Maintain() override;
  const CacheStats& stats() const override { return stats_; }
  hca::Device* device() const override { return device_; }

 private:
  // The open tenant `id`, or nullptr. Lock-free; the fast paths use it without a Status.
  Tenant* Lookup(TenantId id) const {
    Tenant* t = tenants_[id & (kMaxTenantSlots - 1)].load(std::memory_order_acquire);
    return t != nullptr && t->id == id ? t : nullptr;
  }
  absl::StatusOr<Tenant*> Find(TenantId id) const {
    Tenant* t = Lookup(id);
    if (t == nullptr) return absl::NotFoundError(absl::StrFormat("no open tenant %d", id));
    return t;
  }
  // kInvalidArgument for handle 0, kPermissionDenied for a handle of another tenant.
  static absl::Status CheckHandleTenant(const Tenant* t, Handle handle) {
    if (handle == 0) return absl::InvalidArgumentError("handle 0 is never valid");
    if (HandleTenantSlot(handle) != t->slot) {
      return absl::PermissionDeniedError(
          absl::StrFormat("handle 0x%x belongs to another tenant", handle));
    }
    return absl::OkStatus();
  }
  // The record `handle` names, if it belongs to `t` and is published with that generation.
  // Lock-free; the answer can be stale by the time the caller acts on it, so callers that
  // change the record re-check the state word (CAS) or hold index_mu.
  absl::StatusOr<Registration*> Resolve(Tenant* t, Handle handle) const {
    RETURN_IF_ERROR(CheckHandleTenant(t, handle));
    // The hot half only: the cold one stays out of the cache on the release path.
    if (const HotRecord* h = t->slab.Hot(HandleSlot(handle))) {
      const uint64_t s = h->state.load(std::memory_order_acquire);
      if (st::PublishedAs(s, HandleGen(handle))) {
        return t->slab.At(HandleSlot(handle));
      }
    }
    return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
  }
  // One more holder for the record at `slot` (hot half `h`) in this thread's table `mine`, if
  // it is a live registration of exactly [va, +length) with at least `access`: the hit's half of
  // the hold protocol (cache/internal/index.h). Returns the state word it held, or 0 if it took
  // nothing; `busy` is set when the thread's entry belongs to another registration.
  uint64_t TryHoldLocal(Tenant* t, HoldTable* mine, uint32_t slot, HotRecord* h, uint64_t va,
                        uint64_t length, hca::AccessFlags access, bool& busy);
  // Fills `g` and returns true on a hit.
  bool TryHit(Tenant* t, uint64_t va, uint64_t length, hca::AccessFlags access, KeyGrant& g);
  absl::StatusOr<KeyGrant> Miss(Tenant* t, uint64_t va, uint64_t length,
                                hca::AccessFlags access);
  // Reserves one quota slot and takes a key of `cls`, evicting unreferenced registrations of
  // the tenant when the quota or the pool is exhausted. On success the tenant mutex is held.
  // (Conditional lock hand-off: not expressible to the analysis.)
  absl::StatusOr<TakenKey> ReserveKey(Tenant* t, int cls) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // CLOCK over the tenant's records: the first unheld registration not hit since the hand
  // last passed it, with its references stopped. nullptr if none.
  Registration* PickVictim(Tenant* t);
  // Stop-reference: after this no one can become a holder, and the record leaves the range
  // index. A held one is revoked (its handle lives until the last release); an unheld one's
  // handle goes now. Returns what it did: kNotStopped if the record is not live (already
  // stopped, or not published), or `only_unheld` and held, or `gen` given and not its
  // generation. Costs a HeavyFence; StopReferences stops many for one.
  static constexpr uint32_t kAnyGen = UINT32_MAX;
  enum Stopped { kNotStopped = 0, kStoppedUnheld, kStoppedRevoked };
  Stopped StopReference(Tenant* t, Registration* r, bool only_unheld = false,
                        uint32_t gen = kAnyGen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->index_mu);
  // The same for every record in `rs`; keeps in `rs` those it stopped.
  void StopReferences(Tenant* t, std::vector<Registration*>& rs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->index_mu);
  // Stop-reference's two halves, around the HeavyFence: MarkDead returns the state word before
  // (0 if it did not mark it); SettleStop counts the holders and unpublishes, revokes or (if
  // `only_unheld` and held) undoes the mark.
  uint64_t MarkDead(Tenant* t, Registration* r, bool only_unheld, uint32_t gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->index_mu);
  Stopped SettleStop(Tenant* t, Registration* r, uint64_t before, bool only_unheld)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->index_mu);
  // Every holder of the record at `slot` in state `s` (generation Gen(s)): shared + per thread.
  static int64_t Holders(const Tenant* t, uint32_t slot, uint64_t s) {
    return st::SharedHolders(s) + t->holds.Count(slot, st::Gen(s));
  }
  // For callers that need the holders of many records: the threads' holds in one pass over
  // their tables (Holders() costs a load per thread for each record), then per record.
  static absl::flat_hash_map<uint64_t, int64_t> LocalHolds(const Tenant* t);
  static int64_t HoldersFrom(const absl::flat_hash_map<uint64_t, int64_t>& local, uint32_t slot,
                             uint64_t s);
  // Called by whoever drops a hold on a dead record (release, or a hit that lost its race):
  // once every holder is gone, unpublishes it, and recycles it if its lifecycle is done. Takes
  // index_mu, so it runs after any stop in progress.
  void Settle(Tenant* t, uint32_t slot, uint32_t gen);
  // Drops one holder of the record at `slot`, published with generation `gen`, from the shared
  // count. The last holder of a revoked record hands it back to the slab once its lifecycle is
  // done; the last of a window retires the window. `user_release`: a Release() call (counted
  // in the stats), not the cache's own hold.
  absl::Status DropHold(Tenant* t, uint32_t slot, uint32_t gen, Handle handle,
                        bool user_release);
  // Runs draining → fencing → invalidating → unmapped → quarantined for a registration whose
  // references were stopped (StopReference), windows first. Never holds a lock across a UMR.
  void RunLifecycle(Tenant* t, Registration* r);
  // A key whose UMR failed or timed out: invalidate it again (trying the key value before and
  // after the map), else destroy it. Returns with the key quarantined or forgotten.
  void RecoverKey(Tenant* t, Registration* r, hca::Key previous_key);
  // The lifecycle is done with `r`: it goes back to the slab now, or at its last release.
  void Finish(Tenant* t, Registration* r);
  // Back to the slab's free list. REQUIRES: unpublished, and nobody will touch it again.
  void Recycle(Tenant* t, Registration* r) {
    base::MutexLock il(&t->index_mu);
    RecycleLocked(t, r);
  }
  void RecycleLocked(Tenant* t, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->index_mu);
  // `s`: its state word, read by the caller. REQUIRES: the tenant mutex (shared), so that the
  // record is not reallocated meanwhile.
  // `holders`: all of them (Holders(), or a sum the caller made for many records at once).
  RegistrationInfo InfoOf(Tenant* t, const Registration& r, uint64_t s, int64_t holders)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void MaintenanceLoop();
  // Tell CacheOptions::backing_observer (if any) about a backing just attached, or about to be
  // deregistered (cache/backing_observer.h). REQUIRE the tenant mutex.
  void NotifyAdded(const Tenant& t, const BackingRecord& b) const {
    if (options_.backing_observer != nullptr) {
      options_.backing_observer->OnBackingAdded(BackingEvent{t.id, b.id, b.va, b.device, b.access});
    }
  }
  void NotifyRemoving(const Tenant& t, const BackingRecord& b) const {
    if (options_.backing_observer != nullptr) {
      options_.backing_observer->OnBackingRemoving(
          BackingEvent{t.id, b.id, b.va, b.device, b.access});
    }
  }

  hca::Device* const device_;
  const CacheOptions options_;
  CacheStats stats_;
  base::stats::Registration registration_;

  std::unique_ptr<std::atomic<Tenant*>[]> tenants_;
  base::Mutex tenants_mu_;
  std::vector<uint16_t> generations_ ABSL_GUARDED_BY(tenants_mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(tenants_mu_);
  absl::flat_hash_map<TenantId, std::shared_ptr<Tenant>> live_tenants_ ABSL_GUARDED_BY(tenants_mu_);

  base::Mutex stop_mu_;
  base::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread maintenance_;
};

// ---------------------------------------------------------------------------------------------
// Tenants

absl::StatusOr<TenantId> RegCacheImpl::OpenTenant(const TenantOptions& options) {
  auto t = std::make_shared<Tenant>();
  t->options = options;
  ASSIGN_OR_RETURN(t->pd, device_->AllocPd());
  auto engine = UmrEngine::Create(device_, t->pd, options_.engine, &stats_);
  if (!engine.ok()) {
    (void)device_->DeallocPd(t->pd);
    return engine.status();
  }
  t->engine = std::move(*engine);
  {
    base::MutexLock lock(&t->mu);
    t->pool = std::make_unique<KeyPool>(device_, t->pd, options_.pool, &stats_);
  }
  base::MutexLock lock(&tenants_mu_);
  if (free_slots_.empty()) {
    t.reset();
    return absl::ResourceExhaustedError("too many tenants");
  }
  t->slot = free_slots_.back();
  free_slots_.pop_back();
  const uint16_t gen = ++generations_[t->slot];
  t->id = (static_cast<uint32_t>(gen) << 16) | t->slot;
  tenants_[t->slot].store(t.get(), std::memory_order_release);
  live_tenants_[t->id] = t;
  stats_.tenants.Add();
  return t->id;
}

absl::Status RegCacheImpl::CloseTenant(TenantId tenant) {
  std::shared_ptr<Tenant> t;
  {
    base::MutexLock lock(&tenants_mu_);
    auto it = live_tenants_.find(tenant);
    if (it == live_tenants_.end()) {
      return absl::NotFoundError(absl::StrFormat("no open tenant %d", tenant));
    }
    t = it->second;
    live_tenants_.erase(it);
    tenants_[t->slot].store(nullptr, std::memory_order_release);
  }
  // Every registration through the lifecycle: windows first (a parent waits for its windows).
  std::vector<Registration*> windows, parents;
  {
    base::MutexLock lock(&t->index_mu);
    std::vector<Registration*> all;
    for (uint32_t i = 0; i < t->slab.size(); ++i) all.push_back(t->slab.At(i));
    StopReferences(t.get(), all);
    for (Registration* r : all) (r->is_window() ? windows : parents).push_back(r);
  }
  for (Registration* r : windows) RunLifecycle(t.get(), r);
  for (Registration* r : parents) RunLifecycle(t.get(), r);

  absl::Status first;
  {
    base::MutexLock lock(&t->mu);
    t->closing = true;
    std::vector<BackingId> ids;
    for (auto& [va, b] : t->backings.by_va()) ids.push_back(b.id);
    for (BackingId id : ids) {
      auto b = t->backings.Remove(id);
      NotifyRemoving(*t, *b);
      absl::Status s = device_->DestroyKey(b->device.key);
      if (!s.ok() && first.ok()) first = s;
      stats_.bytes_backed.Sub(static_cast<int64_t>(b->length));
    }
    t->pool.reset();  // destroys free and quarantined keys
  }
  // Records still held (revoked) die with the tenant's slab: their handles go with it.
  t->engine.reset();
  absl::Status s = device_->DeallocPd(t->pd);
  if (!s.ok() && first.ok()) first = s;
  {
    base::MutexLock lock(&tenants_mu_);
    free_slots_.push_back(t->slot);
  }
  stats_.tenants.Sub();
  return first;
}

// ---------------------------------------------------------------------------------------------
// Backing memory

absl::StatusOr<BackingId> RegCacheImpl::AddBacking(TenantId tenant, const BackingSpec& spec) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  if (spec.length == 0) return absl::InvalidArgumentError("memory length 0");
  if (spec.va + spec.length < spec.va) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory [0x%x, +0x%x) wraps around the address space", spec.va,
                        spec.length));
  }
  if (spec.local_addr == nullptr) return absl::InvalidArgumentError("memory not mapped here");
  ASSIGN_OR_RETURN(hca::AccessFlags access, NormalizeAccess(spec.access));
  base::MutexLock lock(&t->mu);
  if (t->options.max_backed_bytes != 0 &&
      t->backings.total_bytes() + spec.length > t->options.max_backed_bytes) {
    stats_.quota_refusals.Inc();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "memory quota: %d bytes attached + %d > limit %d", t->backings.total_bytes(),
        spec.length, t->options.max_backed_bytes));
  }
  BackingRecord rec;
  rec.id = t->next_backing++;
  rec.va = spec.va;
  rec.length = spec.length;
  rec.device_addr = reinterpret_cast<uint64_t>(spec.local_addr);
  rec.access = access;
  RETURN_IF_ERROR(t->backings.CheckFree(spec.va, spec.length));  // before touching the device
  hca::BackingOptions bo;
  bo.on_demand = spec.on_demand;
  ASSIGN_OR_RETURN(rec.device, device_->RegisterBacking(t->pd, rec.device_addr, spec.length,
                                                        access, bo));
  absl::Status added = t->backings.Add(rec);
  if (!added.ok()) {
    (void)device_->DestroyKey(rec.device.key);
    return added;
  }
  stats_.bytes_backed.Add(static_cast<int64_t>(spec.length));
  NotifyAdded(*t, rec);
  return rec.id;
}

absl::Status RegCacheImpl::RemoveBacking(TenantId tenant, BackingId backing) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  for (int attempt = 0; attempt < kEvictionAttempts; ++attempt) {
    std::vector<Registration*> victims;
    {
      base::MutexLock lock(&t->mu);
      BackingRecord* b = t->backings.Find(backing);
      if (b == nullptr) {
        return absl::NotFoundError(absl::StrFormat("no attached memory with id %d", backing));
      }
      b->removing = true;  // new layouts refuse it from now on
      if (b->users == 0) {
        auto rec = t->backings.Remove(backing);
        stats_.bytes_backed.Sub(static_cast<int64_t>(rec->length));
        NotifyRemoving(*t, *rec);
        return device_->DestroyKey(rec->device.key);
      }
      // Registrations over it: those whose range intersects it.
      const uint64_t lo = b->va > t->max_length ? b->va - t->max_length : 0;
      for (auto it = t->cover.lower_bound(lo);
           it != t->cover.end() && it->first < b->va + b->length; ++it) {
        Registration* r = it->second;
        if (r->hot->va + r->hot->length <= b->va) continue;
        victims.push_back(r);
      }
      base::MutexLock il(&t->index_mu);
      StopReferences(t, victims);
    }
    for (Registration* r : victims) RunLifecycle(t, r);
    if (victims.empty()) absl::SleepFor(absl::Microseconds(100));  // a map in flight
  }
  return absl::UnavailableError(
      absl::StrFormat("attached memory %d is still in use by registrations being mapped", backing));
}

// ---------------------------------------------------------------------------------------------
// Register

uint64_t RegCacheImpl::TryHoldLocal(Tenant* t, HoldTable* mine, uint32_t slot, HotRecord* h,
                                    uint64_t va, uint64_t length, hca::AccessFlags access,
                                    bool& busy) {
  const uint64_t s = h->state.load(std::memory_order_acquire);
  if (!Matches(h, s, va, length, access)) return 0;
  if (st::SharedHolders(s) < 0) [[unlikely]] {
    // Holds taken in threads' tables were released from other threads (a server that takes
    // requests on any thread does that). Take this one in the shared count, so that count
    // stays balanced instead of drifting further below zero with every such release.
    busy = true;
    return 0;
  }
  RC_CACHE_TEST_HOOK(kHitRead);
  const uint32_t gen = st::Gen(s);
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
    const HotRecord* other = t->slab.Hot(HoldTable::SlotOf(e));
    const uint64_t os = other->state.load(std::memory_order_acquire);
    if (st::PublishedAs(os, HoldTable::GenOf(e))) {
      busy = true;
      return 0;
    }
    held = key | 1;
  }
  entry.store(held, std::memory_order_relaxed);
  base::LightFence();  // the entry, before the recheck (a stop's HeavyFence pairs with this)
  std::atomic_thread_fence(std::memory_order_acquire);  // the range loads, before the recheck
  const uint64_t now = h->state.load(std::memory_order_relaxed);
  if (st::SameLive(s, now)) [[likely]] {
    // CLOCK's referenced bit: a shared write only when the hand has cleared it.
    if ((now & st::kReferenced) == 0) h->state.fetch_or(st::kReferenced, std::memory_order_relaxed);
    return s;
  }
  // Stopped (or recycled) since the first read: undo. A stop that counted this hold before the
  // undo revoked the record instead of unpublishing it; Settle finds that out.
  entry.store(held - 1, std::memory_order_release);
  base::LightFence();
  const uint64_t after = h->state.load(std::memory_order_acquire);
  if ((after & st::kDead) != 0 && st::PublishedAs(after, gen)) {
    Settle(t, slot, gen);
  }
  return 0;
}

bool RegCacheImpl::TryHit(Tenant* t, uint64_t va, uint64_t length, hca::AccessFlags access,
                          KeyGrant& g) {
  // Top half: the exact range, without a lock, held in this thread's table (else shared).
  HoldTable* mine = t->holds.Mine();
  const bool found = t->index.Find(RangeIndex::Hash(va, length), [&](uint32_t slot) {
    HotRecord* h = t->slab.Hot(slot);
    if (h == nullptr) return false;
    bool busy = mine == nullptr;
    uint64_t s = busy ? 0 : TryHoldLocal(t, mine, slot, h, va, length, access, busy);
    if (s == 0 && busy) s = TryHoldShared(h, va, length, access);
    if (s == 0) return false;
    FillGrant(g, *h, MakeHandle(t->slot, st::Gen(s), slot), /*hit=*/true);
    return true;
  });
  if (found) return true;
  // Bottom half: a wider registration that covers the range (or the exact one, if the
  // lock-free probe raced with a writer moving its bucket).
  base::ReaderMutexLock lock(&t->mu);
  if (t->cover.empty()) return false;
  const uint64_t end = va + length;
  auto it = t->cover.upper_bound(va);
  int scanned = 0;
  while (it != t->cover.begin() && scanned++ < kCoverScanLimit) {
    --it;
    Registration* r = it->second;
    const uint64_t rva = r->hot->va.load(std::memory_order_relaxed);
    const uint64_t rlen = r->hot->length.load(std::memory_order_relaxed);
    if (end - rva > t->max_length) break;  // nothing further left can reach `end`
    if (rva + rlen < end) continue;
    // Records in `cover` are not recycled while the tenant mutex is held.
    if (TryHoldShared(r->hot, rva, rlen, access) == 0) continue;
    FillGrant(g, *r->hot, r->handle, /*hit=*/true);
    return true;
  }
  return false;
}

absl::StatusOr<KeyGrant> RegCacheImpl::Register(TenantId tenant, uint64_t va, uint64_t length,
                                                hca::AccessFlags access) {
  // One result object, filled in place and returned by NRVO: the hit path writes the grant
  // straight into the caller's StatusOr (copying a grant built field by field costs the hit
  // path store-forwarding stalls).
  absl::StatusOr<KeyGrant> result(absl::in_place);
  // The common case first, with no Status objects: an open tenant, a well-formed range, rights
  // that need no normalising beyond local read. Anything else takes the checks below.
  Tenant* fast = Lookup(tenant);
  if (fast != nullptr && length != 0 && va + length >= va && AccessIsValid(access)) [[likely]] {
    const hca::AccessFlags normal = access | hca::kLocalRead;
    if (TryHit(fast, va, length, normal, *result)) [[likely]] {
      stats_.register_hits.Inc();
      return result;
    }
    result = Miss(fast, va, length, normal);
    if (!result.ok()) stats_.register_errors.Inc();
    return result;
  }
  absl::StatusOr<Tenant*> t = Find(tenant);
  absl::StatusOr<hca::AccessFlags> normalized = NormalizeAccess(access);
  if (!t.ok()) {
    result = t.status();
  } else if (length == 0) {
    result = absl::InvalidArgumentError("length 0");
  } else if (va + length < va) {
    result = absl::InvalidArgumentError(
        absl::StrFormat("range [0x%x, +0x%x) wraps around the address space", va, length));
  } else if (!normalized.ok()) {
    result = normalized.status();
  } else if (TryHit(*t, va, length, *normalized, *result)) {
    stats_.register_hits.Inc();
    return result;
  } else {
    result = Miss(*t, va, length, *normalized);
  }
  if (!result.ok()) stats_.register_errors.Inc();
  return result;
}

absl::StatusOr<TakenKey> RegCacheImpl::ReserveKey(Tenant* t, int cls) {
  absl::Status last;
  bool quota_refused = false;
  for (int attempt = 0; attempt <= kEvictionAttempts; ++attempt) {
    t->mu.Lock();
    if (t->closing) {
      t->mu.Unlock();
      return absl::NotFoundError("tenant is closing");
    }
    const bool over_quota = t->options.max_keys != 0 && t->live >= t->options.max_keys;
    if (!over_quota) {
      absl::StatusOr<TakenKey> taken = t->pool->Take(cls, base::MonotonicNow());
      if (taken.ok()) {
        t->live++;
        return taken;  // tenant mutex stays held
      }
      last = taken.status();
      quota_refused = false;
    } else {
      last = absl::ResourceExhaustedError(absl::StrFormat(
          "key quota: %d keys live, limit %d", t->live, t->options.max_keys));
      quota_refused = true;
    }
    t->mu.Unlock();
    Registration* victim = PickVictim(t);
    if (victim == nullptr) break;
    stats_.evictions.Inc();
    RunLifecycle(t, victim);
  }
  if (quota_refused) stats_.quota_refusals.Inc();
  return last;
}

Registration* RegCacheImpl::PickVictim(Tenant* t) {
  // Two turns of the hand at most: the first may only clear referenced bits.
  base::MutexLock lock(&t->index_mu);
  const uint32_t n = t->slab.size();
  for (uint64_t step = 0; step < 2 * uint64_t{n}; ++step) {
    if (t->clock_hand >= n) t->clock_hand = 0;
    Registration* r = t->slab.At(t->clock_hand++);
    uint64_t s = r->hot->state.load(std::memory_order_acquire);
    while (st::Live(s) && (s & st::kWindow) == 0 && st::SharedHolders(s) <= 0) {
      if ((s & st::kReferenced) != 0) {  // second chance
        if (r->hot->state.compare_exchange_weak(s, s & ~st::kReferenced, std::memory_order_acq_rel,
                                           std::memory_order_acquire)) {
          break;
        }
        continue;
      }
      // Unreferenced and no shared holder: sum the threads' holds only now (it costs a load
      // per thread). The stop counts again after its fence and backs out if a hit got in
      // first; then the hand moves on.
      if (Holders(t, r->slot, s) > 0) break;
      if (StopReference(t, r, /*only_unheld=*/true) != kNotStopped) return r;
      break;
    }
  }
  return nullptr;
}

absl::StatusOr<KeyGrant> RegCacheImpl::Miss(Tenant* t, uint64_t va, uint64_t length,
                                            hca::AccessFlags access) {
  const absl::Time start = base::MonotonicNow();
  std::vector<hca::KlmEntry> layout;
  std::vector<BackingId> used;
  int cls = 0;
  {
    base::ReaderMutexLock lock(&t->mu);
    ASSIGN_OR_RETURN(layout, t->backings.Layout(va, length, access, &used));
    ASSIGN_OR_RETURN(cls, t->pool->ClassFor(static_cast<uint32_t>(layout.size())));
  }
  ASSIGN_OR_RETURN(TakenKey taken, ReserveKey(t, cls));
  t->mu.AssertHeld();  // ReserveKey returns holding it on success
  // The backings may have changed while the mutex was released: lay out again under the lock
  // that pins them.
  auto relaid = t->backings.Layout(va, length, access, &used);
  if (!relaid.ok() || relaid->size() > t->pool->capacity(cls)) {
    t->live--;
    t->pool->Quarantine(taken.pooled, base::MonotonicNow());  // never mapped: still free on the device
    t->mu.Unlock();
    return relaid.ok() ? absl::AbortedError("attached memory changed during register; retry")
                       : relaid.status();
  }
  layout = std::move(*relaid);
  Registration* r = AllocateRecord(t);
  if (r == nullptr) {
    t->live--;
    t->pool->Quarantine(taken.pooled, base::MonotonicNow());
    t->mu.Unlock();
    return absl::ResourceExhaustedError(
        absl::StrFormat("tenant has %d registrations, the most one tenant may have",
                        Slab::kMaxSlots));
  }
  SetRange(r, va, length, access, taken.mapped_key());
  r->klm_entries = static_cast<uint32_t>(layout.size());
  r->pooled = PooledKey{taken.mapped_key(), cls};
  r->backings.assign(used.begin(), used.end());
  for (BackingId id : used) t->backings.Find(id)->users++;
  r->life.Transition(KeyState::kMapping);
  t->mu.Unlock();

  UmrOp op;
  op.kind = UmrOp::Kind::kMap;
  op.klm = std::move(layout);
  op.map.key = taken.pooled.key;
  op.map.new_variant = taken.new_variant;
  op.map.layout = hca::Layout::kKlm;
  op.map.access = access;
  op.map.start_addr = va;
  op.map.length = length;
  op.map.require_free = true;
  UmrOp* ops[] = {&op};
  t->engine->Execute(ops);

  if (!op.result.ok()) {
    RecoverKey(t, r, taken.pooled.key);
    {
      base::MutexLock lock(&t->mu);
      for (BackingId id : r->backings) {
        if (BackingRecord* b = t->backings.Find(id)) b->users--;
      }
      t->live--;
    }
    Recycle(t, r);
    return op.result;
  }
  KeyGrant grant;
  {
    base::MutexLock lock(&t->mu);
    r->life.Transition(KeyState::kActive);
    t->cover.emplace(va, r);
    t->max_length = std::max(t->max_length, length);
    base::MutexLock il(&t->index_mu);
    Publish(t, r, /*window=*/false);
    t->index.Insert(RangeIndex::Hash(va, length), r->slot);
    grant = GrantOf(*r, false);
  }
  stats_.register_misses.Inc();
  stats_.live_registrations.Add();
  stats_.miss_latency_ns.Record(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(base::MonotonicNow() - start)));
  return grant;
}

// ---------------------------------------------------------------------------------------------
// Windows

absl::StatusOr<KeyGrant> RegCacheImpl::CreateWindow(TenantId tenant, Handle parent,
                                                    uint64_t offset, uint64_t length,
                                                    hca::AccessFlags access) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Registration * p, Resolve(t, parent));
  ASSIGN_OR_RETURN(hca::AccessFlags normalized, NormalizeAccess(access));
  if (length == 0) return absl::InvalidArgumentError("window length 0");
  ASSIGN_OR_RETURN(int cls, [&] {
    base::ReaderMutexLock lock(&t->mu);
    return t->pool->ClassFor(1);
  }());
  // A window holds its parent: take that hold first, then check the window against it (the
  // parent's range and rights are fixed while it is held).
  const uint32_t gen = HandleGen(parent);
  uint64_t ps = p->hot->state.load(std::memory_order_acquire);
  for (;;) {
    if (!st::PublishedAs(ps, gen)) {
      return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", parent));
    }
    if ((ps & st::kDead) != 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("registration 0x%x was invalidated", parent));
    }
    if ((ps & st::kWindow) != 0) {
      return absl::InvalidArgumentError("a window cannot be the parent of a window");
    }
    if (st::SharedHolders(ps) == INT32_MAX) {
      return absl::ResourceExhaustedError("the parent has the most holders it can count");
    }
    if (p->hot->state.compare_exchange_weak(ps, st::WithShared(ps, st::SharedHolders(ps) + 1),
                                            std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      break;
    }
  }
  const uint64_t parent_va = p->hot->va.load(std::memory_order_relaxed);
  const uint64_t parent_length = p->hot->length.load(std::memory_order_relaxed);
  const hca::AccessFlags parent_access = p->hot->access.load(std::memory_order_relaxed);
  const hca::Key parent_key = p->hot->key.load(std::memory_order_relaxed);
  auto drop_parent = [&] { (void)DropHold(t, p->slot, gen, parent, /*user_release=*/false); };
  if (offset >= parent_length || length > parent_length - offset) {
    drop_parent();
    return absl::InvalidArgumentError(absl::StrFormat(
        "window [+0x%x, +0x%x) is outside its parent of 0x%x bytes", offset, length,
        parent_length));
  }
  if ((normalized & ~parent_access) != 0) {
    drop_parent();
    return absl::InvalidArgumentError(absl::StrFormat(
        "window access %s is not narrower than its parent's %s", hca::AccessToString(normalized),
        hca::AccessToString(parent_access)));
  }
  absl::StatusOr<TakenKey> taken = ReserveKey(t, cls);
  if (!taken.ok()) {
    drop_parent();
    stats_.register_errors.Inc();
    return taken.status();
  }
  t->mu.AssertHeld();  // ReserveKey returns holding it on success
  Registration* w = AllocateRecord(t);
  if (w == nullptr) {
    t->live--;
    t->pool->Quarantine(taken->pooled, base::MonotonicNow());
    t->mu.Unlock();
    drop_parent();
    stats_.register_errors.Inc();
    return absl::ResourceExhaustedError(
        absl::StrFormat("tenant has %d registrations, the most one tenant may have",
                        Slab::kMaxSlots));
  }
  w->parent = p;
  SetRange(w, parent_va + offset, length, normalized, taken->mapped_key());
  w->klm_entries = 1;
  w->pooled = PooledKey{taken->mapped_key(), cls};
  w->life.Transition(KeyState::kMapping);
  p->windows.push_back(w);
  t->mu.Unlock();

  UmrOp op;
  op.kind = UmrOp::Kind::kMap;
  op.klm = {hca::KlmEntry{parent_key, parent_va + offset, length}};
  op.map.key = taken->pooled.key;
  op.map.new_variant = taken->new_variant;
  op.map.layout = hca::Layout::kKlm;
  op.map.access = normalized;
  op.map.start_addr = parent_va + offset;
  op.map.length = length;
  UmrOp* ops[] = {&op};
  t->engine->Execute(ops);

  if (!op.result.ok()) {
    RecoverKey(t, w, taken->pooled.key);
    {
      base::MutexLock lock(&t->mu);
      std::erase(p->windows, w);
      t->live--;
    }
    drop_parent();
    Recycle(t, w);
    stats_.register_errors.Inc();
    return op.result;
  }
  KeyGrant grant;
  {
    base::MutexLock lock(&t->mu);
    w->life.Transition(KeyState::kActive);
    base::MutexLock il(&t->index_mu);
    Publish(t, w, /*window=*/true);
    grant = GrantOf(*w, false);
  }
  stats_.windows_created.Inc();
  stats_.live_registrations.Add();
  return grant;
}

// ---------------------------------------------------------------------------------------------
// Release / Invalidate / Query

absl::Status RegCacheImpl::Release(TenantId tenant, Handle handle) {
  Tenant* t = Lookup(tenant);
  if (t == nullptr || handle == 0 || HandleTenantSlot(handle) != t->slot) [[unlikely]] {
    ASSIGN_OR_RETURN(t, Find(tenant));  // the errors, in their order
    RETURN_IF_ERROR(CheckHandleTenant(t, handle));
  }
  const uint32_t slot = HandleSlot(handle);
  const uint32_t gen = HandleGen(handle);
  // A hold this thread took: give it back in its own table (the release half of the protocol).
  if (HoldTable* mine = t->holds.MineIfAny()) {
    std::atomic<uint64_t>& entry = mine->At(slot);
    const uint64_t e = entry.load(std::memory_order_relaxed);
    if (HoldTable::KeyOfEntry(e) == HoldTable::KeyOf(slot, gen) && HoldTable::CountOf(e) > 0) {
      HotRecord* h = t->slab.Hot(slot);
      const uint64_t before = h->state.load(std::memory_order_acquire);
      if (!st::PublishedAs(before, gen)) [[unlikely]] {
        // The publication is over: this entry's holds were all released from other threads
        // (each +1 here was balanced by a -1 in the shared count). Nobody counts it any more.
        entry.store(0, std::memory_order_relaxed);
        return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
      }
      // Published with this generation and held here, so it stays published until this
      // store is seen: a stop in between counts the hold and revokes instead.
      entry.store(e - 1, std::memory_order_release);
      RC_CACHE_TEST_HOOK(kReleaseStore);
      base::LightFence();  // the entry, before the state read (pairs with a stop's HeavyFence)
      const uint64_t s = h->state.load(std::memory_order_acquire);
      if (st::SharedHolders(s) < 0 && st::PublishedAs(s, gen) &&
          Holders(t, slot, s) < 0) [[unlikely]] {
        // Released once more than held: this thread's hold was already released from another
        // thread. Put the count back and refuse, as the shared path does.
        entry.store(e, std::memory_order_relaxed);
        return absl::FailedPreconditionError(
            absl::StrFormat("handle 0x%x has no holders left to release", handle));
      }
      stats_.releases.Inc();
      if ((s & st::kDead) != 0) [[unlikely]] {
        if ((s & st::kRevoked) != 0) stats_.releases_after_revoke.Inc();
        Settle(t, slot, gen);
      }
      return absl::OkStatus();
    }
  }
  return DropHold(t, slot, gen, handle, /*user_release=*/true);
}

absl::Status RegCacheImpl::DropHold(Tenant* t, uint32_t slot, uint32_t gen, Handle handle,
                                    bool user_release) {
  HotRecord* h = t->slab.Hot(slot);
  if (h == nullptr) {
    return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
  }
  uint64_t s = h->state.load(std::memory_order_acquire);
  uint64_t next;
  for (;;) {
    if (!st::PublishedAs(s, gen)) {
      return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
    }
    // Over-release: the shared count can be negative (holds released by another thread than
    // the one that took them), so look at every holder. A snapshot: exact unless a hit on the
    // same registration races this release.
    if (st::SharedHolders(s) <= 0 && Holders(t, slot, s) <= 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("handle 0x%x has no holders left to release", handle));
    }
    if (st::SharedHolders(s) == INT32_MIN) {
      return absl::ResourceExhaustedError("the registration has the most releases it can count");
    }
    next = st::WithShared(s, st::SharedHolders(s) - 1);
    if (h->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      break;
    }
  }
  if (user_release) {
    stats_.releases.Inc();
    if ((s & st::kRevoked) != 0) stats_.releases_after_revoke.Inc();
  }
  if ((s & st::kDead) != 0) {
    // Dead: the last holder unpublishes it, and recycles it if the lifecycle is done with it.
    Settle(t, slot, gen);
  } else if ((s & st::kWindow) != 0 && st::SharedHolders(next) == 0) {
    // Windows are not cached (and all their holds are shared): the last release retires one.
    Stopped stopped;
    {
      base::MutexLock il(&t->index_mu);
      stopped = StopReference(t, t->slab.At(slot), /*only_unheld=*/true, gen);
    }
    if (stopped != kNotStopped) RunLifecycle(t, t->slab.At(slot));
  }
  // Otherwise the registration stays cached, for the CLOCK to find if nobody hits it again.
  return absl::OkStatus();
}

void RegCacheImpl::Settle(Tenant* t, uint32_t slot, uint32_t gen) {
  base::MutexLock il(&t->index_mu);
  HotRecord* h = t->slab.Hot(slot);
  uint64_t s = h->state.load(std::memory_order_acquire);
  for (;;) {
    const bool dead_here = st::PublishedAs(s, gen) && (s & st::kDead) != 0;
    // Not ours to settle (already unpublished, or a stop that undid its mark), or still held.
    if (!dead_here || Holders(t, slot, s) > 0) return;
    if (h->state.compare_exchange_weak(s, s & ~st::kPublished, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      break;
    }
  }
  // The lifecycle is done with it: recycle it here (else the lifecycle will when it ends).
  if ((s & st::kDone) != 0) RecycleLocked(t, t->slab.At(slot));
}

RegCacheImpl::Stopped RegCacheImpl::StopReference(Tenant* t, Registration* r, bool only_unheld,
                                                  uint32_t gen) {
  const uint64_t before = MarkDead(t, r, only_unheld, gen);
  if (before == 0) return kNotStopped;
  RC_CACHE_TEST_HOOK(kStopMarked);
  base::HeavyFence();  // every hit that will succeed has its hold visible from here on
  return SettleStop(t, r, before, only_unheld);
}

void RegCacheImpl::StopReferences(Tenant* t, std::vector<Registration*>& rs) {
  std::vector<uint64_t> before;
  before.reserve(rs.size());
  size_t marked = 0;
  for (Registration* r : rs) {
    const uint64_t s = MarkDead(t, r, /*only_unheld=*/false, kAnyGen);
    if (s == 0) continue;
    rs[marked++] = r;
    before.push_back(s);
  }
  rs.resize(marked);
  if (rs.empty()) return;
  base::HeavyFence();  // one for all of them
  for (size_t i = 0; i < rs.size(); ++i) (void)SettleStop(t, rs[i], before[i], false);
}

uint64_t RegCacheImpl::MarkDead(Tenant* t, Registration* r, bool only_unheld, uint32_t gen) {
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  for (;;) {
    if (!st::Live(s) || (gen != kAnyGen && st::Gen(s) != gen)) return 0;
    // A cheap refusal (a shared holder); the threads' entries are summed after the fence.
    if (only_unheld && st::SharedHolders(s) > 0) return 0;
    if (r->hot->state.compare_exchange_weak(s, s | st::kDead, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      return s;
    }
  }
}

RegCacheImpl::Stopped RegCacheImpl::SettleStop(Tenant* t, Registration* r, uint64_t before,
                                               bool only_unheld) {
  // Dead now, so only releases (and hits undoing themselves) change the count: each of those
  // that this sum misses sees DEAD and calls Settle, which runs after this (index_mu).
  Stopped result;
  uint64_t s = r->hot->state.load(std::memory_order_acquire);
  for (;;) {
    RC_DCHECK((s & st::kDead) != 0 && st::Gen(s) == st::Gen(before));
    uint64_t next;
    if (Holders(t, r->slot, s) <= 0) {
      next = s & ~st::kPublished;  // unheld: the handle goes now
      result = kStoppedUnheld;
    } else if (only_unheld) {
      next = s & ~st::kDead;  // a hit got in before the mark: not a victim after all
      result = kNotStopped;
    } else {
      next = s | st::kRevoked;  // the handle stays for Release/Query until the last holder
      result = kStoppedRevoked;
    }
    if (r->hot->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      break;
    }
  }
  if (result != kNotStopped && (before & st::kWindow) == 0) {
    t->index.Erase(RangeIndex::Hash(r->hot->va.load(std::memory_order_relaxed),
                                    r->hot->length.load(std::memory_order_relaxed)),
                   r->slot);
  }
  return result;
}

absl::Status RegCacheImpl::Invalidate(TenantId tenant, Handle handle) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Registration * r, Resolve(t, handle));
  {
    base::MutexLock il(&t->index_mu);
    const Stopped stopped = StopReference(t, r, /*only_unheld=*/false, HandleGen(handle));
    if (stopped == kNotStopped) {  // not live: revoked and still held, or gone since Resolve
      const uint64_t s = r->hot->state.load(std::memory_order_acquire);
      if (st::PublishedAs(s, HandleGen(handle))) {
        return absl::FailedPreconditionError(
            absl::StrFormat("handle 0x%x was already invalidated", handle));
      }
      return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
    }
    if (stopped == kStoppedRevoked) stats_.revoked_with_holders.Inc();
  }
  RunLifecycle(t, r);
  return absl::OkStatus();
}

void RegCacheImpl::RunLifecycle(Tenant* t, Registration* r) {
  // Windows first: a parent's key is invalidated only after every window on it is.
  for (int round = 0;; ++round) {
    std::vector<Registration*> stop;
    bool waiting = false;
    {
      base::MutexLock lock(&t->mu);
      if (round == 0) {
        r->life.Transition(KeyState::kDraining);
        if (!r->is_window()) {
          auto [lo, hi] = t->cover.equal_range(r->hot->va.load(std::memory_order_relaxed));
          for (auto it = lo; it != hi; ++it) {
            if (it->second == r) {
              t->cover.erase(it);
              break;
            }
          }
        }
      }
      for (Registration* w : r->windows) {
        if (w->life.state() != KeyState::kActive) {
          waiting = true;  // mapping, or retiring on another thread
          continue;
        }
        base::MutexLock il(&t->index_mu);
        if (StopReference(t, w) != kNotStopped) {
          stop.push_back(w);
        } else {
          waiting = true;
        }
      }
      if (stop.empty() && !waiting) break;
    }
    for (Registration* w : stop) RunLifecycle(t, w);
    if (stop.empty() && waiting) absl::SleepFor(absl::Microseconds(50));
  }

  {
    base::MutexLock lock(&t->mu);
    r->life.Transition(KeyState::kFencing);
    r->life.Transition(KeyState::kInvalidating);
  }
  // One WQE: the fence bit makes it wait for everything posted before it on the queue.
  const hca::Key key = r->hot->key.load(std::memory_order_relaxed);
  UmrOp op = UmrOp::Invalidate(key, /*fence=*/true);
  UmrOp* ops[] = {&op};
  t->engine->Execute(ops);
  if (!op.result.ok()) {
    RC_LOG(WARNING) << "invalidate of key " << absl::StrFormat("0x%08x", key)
                    << " failed: " << op.result << "; recovering";
    {
      base::MutexLock lock(&t->mu);
      r->life.Transition(KeyState::kRecovery);
    }
    RecoverKey(t, r, key);
  }
  Registration* parent = nullptr;
  {
    base::MutexLock lock(&t->mu);
    if (r->life.state() == KeyState::kInvalidating) {
      r->life.Transition(KeyState::kUnmapped);
      r->life.Transition(KeyState::kQuarantined);
      t->pool->Quarantine(r->pooled, base::MonotonicNow());
    }
    // Unmapped (or destroyed): only now do backing references and quota go.
    for (BackingId id : r->backings) {
      if (BackingRecord* b = t->backings.Find(id)) b->users--;
    }
    t->live--;
    if (r->is_window()) {
      std::erase(r->parent->windows, r);
      parent = r->parent;
    }
  }
  stats_.invalidations.Inc();
  stats_.live_registrations.Sub();
  if (parent != nullptr) {
    // The window's hold on its parent (taken in CreateWindow; the parent's generation cannot
    // change while it is held).
    (void)DropHold(t, parent->slot, HandleGen(parent->handle), parent->handle,
                   /*user_release=*/false);
  }
  Finish(t, r);
}

void RegCacheImpl::RecoverKey(Tenant* t, Registration* r, hca::Key previous_key) {
  stats_.keys_recovered.Inc();
  {
    base::MutexLock lock(&t->mu);
    if (r->life.state() == KeyState::kMapping) r->life.Transition(KeyState::kRecovery);
  }
  // The key's variant is the old or the new one, depending on how far the failed UMR got.
  for (hca::Key k : {r->hot->key.load(std::memory_order_relaxed), previous_key}) {
    UmrOp op = UmrOp::Invalidate(k, /*fence=*/true);
    UmrOp* ops[] = {&op};
    t->engine->Execute(ops);
    if (op.result.ok()) {
      base::MutexLock lock(&t->mu);
      r->life.Transition(KeyState::kUnmapped);
      r->life.Transition(KeyState::kQuarantined);
      t->pool->Quarantine(PooledKey{k, r->pooled.cls}, base::MonotonicNow());
      return;
    }
    if (k == previous_key) break;
  }
  absl::Status s = device_->DestroyKey(r->hot->key.load(std::memory_order_relaxed));
  if (!s.ok()) RC_LOG(ERROR) << "recovery could not destroy key: " << s;
  stats_.keys_destroyed_in_recovery.Inc();
  stats_.keys_destroyed.Inc();
  base::MutexLock lock(&t->mu);
  r->life.Transition(KeyState::kDestroyed);
  t->pool->Forget(r->pooled);
}

void RegCacheImpl::Finish(Tenant* t, Registration* r) {
  // A revoked handle lives until its last holder releases it: whichever of the two comes
  // second (this, or the release that unpublishes it) recycles the record.
  const uint64_t before = r->hot->state.fetch_or(st::kDone, std::memory_order_acq_rel);
  if ((before & st::kPublished) == 0) Recycle(t, r);
}

void RegCacheImpl::RecycleLocked(Tenant* t, Registration* r) {
  const uint64_t s = r->hot->state.load(std::memory_order_acquire);
  RC_DCHECK((s & st::kPublished) == 0);
  // Keeps the generation (the next publication bumps it) and drops every flag.
  r->hot->state.store(uint64_t{st::Gen(s)} << st::kGenShift, std::memory_order_release);
  t->slab.Free(r);
}

absl::StatusOr<RegistrationInfo> RegCacheImpl::Query(TenantId tenant, Handle handle) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Registration * r, Resolve(t, handle));
  base::ReaderMutexLock lock(&t->mu);  // keeps the record from being reallocated
  const uint64_t s = r->hot->state.load(std::memory_order_acquire);
  if (!st::PublishedAs(s, HandleGen(handle))) {
    return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
  }
  return InfoOf(t, *r, s, Holders(t, r->slot, s));
}

RegistrationInfo RegCacheImpl::InfoOf(Tenant* t, const Registration& r, uint64_t s,
                                      int64_t holders) {
  RegistrationInfo info;
  info.handle = r.handle;
  info.key = r.hot->key.load(std::memory_order_relaxed);
  info.va = r.hot->va.load(std::memory_order_relaxed);
  info.length = r.hot->length.load(std::memory_order_relaxed);
  info.access = r.hot->access.load(std::memory_order_relaxed);
  info.holders = static_cast<uint32_t>(std::max<int64_t>(0, holders));
  info.revoked = (s & st::kRevoked) != 0;
  info.is_window = (s & st::kWindow) != 0;
  info.parent = r.parent != nullptr ? r.parent->handle : 0;
  info.windows = static_cast<uint32_t>(r.windows.size());
  info.klm_entries = r.klm_entries;
  info.key_capacity = t->pool != nullptr ? t->pool->capacity(r.pooled.cls) : 0;
  info.key_state = r.life.state();
  return info;
}

absl::flat_hash_map<uint64_t, int64_t> RegCacheImpl::LocalHolds(const Tenant* t) {
  absl::flat_hash_map<uint64_t, int64_t> local;
  t->holds.ForEachHold([&](uint32_t slot, uint32_t gen, uint32_t count) {
    local[HoldTable::KeyOf(slot, gen)] += count;
  });
  return local;
}

int64_t RegCacheImpl::HoldersFrom(const absl::flat_hash_map<uint64_t, int64_t>& local,
                                  uint32_t slot, uint64_t s) {
  int64_t n = st::SharedHolders(s);
  if (auto it = local.find(HoldTable::KeyOf(slot, st::Gen(s))); it != local.end()) {
    n += it->second;
  }
  return n;
}

absl::StatusOr<std::vector<RegistrationInfo>> RegCacheImpl::List(TenantId tenant) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  std::vector<RegistrationInfo> out;
  base::ReaderMutexLock lock(&t->mu);
  base::MutexLock il(&t->index_mu);
  const auto local = LocalHolds(t);
  for (uint32_t i = 0; i < t->slab.size(); ++i) {
    const Registration* r = t->slab.At(i);
    const uint64_t s = r->hot->state.load(std::memory_order_acquire);
    if ((s & st::kPublished) != 0) out.push_back(InfoOf(t, *r, s, HoldersFrom(local, i, s)));
  }
  return out;
}

absl::StatusOr<TenantUsage> RegCacheImpl::Usage(TenantId tenant) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  TenantUsage u;
  u.pd = t->pd;
  base::ReaderMutexLock lock(&t->mu);
  u.live_registrations = t->live;
  u.backings = t->backings.size();
  u.backed_bytes = t->backings.total_bytes();
  u.pool_free = t->pool->free_keys();
  u.pool_quarantined = t->pool->quarantined_keys();
  u.pool_outstanding = t->pool->outstanding_keys();
  u.pool_total = t->pool->total_keys();
  base::MutexLock il(&t->index_mu);
  const auto local = LocalHolds(t);
  for (uint32_t i = 0; i < t->slab.size(); ++i) {
    const uint64_t s = t->slab.Hot(i)->state.load(std::memory_order_acquire);
    if (st::Live(s) && (s & st::kWindow) == 0 && HoldersFrom(local, i, s) <= 0) {
      u.cached_unreferenced++;
    }
    if ((s & st::kPublished) != 0 && (s & st::kRevoked) != 0) u.revoked_held++;
  }
  return u;
}

// ---------------------------------------------------------------------------------------------
// Maintenance

void RegCacheImpl::Maintain() {
  std::vector<std::shared_ptr<Tenant>> tenants;
  {
    base::MutexLock lock(&tenants_mu_);
    for (auto& [id, t] : live_tenants_) tenants.push_back(t);
  }
  const absl::Time now = base::MonotonicNow();
  for (auto& t : tenants) {
    base::MutexLock lock(&t->mu);
    if (t->closing || t->pool == nullptr) continue;
    absl::Status s = t->pool->Maintain(now);
    if (!s.ok()) RC_LOG(DEBUG) << "pool refill for tenant " << t->id << ": " << s;
  }
}

void RegCacheImpl::MaintenanceLoop() {
  for (;;) {
    {
      base::MutexLock lock(&stop_mu_);
      if (stop_cv_.WaitFor(&stop_mu_, options_.maintenance_period, [this]() {
            stop_mu_.AssertHeld();
            return stop_;
          })) {
        return;
      }
    }
    Maintain();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RegCache>> RegCache::Create(hca::Device* device,
                                                          const CacheOptions& options,
                                                          base::stats::Registry* registry) {
  if (device == nullptr) return absl::InvalidArgumentError("no device");
  if (options.pool.capacity_classes.empty()) {
    return absl::InvalidArgumentError("no key capacity classes");
  }
  for (size_t i = 0; i < options.pool.capacity_classes.size(); ++i) {
    const uint32_t c = options.pool.capacity_classes[i];
    if (c == 0 || (i > 0 && c <= options.pool.capacity_classes[i - 1])) {
      return absl::InvalidArgumentError("capacity classes must be positive and ascending");
    }
    if (c > device->capabilities().max_klm_entries) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "capacity class %d exceeds the device's %d KLM entries per key", c,
          device->capabilities().max_klm_entries));
    }
    if (device->capabilities().max_inline_klm != 0 && c > device->capabilities().max_inline_klm) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "capacity class %d exceeds the %d KLM entries one map carries inline", c,
          device->capabilities().max_inline_klm));
    }
  }
  if (options.pool.high_watermark < options.pool.low_watermark) {
    return absl::InvalidArgumentError("pool high watermark below low watermark");
  }
  if (!device->capabilities().umr && !device->capabilities().memory_windows) {
    return absl::UnimplementedError(absl::StrFormat(
        "device %s can neither UMR nor bind memory windows", device->capabilities().backend));
  }
  return std::unique_ptr<RegCache>(new RegCacheImpl(device, options, registry));
}

}  // namespace cache
