// The pool of pre-created free indirect keys of one tenant (one PD), in capacity classes.
//
// Keys are created free and UMR-enabled (CreateIndirectKeys) and handed out FIFO. Each hand-out
// bumps the key's 8-bit variant: Take() returns the key's current full value and the variant
// the map must give it, so the rkey a registration hands out differs from every earlier rkey
// of the same index. An invalidated key enters quarantine; its index is handed out again only
// once it has spent PoolOptions::quarantine_time there AND quarantine_count other keys entered
// quarantine after it (see options.h for why).
//
// Thread safety: none; the owning tenant serializes calls (its mutex).
#ifndef REGCACHE_CACHE_KEY_POOL_H_
#define REGCACHE_CACHE_KEY_POOL_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/internal/key_budget.h"
#include "cache/internal/key_ledger.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "hca/device.h"

namespace regcache::cache {

struct PooledKey {
  hca::Key key = 0;  // the full key as the device currently knows it (index<<8 | variant)
  int cls = 0;       // capacity class index
};

// What Take() hands out: the key as it is now, and the variant to map it with.
struct TakenKey {
  PooledKey pooled;
  uint8_t new_variant = 0;
  hca::Key mapped_key() const { return hca::MakeKey(hca::KeyIndex(pooled.key), new_variant); }
};

class KeyPool {
 public:
  // REQUIRES: options.capacity_classes non-empty, ascending, each <= device max_klm_entries;
  // `device`, `stats` and `ledger` outlive the pool. With a ledger (key_ledger.h), keys the
  // device creates continue their index's variants, and keys the pool destroys are recorded.
  // With a budget (key_budget.h), every key created is taken from it and every key destroyed
  // given back; a class fills only once used and empties again when idle (PoolOptions).
  KeyPool(hca::Device* device, hca::Pd pd, const PoolOptions& options, CacheStats* stats,
          KeyLedger* ledger = nullptr, KeyBudget* budget = nullptr);
  ~KeyPool();  // destroys free and quarantined keys (DestroyAll)
  KeyPool(const KeyPool&) = delete;
  KeyPool& operator=(const KeyPool&) = delete;

  int num_classes() const { return static_cast<int>(classes_.size()); }
  uint32_t capacity(int cls) const { return classes_[cls].capacity; }

  // The smallest class holding `entries` KLM entries. kInvalidArgument if none does.
  absl::StatusOr<int> ClassFor(uint32_t entries) const;

  // Hands out the oldest free key of `cls`; if none is free, first releases eligible
  // quarantined keys, then creates a batch on the device. kResourceExhausted when the class is
  // at max_keys_per_class or the device cannot create keys (the message says how many keys
  // wait in quarantine).
  absl::StatusOr<TakenKey> Take(int cls, absl::Time now);

  // A key whose invalidation the device confirmed (its current full key): into quarantine.
  void Quarantine(PooledKey key, absl::Time now);
  // The same for many keys at once (a batch retired together).
  void Quarantine(absl::Span<const PooledKey> keys, absl::Time now);
  // Keys of a closing tenant, refused by the device (behind shut gates) but never to be mapped
  // again: kept for TakeForTeardown, which hands them out first, counted as quarantined. A
  // compact list rather than quarantine's timed entries: a close may bring 100k of them.
  void Doom(absl::Span<const PooledKey> keys);
  // Room for `n` more doomed keys, so a close's Doom calls do not grow the list step by step.
  void ReserveDoomed(size_t n) { doomed_.reserve(doomed_.size() + n); }

  // A key that was destroyed on the device (recovery): forgotten.
  void Forget(PooledKey key);

  // Releases eligible quarantined keys, then tops up every class below the low watermark to
  // the high watermark. Returns the first device error (the pool stays usable).
  absl::Status Maintain(absl::Time now);

  // Maintain in three steps, so that the device work runs without the tenant's lock (a verbs
  // device allocates each window with a system call): PlanRefill releases eligible quarantined
  // keys and says how many keys each class below its low watermark needs, reserving them against
  // max_keys_per_class; the caller creates them on the device (CreateIndirectKeys) unlocked;
  // AddCreated puts what was made into the free list and gives back the rest of the reservation.
  struct Refill {
    int cls = 0;
    uint32_t capacity = 0;
    uint32_t count = 0;
  };
  // `at_limit` (if given) receives kResourceExhausted when a class below its low watermark is
  // at max_keys_per_class.
  std::vector<Refill> PlanRefill(absl::Time now, absl::Status* at_limit = nullptr);
  void AddCreated(const Refill& refill, const std::vector<hca::Key>& keys);

  // Destroys every free and quarantined key. Keys handed out and not returned stay the
  // caller's. Returns the first error.
  absl::Status DestroyAll();

  // Takes out of the pool what it should give back to the device: the free keys of classes
  // idle for PoolOptions::idle_release, and, while the pool holds more than `keep` keys or
  // `keep_entries` translation entries, free keys (largest classes first) then quarantined
  // keys. The caller destroys them (DestroyKeys), without the tenant's lock.
  std::vector<PooledKey> Shrink(absl::Time now, uint64_t keep, uint64_t keep_entries = UINT64_MAX);
  // Destroys keys Shrink or TakeForTeardown took out (ledger, device, budget); returns the first
  // failure. Touches only the classes' capacities, which never change: callable without the
  // tenant's lock.
  absl::Status DestroyKeys(const std::vector<PooledKey>& keys);
  // For a closed tenant: takes out up to `max` keys, free ones first, then quarantined ones
  // whatever their time there (no key of the PD is mapped again). The caller destroys them.
  std::vector<PooledKey> TakeForTeardown(size_t max);
  // The last key creation was refused by the device budget (not by max_keys_per_class).
  bool budget_refused() const { return budget_refused_; }

  uint64_t free_keys() const;
  // Keys reserved for creation (a refill or an on-demand batch) not yet added to the free lists.
  uint64_t refilling() const { return refilling_; }
  // Nothing for Maintain to do soon: every class at or above its low watermark. Quarantined
  // keys do not count: the last few of a burst wait for later invalidations (quarantine_count)
  // however long the thread keeps polling, and Take releases eligible ones itself when a class
  // runs dry; a slower maintenance pass only keeps them in quarantine longer, which is safe.
  bool Idle() const;
  uint64_t quarantined_keys() const { return quarantine_.size() + doomed_.size(); }
  uint64_t outstanding_keys() const;  // handed out, not yet back (mapping/live/draining)
  uint64_t total_keys() const;        // free + quarantined + outstanding
  uint64_t total_entries() const;     // the translation entries of total_keys (their classes')
  // The entries of keys neither free nor quarantined (mapped or being mapped).
  uint64_t outstanding_entries() const;

 private:
  struct Class {
    uint32_t capacity = 0;
    std::deque<hca::Key> free;  // FIFO
    uint64_t total = 0;         // keys of this class that exist on the device
    bool used = false;          // taken from since it was last emptied for idleness
    absl::Time last_take;
  };
  struct Quarantined {
    PooledKey key;
    absl::Time entered;
    uint64_t seq = 0;
  };

  absl::Status Create(int cls, uint32_t count);
  // Counts up to `want` more keys of `c` against max_keys_per_class; returns how many.
  uint32_t Reserve(Class& c, uint64_t want);
  absl::Status AtLimit(int cls) const;  // kResourceExhausted naming the class and its limit
  void ReleaseEligible(absl::Time now);

  hca::Device* const device_;
  const hca::Pd pd_;
  const PoolOptions options_;
  CacheStats* const stats_;
  KeyLedger* const ledger_;  // may be null
  KeyBudget* const budget_;  // may be null
  bool budget_refused_ = false;
  bool refused_first_ = false;
  uint64_t refilling_ = 0;  // reserved by PlanRefill or Create, until AddCreated  // ...because
                            // others under their share wait (RefusedFirst)
  std::vector<Class> classes_;
  std::deque<Quarantined> quarantine_;  // FIFO by entry
  uint64_t quarantine_seq_ = 0;         // keys that ever entered quarantine
  std::vector<PooledKey> doomed_;       // Doom's
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_KEY_POOL_H_
