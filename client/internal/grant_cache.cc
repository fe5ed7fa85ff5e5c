#include "client/internal/grant_cache.h"

#include <algorithm>
#include <iterator>

#include "base/log.h"
#include "client/internal/grant_cache_words.h"

namespace regcache::api::internal {
using namespace grant_cache_words;  // NOLINT: the entry's words, spelled as everywhere here
namespace {

namespace shm = ::regcache::protocol::shm;

using base::ProbeTable;

std::atomic<uint64_t> next_cache_id{1};

// Rights the daemon would accept (cache::NormalizeAccess): known bits, and remote write or
// atomic only with local write. Anything else goes to the daemon, which says what is wrong.
bool ValidAccess(uint32_t access) {
  constexpr uint32_t kKnown = kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic;
  if ((access & ~kKnown) != 0) return false;
  return (access & (kRemoteWrite | kRemoteAtomic)) == 0 || (access & kLocalWrite) != 0;
}

thread_local bool tls_exiting = false;

}  // namespace

namespace grant_cache_detail {

struct ThreadTables {
  struct Item {
    std::shared_ptr<Registry> registry;
    std::unique_ptr<ThreadRefs> refs;
  };
  std::vector<Item> items;
  // The thread exits: what it references goes to the shared counts, so it stays referenced
  // (and what it no longer references becomes reclaimable). The lock held is the cache's
  // registry_->mu, which the analysis cannot tell.
  ~ThreadTables() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    tls_exiting = true;
    tls_last_id = 0;
    tls_last = nullptr;
    for (Item& it : items) {
      base::MutexLock l(&it.registry->mu);
      if (it.registry->cache != nullptr) it.registry->cache->HandBack(*it.refs);
      std::erase(it.registry->tables, it.refs.get());
    }
  }
};

namespace {
ThreadTables& Tables() {
  thread_local ThreadTables tables;
  return tables;
}
}  // namespace

}  // namespace grant_cache_detail

using grant_cache_detail::FrontTable;
using grant_cache_detail::ThreadRefs;
using grant_cache_detail::tls_last;
using grant_cache_detail::tls_last_id;

GrantCache::GrantCache(const GrantStateView& state)
    : state_(state),
      id_(next_cache_id.fetch_add(1, std::memory_order_relaxed)),
      registry_(std::make_shared<grant_cache_detail::Registry>()),
      chunks_(new std::atomic<Entry*>[kMaxChunks]()) {
  base::MutexLock r(&registry_->mu);
  registry_->cache = this;
}

GrantCache::~GrantCache() {
  {
    base::MutexLock r(&registry_->mu);
    registry_->cache = nullptr;  // threads keep their tables until they exit
    registry_->tables.clear();
  }
  for (uint32_t c = 0; c < kMaxChunks; ++c) delete[] chunks_[c].load(std::memory_order_relaxed);
}

bool GrantCache::CurrentWord(uint32_t slot, uint32_t generation) const {
  if (state_.session_state != nullptr &&
      state_.session_state->load(std::memory_order_acquire) != shm::kSessionOpen) {
    return false;
  }
  return state_.slots[slot].load(std::memory_order_acquire) == shm::SlotWord(generation, false);
}

// --- Threads' tables ---------------------------------------------------------------------------
inline ThreadRefs* GrantCache::MyRefs(bool create) {
  if (tls_last_id == id_) [[likely]]
    return tls_last;
  return MyRefsSlow(create);
}

void GrantCache::ReaperFenceLocked() {
  const size_t tables = registry_->tables.size();
  if (fence_ == base::FenceMode::kMembarrier &&
      (tables == 0 || (tables == 1 && registry_->tables[0] == MyRefs(/*create=*/false)))) {
    // No other thread counts holds here: the caller's own words are in its program order, and
    // a thread that registers a table later does so under registry_->mu, after this reaper's
    // marks. (The common case of Invalidate from a single-threaded user: no IPI.)
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return;
  }
  base::ReaperFence(fence_);
}

ThreadRefs* GrantCache::MyRefsSlow(bool create) {
  if (tls_exiting) return nullptr;
  auto& items = grant_cache_detail::Tables().items;
  for (auto& it : items) {
    if (it.refs->cache_id == id_) {
      tls_last_id = id_;
      tls_last = it.refs.get();
      return tls_last;
    }
  }
  if (!create) return nullptr;
  // Tables of caches that are gone are dropped here (their ids never come back).
  std::erase_if(items, [](auto& it) {
    base::MutexLock l(&it.registry->mu);
    return it.registry->cache == nullptr;
  });
  auto refs = std::make_unique<ThreadRefs>(id_);
  {
    base::MutexLock l(&registry_->mu);
    registry_->tables.push_back(refs.get());
  }
  items.push_back({registry_, std::move(refs)});
  tls_last_id = id_;
  tls_last = items.back().refs.get();
  return tls_last;
}

void GrantCache::HandBack(ThreadRefs& t) {
  for (uint32_t c = 0; c < kMaxChunks; ++c) {
    std::atomic<uint64_t>* words = t.chunks[c].load(std::memory_order_relaxed);
    if (words == nullptr || chunks_[c].load(std::memory_order_acquire) == nullptr) continue;
    for (uint32_t i = 0; i < kChunk; ++i) {
      const uint64_t w = words[i].load(std::memory_order_relaxed);
      if (Count(w) == 0) continue;
      Entry& e = At(c * kChunk + i);
      const uint64_t s = e.state.load(std::memory_order_acquire);
      // A stale word counts for nobody; reapers hold the registry lock, so none counts here.
      if (Inc(s) == WordInc(w) && (s & kLive) != 0) {
        e.shared.fetch_add(Count(w), std::memory_order_acq_rel);
      }
      words[i].store(0, std::memory_order_release);
    }
  }
}

// --- Hits --------------------------------------------------------------------------------------
std::optional<Key> GrantCache::TryHit(ThreadRefs* t, uint32_t idx, uint64_t addr, uint64_t end,
                                      uint32_t access, uint64_t epoch) {
  Entry& e = At(idx);
  const uint64_t s = e.state.load(std::memory_order_acquire);
  if ((s & (kLive | kForgotten | kMarked)) != kLive) return std::nullopt;
  if (e.va.load(std::memory_order_relaxed) > addr || e.end.load(std::memory_order_relaxed) < end ||
      (access & ~e.access.load(std::memory_order_relaxed)) != 0) {
    return std::nullopt;
  }
  const uint32_t inc = Inc(s);
  std::atomic<uint64_t>* mine = t != nullptr ? &t->Mine(idx) : nullptr;
  uint64_t w = mine != nullptr ? mine->load(std::memory_order_relaxed) : 0;
  // While releases from other threads are outstanding (shared < 0), hits count there too.
  if (mine != nullptr && (WordInc(w) != inc || Count(w) < HoldWord::kMaxCount) &&
      e.shared.load(std::memory_order_relaxed) >= 0) [[likely]] {
    w = WordInc(w) == inc ? w + 1 : HoldWord::Make(inc, 1);  // a stale word counts for nobody
    mine->store(w, std::memory_order_relaxed);
    base::HolderFence(fence_);  // the count and the range loads, before the recheck
  } else {
    mine = nullptr;
    e.shared.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_acquire);  // the range loads, before the recheck
  }
  if (e.state.load(std::memory_order_acquire) != s) [[unlikely]] {
    Unref(mine != nullptr ? t : nullptr, idx, inc);
    return std::nullopt;
  }
  // Held: the entry stays this grant. Its daemon word, read now: current while we held it.
  const bool open = state_.session_state == nullptr ||
                    state_.session_state->load(std::memory_order_acquire) == shm::kSessionOpen;
  const uint32_t slot = e.slot.load(std::memory_order_relaxed);
  if (!open || state_.slots[slot].load(std::memory_order_acquire) !=
                   shm::SlotWord(e.generation.load(std::memory_order_relaxed), false))
      [[unlikely]] {
    Unref(mine != nullptr ? t : nullptr, idx, inc);
    if (open) {  // revoked: no one gets it again; its holds go back once unreferenced
      base::MutexLock l(&mu_);
      base::MutexLock r(&registry_->mu);
      Reaping reaping(epoch_);
      const uint64_t h = e.handle.load(std::memory_order_relaxed);
      if (Inc(e.state.load(std::memory_order_acquire)) == inc) {
        if (uint32_t holds = ForgetLocked(idx); holds > 0) AddPending(h, holds);
      }
    }
    return std::nullopt;
  }
  constexpr auto kR = std::memory_order_relaxed;
  const uint64_t va = e.va.load(kR);
  const Key k{e.handle.load(kR),
              e.lkey.load(kR),
              e.rkey.load(kR),
              va,
              e.end.load(kR) - va,
              e.access.load(kR),
              true};
  if (mine != nullptr) {
    t->last_handle = k.handle;
    t->last_idx = idx;
    if ((epoch & 1) == 0 && t->front_on) Remember(*t, idx, addr, k, epoch);
  }
  return k;
}

// Fills `addr`'s front slot with a grant this thread holds (its word counts it) and that was
// validated after epoch_ read `epoch` (even). The newer way is 0: the older one is dropped.
void GrantCache::Remember(ThreadRefs& t, uint32_t idx, uint64_t addr, const Key& k,
                          uint64_t epoch) {
  if (t.front == nullptr) t.front = std::make_unique<FrontTable>();
  FrontTable& ft = *t.front;
  const uint32_t i = 2 * FrontTable::Set(addr);
  grant_cache_detail::Front& f = ft.slots[i];
  if (f.handle != k.handle || f.epoch != epoch) {
    ft.slots[i + 1] = f;
    ft.by_handle[FrontTable::ByHandle(f.handle)] = static_cast<uint16_t>(i + 1);
  }
  const Entry& e = At(idx);
  constexpr auto kR = std::memory_order_relaxed;
  const uint32_t word = shm::SlotWord(e.generation.load(kR), false);
  f = {k.va, k.va + k.length,       k.handle, epoch, k.lkey, k.rkey, k.access, e.slot.load(kR),
       word, Inc(e.state.load(kR)), idx};
  ft.by_handle[FrontTable::ByHandle(k.handle)] = static_cast<uint16_t>(i);
  ft.last = i;
}

// Drops a reference TryHit took (`t` nullptr: a shared one).
void GrantCache::Unref(ThreadRefs* t, uint32_t idx, uint32_t inc) {
  Entry& e = At(idx);
  if (t != nullptr) {
    std::atomic<uint64_t>& mine = t->Mine(idx);
    mine.store(mine.load(std::memory_order_relaxed) - 1, std::memory_order_release);
    base::HolderFence(fence_);
  } else {
    e.shared.fetch_sub(1, std::memory_order_seq_cst);
  }
  const uint64_t s = e.state.load(std::memory_order_acquire);
  if (Inc(s) == inc && (s & kForgotten) != 0) [[unlikely]] {
    auto [handle, holds] = Settle(idx, inc);
    if (holds > 0) {
      base::MutexLock l(&mu_);
      AddPending(handle, holds);
    }
  }
}

std::optional<Key> GrantCache::AcquireUnlocked(ThreadRefs* t, uint64_t addr, uint64_t end,
                                               uint32_t access, uint64_t epoch, uint32_t** hint) {
  std::optional<Key> k;
  const auto hit = [&](uint32_t idx) {
    k = TryHit(t, idx, addr, end, access, epoch);
    return k.has_value();
  };
  // A grant that starts at `addr`.
  if (by_va_.Find(ProbeTable::Mix(addr), hit, kMaxProbe)) return k;
  // The grant this thread last used at this address.
  *hint = t != nullptr ? &t->hints[ProbeTable::Mix(addr >> 12) % kHints] : nullptr;
  if (*hint != nullptr && **hint != 0 && hit(**hint - 1)) return k;
  return std::nullopt;
}

std::optional<Key> GrantCache::AcquireSlow(uint64_t addr, uint64_t length, uint32_t access) {
  const uint64_t end = addr + length;
  if (length == 0 || end < addr || !ValidAccess(access)) return std::nullopt;
  ThreadRefs* t = MyRefs(/*create=*/true);
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);  // before any entry is read
  uint32_t* hint = nullptr;
  if (std::optional<Key> k = AcquireUnlocked(t, addr, end, access, epoch, &hint)) return k;
  return AcquireCovering(t, addr, end, access, epoch, hint);  // then the ordered index
}

std::optional<Key> GrantCache::CoverHit(ThreadRefs* t, std::optional<uint32_t> idx, uint64_t addr,
                                        uint64_t end, uint32_t access, uint64_t epoch,
                                        uint32_t* hint) {
  if (!idx.has_value()) return std::nullopt;
  std::optional<Key> k = TryHit(t, *idx, addr, end, access, epoch);
  if (k.has_value() && hint != nullptr) *hint = *idx + 1;
  return k;
}

std::optional<Key> GrantCache::AcquireCovering(ThreadRefs* t, uint64_t addr, uint64_t end,
                                               uint32_t access, uint64_t epoch, uint32_t* hint) {
  std::optional<uint32_t> idx;
  {
    base::ReaderMutexLock lock(&mu_);
    idx = FindCovering(addr, end, access);
  }
  // Outside the lock: a hit that finds its grant revoked takes it to forget the grant.
  return CoverHit(t, idx, addr, end, access, epoch, hint);
}

void GrantCache::AcquireBatch(absl::Span<const Lookup> lookups, absl::Span<std::optional<Key>> out,
                              absl::FunctionRef<void()> first_miss) {
  ThreadRefs* t = MyRefs(/*create=*/true);
  // Read once, before any entry of the batch: a reaper that bumps it meanwhile only keeps the
  // batch's hits out of the front (Remember checks the epoch).
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);
  struct Unsure {
    size_t i;
    uint32_t* hint;
    std::optional<uint32_t> idx;  // the covering grant the ordered index offers
  };
  std::vector<Unsure> unsure;
  bool missed = false;
  for (size_t i = 0; i < lookups.size(); ++i) {
    const Lookup& l = lookups[i];
    const uint64_t end = l.addr + l.length;
    if (l.length == 0 || end < l.addr || !ValidAccess(l.access)) continue;
    if (Key k; t != nullptr && FrontAcquire(t, l.addr, end, l.access, &k)) {
      out[i] = k;
      continue;
    }
    uint32_t* hint = nullptr;
    out[i] = AcquireUnlocked(t, l.addr, end, l.access, epoch, &hint);
    if (out[i].has_value()) continue;
    if (missed) {
      unsure.push_back({i, hint, std::nullopt});
      continue;
    }
    // Until the first miss, each item is settled on its own: the caller learns of that miss
    // (and wakes the daemon) while the rest are still being looked up.
    out[i] = AcquireCovering(t, l.addr, end, l.access, epoch, hint);
    if (!out[i].has_value()) {
      missed = true;
      first_miss();
    }
  }
  for (size_t from = 0; from < unsure.size(); from += kLockRun) {
    const size_t to = std::min(unsure.size(), from + kLockRun);
    {
      base::ReaderMutexLock lock(&mu_);
      for (size_t u = from; u < to; ++u) {
        const Lookup& l = lookups[unsure[u].i];
        unsure[u].idx = FindCovering(l.addr, l.addr + l.length, l.access);
      }
    }
    for (size_t u = from; u < to; ++u) {  // outside the lock, as AcquireCovering's
      const Lookup& l = lookups[unsure[u].i];
      out[unsure[u].i] =
          CoverHit(t, unsure[u].idx, l.addr, l.addr + l.length, l.access, epoch, unsure[u].hint);
    }
  }
}

std::optional<uint32_t> GrantCache::FindCovering(uint64_t addr, uint64_t end, uint32_t access) {
  auto it = index_.upper_bound({addr, ~uint64_t{0}});
  for (int n = 0; n < kScanLimit && it != index_.begin(); ++n) {
    --it;
    const Entry& e = At(it->second);
    if ((e.state.load(std::memory_order_acquire) & (kForgotten | kMarked)) != 0) continue;
    if (end <= e.end.load(std::memory_order_relaxed) &&
        (access & ~e.access.load(std::memory_order_relaxed)) == 0) {
      return it->second;
    }
  }
  return std::nullopt;
}

// --- Insert ------------------------------------------------------------------------------------
void GrantCache::AddRefLocked(uint32_t idx, uint32_t inc) {
  // Under mu_: no reaper counts meanwhile, and the next one sees this (mu_ orders it).
  if (ThreadRefs* t = MyRefs(/*create=*/true)) {
    std::atomic<uint64_t>& mine = t->Mine(idx);
    const uint64_t w = mine.load(std::memory_order_relaxed);
    if (WordInc(w) != inc) {
      mine.store(HoldWord::Make(inc, 1), std::memory_order_release);
      return;
    }
    if (Count(w) < HoldWord::kMaxCount) {
      mine.store(w + 1, std::memory_order_release);
      return;
    }
  }
  At(idx).shared.fetch_add(1, std::memory_order_seq_cst);
}

namespace {
bool Insertable(const Key& key, uint32_t slot, uint32_t slot_count) {
  return slot != shm::kNoSlot && slot < slot_count && key.length != 0 &&
         key.va + key.length >= key.va;
}
}  // namespace

bool GrantCache::Insert(const Key& key, uint32_t slot, uint32_t generation) {
  if (!Insertable(key, slot, state_.slot_count)) return false;
  base::MutexLock lock(&mu_);
  IndexHint hint = index_.end();
  return InsertLocked(key, slot, generation, hint);
}

void GrantCache::InsertBatch(absl::Span<const Insertion> grants) {
  // Runs of kLockRun: a long batch does not keep other threads' misses waiting for all of it.
  for (size_t from = 0; from < grants.size(); from += kLockRun) {
    base::MutexLock lock(&mu_);
    // A batch's grants mostly come in address order: each one's place in the ordered index is
    // then just past the previous one's, and the hint saves the search.
    IndexHint hint = index_.end();
    for (const Insertion& g : grants.subspan(from, kLockRun)) {
      if (Insertable(*g.key, g.slot, state_.slot_count)) {
        (void)InsertLocked(*g.key, g.slot, g.generation, hint);
      }
    }
  }
}

bool GrantCache::InsertLocked(const Key& key, uint32_t slot, uint32_t generation, IndexHint& hint) {
  // One probe of the handle map, whichever way it goes (a refusal below takes the key out).
  auto [it, fresh] = handles_.try_emplace(key.handle, 0);
  if (!fresh) {
    Entry& e = At(it->second);
    if (e.slot.load(std::memory_order_relaxed) != slot ||
        e.generation.load(std::memory_order_relaxed) != generation) {
      return false;
    }
    // Even if forgotten meanwhile: the hold is the entry's, given back with its last reference.
    AddRefLocked(it->second, Inc(e.state.load(std::memory_order_relaxed)));
    ++e.daemon_holds;
    return true;
  }
  if (!CurrentWord(slot, generation) || (free_.empty() && next_ == kChunk * kMaxChunks)) {
    handles_.erase(it);  // stale, or full: the daemon answers the rest
    return false;
  }
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else {
    idx = next_++;
    if (idx % kChunk == 0)
      chunks_[idx / kChunk].store(new Entry[kChunk], std::memory_order_release);
  }
  Entry& e = At(idx);
  constexpr auto kR = std::memory_order_relaxed;
  e.va.store(key.va, kR);
  e.end.store(key.va + key.length, kR);
  e.handle.store(key.handle, kR);
  e.lkey.store(key.lkey, kR);
  e.rkey.store(key.rkey, kR);
  e.access.store(key.access, kR);
  e.slot.store(slot, kR);
  e.generation.store(generation, kR);
  e.shared.store(0, kR);
  e.daemon_holds = 1;
  const uint32_t inc = Inc(e.state.load(std::memory_order_relaxed));
  AddRefLocked(idx, inc);
  e.state.store(Clean(inc), std::memory_order_release);  // the fields, before a reader sees it
  hint = std::next(index_.emplace_hint(hint, std::make_pair(key.va, key.handle), idx));
  it->second = idx;
  by_va_.Insert(ProbeTable::Mix(key.va), idx);
  by_handle_.Insert(ProbeTable::Mix(key.handle), idx);
  return true;
}

// --- Release -----------------------------------------------------------------------------------
GrantCache::ReleaseOutcome GrantCache::ReleaseProbe(uint64_t handle) {
  ThreadRefs* t = MyRefs(/*create=*/false);
  if (t == nullptr) return ReleaseSlow(handle);
  ReleaseOutcome out;
  // A reference of `handle` this thread counts in its word for entry `idx`: given back.
  const auto release = [&](uint32_t idx) {
    std::atomic<uint64_t>* mine = t->Find(idx);
    if (mine == nullptr) return false;
    const uint64_t w = mine->load(std::memory_order_relaxed);
    if (Count(w) == 0) return false;
    Entry& e = At(idx);
    const uint64_t s = e.state.load(std::memory_order_acquire);
    if (Inc(s) != WordInc(w) || (s & kLive) == 0 ||
        e.handle.load(std::memory_order_relaxed) != handle) {
      return false;
    }
    mine->store(w - 1, std::memory_order_release);
    base::HolderFence(fence_);  // the count, before the state read
    out = Released(idx, mine, w, handle);
    return true;
  };
  // The grant this thread hit last (most often the one released next), then the table.
  if (t->last_handle == handle && release(t->last_idx)) return out;
  if (by_handle_.Find(ProbeTable::Mix(handle), release, kMaxProbe)) return out;
  return ReleaseSlow(handle);
}

GrantCache::ReleaseOutcome GrantCache::Released(uint32_t idx, std::atomic<uint64_t>* mine,
                                                uint64_t w, uint64_t handle) {
  const uint64_t now = At(idx).state.load(std::memory_order_acquire);
  ReleaseOutcome out;
  out.cached = true;
  // Reaped since the caller's check, after this release: the reaper gave the holds back.
  if (Inc(now) != WordInc(w)) return out;
  if (At(idx).shared.load(std::memory_order_relaxed) < 0) [[unlikely]] {
    // Some references were released by other threads: the exact path decides.
    mine->store(w, std::memory_order_release);
    return ReleaseSlow(handle);
  }
  if ((now & kForgotten) != 0) [[unlikely]]
    out.daemon_releases = Settle(idx, WordInc(w)).second;
  return out;
}

// A reference this thread does not count: from the shared count, after a check that the grant
// has one left (a snapshot, as the daemon's own check).
GrantCache::ReleaseOutcome GrantCache::ReleaseSlow(uint64_t handle) {
  ReleaseOutcome out;
  base::MutexLock l(&mu_);
  base::MutexLock r(&registry_->mu);
  Reaping reaping(epoch_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return out;
  out.cached = true;
  const uint32_t idx = it->second;
  Entry& e = At(idx);
  const uint32_t inc = Inc(e.state.load(std::memory_order_acquire));
  ReaperFenceLocked();
  if (Holders(idx, inc) <= 0) {
    out.no_reference = true;
    return out;
  }
  // Our own word if it counts this grant (the fast path saw a negative shared count).
  ThreadRefs* t = MyRefs(/*create=*/false);
  std::atomic<uint64_t>* mine = t != nullptr ? t->Find(idx) : nullptr;
  const uint64_t w = mine != nullptr ? mine->load(std::memory_order_relaxed) : 0;
  if (mine != nullptr && WordInc(w) == inc && Count(w) > 0) {
    mine->store(w - 1, std::memory_order_release);
  } else {
    e.shared.fetch_sub(1, std::memory_order_seq_cst);
  }
  if ((e.state.load(std::memory_order_acquire) & kForgotten) != 0) {
    ReaperFenceLocked();
    if (Holders(idx, inc) <= 0) out.daemon_releases = ReapLocked(idx);
  }
  return out;
}

GrantCache::Sole GrantCache::TakeSole(uint64_t handle) {
  Sole out;
  base::MutexLock l(&mu_);
  base::MutexLock r(&registry_->mu);
  Reaping reaping(epoch_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return out;
  out.cached = true;
  const uint32_t idx = it->second;
  Entry& e = At(idx);
  const uint64_t s = e.state.fetch_or(kMarked, std::memory_order_seq_cst);
  ReaperFenceLocked();
  if (Holders(idx, Inc(s)) == 1) {
    out.daemon_holds = ReapLocked(idx);
    out.sole = out.daemon_holds > 0;
  } else {
    e.state.fetch_and(~kMarked, std::memory_order_release);
  }
  return out;
}

}  // namespace regcache::api::internal
