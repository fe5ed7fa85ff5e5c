// The device-wide budget of pooled keys, shared by every tenant of a RegCache
// (docs/architecture.md, Device budget). It counts two things: keys (entries of the device's key
// table) and the translation entries those keys hold (a pool key of capacity class C holds C
// KLM entries of the NIC's translation memory, ICM, whether or not it is mapped). Pools take
// both before they create keys and give both back when they destroy them. A tenant's fair share
// of each is its total over the tenants open; a tenant under its share that finds the budget
// spent presses it and waits (bounded), and the maintenance thread then takes keys back from
// the tenants over their share (free and quarantined pool keys first, then unreferenced cached
// registrations, and once the pressure has lasted a moment, registrations they hold: revoked)
// until the pressure is gone. While anyone waits, a tenant at or over its share is refused a
// new key outright (refused first), so that what comes back goes to those waiting.
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
  // REQUIRES: total_keys > 0, total_entries > 0.
  KeyBudget(uint64_t total_keys, uint64_t total_entries)
      : total_(total_keys), total_entries_(total_entries) {}

  uint64_t total() const { return total_; }
  uint64_t total_entries() const { return total_entries_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t used_entries() const { return used_entries_.load(std::memory_order_relaxed); }
  uint64_t tenants() const { return tenants_.load(std::memory_order_relaxed); }
  // The budgets over the tenants open (the whole budgets with none or one).
  uint64_t FairShare() const { return total_ / std::max<uint64_t>(1, tenants()); }
  uint64_t FairEntryShare() const { return total_entries_ / std::max<uint64_t>(1, tenants()); }

  // Takes up to `want` keys of `capacity` entries each; returns how many it could (0 when either
  // budget has no room for one).
  uint64_t Take(uint64_t want, uint32_t capacity);
  void Give(uint64_t n, uint32_t capacity);
  // Room for one more key of `capacity` entries.
  bool HasRoom(uint32_t capacity) const {
    return used() < total_ && used_entries() + capacity <= total_entries_;
  }

  void TenantOpened() { tenants_.fetch_add(1, std::memory_order_relaxed); }
  void TenantClosed() { tenants_.fetch_sub(1, std::memory_order_relaxed); }

  // A tenant under its fair share was refused a key of `capacity` entries: keys must come back
  // from those over their share until one of the largest capacity pressed for fits.
  // REQUIRES: capacity > 0 (0 means no pressure).
  void Press(uint32_t capacity) {
    uint32_t seen = press_capacity_.load(std::memory_order_relaxed);
    while (seen < capacity &&
           !press_capacity_.compare_exchange_weak(seen, capacity, std::memory_order_relaxed)) {
    }
  }
  bool pressed() const { return press_capacity_.load(std::memory_order_relaxed) != 0; }

  // A tenant under its fair share waits for room, from before its wait until after its retry.
  class Waiting {
   public:
    explicit Waiting(KeyBudget& b) : b_(b) { b_.waiters_.fetch_add(1, std::memory_order_relaxed); }
    ~Waiting() { b_.waiters_.fetch_sub(1, std::memory_order_relaxed); }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    KeyBudget& b_;
  };
  bool waiting() const { return waiters_.load(std::memory_order_relaxed) != 0; }
  // Whether a tenant holding `held_keys` keys with `held_entries` entries may not take one more
  // of `capacity` entries because others wait: it is at or over its fair share of either.
  bool RefusedFirst(uint64_t held_keys, uint64_t held_entries, uint32_t capacity) const {
    return waiting() && (held_keys >= FairShare() || held_entries + capacity > FairEntryShare());
  }
  // Relieves the pressure once what was pressed for fits. True if it did (or none was on); a
  // larger press that comes in meanwhile stays.
  bool RelieveIfRoom() {
    uint32_t capacity = press_capacity_.load(std::memory_order_relaxed);
    if (capacity == 0) return true;
    if (!HasRoom(capacity)) return false;
    press_capacity_.compare_exchange_strong(capacity, 0, std::memory_order_relaxed);
    return true;
  }

  // "device key budget: U of T keys and E of F translation entries in use by N tenants (fair
  // share ...); this tenant holds H keys with X entries".
  std::string Describe(uint64_t held_keys, uint64_t held_entries) const;

 private:
  const uint64_t total_;
  const uint64_t total_entries_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> used_entries_{0};
  std::atomic<uint64_t> tenants_{0};
  std::atomic<uint32_t> press_capacity_{0};  // the largest capacity pressed for; 0: none
  std::atomic<uint32_t> waiters_{0};         // tenants under their share waiting (Waiting)
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_INTERNAL_KEY_BUDGET_H_
