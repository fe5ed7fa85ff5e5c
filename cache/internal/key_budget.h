// The device-wide budget of pooled keys, shared by every tenant of a RegCache
// (docs/architecture.md, Device budget). Pools take keys from it before they create them and
// give them back when they destroy them. Its fair share is the budget over the tenants open; a
// tenant under its share that finds the budget spent presses it, and the maintenance thread then
// takes keys back from the tenants over their share (free and quarantined pool keys first, then
// unreferenced cached registrations) until the pressure is gone.
//
// Thread safety: every method may be called from any thread (atomics).
#ifndef REGCACHE_CACHE_INTERNAL_KEY_BUDGET_H_
#define REGCACHE_CACHE_INTERNAL_KEY_BUDGET_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

namespace regcache::cache {

class KeyBudget {
 public:
  explicit KeyBudget(uint64_t total) : total_(total) {}

  uint64_t total() const { return total_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t tenants() const { return tenants_.load(std::memory_order_relaxed); }
  // The budget over the tenants open (the whole budget with none or one).
  uint64_t FairShare() const { return total_ / std::max<uint64_t>(1, tenants()); }

  // Takes up to `want` keys; returns how many it could (0 when the budget is spent).
  uint64_t Take(uint64_t want);
  void Give(uint64_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }

  void TenantOpened() { tenants_.fetch_add(1, std::memory_order_relaxed); }
  void TenantClosed() { tenants_.fetch_sub(1, std::memory_order_relaxed); }

  // A tenant under its fair share was refused: keys must come back from those over it.
  void Press() { pressed_.store(true, std::memory_order_relaxed); }
  bool pressed() const { return pressed_.load(std::memory_order_relaxed); }
  void Relieve() { pressed_.store(false, std::memory_order_relaxed); }

  // "device key budget: U of T keys in use by N tenants (fair share F); this tenant holds H".
  std::string Describe(uint64_t held) const;

 private:
  const uint64_t total_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> tenants_{0};
  std::atomic<bool> pressed_{false};
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_INTERNAL_KEY_BUDGET_H_
