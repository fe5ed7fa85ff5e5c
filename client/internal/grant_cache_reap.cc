// GrantCache's reapers: what takes grants out of the cache once no reference is left.
#include <utility>
#include <vector>

#include "base/log.h"
#include "client/internal/grant_cache.h"
#include "client/internal/grant_cache_words.h"

namespace regcache::api::internal {
using namespace grant_cache_words;  // NOLINT: the entry's words, spelled as in grant_cache.cc
using base::ProbeTable;
using grant_cache_detail::ThreadRefs;

int64_t GrantCache::Holders(uint32_t idx, uint32_t inc) const {
  int64_t n = 0;
  for (const ThreadRefs* t : registry_->tables) {
    if (const std::atomic<uint64_t>* w = t->Find(idx)) {
      const uint64_t v = w->load(std::memory_order_acquire);
      n += HoldWord::HoldsOf(v, inc);
    }
  }
  return n + At(idx).shared.load(std::memory_order_acquire);
}

uint32_t GrantCache::ReapLocked(uint32_t idx) {
  Entry& e = At(idx);
  const uint64_t handle = e.handle.load(std::memory_order_relaxed);
  index_.erase({e.va.load(std::memory_order_relaxed), handle});
  handles_.erase(handle);
  const bool by_va = by_va_.Erase(ProbeTable::Mix(e.va.load(std::memory_order_relaxed)), idx);
  const bool by_handle = by_handle_.Erase(ProbeTable::Mix(handle), idx);
  RC_CHECK(by_va && by_handle) << "grant cache: entry " << idx
                               << " was not in its lock-free tables";
  const uint32_t holds = e.daemon_holds;
  e.daemon_holds = 0;
  // A new incarnation: every thread's word for the old one counts for nobody from here.
  e.state.store(uint64_t{Inc(e.state.load(std::memory_order_relaxed)) + 1} << 32,
                std::memory_order_release);
  free_.push_back(idx);
  return holds;
}

uint32_t GrantCache::ForgetLocked(uint32_t idx) {
  const uint64_t s = At(idx).state.fetch_or(kForgotten, std::memory_order_seq_cst);
  if ((s & kLive) == 0) return 0;
  ReaperFenceLocked();  // every hit that will succeed, and every release, is counted below
  return Holders(idx, Inc(s)) <= 0 ? ReapLocked(idx) : 0;
}

std::pair<uint64_t, uint32_t> GrantCache::Settle(uint32_t idx, uint32_t inc) {
  base::MutexLock l(&mu_);
  base::MutexLock r(&registry_->mu);
  Reaping reaping(epoch_);
  Entry& e = At(idx);
  const uint64_t s = e.state.load(std::memory_order_acquire);
  if (Inc(s) != inc || (s & kLive) == 0 || (s & kForgotten) == 0) return {0, 0};
  ReaperFenceLocked();
  if (Holders(idx, inc) > 0) return {0, 0};
  return {e.handle.load(std::memory_order_relaxed), ReapLocked(idx)};
}

std::vector<std::pair<uint64_t, uint32_t>> GrantCache::TakeUnreferenced() {
  base::MutexLock l(&mu_);
  base::MutexLock r(&registry_->mu);
  Reaping reaping(epoch_);
  // Candidates: no reference seen without the fence (a cheap filter), then marked.
  std::vector<std::pair<uint32_t, uint64_t>> marked;  // (index, state before the mark)
  for (const auto& [handle, idx] : handles_) {
    const uint64_t s = At(idx).state.load(std::memory_order_acquire);
    if (Holders(idx, Inc(s)) <= 0) {
      marked.emplace_back(idx, At(idx).state.fetch_or(kMarked, std::memory_order_seq_cst));
    }
  }
  std::vector<std::pair<uint64_t, uint32_t>> out = std::exchange(pending_, {});
  has_pending_.store(false, std::memory_order_relaxed);
  if (marked.empty()) return out;
  ReaperFenceLocked();  // one for all of them
  for (const auto& [idx, s] : marked) {
    const uint64_t handle = At(idx).handle.load(std::memory_order_relaxed);
    if (Holders(idx, Inc(s)) > 0) {
      At(idx).state.fetch_and(~kMarked, std::memory_order_release);  // referenced after all
    } else if (uint32_t holds = ReapLocked(idx); holds > 0) {
      out.emplace_back(handle, holds);
    }
  }
  return out;
}

}  // namespace regcache::api::internal
