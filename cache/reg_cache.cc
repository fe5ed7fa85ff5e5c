// The facade of the registration cache: the tenant table, argument checks, and the hit path.
// The machinery is under cache/internal/ (internal/tenant.h says what lives where).
#include "cache/reg_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "cache/internal/holds.h"
#include "cache/internal/index.h"
#include "cache/internal/introspect.h"
#include "cache/internal/key_pool.h"
#include "cache/internal/lifecycle.h"
#include "cache/internal/mapper.h"
#include "cache/internal/reaper.h"
#include "cache/internal/rereg.h"
#include "cache/internal/tenant.h"
#include "cache/umr_engine.h"

namespace regcache::cache {

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

absl::Status CheckRange(uint64_t va, uint64_t length) {
  if (length == 0) return absl::InvalidArgumentError("length 0");
  if (va + length >= va) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("range [0x%x, +0x%x) wraps around the address space", va, length));
}

using internal::Record;
using internal::Tenant;

constexpr uint32_t kMaxTenantSlots = 1u << 16;
// The translation entries budgeted per key of the table when the options give no figure
// (CacheOptions::device_translation_entries).
constexpr uint64_t kDefaultEntriesPerKey = 64;
// Pool keys of a closed tenant destroyed per maintenance step (Reaper::Step): on a ConnectX each
// is a DESTROY_MKEY command of some microseconds.
constexpr size_t kReapKeysPerStep = 4096;

class RegCacheImpl final : public RegCache {
 public:
  RegCacheImpl(hca::Device* device, const CacheOptions& options, base::stats::Registry* registry)
      : tenants_(new std::atomic<Tenant*>[kMaxTenantSlots]), generations_(kMaxTenantSlots, 0) {
    ctx_.device = device;
    ctx_.options = options;
    ctx_.stats = &stats_;
    // A map chooses the variant only where the device does not (memory windows pick their own).
    if (!device->capabilities().memory_windows) ctx_.ledger = &ledger_;
    const uint64_t table = device->capabilities().max_keys;
    const uint32_t divisor = std::max<uint32_t>(1, options.device_key_reserve_divisor);
    const uint64_t entries = options.device_translation_entries != 0
                                 ? options.device_translation_entries
                                 : table * kDefaultEntriesPerKey;
    budget_ = std::make_unique<KeyBudget>(table - table / divisor, entries - entries / divisor);
    ctx_.budget = budget_.get();
    for (uint32_t i = 0; i < kMaxTenantSlots; ++i) tenants_[i].store(nullptr);
    for (uint32_t i = kMaxTenantSlots - 1; i >= 1; --i) free_slots_.push_back(i);
    if (registry != nullptr) registration_ = base::stats::Registration(*registry, "cache", &stats_);
    if (options.background_maintenance) {
      maintenance_ = std::thread([this] { MaintenanceLoop(); });
    }
  }
  ~RegCacheImpl() override;

  absl::StatusOr<TenantId> OpenTenant(const TenantOptions& options) override;
  absl::Status CloseTenant(TenantId tenant) override;
  absl::StatusOr<BackingId> AddBacking(TenantId tenant, const BackingSpec& spec) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::AttachMemory(*t, spec);
  }
  absl::Status RemoveBacking(TenantId tenant, BackingId backing) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::DetachMemory(*t, backing);
  }
  absl::StatusOr<KeyGrant> Register(TenantId tenant, uint64_t va, uint64_t length,
                                    hca::AccessFlags access) override;
  std::vector<absl::StatusOr<KeyGrant>> RegisterBatch(
      TenantId tenant, absl::Span<const RegisterItem> items) override;
  absl::StatusOr<KeyGrant> CreateWindow(TenantId tenant, Handle parent, uint64_t offset,
                                        uint64_t length, hca::AccessFlags access) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::MapWindow(*t, parent, offset, length, access);
  }
  absl::StatusOr<KeyGrant> Reregister(TenantId tenant, Handle handle, uint64_t va, uint64_t length,
                                      hca::AccessFlags access,
                                      absl::FunctionRef<void(Handle)> revoking) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::Reregister(
        *t, handle, va, length, access, [&] { return Register(tenant, va, length, access); },
        revoking);
  }
  absl::Status Release(TenantId tenant, Handle handle) override;
  absl::Status Invalidate(TenantId tenant, Handle handle) override;
  bool Revoked(TenantId tenant, Handle handle) const override {
    const Tenant* t = Lookup(tenant);
    return t == nullptr || internal::HandleRevoked(*t, handle);
  }
  absl::StatusOr<RegistrationInfo> Query(TenantId tenant, Handle handle) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::QueryRecord(*t, handle);
  }
  absl::StatusOr<TenantUsage> Usage(TenantId tenant) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::UsageOf(*t);
  }
  absl::StatusOr<std::vector<RegistrationInfo>> List(TenantId tenant) override {
    ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
    return internal::ListRecords(*t);
  }
  void Maintain() override;
  const CacheStats& stats() const override { return stats_; }
  hca::Device* device() const override { return ctx_.device; }

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
  // Fills `g` and returns true on a hit: the exact range without a lock, else a covering
  // registration under the tenant mutex (cache/internal/holds.h, HitExact and HitCover).
  static bool TryHit(Tenant& t, uint64_t va, uint64_t length, hca::AccessFlags access, KeyGrant& g);
  void MaintenanceLoop();
  // One maintenance pass; true when every tenant's pool was idle after it.
  bool MaintainPass();
  // Under budget pressure: evicts `t`'s unreferenced registrations while it holds more than
  // `share` keys or `entry_share` translation entries outside its pool's free list and
  // quarantine; with `take_held`, then revokes registrations it holds (TenantOptions::
  // reclaiming is told before and after each).
  void ReclaimOverShare(Tenant& t, uint64_t share, uint64_t entry_share, bool take_held);
  // Revokes `r` (handle `h`), held by `t`'s clients, as Invalidate would.
  void ReclaimHeld(Tenant& t, internal::Record* r, Handle h);
  // Whether a tenant under its share has been waiting for keys for held_reclaim_after.
  bool WaitedLongEnough(absl::Time now);
  static constexpr int kReclaimPerPass = 256;

  internal::CacheContext ctx_;
  CacheStats stats_;
  KeyLedger ledger_;  // device-wide: every tenant's keys continue each index's variants
  std::unique_ptr<KeyBudget> budget_;  // device-wide: the pooled keys every tenant shares
  base::stats::Registration registration_;

  std::unique_ptr<std::atomic<Tenant*>[]> tenants_;  // by slot; written under tenants_mu_
  base::Mutex tenants_mu_;
  base::Mutex waiting_mu_;
  absl::Time waiting_since_ ABSL_GUARDED_BY(waiting_mu_) = absl::InfiniteFuture();
  std::vector<uint16_t> generations_ ABSL_GUARDED_BY(tenants_mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(tenants_mu_);
  absl::flat_hash_map<TenantId, std::shared_ptr<Tenant>> live_tenants_ ABSL_GUARDED_BY(tenants_mu_);

  internal::Reaper reaper_{&stats_};  // what closed tenants left on the device

  base::Mutex stop_mu_;
  base::CondVar stop_cv_;  // stop_, or a closed tenant to reap
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool reap_wanted_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread maintenance_;
};

RegCacheImpl::~RegCacheImpl() {
  {
    base::MutexLock lock(&stop_mu_);
    stop_ = true;
    stop_cv_.SignalAll();
  }
  if (maintenance_.joinable()) maintenance_.join();
  reaper_.Finish();
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

// ---------------------------------------------------------------------------------------------
// Tenants

absl::StatusOr<TenantId> RegCacheImpl::OpenTenant(const TenantOptions& options) {
  auto t = std::make_shared<Tenant>();
  t->ctx = &ctx_;
  t->options = options;
  // No tenant's key limit is above what the device can hold for all of them.
  if (t->options.max_keys == 0 || t->options.max_keys > budget_->total()) {
    t->options.max_keys = budget_->total();
  }
  ASSIGN_OR_RETURN(t->pd, ctx_.device->AllocPd());
  auto engine = UmrEngine::Create(ctx_.device, t->pd, ctx_.options.engine, &stats_);
  if (!engine.ok()) {
    (void)ctx_.device->DeallocPd(t->pd);
    return engine.status();
  }
  t->engine = std::move(*engine);
  {
    base::MutexLock lock(&t->mu);
    t->pool = std::make_unique<KeyPool>(ctx_.device, t->pd, ctx_.options.pool, &stats_, ctx_.ledger,
                                        ctx_.budget);
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
  budget_->TenantOpened();
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
  absl::Status s = internal::CloseTenant(*t);
  {
    base::MutexLock lock(&tenants_mu_);
    free_slots_.push_back(t->slot);
  }
  stats_.tenants.Sub();
  budget_->TenantClosed();
  // Its keys reach nothing now. What it left on the device (pool keys, queues, PD) goes after
  // the close, on the maintenance thread, so that a close waits only for its invalidations; the
  // device budget counts those keys until they are destroyed. Without that thread, here.
  if (!maintenance_.joinable()) {
    while (!internal::ReapTenant(*t, SIZE_MAX, s)) {
    }
    return s;
  }
  reaper_.Add(std::move(t));
  base::MutexLock lock(&stop_mu_);
  reap_wanted_ = true;
  stop_cv_.SignalAll();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Register: the hit here (its hold is cache/internal/holds.h's), the miss in internal/mapper.

bool RegCacheImpl::TryHit(Tenant& t, uint64_t va, uint64_t length, hca::AccessFlags access,
                          KeyGrant& g) {
  if (internal::HitExact(t, va, length, access, g)) return true;
  base::ReaderMutexLock lock(&t.mu);
  return internal::HitCover(t, va, length, access, g);
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
    if (TryHit(*fast, va, length, normal, *result)) [[likely]] {
      stats_.register_hits.Inc();
      return result;
    }
    result = internal::MapRegistration(*fast, va, length, normal);
    if (!result.ok()) stats_.register_errors.Inc();
    return result;
  }
  absl::StatusOr<Tenant*> t = Find(tenant);
  absl::StatusOr<hca::AccessFlags> normalized = NormalizeAccess(access);
  if (!t.ok()) {
    result = t.status();
  } else if (absl::Status r = CheckRange(va, length); !r.ok()) {
    result = std::move(r);
  } else if (!normalized.ok()) {
    result = normalized.status();
  } else if (TryHit(**t, va, length, *normalized, *result)) {
    stats_.register_hits.Inc();
    return result;
  } else {
    result = internal::MapRegistration(**t, va, length, *normalized);
  }
  if (!result.ok()) stats_.register_errors.Inc();
  return result;
}

// Each item checked and tried as a hit as Register does; the misses mapped together, except
// repeats of an earlier miss of the batch, which then hit the key that miss made.
std::vector<absl::StatusOr<KeyGrant>> RegCacheImpl::RegisterBatch(
    TenantId tenant, absl::Span<const RegisterItem> items) {
  std::vector<absl::StatusOr<KeyGrant>> out(items.size(), absl::StatusOr<KeyGrant>(KeyGrant{}));
  absl::StatusOr<Tenant*> t = Find(tenant);
  for (size_t i = 0; !t.ok() && i < items.size(); ++i) out[i] = t.status();
  std::vector<RegisterItem> misses;      // normalized; misses[k] is items[miss_of[k]]
  std::vector<size_t> miss_of, repeats;  // repeats: items repeating an earlier miss
  // The misses so far, to tell a repeat; not needed when the batch's ranges come in strictly
  // increasing order (the usual batch: blocks of a pool, in address order), as no two are equal.
  using Range = std::tuple<uint64_t, uint64_t, hca::AccessFlags>;
  absl::flat_hash_set<Range> seen;
  // First without a lock: the checks and the exact ranges' hits. The rest then look for a
  // covering registration under one hold of the tenant mutex per run, not one each.
  std::vector<RegisterItem> unsure;  // normalized; unsure[k] is items[unsure_of[k]]
  std::vector<size_t> unsure_of;
  unsure.reserve(items.size());
  unsure_of.reserve(items.size());
  misses.reserve(items.size());
  miss_of.reserve(items.size());
  for (size_t i = 0; t.ok() && i < items.size(); ++i) {
    RegisterItem item = items[i];
    absl::StatusOr<hca::AccessFlags> normalized = NormalizeAccess(item.access);
    if (absl::Status r = CheckRange(item.va, item.length); !r.ok()) {
      out[i] = std::move(r);
    } else if (!normalized.ok()) {
      out[i] = normalized.status();
    } else if (item.access = *normalized;
               internal::HitExact(**t, item.va, item.length, item.access, *out[i])) {
      stats_.register_hits.Inc();
    } else {
      unsure.push_back(item);
      unsure_of.push_back(i);
    }
  }
  const auto range_of = [](const RegisterItem& r) { return Range{r.va, r.length, r.access}; };
  bool increasing = true;
  for (size_t k = 1; increasing && k < unsure.size(); ++k) {
    increasing = range_of(unsure[k - 1]) < range_of(unsure[k]);
  }
  if (!increasing) seen.reserve(unsure.size());  // no rehash as the batch's misses go in
  for (size_t from = 0; from < unsure.size(); from += internal::kLockRun) {
    base::ReaderMutexLock lock(&(*t)->mu);
    for (size_t k = from; k < std::min(unsure.size(), from + internal::kLockRun); ++k) {
      const RegisterItem& item = unsure[k];
      const size_t i = unsure_of[k];
      if (internal::HitCover(**t, item.va, item.length, item.access, *out[i])) {
        stats_.register_hits.Inc();
      } else if (!increasing && !seen.insert(range_of(item)).second) {
        repeats.push_back(i);
      } else {
        misses.push_back(item);
        miss_of.push_back(i);
      }
    }
  }
  if (!misses.empty() && misses.size() == items.size()) {  // all misses (the usual batch)
    internal::MapRegistrations(**t, misses, absl::MakeSpan(out));
  } else if (!misses.empty()) {
    std::vector<absl::StatusOr<KeyGrant>> mapped(misses.size(),
                                                 absl::StatusOr<KeyGrant>(KeyGrant{}));
    internal::MapRegistrations(**t, misses, absl::MakeSpan(mapped));
    for (size_t k = 0; k < misses.size(); ++k) out[miss_of[k]] = std::move(mapped[k]);
  }
  for (size_t i : repeats) {
    const RegisterItem& item = items[i];
    const hca::AccessFlags access = item.access | hca::kLocalRead;  // as NormalizeAccess
    if (TryHit(**t, item.va, item.length, access, *out[i])) {
      stats_.register_hits.Inc();
    } else {  // the earlier one failed, or its key went meanwhile
      out[i] = internal::MapRegistration(**t, item.va, item.length, access);
    }
  }
  for (const auto& o : out) {
    if (!o.ok()) stats_.register_errors.Inc();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Release, Invalidate

absl::Status RegCacheImpl::Release(TenantId tenant, Handle handle) {
  Tenant* t = Lookup(tenant);
  if (t == nullptr || handle == 0 || internal::HandleTenantSlot(handle) != t->slot) [[unlikely]] {
    ASSIGN_OR_RETURN(t, Find(tenant));  // the errors, in their order
    RETURN_IF_ERROR(internal::CheckHandleTenant(*t, handle));
  }
  return internal::ReleaseHold(*t, handle);
}

absl::Status RegCacheImpl::Invalidate(TenantId tenant, Handle handle) {
  ASSIGN_OR_RETURN(Tenant * t, Find(tenant));
  ASSIGN_OR_RETURN(Record * r, internal::Resolve(*t, handle));
  {
    base::MutexLock il(&t->index_mu);
    const internal::Stopped stopped =
        internal::StopReference(*t, r, /*only_unheld=*/false, internal::HandleGen(handle));
    if (stopped == internal::Stopped::kNo) {
      // Not live: revoked and still held, or gone since Resolve.
      const uint64_t s = r->hot->state.load(std::memory_order_acquire);
      if (internal::state::PublishedAs(s, internal::HandleGen(handle))) {
        return base::WithReason(absl::FailedPreconditionError(
                                    absl::StrFormat("handle 0x%x was already invalidated", handle)),
                                base::reason::kKeyRevoked, {{"handle", std::to_string(handle)}});
      }
      return internal::NoSuchHandle(handle);
    }
    if (stopped == internal::Stopped::kRevoked) stats_.revoked_with_holders.Inc();
  }
  internal::Retire(*t, r);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Maintenance

void RegCacheImpl::Maintain() {
  reaper_.Finish();
  (void)MaintainPass();
}

bool RegCacheImpl::MaintainPass() {
  bool idle = true;
  std::vector<std::shared_ptr<Tenant>> tenants;
  {
    base::MutexLock lock(&tenants_mu_);
    for (auto& [id, t] : live_tenants_) tenants.push_back(t);
  }
  const absl::Time now = base::MonotonicNow();
  const bool pressed = budget_->pressed();
  const uint64_t share = budget_->FairShare();
  const uint64_t entry_share = budget_->FairEntryShare();
  const bool take_held = WaitedLongEnough(now);
  for (auto& t : tenants) {
    base::MutexLock refill(&t->refill_mu);
    if (pressed || take_held) ReclaimOverShare(*t, share, entry_share, take_held);
    std::vector<KeyPool::Refill> plan;
    std::vector<PooledKey> surplus;
    KeyPool* pool = nullptr;  // stays while refill_mu is held (closing waits for it)
    {
      base::MutexLock lock(&t->mu);
      if (t->closing || t->pool == nullptr) continue;
      pool = t->pool.get();
      surplus = pressed ? t->pool->Shrink(now, share, entry_share)
                        : t->pool->Shrink(now, UINT64_MAX, UINT64_MAX);
      plan = t->pool->PlanRefill(now);
      idle = idle && t->pool->Idle();
    }
    // The device work without the tenant's lock, so that its registrations go on meanwhile
    // (the pool stays: closing waits for refill_mu).
    (void)pool->DestroyKeys(surplus);  // each failure is logged
    if (plan.empty()) continue;
    std::vector<std::vector<hca::Key>> made(plan.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      absl::StatusOr<std::vector<hca::Key>> keys =
          ctx_.device->CreateIndirectKeys(t->pd, plan[i].capacity, plan[i].count, {});
      if (keys.ok()) {
        made[i] = std::move(*keys);
      } else {
        RC_LOG(DEBUG) << "pool refill for tenant " << t->id << ": " << keys.status();
      }
    }
    base::MutexLock lock(&t->mu);
    for (size_t i = 0; i < plan.size(); ++i) t->pool->AddCreated(plan[i], made[i]);
  }
  return budget_->RelieveIfRoom() && idle;
}

bool RegCacheImpl::WaitedLongEnough(absl::Time now) {
  base::MutexLock lock(&waiting_mu_);
  if (!budget_->waiting()) {
    waiting_since_ = absl::InfiniteFuture();
    return false;
  }
  if (waiting_since_ == absl::InfiniteFuture()) waiting_since_ = now;
  return now - waiting_since_ >= ctx_.options.held_reclaim_after;
}

void RegCacheImpl::ReclaimOverShare(Tenant& t, uint64_t share, uint64_t entry_share,
                                    bool take_held) {
  // Unreferenced cached registrations of a tenant over its fair share go through the lifecycle
  // (their keys to its quarantine, which Shrink then gives back), a bounded number per pass;
  // then, if a tenant under its share has waited long enough, registrations it holds.
  for (int i = 0; i < kReclaimPerPass; ++i) {
    {
      base::MutexLock lock(&t.mu);
      if (t.closing || t.pool == nullptr ||
          (t.pool->outstanding_keys() <= share && t.pool->outstanding_entries() <= entry_share)) {
        return;
      }
    }
    if (Record* victim = internal::PickVictim(t)) {
      t.stats().evictions.Inc();
      internal::Retire(t, victim);
      continue;
    }
    if (!take_held) return;
    Handle h = 0;
    Record* held = internal::PickHeldVictim(t, &h);
    if (held == nullptr) return;
    ReclaimHeld(t, held, h);
  }
}

void RegCacheImpl::ReclaimHeld(Tenant& t, Record* r, Handle h) {
  // The same order as an Invalidate through the daemon: told, revoked, told again.
  if (t.options.reclaiming) t.options.reclaiming(h);
  {
    base::MutexLock il(&t.index_mu);
    if (internal::StopReference(t, r, /*only_unheld=*/false, internal::HandleGen(h)) ==
        internal::Stopped::kNo) {
      return;  // gone or revoked meanwhile
    }
  }
  stats_.held_reclaimed.Inc();
  internal::Retire(t, r);
  if (t.options.reclaiming) t.options.reclaiming(h);
}

void RegCacheImpl::MaintenanceLoop() {
  const absl::Duration busy = ctx_.options.maintenance_period;
  const absl::Duration most = std::max(busy, ctx_.options.idle_maintenance_period);
  absl::Duration period = busy;
  for (;;) {
    {
      base::MutexLock lock(&stop_mu_);
      stop_cv_.WaitFor(&stop_mu_, period, [this]() {
        stop_mu_.AssertHeld();
        return stop_ || reap_wanted_;
      });
      if (stop_) return;
      reap_wanted_ = false;
    }
    // A closed tenant's keys a bounded step at a time, the live tenants' maintenance between
    // two steps: a large pool being destroyed delays no one's refill by more than one step.
    const bool reaping = reaper_.Step(kReapKeysPerStep);
    const bool idle = MaintainPass();
    period = reaping ? absl::ZeroDuration() : idle ? std::min(period * 2, most) : busy;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RegCache>> RegCache::Create(hca::Device* device,
                                                           const CacheOptions& options,
                                                           base::stats::Registry* registry) {
  if (device == nullptr) return absl::InvalidArgumentError("no device");
  RETURN_IF_ERROR(ValidateCacheOptions(options, device->capabilities()));
  return std::unique_ptr<RegCache>(new RegCacheImpl(device, options, registry));
}

}  // namespace regcache::cache