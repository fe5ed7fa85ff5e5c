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
#include "base/log.h"
#include "base/mutex.h"
#include "base/spinlock.h"
#include "base/status_macros.h"
#include "cache/backing_observer.h"
#include "cache/internal/index.h"
#include "cache/key_pool.h"
#include "cache/umr_engine.h"

namespace cache {

absl::StatusOr<hca::AccessFlags> NormalizeAccess(hca::AccessFlags access) {
  if ((access & ~hca::kAllAccess) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown access bits 0x%x", access & ~hca::kAllAccess));
  }
  if ((access & (hca::kRemoteWrite | hca::kRemoteAtomic)) != 0 &&
      (access & hca::kLocalWrite) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "access %s: remote write and remote atomic need local write",
        hca::AccessToString(access)));
  }
  return access | hca::kLocalRead;
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
  std::unique_ptr<Shard[]> shards;
  uint32_t shard_mask = 0;

  base::Mutex mu;  // the slow path: backings, pool, cover index, quota, lifecycles
  BackingSet backings ABSL_GUARDED_BY(mu);
  std::unique_ptr<KeyPool> pool ABSL_GUARDED_BY(mu);
  absl::btree_multimap<uint64_t, Registration*> cover ABSL_GUARDED_BY(mu);
  uint64_t max_length ABSL_GUARDED_BY(mu) = 0;
  uint64_t live ABSL_GUARDED_BY(mu) = 0;  // quota-counted keys: from take to unmapped
  BackingId next_backing ABSL_GUARDED_BY(mu) = 1;
  bool closing ABSL_GUARDED_BY(mu) = false;

  Shard& ShardOf(Handle h) { return shards[HandleShard(h) & shard_mask]; }
  uint32_t ShardFor(uint64_t va, uint64_t length) const {
    return static_cast<uint32_t>(absl::HashOf(va, length)) & shard_mask;
  }
};

KeyGrant GrantOf(const Registration& r, bool hit) {
  KeyGrant g;
  g.handle = r.handle;
  g.lkey = g.rkey = r.key;
  g.va = r.va;
  g.length = r.length;
  g.access = r.access;
  g.hit = hit;
  return g;
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
  absl::StatusOr<Tenant*> Find(TenantId id) const {
    Tenant* t = tenants_[id & (kMaxTenantSlots - 1)].load(std::memory_order_acquire);
    if (t == nullptr || t->id != id) {
      return absl::NotFoundError(absl::StrFormat("no open tenant %d", id));
    }
    return t;
  }
  // The shard that holds `handle`, after checking that it belongs to `t`.
  absl::StatusOr<Shard*> ShardForHandle(Tenant* t, Handle handle) const {
    if (handle == 0) return absl::InvalidArgumentError("handle 0 is never valid");
    if (HandleTenantSlot(handle) != t->slot) {
      return absl::PermissionDeniedError(
          absl::StrFormat("handle 0x%x belongs to another tenant", handle));
    }
    return &t->ShardOf(handle);
  }

  std::optional<KeyGrant> TryHit(Tenant* t, uint64_t va, uint64_t length,
                                 hca::AccessFlags access);
  absl::StatusOr<KeyGrant> Miss(Tenant* t, uint64_t va, uint64_t length,
                                hca::AccessFlags access);
  // Reserves one quota slot and takes a key of `cls`, evicting unreferenced registrations of
  // the tenant when the quota or the pool is exhausted. On success the tenant mutex is held.
  // (Conditional lock hand-off: not expressible to the analysis.)
  absl::StatusOr<TakenKey> ReserveKey(Tenant* t, int cls) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Picks the least recently used unreferenced registration and stops references to it.
  Registration* PickVictim(Tenant* t);
  // Runs draining → fencing → invalidating → unmapped → quarantined for a registration whose
  // references were stopped (StopReference), windows first. Never holds a lock across a UMR.
  void RunLifecycle(Tenant* t, Registration* r);
  // A key whose UMR failed or timed out: invalidate it again (trying the key value before and
  // after the map), else destroy it. Returns with the key quarantined or forgotten.
  void RecoverKey(Tenant* t, Registration* r, hca::Key previous_key);
  // Drops the registration object if both the lifecycle and the last holder are done.
  void FinishWithRegistration(Tenant* t, Registration* r);
  // REQUIRES: the tenant mutex (shared) and the registration's shard lock.
  RegistrationInfo InfoOf(Tenant* t, const Registration& r) ABSL_NO_THREAD_SAFETY_ANALYSIS;
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
  const uint32_t shards = options_.index_shards;
  if (shards == 0 || (shards & (shards - 1)) != 0 || shards > (1u << kShardBits)) {
    return absl::InvalidArgumentError("index_shards must be a power of two <= 256");
  }
  auto t = std::make_shared<Tenant>();
  t->options = options;
  ASSIGN_OR_RETURN(t->pd, device_->AllocPd());
  auto engine = UmrEngine::Create(device_, t->pd, options_.engine, &stats_);
  if (!engine.ok()) {
    (void)device_->DeallocPd(t->pd);
    return engine.status();
  }
  t->engine = std::move(*engine);
  t->shards.reset(new Shard[shards]);
  t->shard_mask = shards - 1;
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
  for (uint32_t i = 0; i <= t->shard_mask; ++i) {
    Shard& s = t->shards[i];
    base::SpinLockHolder lock(&s.mu);
    std::vector<Registration*> here;
    for (Registration* r : s.slots) {
      if (r != nullptr && !r->dying) here.push_back(r);
    }
    for (Registration* r : here) {
      StopReference(s, r);
      (r->is_window ? windows : parents).push_back(r);
    }
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
  // Tombstones still held: their holders' handles die with the tenant.
  for (uint32_t i = 0; i <= t->shard_mask; ++i) {
    Shard& s = t->shards[i];
    base::SpinLockHolder lock(&s.mu);
    for (Registration*& r : s.slots) {
      delete r;
      r = nullptr;
    }
  }
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
        if (r->va + r->length <= b->va) continue;
        Shard& s = t->ShardOf(r->handle);
        base::SpinLockHolder sl(&s.mu);
        if (!r->dying) {
          StopReference(s, r);
          victims.push_back(r);
        }
      }
    }
    for (Registration* r : victims) RunLifecycle(t, r);
    if (victims.empty()) absl::SleepFor(absl::Microseconds(100));  // a map in flight
  }
  return absl::UnavailableError(
      absl::StrFormat("attached memory %d is still in use by registrations being mapped", backing));
}

// ---------------------------------------------------------------------------------------------
// Register

std::optional<KeyGrant> RegCacheImpl::TryHit(Tenant* t, uint64_t va, uint64_t length,
                                              hca::AccessFlags access) {
  // Top half: the exact range, one shard lock.
  {
    Shard& s = t->shards[t->ShardFor(va, length)];
    base::SpinLockHolder lock(&s.mu);
    auto it = s.by_range.find(RangeKey{va, length});
    if (it != s.by_range.end()) {
      for (Registration* r = *it; r != nullptr; r = r->next_same_range) {
        if ((r->access & access) == access) {
          r->holders++;  // stays on the LRU; eviction skips held entries
          KeyGrant g;    // built from the request: va and length are the key's (exact match)
          g.handle = r->handle;
          g.lkey = g.rkey = r->key;
          g.va = va;
          g.length = length;
          g.access = r->access;
          g.hit = true;
          return g;
        }
      }
    }
  }
  // Bottom half: a wider registration that covers the range.
  base::ReaderMutexLock lock(&t->mu);
  if (t->cover.empty()) return std::nullopt;
  const uint64_t end = va + length;
  auto it = t->cover.upper_bound(va);
  int scanned = 0;
  while (it != t->cover.begin() && scanned++ < kCoverScanLimit) {
    --it;
    Registration* r = it->second;
    if (end - r->va > t->max_length) break;  // nothing further left can reach `end`
    if (r->va + r->length < end || (r->access & access) != access) continue;
    Shard& s = t->ShardOf(r->handle);
    base::SpinLockHolder sl(&s.mu);
    if (!r->indexed) continue;
    r->holders++;
    return GrantOf(*r, true);
  }
  return std::nullopt;
}

absl::StatusOr<KeyGrant> RegCacheImpl::Register(TenantId tenant, uint64_t va, uint64_t length,
                                                hca::AccessFlags access) {
  auto result = [&]() -> absl::StatusOr<KeyGrant> {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    if (length == 0) return absl::InvalidArgumentError("length 0");
    if (va + length < va) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "range [0x%x, +0x%x) wraps around the address space", va, length));
    }
    ASSIGN_OR_RETURN(hca::AccessFlags normalized, NormalizeAccess(access));
    if (std::optional<KeyGrant> hit = TryHit(t, va, length, normalized)) {
      stats_.register_hits.Inc();
      return *hit;
    }
    return Miss(t, va, length, normalized);
  }();
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
      absl::StatusOr<TakenKey> taken = t->pool->Take(cls, absl::Now());
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
  // Make each shard's oldest entry an eligible one (bounded work), then take the least recently
  // used of those heads.
  constexpr int kCleanPerShard = 32;
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint32_t best = UINT32_MAX;
    uint64_t best_tick = UINT64_MAX;
    for (uint32_t i = 0; i <= t->shard_mask; ++i) {
      Shard& s = t->shards[i];
      base::SpinLockHolder lock(&s.mu);
      for (int n = 0; n < kCleanPerShard && s.lru_oldest != nullptr; ++n) {
        Registration* r = s.lru_oldest;
        if (r->holders > 0) {
          LruUnlink(s, r);  // its release queues it again
        } else if (r->referenced) {
          LruUnlink(s, r);  // second chance: used since it was queued
          LruPush(s, r, g_lru_ticket.fetch_add(1, std::memory_order_relaxed));
        } else {
          break;
        }
      }
      Registration* head = s.lru_oldest;
      if (head != nullptr && head->holders == 0 && !head->referenced &&
          head->queued_at < best_tick) {
        best_tick = head->queued_at;
        best = i;
      }
    }
    if (best == UINT32_MAX) return nullptr;
    Shard& s = t->shards[best];
    base::SpinLockHolder lock(&s.mu);
    Registration* r = s.lru_oldest;
    if (r == nullptr || r->holders != 0 || r->referenced || r->queued_at != best_tick) {
      continue;  // raced with a hit or a release: look again
    }
    RC_DCHECK(!r->dying);
    StopReference(s, r);
    return r;
  }
  return nullptr;
}

absl::StatusOr<KeyGrant> RegCacheImpl::Miss(Tenant* t, uint64_t va, uint64_t length,
                                            hca::AccessFlags access) {
  const absl::Time start = absl::Now();
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
    t->pool->Quarantine(taken.pooled, absl::Now());  // never mapped: still free on the device
    t->mu.Unlock();
    return relaid.ok() ? absl::AbortedError("attached memory changed during register; retry")
                       : relaid.status();
  }
  layout = std::move(*relaid);
  auto* r = new Registration;
  r->va = va;
  r->length = length;
  r->access = access;
  r->klm_entries = static_cast<uint32_t>(layout.size());
  r->key = taken.mapped_key();
  r->pooled = PooledKey{r->key, cls};
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

  absl::Status published;
  if (!op.result.ok()) {
    RecoverKey(t, r, taken.pooled.key);
    {
      base::MutexLock lock(&t->mu);
      for (BackingId id : r->backings) {
        if (BackingRecord* b = t->backings.Find(id)) b->users--;
      }
      t->live--;
    }
    delete r;
    return op.result;
  }
  {
    base::MutexLock lock(&t->mu);
    r->life.Transition(KeyState::kActive);
    t->cover.emplace(va, r);
    t->max_length = std::max(t->max_length, length);
    const uint32_t shard = t->ShardFor(va, length);
    Shard& s = t->shards[shard];
    base::SpinLockHolder sl(&s.mu);
    published = Publish(s, shard, t->slot, r);
    if (published.ok()) {
      RangeLink(s, r);
      r->holders = 1;
    }
  }
  if (!published.ok()) {  // not reachable by anyone: retire it like an eviction
    {
      Shard& s = t->shards[t->ShardFor(va, length)];
      base::SpinLockHolder sl(&s.mu);
      r->dying = true;
    }
    stats_.live_registrations.Add();
    RunLifecycle(t, r);
    return published;
  }
  stats_.register_misses.Inc();
  stats_.live_registrations.Add();
  stats_.miss_latency_ns.Record(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - start)));
  return GrantOf(*r, false);
}

// ---------------------------------------------------------------------------------------------
// Windows

absl::StatusOr<KeyGrant> RegCacheImpl::CreateWindow(TenantId tenant, Handle parent,
                                                    uint64_t offset, uint64_t length,
                                                    hca::AccessFlags access) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Shard * ps, ShardForHandle(t, parent));
  ASSIGN_OR_RETURN(hca::AccessFlags normalized, NormalizeAccess(access));
  if (length == 0) return absl::InvalidArgumentError("window length 0");
  ASSIGN_OR_RETURN(int cls, [&] {
    base::ReaderMutexLock lock(&t->mu);
    return t->pool->ClassFor(1);
  }());
  Registration* p = nullptr;
  {
    base::SpinLockHolder lock(&ps->mu);
    p = Lookup(*ps, parent);
    if (p == nullptr) {
      return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", parent));
    }
    if (p->dying) {
      return absl::FailedPreconditionError(
          absl::StrFormat("registration 0x%x was invalidated", parent));
    }
    if (p->is_window) {
      return absl::InvalidArgumentError("a window cannot be the parent of a window");
    }
    if (offset >= p->length || length > p->length - offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "window [+0x%x, +0x%x) is outside its parent of 0x%x bytes", offset, length,
          p->length));
    }
    if ((normalized & ~p->access) != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "window access %s is not narrower than its parent's %s",
          hca::AccessToString(normalized), hca::AccessToString(p->access)));
    }
    p->holders++;  // a window holds its parent
  }
  auto drop_parent = [&] {
    base::SpinLockHolder lock(&ps->mu);
    p->holders--;
    if (p->holders == 0 && !p->dying) Unreferenced(*ps, p);
  };
  absl::StatusOr<TakenKey> taken = ReserveKey(t, cls);
  if (!taken.ok()) {
    drop_parent();
    stats_.register_errors.Inc();
    return taken.status();
  }
  t->mu.AssertHeld();  // ReserveKey returns holding it on success
  auto* w = new Registration;
  w->is_window = true;
  w->parent = p;
  w->va = p->va + offset;
  w->length = length;
  w->access = normalized;
  w->klm_entries = 1;
  w->key = taken->mapped_key();
  w->pooled = PooledKey{w->key, cls};
  w->life.Transition(KeyState::kMapping);
  p->windows.push_back(w);
  t->mu.Unlock();

  UmrOp op;
  op.kind = UmrOp::Kind::kMap;
  op.klm = {hca::KlmEntry{p->key, w->va, length}};
  op.map.key = taken->pooled.key;
  op.map.new_variant = taken->new_variant;
  op.map.layout = hca::Layout::kKlm;
  op.map.access = normalized;
  op.map.start_addr = w->va;
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
    delete w;
    stats_.register_errors.Inc();
    return op.result;
  }
  absl::Status published;
  {
    base::MutexLock lock(&t->mu);
    w->life.Transition(KeyState::kActive);
    const uint32_t shard = t->ShardFor(w->va, w->length);
    Shard& s = t->shards[shard];
    base::SpinLockHolder sl(&s.mu);
    published = Publish(s, shard, t->slot, w);
    if (published.ok()) {
      w->holders = 1;
    } else {
      w->dying = true;
    }
  }
  if (!published.ok()) {
    stats_.live_registrations.Add();
    RunLifecycle(t, w);
    return published;
  }
  stats_.windows_created.Inc();
  stats_.live_registrations.Add();
  return GrantOf(*w, false);
}

// ---------------------------------------------------------------------------------------------
// Release / Invalidate / Query

absl::Status RegCacheImpl::Release(TenantId tenant, Handle handle) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Shard * s, ShardForHandle(t, handle));
  Registration* window_to_retire = nullptr;
  Registration* to_delete = nullptr;
  {
    base::SpinLockHolder lock(&s->mu);
    Registration* r = Lookup(*s, handle);
    if (r == nullptr) {
      return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
    }
    if (r->holders == 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("handle 0x%x has no holders left to release", handle));
    }
    r->holders--;
    stats_.releases.Inc();
    if (r->revoked) {
      stats_.releases_after_revoke.Inc();
      if (r->holders == 0) {
        Unpublish(*s, r);
        s->tombstones--;
        if (r->lifecycle_done) to_delete = r;
      }
    } else if (r->holders == 0) {
      if (r->is_window) {
        StopReference(*s, r);  // windows are not cached
        window_to_retire = r;
      } else {
        Unreferenced(*s, r);
      }
    }
  }
  delete to_delete;
  if (window_to_retire != nullptr) RunLifecycle(t, window_to_retire);
  return absl::OkStatus();
}

absl::Status RegCacheImpl::Invalidate(TenantId tenant, Handle handle) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Shard * s, ShardForHandle(t, handle));
  Registration* r = nullptr;
  {
    base::SpinLockHolder lock(&s->mu);
    r = Lookup(*s, handle);
    if (r == nullptr) {
      return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
    }
    if (r->dying) {
      return absl::FailedPreconditionError(
          absl::StrFormat("handle 0x%x was already invalidated", handle));
    }
    if (r->holders > 0) stats_.revoked_with_holders.Inc();
    StopReference(*s, r);
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
        if (!r->is_window) {
          auto [lo, hi] = t->cover.equal_range(r->va);
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
        Shard& ws = t->ShardOf(w->handle);
        base::SpinLockHolder sl(&ws.mu);
        if (!w->dying) {
          StopReference(ws, w);
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
  UmrOp op = UmrOp::Invalidate(r->key, /*fence=*/true);
  UmrOp* ops[] = {&op};
  t->engine->Execute(ops);
  if (!op.result.ok()) {
    RC_LOG(WARNING) << "invalidate of key " << absl::StrFormat("0x%08x", r->key)
                    << " failed: " << op.result << "; recovering";
    {
      base::MutexLock lock(&t->mu);
      r->life.Transition(KeyState::kRecovery);
    }
    RecoverKey(t, r, r->key);
  }
  Registration* parent = nullptr;
  {
    base::MutexLock lock(&t->mu);
    if (r->life.state() == KeyState::kInvalidating) {
      r->life.Transition(KeyState::kUnmapped);
      r->life.Transition(KeyState::kQuarantined);
      t->pool->Quarantine(r->pooled, absl::Now());
    }
    // Unmapped (or destroyed): only now do backing references and quota go.
    for (BackingId id : r->backings) {
      if (BackingRecord* b = t->backings.Find(id)) b->users--;
    }
    t->live--;
    if (r->is_window) {
      std::erase(r->parent->windows, r);
      parent = r->parent;
    }
  }
  stats_.invalidations.Inc();
  stats_.live_registrations.Sub();
  if (parent != nullptr) {
    Shard& ps = t->ShardOf(parent->handle);
    Registration* delete_parent = nullptr;
    {
      base::SpinLockHolder lock(&ps.mu);
      parent->holders--;
      if (parent->holders == 0) {
        if (!parent->dying) {
          Unreferenced(ps, parent);
        } else if (parent->revoked) {
          Unpublish(ps, parent);
          ps.tombstones--;
          if (parent->lifecycle_done) delete_parent = parent;
        }
      }
    }
    delete delete_parent;
  }
  FinishWithRegistration(t, r);
}

void RegCacheImpl::RecoverKey(Tenant* t, Registration* r, hca::Key previous_key) {
  stats_.keys_recovered.Inc();
  {
    base::MutexLock lock(&t->mu);
    if (r->life.state() == KeyState::kMapping) r->life.Transition(KeyState::kRecovery);
  }
  // The key's variant is the old or the new one, depending on how far the failed UMR got.
  for (hca::Key k : {r->key, previous_key}) {
    UmrOp op = UmrOp::Invalidate(k, /*fence=*/true);
    UmrOp* ops[] = {&op};
    t->engine->Execute(ops);
    if (op.result.ok()) {
      base::MutexLock lock(&t->mu);
      r->life.Transition(KeyState::kUnmapped);
      r->life.Transition(KeyState::kQuarantined);
      t->pool->Quarantine(PooledKey{k, r->pooled.cls}, absl::Now());
      return;
    }
    if (k == previous_key) break;
  }
  absl::Status s = device_->DestroyKey(r->key);
  if (!s.ok()) RC_LOG(ERROR) << "recovery could not destroy key: " << s;
  stats_.keys_destroyed_in_recovery.Inc();
  stats_.keys_destroyed.Inc();
  base::MutexLock lock(&t->mu);
  r->life.Transition(KeyState::kDestroyed);
  t->pool->Forget(r->pooled);
}

void RegCacheImpl::FinishWithRegistration(Tenant* t, Registration* r) {
  Shard& s = t->ShardOf(r->handle);
  bool drop = false;
  {
    base::SpinLockHolder lock(&s.mu);
    r->lifecycle_done = true;
    // A revoked handle lives until its last holder releases it.
    drop = !r->revoked || r->holders == 0;
    if (drop && r->revoked && Lookup(s, r->handle) == r) {
      Unpublish(s, r);
      s.tombstones--;
    }
  }
  if (drop) delete r;
}

absl::StatusOr<RegistrationInfo> RegCacheImpl::Query(TenantId tenant, Handle handle) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Shard * s, ShardForHandle(t, handle));
  base::ReaderMutexLock lock(&t->mu);
  base::SpinLockHolder sl(&s->mu);
  const Registration* found = Lookup(*s, handle);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrFormat("no registration with handle 0x%x", handle));
  }
  return InfoOf(t, *found);
}

RegistrationInfo RegCacheImpl::InfoOf(Tenant* t, const Registration& r) {
  RegistrationInfo info;
  info.handle = r.handle;
  info.key = r.key;
  info.va = r.va;
  info.length = r.length;
  info.access = r.access;
  info.holders = r.holders;
  info.revoked = r.revoked;
  info.is_window = r.is_window;
  info.parent = r.parent != nullptr ? r.parent->handle : 0;
  info.windows = static_cast<uint32_t>(r.windows.size());
  info.klm_entries = r.klm_entries;
  info.key_capacity = t->pool != nullptr ? t->pool->capacity(r.pooled.cls) : 0;
  info.key_state = r.life.state();
  return info;
}

absl::StatusOr<std::vector<RegistrationInfo>> RegCacheImpl::List(TenantId tenant) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  std::vector<RegistrationInfo> out;
  base::ReaderMutexLock lock(&t->mu);
  for (uint32_t i = 0; i <= t->shard_mask; ++i) {
    Shard& s = t->shards[i];
    base::SpinLockHolder sl(&s.mu);
    for (const Registration* r : s.slots) {
      if (r != nullptr) out.push_back(InfoOf(t, *r));
    }
  }
  return out;
}

absl::StatusOr<TenantUsage> RegCacheImpl::Usage(TenantId tenant) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  TenantUsage u;
  u.pd = t->pd;
  {
    base::ReaderMutexLock lock(&t->mu);
    u.live_registrations = t->live;
    u.backings = t->backings.size();
    u.backed_bytes = t->backings.total_bytes();
    u.pool_free = t->pool->free_keys();
    u.pool_quarantined = t->pool->quarantined_keys();
    u.pool_outstanding = t->pool->outstanding_keys();
    u.pool_total = t->pool->total_keys();
  }
  for (uint32_t i = 0; i <= t->shard_mask; ++i) {
    base::SpinLockHolder lock(&t->shards[i].mu);
    u.cached_unreferenced += t->shards[i].lru_size;
    u.revoked_held += t->shards[i].tombstones;
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
  const absl::Time now = absl::Now();
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
