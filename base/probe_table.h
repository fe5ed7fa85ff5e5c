// ProbeTable — a hash table of 32-bit values that readers probe without a lock.
//
// What it is for: an index whose readers are hot paths (a cache hit) and whose writers are rare
// and already serialised by a mutex of the caller's. It maps a 64-bit hash to values (an index
// into the caller's own array of records); it does not store keys. A reader therefore checks
// every value it is offered against the record it names, and the record's own state decides
// whether the reader may use it (docs/hold-protocol.md: the hold protocol both users run over
// what they find here).
//
// Layout: open addressing with linear probing, one 64-bit bucket per entry,
// (top 32 bits of the hash << 32) | (value + 1); 0 is an empty bucket. The top bits are both the
// home bucket and a tag, so a reader touches a record only when its tag matches. Load factor at
// most 1/2. The same value may be present under several hashes, and several values under one.
//
// Concurrency:
//   - Readers (any thread, no lock): Find. A reader may miss an entry that a writer is moving
//     (a backward-shift delete copies a later entry into the hole before it clears the old
//     place, so a probe that passed the new place already can miss it) or that is being
//     inserted; it never gets a value that was not inserted under a hash with that tag. Callers
//     treat a miss as "ask the slow path".
//   - Writers (Insert, Erase, size) must be serialised by the caller.
//   - Growth copies every bucket into a table twice the size and publishes it with one release
//     store. Grown-out tables stay allocated until the ProbeTable is destroyed, because a reader
//     may still be probing one; growth doubles, so together they are smaller than the current.
//
// Thread safety: Find from any thread at any time; everything else under the caller's lock.
#ifndef REGCACHE_BASE_PROBE_TABLE_H_
#define REGCACHE_BASE_PROBE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace regcache::base {

class ProbeTable {
 public:
  static constexpr uint64_t kUnbounded = ~uint64_t{0};

  // REQUIRES: initial_capacity is a power of two, at least 2.
  explicit ProbeTable(uint64_t initial_capacity = 64);
  ProbeTable(const ProbeTable&) = delete;
  ProbeTable& operator=(const ProbeTable&) = delete;

  // A well-mixed 64-bit hash of an integer key, for callers without one (Fibonacci hashing
  // with the high half folded down, so both halves depend on every key bit).
  static uint64_t Mix(uint64_t x) {
    const uint64_t m = x * 0x9e3779b97f4a7c15ull;
    return m ^ (m >> 31);
  }

  // Calls visit(value) for each entry whose tag matches `hash`, in probe order, until it returns
  // true or `max_probe` buckets were looked at; returns whether a visit returned true.
  // Lock-free; may miss an entry being moved (see the top).
  template <typename Visit>
  bool Find(uint64_t hash, Visit&& visit, uint64_t max_probe = kUnbounded) const {
    const Table* t = table_.load(std::memory_order_acquire);
    const uint32_t tag = static_cast<uint32_t>(hash >> 32);
    uint64_t i = tag & t->mask;
    for (uint64_t n = 0; n <= t->mask && n < max_probe; ++n, i = (i + 1) & t->mask) {
      const uint64_t b = t->buckets[i].load(std::memory_order_acquire);
      if (b == 0) return false;
      if (static_cast<uint32_t>(b >> 32) == tag && visit(static_cast<uint32_t>(b) - 1)) {
        return true;
      }
    }
    return false;
  }

  // Writers, serialised by the caller. REQUIRES for Insert: value < UINT32_MAX.
  void Insert(uint64_t hash, uint32_t value);
  // Removes one entry of `value` under `hash`; false if there is none.
  bool Erase(uint64_t hash, uint32_t value);
  // Removes every entry: one sequential pass over the buckets, instead of a probe and a shift
  // per entry. A reader racing it misses entries not yet cleared or finds them, as with Erase.
  void Clear();
  uint64_t size() const { return size_; }

 private:
  struct Table {
    uint64_t mask = 0;
    std::unique_ptr<std::atomic<uint64_t>[]> buckets;
  };
  static std::unique_ptr<Table> NewTable(uint64_t capacity);
  static void Place(Table& t, uint64_t bucket);

  std::atomic<Table*> table_{nullptr};
  std::vector<std::unique_ptr<Table>> tables_;  // the current one last; the rest grown out
  uint64_t size_ = 0;
};

}  // namespace regcache::base
#endif  // REGCACHE_BASE_PROBE_TABLE_H_
