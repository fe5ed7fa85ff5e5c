#include "cache/internal/mapper.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/error_reason.h"
#include "base/status_macros.h"
#include "cache/internal/holds.h"
#include "cache/internal/lifecycle.h"
#include "cache/umr_engine.h"

namespace regcache::cache::internal {

namespace {

constexpr int kEvictionAttempts = 8;
// How long a tenant under its fair share waits for others to give back keys when the device's
// budget is spent (their ring workers and the maintenance thread are not held meanwhile). The
// maintenance thread revokes held registrations of tenants over their share after
// CacheOptions::held_reclaim_after (100 ms) of such waiting, well inside this bound.
constexpr absl::Duration kBudgetWait = absl::Seconds(1);

// What a miss or a window plans before it reserves a key (step 1).
struct Mapping {
  uint64_t va = 0;
  uint64_t length = 0;
  hca::AccessFlags access = 0;  // normalized
  KlmLayout layout;
  // A registration: the memory its layout uses, valid while the memory stays at `generation`.
  BackingRefs refs;
  // The generation of the tenant's memory (BackingSet) the layout was made at; none yet: ~0.
  uint64_t generation = ~uint64_t{0};
  Record* parent = nullptr;  // a window: its parent, held by the caller
  int cls = 0;

  bool window() const { return parent != nullptr; }
};

// A quota slot and a key of `cls`, under the tenant mutex, without evicting. `quota_refused`
// tells the caller which of the two ran out. `now`: the pool's clock (a batch reads it once).
absl::StatusOr<TakenKey> TryReserve(Tenant& t, int cls, bool& quota_refused,
                                    absl::Time now = base::MonotonicNow())
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  if (t.closing) return absl::NotFoundError("tenant is closing");
  if (t.options.max_keys != 0 && t.live >= t.options.max_keys) {
    quota_refused = true;
    return base::WithReason(
        absl::ResourceExhaustedError(
            absl::StrFormat("key quota: %d keys live, limit %d", t.live, t.options.max_keys)),
        base::reason::kKeyQuotaExceeded,
        {{"limit", std::to_string(t.options.max_keys)}, {"used", std::to_string(t.live)}});
  }
  quota_refused = false;
  ASSIGN_OR_RETURN(TakenKey taken, t.pool->Take(cls, now));
  t.live++;
  return taken;
}

// Gives back a reservation whose key was never mapped (still free on the device).
void Unreserve(Tenant& t, const TakenKey& taken) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  t.live--;
  t.pool->Quarantine(taken.pooled, base::MonotonicNow());
}

// Step 3, under the tenant mutex: a record for the reserved key, bound to what it maps.
absl::StatusOr<Record*> Bind(Tenant& t, Mapping& m, const TakenKey& taken)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  absl::Cleanup unreserve = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) { Unreserve(t, taken); };
  if (!m.window() && t.backings.generation() != m.generation) {
    // The tenant's memory changed while the mutex was released: lay out again under the lock
    // that pins it.
    ASSIGN_OR_RETURN(KlmLayout relaid,
                     t.backings.Layout(m.va, m.length, m.access, /*used=*/nullptr, &m.refs));
    if (relaid.size() > t.pool->capacity(m.cls)) {
      return absl::AbortedError("attached memory changed during register; retry");
    }
    m.layout = std::move(relaid);
    m.generation = t.backings.generation();
  }
  Record* r = AllocateRecord(t);
  if (r == nullptr) return TooManyRecords();
  std::move(unreserve).Cancel();
  SetRange(r, m.va, m.length, m.access, taken.mapped_key());
  r->klm_entries = static_cast<uint32_t>(m.layout.size());
  r->pooled = PooledKey{taken.mapped_key(), m.cls};
  if (m.window()) {
    r->parent = m.parent;
    m.parent->windows.push_back(r);
  } else {
    // The layout is of the memory as it is now (the generation check above): its refs hold.
    for (const BackingRecord* b : m.refs) {
      r->backings.push_back(b->id);  // empty (AllocateRecord)
      t.backings.Own(b).users++;
    }
  }
  r->life.Transition(KeyState::kMapping);
  return r;
}

// Undoes Bind for a record whose map failed (its key already went to recovery).
void Unbind(Tenant& t, Record* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  if (r->parent != nullptr) {
    std::erase(r->parent->windows, r);
  } else {
    for (BackingId id : r->backings) {
      if (BackingRecord* b = t.backings.Find(id)) b->users--;
    }
  }
  t.live--;
}

// Presses the budget and waits, without any lock, until it has room again or the tenant's own
// pool has free keys (a refill of its that was under way): true, or false after kBudgetWait.
bool AwaitBudget(Tenant& t, KeyBudget& budget, uint32_t capacity) {
  budget.Press(capacity);
  const absl::Time give_up = base::MonotonicNow() + kBudgetWait;
  auto own_keys = [&t] {
    base::MutexLock lock(&t.mu);
    return t.pool != nullptr && t.pool->free_keys() > 0;
  };
  while (!budget.HasRoom(capacity) && !own_keys()) {
    if (base::MonotonicNow() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// Steps 2 and 3: reserve (evicting unheld registrations while the quota or the pool is
// exhausted) and bind. On success the record is in kMapping and `taken` says what to map.
absl::StatusOr<Record*> ReserveAndBind(Tenant& t, Mapping& m, TakenKey& taken) {
  absl::Status last;
  bool quota_refused = false;
  bool waited = false;
  // From the wait until this returns: tenants over their share are refused meanwhile, so the
  // room the wait sees is still there for the retry.
  std::optional<KeyBudget::Waiting> waiting;
  for (int attempt = 0;; ++attempt) {
    bool over_budget = false;
    uint32_t capacity = 0;
    {
      base::MutexLock lock(&t.mu);
      absl::StatusOr<TakenKey> reserved = TryReserve(t, m.cls, quota_refused);
      if (reserved.ok()) {
        taken = *reserved;
        return Bind(t, m, taken);
      }
      last = reserved.status();
      if (t.pool != nullptr) capacity = t.pool->capacity(m.cls);
      // Keys of its own still being created do not count: they are on their way.
      over_budget = t.ctx->budget != nullptr && t.pool != nullptr && t.pool->budget_refused() &&
                    t.pool->total_keys() - t.pool->refilling() < t.ctx->budget->FairShare() &&
                    t.pool->total_entries() + capacity <= t.ctx->budget->FairEntryShare();
    }
    Record* victim = attempt < kEvictionAttempts ? PickVictim(t) : nullptr;
    if (victim != nullptr) {
      t.stats().evictions.Inc();
      Retire(t, victim);
      continue;
    }
    // The device's budget is spent and this tenant is under its fair share: the others give
    // back what is over theirs (the maintenance thread); wait for that, once and bounded.
    if (!over_budget || waited) break;
    waiting.emplace(*t.ctx->budget);
    if (!AwaitBudget(t, *t.ctx->budget, capacity)) break;
    waited = true;
    attempt = 0;
  }
  if (quota_refused) t.stats().quota_refusals.Inc();
  return last;
}

}  // namespace

absl::Status DeviceCanGrant(const Tenant& t, hca::AccessFlags access) {
  const hca::Capabilities& caps = t.device()->capabilities();
  if ((access & hca::kRemoteAtomic) != 0 && caps.umr && !caps.umr_modify_atomic) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s cannot grant remote atomics through a UMR (it reports umr_modify_atomic_disabled)",
        caps.device_name));
  }
  return absl::OkStatus();
}

namespace {

// A key reserved and bound for a Mapping (steps 2 and 3), and the UMR that maps it (step 4).
struct Prepared {
  bool refused = false;  // by its plan, before any key was reserved
  Record* r = nullptr;
  TakenKey taken;
  UmrOp op;
};

// Step 4's op for a bound key (it takes m.layout).
void FillOp(Mapping& m, Prepared& p) {
  p.op.kind = UmrOp::Kind::kMap;
  p.op.klm = std::move(m.layout);
  p.op.map.key = p.taken.pooled.key;
  p.op.map.new_variant = p.taken.new_variant;
  p.op.map.layout = hca::Layout::kKlm;
  p.op.map.access = m.access;
  p.op.map.start_addr = m.va;
  p.op.map.length = m.length;
  p.op.map.require_free = !m.window();
}

// Steps 2 and 3, and step 4's op.
absl::Status Prepare(Tenant& t, Mapping& m, Prepared& p) {
  RETURN_IF_ERROR(DeviceCanGrant(t, m.access));
  ASSIGN_OR_RETURN(p.r, ReserveAndBind(t, m, p.taken));
  FillOp(m, p);
  return absl::OkStatus();
}

// Undoes steps 2 and 3 of a key whose UMR failed (the key to recovery); the UMR's error.
absl::Status Undo(Tenant& t, Prepared& p) {
  Recover(t, p.r, p.taken.pooled.key);
  {
    base::MutexLock lock(&t.mu);
    Unbind(t, p.r);
  }
  base::MutexLock il(&t.index_mu);
  Recycle(t, p.r);
  return p.op.result;
}

// Step 5's first half, under the tenant mutex: the mapped key is active and its range in the
// cover index. `hint`: where the entry is expected to go (a batch's ranges mostly come in
// address order, each right after the one before); it returns where the next is expected.
CoverIndex::iterator Activate(Tenant& t, const Mapping& m, Record* r, CoverIndex::iterator hint)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  r->life.Transition(KeyState::kActive);
  if (m.window()) return hint;
  t.max_length = std::max(t.max_length, m.length);
  // A wrong hint costs two comparisons before the usual search.
  return std::next(t.cover.insert(hint, {m.va, r}));
}

// Step 5's second half, under the index mutex: published, in the hit index, and granted.
void PublishMapped(Tenant& t, const Mapping& m, Record* r, KeyGrant& grant)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu) {
  Publish(t, r, m.window());
  if (!m.window()) t.index.Insert(RangeHash(m.va, m.length), r->slot);
  FillGrant(grant, *r->hot, r->handle, /*hit=*/false);
}

// Step 5 once the UMR completed; Undo if it failed.
absl::StatusOr<KeyGrant> Finish(Tenant& t, const Mapping& m, Prepared& p) {
  if (!p.op.result.ok()) return Undo(t, p);
  KeyGrant grant;
  {
    base::MutexLock lock(&t.mu);
    (void)Activate(t, m, p.r, t.cover.end());
    base::MutexLock il(&t.index_mu);
    PublishMapped(t, m, p.r, grant);
  }
  t.stats().live_registrations.Add();
  return grant;
}

// Step 5 of a batch's mapped keys (`done`, into `out`), one hold of each mutex per run.
void FinishRuns(Tenant& t, absl::Span<const Mapping> maps, absl::Span<const Prepared> prepared,
                absl::Span<const size_t> done, absl::Span<absl::StatusOr<KeyGrant>> out) {
  for (size_t from = 0; from < done.size(); from += kLockRun) {
    const size_t to = std::min(done.size(), from + kLockRun);
    base::MutexLock lock(&t.mu);
    auto hint = t.cover.end();
    for (size_t k = from; k < to; ++k) hint = Activate(t, maps[done[k]], prepared[done[k]].r, hint);
    base::MutexLock il(&t.index_mu);
    for (size_t k = from; k < to; ++k) {
      const size_t i = done[k];
      KeyGrant grant;
      PublishMapped(t, maps[i], prepared[i].r, grant);
      out[i] = grant;
    }
  }
  t.stats().live_registrations.Add(static_cast<int64_t>(done.size()));
}

// The shared path: steps 2 to 5.
absl::StatusOr<KeyGrant> MapNew(Tenant& t, Mapping& m) {
  Prepared p;
  RETURN_IF_ERROR(Prepare(t, m, p));
  UmrOp* ops[] = {&p.op};
  t.engine->Execute(ops);
  return Finish(t, m, p);
}

// Step 1 of a miss: the range over the tenant's memory and the smallest key class for it.
// `last`: the backing the previous plan under the same hold started in (BackingSet::Layout).
absl::Status PlanLocked(Tenant& t, Mapping& m, const BackingRecord** last = nullptr)
    ABSL_SHARED_LOCKS_REQUIRED(t.mu) {
  ASSIGN_OR_RETURN(m.layout,
                   t.backings.Layout(m.va, m.length, m.access, /*used=*/nullptr, &m.refs, last));
  m.generation = t.backings.generation();
  ASSIGN_OR_RETURN(m.cls, t.pool->ClassFor(static_cast<uint32_t>(m.layout.size())));
  return absl::OkStatus();
}

absl::Status Plan(Tenant& t, Mapping& m) {
  base::ReaderMutexLock lock(&t.mu);
  return PlanLocked(t, m);
}

void RecordMiss(Tenant& t, absl::Time start, absl::Time done = base::MonotonicNow()) {
  t.stats().register_misses.Inc();
  t.stats().miss_latency_ns.Record(static_cast<uint64_t>(absl::ToInt64Nanoseconds(done - start)));
}

// `n` misses of one batch, mapped together: each took the same time, worked out once.
void RecordMisses(Tenant& t, absl::Time start, absl::Time done, size_t n) {
  if (n == 0) return;
  t.stats().register_misses.Inc(n);
  t.stats().miss_latency_ns.Record(static_cast<uint64_t>(absl::ToInt64Nanoseconds(done - start)),
                                   n);
}

// Takes one shared hold on `p`, the record `handle` resolved to, for a window on it: the
// parent's range and rights are fixed while it is held. Fails if the record is no longer that
// publication, or is not a live registration.
absl::Status HoldParent(Record* p, Handle handle) {
  const uint32_t gen = HandleGen(handle);
  uint64_t ps = p->hot->state.load(std::memory_order_acquire);
  for (;;) {
    if (!state::PublishedAs(ps, gen)) return NoSuchHandle(handle);
    if ((ps & state::kDead) != 0) {
      return base::WithReason(absl::FailedPreconditionError(
                                  absl::StrFormat("registration 0x%x was invalidated", handle)),
                              base::reason::kKeyRevoked, {{"handle", std::to_string(handle)}});
    }
    if ((ps & state::kWindow) != 0) {
      return absl::InvalidArgumentError("a window cannot be the parent of a window");
    }
    if (state::SharedHolders(ps) == INT32_MAX) {
      return absl::ResourceExhaustedError("the parent has the most holders it can count");
    }
    if (p->hot->state.compare_exchange_weak(ps, state::WithShared(ps, state::SharedHolders(ps) + 1),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
      return absl::OkStatus();
    }
  }
}

// Step 1 for items [from, to) of a batch, under one shared hold of the tenant mutex; a refused
// item gets its error in `out`.
void PlanRun(Tenant& t, absl::Span<const RegisterItem> items, size_t from, size_t to,
             absl::Span<Mapping> maps, absl::Span<Prepared> prepared,
             absl::Span<absl::StatusOr<KeyGrant>> out) {
  base::ReaderMutexLock lock(&t.mu);
  const BackingRecord* last = nullptr;  // valid for this hold only
  for (size_t i = from; i < to; ++i) {
    Mapping& m = maps[i];
    m.va = items[i].va;
    m.length = items[i].length;
    m.access = items[i].access;
    absl::Status s = PlanLocked(t, m, &last);
    if (s.ok()) s = DeviceCanGrant(t, m.access);
    if (!s.ok()) {
      out[i] = std::move(s);
      prepared[i].refused = true;
    }
  }
}

}  // namespace

absl::StatusOr<KeyGrant> MapRegistration(Tenant& t, uint64_t va, uint64_t length,
                                         hca::AccessFlags access) {
  const absl::Time start = base::MonotonicNow();
  Mapping m;
  m.va = va;
  m.length = length;
  m.access = access;
  RETURN_IF_ERROR(Plan(t, m));
  RC_CACHE_TEST_HOOK(kPlanned);
  ASSIGN_OR_RETURN(KeyGrant grant, MapNew(t, m));
  RecordMiss(t, start);
  return grant;
}

void MapRegistrations(Tenant& t, absl::Span<const RegisterItem> items,
                      absl::Span<absl::StatusOr<KeyGrant>> out) {
  const absl::Time start = base::MonotonicNow();
  const size_t n = items.size();
  // Stable addresses: the engine gets pointers to the ops.
  std::vector<Mapping> maps(n);
  std::vector<Prepared> prepared(n);
  std::vector<UmrOp*> ops;
  std::vector<size_t> posted;  // the items whose op is in `ops`
  std::vector<size_t> alone;   // no key without evicting or waiting: ReserveAndBind, one by one
  ops.reserve(n);
  posted.reserve(n);
  // Steps 1 to 3 run by run, each step under one hold of the tenant mutex for the whole run.
  for (size_t from = 0; from < n; from += kLockRun) {
    const size_t to = std::min(n, from + kLockRun);
    PlanRun(t, items, from, to, absl::MakeSpan(maps), absl::MakeSpan(prepared), out);
    RC_CACHE_TEST_HOOK(kPlanned);
    base::MutexLock lock(&t.mu);
    for (size_t i = from; i < to; ++i) {
      Prepared& p = prepared[i];
      if (p.refused) continue;
      bool quota_refused = false;
      absl::StatusOr<TakenKey> reserved = TryReserve(t, maps[i].cls, quota_refused, start);
      if (!reserved.ok()) {
        alone.push_back(i);
        continue;
      }
      p.taken = *reserved;
      absl::StatusOr<Record*> r = Bind(t, maps[i], p.taken);
      if (!r.ok()) {
        out[i] = r.status();
        continue;
      }
      p.r = *r;
      FillOp(maps[i], p);
      ops.push_back(&p.op);
      posted.push_back(i);
    }
  }
  for (size_t i : alone) {
    if (absl::Status s = Prepare(t, maps[i], prepared[i]); !s.ok()) {
      out[i] = std::move(s);
      continue;
    }
    ops.push_back(&prepared[i].op);
    posted.push_back(i);
  }
  if (ops.empty()) return;
  t.engine->ExecuteSpread(ops);
  const absl::Time mapped = base::MonotonicNow();  // a batch's keys are mapped together
  // A UMR that fails takes its queue down, and what was posted after it on that queue is
  // flushed with it: those keys go to recovery (Undo), and each such item is mapped once more
  // on its own below, so only an item that fails by itself fails.
  std::vector<size_t> again, done;
  done.reserve(posted.size());
  for (size_t i : posted) {
    Prepared& p = prepared[i];
    if (p.op.result.ok()) {
      done.push_back(i);
      continue;
    }
    const bool reached_device = p.op.posted;
    out[i] = Undo(t, p);
    if (reached_device && ops.size() > 1) again.push_back(i);
  }
  FinishRuns(t, maps, prepared, done, out);
  RecordMisses(t, start, mapped, done.size());
  for (size_t i : again) out[i] = MapRegistration(t, items[i].va, items[i].length, items[i].access);
}

absl::StatusOr<KeyGrant> MapWindow(Tenant& t, Handle parent, uint64_t offset, uint64_t length,
                                   hca::AccessFlags access) {
  ASSIGN_OR_RETURN(Record * p, Resolve(t, parent));
  ASSIGN_OR_RETURN(hca::AccessFlags normalized, NormalizeAccess(access));
  if (length == 0) return absl::InvalidArgumentError("window length 0");
  Mapping m;
  {
    base::ReaderMutexLock lock(&t.mu);
    ASSIGN_OR_RETURN(m.cls, t.pool->ClassFor(1));
  }
  // The hold first, then the checks against the parent it pins.
  RETURN_IF_ERROR(HoldParent(p, parent));
  absl::Cleanup drop_parent = [&] {
    (void)DropHold(t, p->slot, HandleGen(parent), parent, /*user_release=*/false);
  };
  const uint64_t parent_va = p->hot->va.load(std::memory_order_relaxed);
  const uint64_t parent_length = p->hot->length.load(std::memory_order_relaxed);
  const hca::AccessFlags parent_access = p->hot->access.load(std::memory_order_relaxed);
  if (offset >= parent_length || length > parent_length - offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window [+0x%x, +0x%x) is outside its parent of 0x%x bytes", offset, length,
                        parent_length));
  }
  if ((normalized & ~parent_access) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window access %s is not narrower than its parent's %s",
                        hca::AccessToString(normalized), hca::AccessToString(parent_access)));
  }
  m.va = parent_va + offset;
  m.length = length;
  m.access = normalized;
  m.parent = p;
  m.layout = {hca::KlmEntry{p->hot->key.load(std::memory_order_relaxed), m.va, length}};
  absl::StatusOr<KeyGrant> grant = MapNew(t, m);
  if (!grant.ok()) {
    t.stats().register_errors.Inc();
    return grant.status();
  }
  std::move(drop_parent).Cancel();  // the window keeps it until it is retired
  t.stats().windows_created.Inc();
  return grant;
}

namespace {

// The record under the CLOCK hand, which moves on by one.
Record* NextUnderHand(Tenant& t, uint32_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.index_mu) {
  if (t.clock_hand >= n) t.clock_hand = 0;
  return t.slab.At(t.clock_hand++);
}

}  // namespace

Record* PickVictim(Tenant& t) {
  // Two turns of the hand at most: the first may only clear referenced bits.
  base::MutexLock lock(&t.index_mu);
  const uint32_t n = t.slab.size();
  for (uint64_t step = 0; step < 2 * uint64_t{n}; ++step) {
    Record* r = NextUnderHand(t, n);
    uint64_t s = r->hot->state.load(std::memory_order_acquire);
    while (state::Live(s) && (s & state::kWindow) == 0 && state::SharedHolders(s) <= 0) {
      if ((s & state::kReferenced) != 0) {  // second chance
        if (r->hot->state.compare_exchange_weak(
                s, s & ~state::kReferenced, std::memory_order_acq_rel, std::memory_order_acquire)) {
          break;
        }
        continue;
      }
      // Unreferenced and no shared holder: sum the threads' holds only now (it costs a load
      // per thread). The stop counts again after its fence and backs out if a hit got in
      // first; then the hand moves on.
      if (Holders(t, r->slot, s) > 0) break;
      if (StopReference(t, r, /*only_unheld=*/true) != Stopped::kNo) return r;
      break;
    }
  }
  return nullptr;
}

Record* PickHeldVictim(Tenant& t, Handle* handle) {
  base::MutexLock lock(&t.index_mu);
  const uint32_t n = t.slab.size();
  for (uint64_t step = 0; step < 2 * uint64_t{n}; ++step) {
    Record* r = NextUnderHand(t, n);
    const uint64_t s = r->hot->state.load(std::memory_order_acquire);
    if (!state::Live(s) || (s & state::kWindow) != 0) continue;
    if ((s & state::kReferenced) != 0) {  // second chance
      r->hot->state.fetch_and(~state::kReferenced, std::memory_order_acq_rel);
      continue;
    }
    *handle = r->handle;
    return r;
  }
  return nullptr;
}

}  // namespace regcache::cache::internal