#include "api/internal/grant_cache.h"

#include <memory>

#include "service/shm_protocol.h"

namespace regcache::api::internal {
namespace {

namespace shm = ::regcache::service::shm;

constexpr uint64_t kDead = uint64_t{1} << 31;
constexpr uint64_t kRefMask = kDead - 1;

uint32_t Incarnation(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
uint64_t Refs(uint64_t word) { return word & kRefMask; }

std::atomic<uint64_t> next_cache_id{1};

// One thread's recently used grants, shared by every GrantCache of the process (a slot names
// its cache by id; ids are never reused, so a slot of a destroyed cache never matches).
struct ThreadSlot {
  uint64_t cache_id = 0;
  uint64_t start = 0;
  uint64_t end = 0;
  void* entry = nullptr;
  uint32_t incarnation = 0;
  uint32_t slot = 0;
  uint32_t generation = 0;
  uint32_t access = 0;
  uint64_t handle = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct ThreadTable {
  ThreadSlot slots[GrantCache::kThreadSlots];
};

// Allocated on a thread's first lookup: a large array in static TLS would not suit a library
// loaded with dlopen (the Python module loads the C ABI that way).
ThreadTable& Table() {
  thread_local std::unique_ptr<ThreadTable> table = std::make_unique<ThreadTable>();
  return *table;
}

size_t TableIndex(uint64_t addr) {
  return ((addr >> 12) * 0x9e3779b97f4a7c15ull) >> (64 - 12);  // 4096 slots
}
static_assert(GrantCache::kThreadSlots == 4096);

// Rights the daemon would accept (cache::NormalizeAccess): known bits, and remote write or
// atomic only with local write. Anything else goes to the daemon, which says what is wrong.
bool ValidAccess(uint32_t access) {
  constexpr uint32_t kKnown = kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic;
  if ((access & ~kKnown) != 0) return false;
  return (access & (kRemoteWrite | kRemoteAtomic)) == 0 || (access & kLocalWrite) != 0;
}

}  // namespace

GrantCache::GrantCache(const GrantStateView& state)
    : state_(state), id_(next_cache_id.fetch_add(1, std::memory_order_relaxed)) {}

GrantCache::~GrantCache() = default;

bool GrantCache::Current(const Entry& e) const {
  if (state_.session_state != nullptr &&
      state_.session_state->load(std::memory_order_acquire) != shm::kSessionOpen) {
    return false;
  }
  return state_.slots[e.slot].load(std::memory_order_acquire) == shm::SlotWord(e.generation, false);
}

bool GrantCache::TryRef(Entry& e, uint32_t inc) {
  uint64_t w = e.word.load(std::memory_order_acquire);
  for (int tries = 0; tries < 4; ++tries) {
    if (Incarnation(w) != inc || (w & kDead) != 0) return false;
    if (e.word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

std::optional<Key> GrantCache::Acquire(uint64_t addr, uint64_t length, uint32_t access) {
  const uint64_t end = addr + length;
  if (length == 0 || end < addr || !ValidAccess(access)) return std::nullopt;
  ThreadSlot& t = Table().slots[TableIndex(addr)];
  if (t.cache_id == id_ && addr >= t.start && end <= t.end && (access & ~t.access) == 0) {
    Entry& e = *static_cast<Entry*>(t.entry);
    if (TryRef(e, t.incarnation)) {
      // The state word is read after the reference is taken: the grant was current at a
      // moment we held it.
      bool open = state_.session_state == nullptr ||
                  state_.session_state->load(std::memory_order_acquire) == shm::kSessionOpen;
      if (open && state_.slots[t.slot].load(std::memory_order_acquire) ==
                      shm::SlotWord(t.generation, false)) {
        return Key{t.handle, t.lkey, t.rkey, t.start, t.end - t.start, t.access, true};
      }
      e.stale.store(true, std::memory_order_release);
      e.word.fetch_sub(1, std::memory_order_acq_rel);
      t.cache_id = 0;
      return std::nullopt;
    }
    t.cache_id = 0;
  }
  base::ReaderMutexLock lock(&mu_);
  Entry* e = FindCovering(addr, end, access);
  if (e == nullptr) return std::nullopt;
  uint32_t inc = Incarnation(e->word.load(std::memory_order_acquire));
  if (!TryRef(*e, inc)) return std::nullopt;
  if (!Current(*e)) {
    e->stale.store(true, std::memory_order_release);
    e->word.fetch_sub(1, std::memory_order_acq_rel);
    return std::nullopt;
  }
  Remember(*e, inc, addr);
  Key k = e->key;
  k.hit = true;
  return k;
}

GrantCache::Entry* GrantCache::FindCovering(uint64_t addr, uint64_t end, uint32_t access) {
  auto it = index_.upper_bound({addr, ~uint64_t{0}});
  for (int n = 0; n < kScanLimit && it != index_.begin(); ++n) {
    --it;
    Entry* e = it->second;
    if (e->stale.load(std::memory_order_acquire)) continue;
    if (end <= e->key.va + e->key.length && (access & ~e->key.access) == 0) return e;
  }
  return nullptr;
}

void GrantCache::Remember(const Entry& e, uint32_t inc, uint64_t addr) {
  ThreadSlot& t = Table().slots[TableIndex(addr)];
  t.cache_id = id_;
  t.start = e.key.va;
  t.end = e.key.va + e.key.length;
  t.entry = const_cast<Entry*>(&e);
  t.incarnation = inc;
  t.slot = e.slot;
  t.generation = e.generation;
  t.access = e.key.access;
  t.handle = e.key.handle;
  t.lkey = e.key.lkey;
  t.rkey = e.key.rkey;
}

bool GrantCache::Insert(const Key& key, uint32_t slot, uint32_t generation) {
  if (slot == shm::kNoSlot || slot >= state_.slot_count || key.length == 0 ||
      key.va + key.length < key.va) {
    return false;
  }
  base::MutexLock lock(&mu_);
  Shard& shard = ShardOf(key.handle);
  base::MutexLock shard_lock(&shard.mu);
  if (auto it = shard.by_handle.find(key.handle); it != shard.by_handle.end()) {
    Entry* e = it->second;
    uint32_t inc = Incarnation(e->word.load(std::memory_order_acquire));
    if (e->slot != slot || e->generation != generation || !TryRef(*e, inc)) return false;
    ++e->daemon_holds;
    return true;
  }
  Entry* e;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else {
    e = &pool_.emplace_back();
  }
  e->key = key;
  e->key.hit = false;
  e->slot = slot;
  e->generation = generation;
  e->daemon_holds = 1;
  e->stale.store(false, std::memory_order_relaxed);
  uint32_t inc = Incarnation(e->word.load(std::memory_order_relaxed));
  if (!Current(*e)) {
    free_.push_back(e);
    return false;
  }
  e->word.store((uint64_t{inc} << 32) | 1, std::memory_order_release);
  index_.emplace(std::make_pair(key.va, key.handle), e);
  shard.by_handle.emplace(key.handle, e);
  return true;
}

GrantCache::ReleaseOutcome GrantCache::Release(uint64_t handle) {
  ReleaseOutcome out;
  Entry* e = nullptr;
  uint32_t inc = 0;
  {
    Shard& shard = ShardOf(handle);
    base::MutexLock lock(&shard.mu);
    auto it = shard.by_handle.find(handle);
    if (it == shard.by_handle.end()) return out;
    out.cached = true;
    e = it->second;
    uint64_t w = e->word.load(std::memory_order_acquire);
    do {
      if (Refs(w) == 0) {
        out.no_reference = true;
        return out;
      }
    } while (!e->word.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel));
    if (Refs(w) != 1 || !e->stale.load(std::memory_order_acquire)) return out;
    inc = Incarnation(w);
  }
  out.daemon_releases = Reap(e, inc);
  return out;
}

uint32_t GrantCache::Reap(Entry* e, uint32_t inc, uint64_t refs) {
  base::MutexLock lock(&mu_);
  Shard& shard = ShardOf(e->key.handle);
  base::MutexLock shard_lock(&shard.mu);
  uint64_t expect = (uint64_t{inc} << 32) | refs;  // alive, exactly `refs` references
  if (!e->word.compare_exchange_strong(expect, expect | kDead, std::memory_order_acq_rel)) {
    return 0;
  }
  index_.erase({e->key.va, e->key.handle});
  shard.by_handle.erase(e->key.handle);
  uint32_t holds = e->daemon_holds;
  e->daemon_holds = 0;
  e->word.store(uint64_t{inc + 1} << 32, std::memory_order_release);
  free_.push_back(e);
  return holds;
}

std::vector<std::pair<uint64_t, uint32_t>> GrantCache::TakeUnreferenced() {
  struct Candidate {
    Entry* e;
    uint32_t inc;
    uint64_t handle;  // read under the lock: the entry may be reused once it is dropped
  };
  std::vector<Candidate> candidates;
  {
    base::ReaderMutexLock lock(&mu_);
    for (const auto& [k, e] : index_) {
      uint64_t w = e->word.load(std::memory_order_acquire);
      if (Refs(w) == 0) candidates.push_back({e, Incarnation(w), k.second});
    }
  }
  std::vector<std::pair<uint64_t, uint32_t>> out;
  for (const Candidate& c : candidates) {
    if (uint32_t holds = Reap(c.e, c.inc); holds > 0) out.emplace_back(c.handle, holds);
  }
  return out;
}

uint32_t GrantCache::Forget(uint64_t handle) {
  Entry* e = nullptr;
  uint64_t w = 0;
  {
    Shard& shard = ShardOf(handle);
    base::MutexLock lock(&shard.mu);
    auto it = shard.by_handle.find(handle);
    if (it == shard.by_handle.end()) return 0;
    e = it->second;
    e->stale.store(true, std::memory_order_release);
    w = e->word.load(std::memory_order_acquire);
  }
  return Refs(w) == 0 ? Reap(e, Incarnation(w)) : 0;
}

GrantCache::Sole GrantCache::TakeSole(uint64_t handle) {
  Sole out;
  Entry* e = nullptr;
  uint64_t w = 0;
  {
    Shard& shard = ShardOf(handle);
    base::MutexLock lock(&shard.mu);
    auto it = shard.by_handle.find(handle);
    if (it == shard.by_handle.end()) return out;
    out.cached = true;
    e = it->second;
    w = e->word.load(std::memory_order_acquire);
  }
  if (Refs(w) != 1) return out;
  out.daemon_holds = Reap(e, Incarnation(w), 1);
  out.sole = out.daemon_holds > 0;
  return out;
}

std::vector<uint64_t> GrantCache::RevokedHandles() {
  std::vector<uint64_t> out;
  base::ReaderMutexLock lock(&mu_);
  for (const auto& [k, e] : index_) {
    if (!Current(*e)) out.push_back(k.second);
  }
  return out;
}

size_t GrantCache::size() const {
  base::ReaderMutexLock lock(&mu_);
  return index_.size();
}

}  // namespace regcache::api::internal
