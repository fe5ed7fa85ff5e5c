// The registration index of one tenant: the registration record, the slab that holds the
// records at stable addresses, the exact-range hash and the per-thread hold tables.
// Internal to cache/: callers use cache/reg_cache.h.
//
// Concurrency. Hits and releases take no lock and, in the common case, write no shared line:
//   - Records are type-stable: the slab never frees one while the tenant is open, it only
//     recycles it, and every publication gives it a new generation. A reader holding a stale
//     pointer reads atomics of a live record and sees the generation change.
//   - The hash index (base/probe_table.h) is read without a lock; writers hold the tenant's
//     index mutex. A reader can miss an entry for a moment (the caller falls back to the locked
//     path), but never takes a wrong one: it accepts a record only after checking its range and
//     its state word.
//   - Holders are counted in the state word (shared) and in per-thread hold tables; how a hit,
//     a release and a stop use them without losing a hold is the hold protocol
//     (cache/internal/holds.h; its account: docs/hold-protocol.md).
#ifndef REGCACHE_CACHE_INTERNAL_INDEX_H_
#define REGCACHE_CACHE_INTERNAL_INDEX_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "base/hold_protocol.h"
#include "base/mutex.h"
#include "base/thread_index.h"
#include "cache/backing_set.h"
#include "cache/internal/key_pool.h"
#include "cache/lifecycle.h"
#include "cache/types.h"

namespace regcache::cache::internal {

// Handle layout: tenant slot (16 bits) | generation (24) | record slot (24). A handle names its
// record directly (no hash lookup on release); the generation, new on every publication of
// the record, makes a stale handle miss instead of aliasing (until the same record has been
// published 2^24 more times: the free list is FIFO to make that as slow as it can be).
inline constexpr int kSlotBits = 24;
inline constexpr int kGenBits = 24;
inline constexpr uint32_t kSlotMask = (1u << kSlotBits) - 1;
inline constexpr uint32_t kGenMask = (1u << kGenBits) - 1;

inline uint32_t HandleTenantSlot(Handle h) {
  return static_cast<uint32_t>(h >> (kGenBits + kSlotBits));
}
inline uint32_t HandleGen(Handle h) { return static_cast<uint32_t>(h >> kSlotBits) & kGenMask; }
inline uint32_t HandleSlot(Handle h) { return static_cast<uint32_t>(h) & kSlotMask; }
inline Handle MakeHandle(uint32_t tenant_slot, uint32_t gen, uint32_t slot) {
  return (uint64_t{tenant_slot} << (kGenBits + kSlotBits)) |
         (uint64_t{gen & kGenMask} << kSlotBits) | slot;
}

// The state word of a record.
namespace state {
inline constexpr uint64_t kShared = 0xffffffffull;   // shared holder count: int32, low bits
inline constexpr uint64_t kPublished = 1ull << 32;   // its handle resolves
inline constexpr uint64_t kDead = 1ull << 33;        // stop-reference began: no new holders
inline constexpr uint64_t kRevoked = 1ull << 34;     // went dead while held (a tombstone)
inline constexpr uint64_t kDone = 1ull << 35;        // the lifecycle finished with it
inline constexpr uint64_t kReferenced = 1ull << 36;  // hit since the CLOCK hand last passed
inline constexpr uint64_t kWindow = 1ull << 37;      // a window (never cached, never indexed)
// The rewrite epoch (2 bits): bumped each time a registration is re-registered in place
// (cache/internal/rereg.h), so a hit that read its old range before the rewrite fails its
// recheck although the handle (generation) stays the same.
inline constexpr uint64_t kEpoch = 3ull << 38;
inline constexpr uint64_t kEpochOne = 1ull << 38;
inline constexpr int kGenShift = 40;

// The shared part of the holder count. Signed: a hold taken in one thread's table and released
// by another thread is +1 there and -1 here.
inline int32_t SharedHolders(uint64_t s) { return static_cast<int32_t>(s & kShared); }
inline uint64_t WithShared(uint64_t s, int32_t n) {
  return (s & ~kShared) | static_cast<uint32_t>(n);
}
inline uint32_t Gen(uint64_t s) { return static_cast<uint32_t>(s >> kGenShift) & kGenMask; }
// Published with generation `gen`: the publication a handle names is still there.
inline bool PublishedAs(uint64_t s, uint32_t gen) { return (s & kPublished) != 0 && Gen(s) == gen; }
// Published and not dead: a hit may hold it.
inline bool Live(uint64_t s) { return (s & (kPublished | kDead)) == kPublished; }
// Still the same publication, live and not rewritten since: what a hit's recheck requires.
inline bool SameLive(uint64_t before, uint64_t now) {
  constexpr uint64_t kIdentity = ~uint64_t{0} << kGenShift | kPublished | kDead | kWindow | kEpoch;
  return Live(now) && ((before ^ now) & kIdentity) == 0;
}
}  // namespace state

// The half of a record that hits and releases touch. They read it without a lock, so its
// fields are atomics (a stale reader may look at a recycled record). 32 bytes, packed densely
// in the slab apart from the cold half: at 100k registrations the hot halves fit in L2.
struct alignas(32) HotRecord {
  std::atomic<uint64_t> state{0};
  std::atomic<uint64_t> va{0};
  std::atomic<uint64_t> length{0};
  std::atomic<hca::Key> key{0};  // the mapped key (lkey = rkey)
  std::atomic<hca::AccessFlags> access{0};
};
static_assert(sizeof(HotRecord) == 32);

// One registration or window: its hot half, and the rest, guarded by the tenant mutex or fixed
// while the record is published.
struct Record {
  HotRecord* hot = nullptr;                    // fixed: its hot half
  uint32_t slot = 0;                           // fixed: position in the slab
  uint32_t klm_entries = 0;                    // fixed while published
  Handle handle = 0;                           // fixed while published
  PooledKey pooled;                            // fixed while published: the key as the pool has it
  Record* parent = nullptr;                    // fixed while published (windows)
  KeyLifecycle life;                           // tenant mutex
  std::vector<Record*> windows;                // tenant mutex
  absl::InlinedVector<BackingId, 1> backings;  // tenant mutex

  bool is_window() const {
    return (hot->state.load(std::memory_order_relaxed) & state::kWindow) != 0;
  }
};

// One thread's holds on one tenant's registrations: entries direct-mapped by record slot, each a
// base::HoldWord tagged (slot 24 | generation 24). Only the thread that owns the table (by its
// base::ThreadIndex) writes it, with plain stores; stop-reference and Settle read it. An entry
// with count 0 is free; an entry taken by another registration sends the hit to the shared
// count. Tables live as long as their tenant, and pass with the thread index to the next
// thread that gets it (counts stay meaningful across owners).
struct alignas(64) HoldTable {
  static constexpr uint32_t kEntries = 256;  // 2 KiB per thread per tenant
  static constexpr uint64_t kCount = base::HoldWord::kMaxCount;
  static_assert(kSlotBits + kGenBits == base::HoldWord::kTagBits);
  static uint64_t KeyOf(uint32_t slot, uint32_t gen) {
    return base::HoldWord::Make((uint64_t{slot} << kGenBits) | (gen & kGenMask), 0);
  }
  static uint64_t KeyOfEntry(uint64_t e) { return e & ~kCount; }
  static uint32_t CountOf(uint64_t e) { return base::HoldWord::Count(e); }
  static uint32_t SlotOf(uint64_t e) {
    return static_cast<uint32_t>(base::HoldWord::Tag(e) >> kGenBits);
  }
  static uint32_t GenOf(uint64_t e) {
    return static_cast<uint32_t>(base::HoldWord::Tag(e)) & kGenMask;
  }

  std::atomic<uint64_t>& At(uint32_t slot) { return entries[slot & (kEntries - 1)]; }
  const std::atomic<uint64_t>& At(uint32_t slot) const { return entries[slot & (kEntries - 1)]; }

  std::atomic<uint64_t> entries[kEntries] = {};
};

// Every thread's hold table for one tenant, indexed by base::ThreadIndex.
class HoldTables {
 public:
  HoldTables() : tables_(new std::atomic<HoldTable*>[base::kMaxThreadIndices]) {
    for (uint32_t i = 0; i < base::kMaxThreadIndices; ++i) tables_[i].store(nullptr);
  }
  HoldTables(const HoldTables&) = delete;
  HoldTables& operator=(const HoldTables&) = delete;
  ~HoldTables() {
    for (uint32_t i = 0; i < base::kMaxThreadIndices; ++i) delete tables_[i].load();
  }

  // The calling thread's table, made on first use; nullptr if the thread has no index.
  HoldTable* Mine() {
    const uint32_t i = base::ThreadIndex();
    if (i == base::kNoThreadIndex) [[unlikely]]
      return nullptr;
    HoldTable* h = tables_[i].load(std::memory_order_relaxed);  // this thread wrote it, if any
    if (h == nullptr) [[unlikely]] {
      h = new HoldTable;
      tables_[i].store(h, std::memory_order_release);
    }
    return h;
  }
  // The calling thread's table if it has one (release needs no new one).
  HoldTable* MineIfAny() const {
    const uint32_t i = base::ThreadIndex();
    return i == base::kNoThreadIndex ? nullptr : tables_[i].load(std::memory_order_relaxed);
  }
  // Holds of (slot, gen) in all tables. Exact only when no hit can succeed and the caller
  // fenced after making it so (see the protocol at the top); otherwise a snapshot.
  int64_t Count(uint32_t slot, uint32_t gen) const {
    const uint64_t key = HoldTable::KeyOf(slot, gen);
    const uint32_t limit = base::ThreadIndexLimit();
    int64_t n = 0;
    for (uint32_t i = 0; i < limit; ++i) {
      const HoldTable* h = tables_[i].load(std::memory_order_acquire);
      if (h == nullptr) continue;
      const uint64_t e = h->At(slot).load(std::memory_order_acquire);
      if (HoldTable::KeyOfEntry(e) == key) n += HoldTable::CountOf(e);
    }
    return n;
  }
  // Calls f(slot, gen, count) for every entry that counts holds, in every table: one pass for
  // callers that need the holders of many records (a snapshot, like Count).
  template <typename F>
  void ForEachHold(F&& f) const {
    const uint32_t limit = base::ThreadIndexLimit();
    for (uint32_t i = 0; i < limit; ++i) {
      const HoldTable* h = tables_[i].load(std::memory_order_acquire);
      if (h == nullptr) continue;
      for (const auto& entry : h->entries) {
        const uint64_t e = entry.load(std::memory_order_acquire);
        if (HoldTable::CountOf(e) != 0) {
          f(HoldTable::SlotOf(e), HoldTable::GenOf(e), HoldTable::CountOf(e));
        }
      }
    }
  }

 private:
  std::unique_ptr<std::atomic<HoldTable*>[]> tables_;
};

// Records at stable addresses, in segments that double in size (64, 128, ... records), so a
// slot finds its record with two loads and growing never moves one. Hot and cold halves live
// in parallel segments. Readers: At(), Hot(). Writers (the tenant's index mutex): Allocate()
// and Free().
class Slab {
 public:
  static constexpr uint32_t kMaxSlots = 1u << kSlotBits;

  Slab() = default;
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;
  ~Slab();

  // The hot half of the record at `slot`, or nullptr if the slab never grew that far.
  // Lock-free.
  HotRecord* Hot(uint32_t slot) const {
    const auto [seg, offset] = Locate(slot);
    HotRecord* base = hot_[seg].load(std::memory_order_acquire);
    return base != nullptr ? base + offset : nullptr;
  }
  // The record at `slot`, or nullptr. Lock-free.
  Record* At(uint32_t slot) const {
    const auto [seg, offset] = Locate(slot);
    Record* base = cold_[seg].load(std::memory_order_acquire);
    return base != nullptr ? base + offset : nullptr;
  }

  // A record to fill in: the oldest freed one, else a new one. Its state keeps its old
  // generation and has no flags. nullptr when all 2^24 slots are in use.
  Record* Allocate();
  // Back to the free list (FIFO). REQUIRES: unpublished, nobody will use it again.
  void Free(Record* r);

  // Slots handed out so far (the high-water mark); At() is non-null below it.
  uint32_t size() const { return next_; }

 private:
  static constexpr int kBaseBits = 6;  // segment 0 holds 64 records
  static constexpr int kSegments = kSlotBits - kBaseBits + 1;
  struct Position {
    int seg;
    uint32_t offset;
  };
  static Position Locate(uint32_t slot) {
    const uint32_t q = (slot >> kBaseBits) + 1;
    const int seg = 31 - __builtin_clz(q);
    return {seg, slot - (((1u << seg) - 1) << kBaseBits)};
  }

  // Published cold before hot: a reader that finds a hot half finds its record.
  std::atomic<HotRecord*> hot_[kSegments] = {};
  std::atomic<Record*> cold_[kSegments] = {};
  uint32_t next_ = 0;
  std::deque<uint32_t> free_;  // FIFO
};

// The exact-range index (Tenant::index, a base::ProbeTable) maps this hash of (va, length) to
// the slots of the records of that range, any number of them (different rights).
inline uint64_t RangeHash(uint64_t va, uint64_t length) { return absl::HashOf(va, length); }

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_INDEX_H_
