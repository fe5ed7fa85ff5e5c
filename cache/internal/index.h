// The registration index of one tenant shard: the registration record, the shard (exact-range
// set, handle table, LRU), and the operations on them that the cache's hit path and lifecycle
// share. Internal to cache/: callers use cache/reg_cache.h.
//
// Thread safety: every function taking a Shard requires that shard's lock (annotated).
#ifndef REGCACHE_CACHE_INTERNAL_INDEX_H_
#define REGCACHE_CACHE_INTERNAL_INDEX_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "base/spinlock.h"
#include "cache/backing_set.h"
#include "cache/key_pool.h"
#include "cache/lifecycle.h"
#include "cache/reg_cache.h"

namespace cache::internal {

// Handle layout: tenant slot (16 bits) | generation (20) | slot in its shard (20) | shard (8).
// A handle names a slot of a shard's table directly (no hash lookup on release); the slot's
// generation, bumped on every reuse, makes a stale handle miss instead of aliasing.
inline constexpr int kShardBits = 8;
inline constexpr int kSlotBits = 20;
inline constexpr int kGenBits = 20;

inline uint32_t HandleTenantSlot(Handle h) {
  return static_cast<uint32_t>(h >> (kGenBits + kSlotBits + kShardBits));
}
inline uint32_t HandleShard(Handle h) {
  return static_cast<uint32_t>(h & ((1u << kShardBits) - 1));
}
inline uint32_t HandleSlot(Handle h) {
  return static_cast<uint32_t>((h >> kShardBits) & ((1u << kSlotBits) - 1));
}
inline Handle MakeHandle(uint32_t tenant_slot, uint32_t gen, uint32_t slot, uint32_t shard) {
  return (uint64_t{tenant_slot} << (kGenBits + kSlotBits + kShardBits)) |
         (uint64_t{gen & ((1u << kGenBits) - 1)} << (kSlotBits + kShardBits)) |
         (uint64_t{slot} << kShardBits) | shard;
}

struct RangeKey {
  uint64_t va;
  uint64_t length;
};

struct Registration;

// One registration or window. Fields are guarded as marked; immutable ones are set before the
// registration is published and never change. The first 48 bytes are everything a hit and a
// release touch (one or two cache lines; aligning the object to a line would cost ~35 bytes per
// registration in allocator padding, against the 256-byte budget), and the index's table holds
// only pointers, small enough to stay in L2.
struct Registration {
  // --- hot ---
  uint64_t va = 0;                                 // immutable
  uint64_t length = 0;                             // immutable
  Handle handle = 0;                               // immutable once published (shard lock)
  struct Registration* next_same_range = nullptr;  // shard lock
  hca::Key key = 0;                                // immutable: the mapped key (lkey = rkey)
  hca::AccessFlags access = 0;                     // immutable
  uint32_t holders = 0;                            // shard lock
  bool indexed = false;     // shard lock: in by_range, Register may return it
  bool dying = false;       // shard lock: stop-reference done, lifecycle running
  bool revoked = false;     // shard lock: dying while held; a tombstone until last release
  bool referenced = false;  // shard lock: released since queued on the LRU (second chance)

  // --- cold ---
  bool in_lru = false;                    // shard lock
  bool lifecycle_done = false;            // shard lock: the lifecycle finished with it
  bool is_window = false;                 // immutable
  uint32_t klm_entries = 0;               // immutable
  PooledKey pooled;                       // immutable: the key as the pool tracks it
  uint64_t queued_at = 0;                 // shard lock: LRU queue order (cache-wide ticket)
  Registration* lru_prev = nullptr;       // shard lock
  Registration* lru_next = nullptr;       // shard lock
  struct Registration* parent = nullptr;  // immutable (windows)

  // Guarded by the tenant mutex.
  KeyLifecycle life;
  std::vector<Registration*> windows;
  absl::InlinedVector<BackingId, 1> backings;
};

// The exact-range index holds only pointers (8 bytes a slot: 100k registrations need under
// 1 MiB of table), hashed and compared by the registration's own range; lookups go by RangeKey.
struct RangeHash {
  using is_transparent = void;
  size_t operator()(const RangeKey& k) const { return absl::HashOf(k.va, k.length); }
  size_t operator()(const Registration* r) const;
};
struct RangeEq {
  using is_transparent = void;
  bool operator()(const Registration* a, const Registration* b) const;
  bool operator()(const Registration* a, const RangeKey& k) const;
  bool operator()(const RangeKey& k, const Registration* a) const { return (*this)(a, k); }
};

// One shard of a tenant's index. The hit path takes exactly one shard lock.
//
// LRU: CLOCK with second chance. A registration joins its shard's list when its holder count
// first drops to zero and stays there while it is hit and released again, which only sets its
// `referenced` bit: the hit path touches no list neighbour and no shared counter. Eviction
// takes, over all shards, the oldest-queued entry that is unheld and unreferenced; on the way
// it drops held entries from the list (their release queues them again) and gives referenced
// ones a second chance at the young end.
struct alignas(64) Shard {
  base::SpinLock mu;
  // Heads of same-range chains (next_same_range links registrations of one range with
  // different rights).
  absl::flat_hash_set<Registration*, RangeHash, RangeEq> by_range ABSL_GUARDED_BY(mu);
  std::vector<Registration*> slots ABSL_GUARDED_BY(mu);  // by HandleSlot
  std::vector<uint32_t> gens ABSL_GUARDED_BY(mu);        // generation of each slot
  std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
  uint64_t published ABSL_GUARDED_BY(mu) = 0;  // slots in use
  Registration* lru_oldest ABSL_GUARDED_BY(mu) = nullptr;
  Registration* lru_newest ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t lru_size ABSL_GUARDED_BY(mu) = 0;
  uint64_t tombstones ABSL_GUARDED_BY(mu) = 0;
};

// Gives `r` a slot and its handle. kResourceExhausted when the shard's table is full.
absl::Status Publish(Shard& s, uint32_t shard_index, uint32_t tenant_slot, Registration* r)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// The registration `h` names, or nullptr (unknown slot, or a stale generation).
Registration* Lookup(Shard& s, Handle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Frees r's slot: its handle no longer resolves.
void Unpublish(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Takes r off the shard's LRU list (no-op if not on it).
void LruUnlink(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Queues r at the young end with `ticket` (from g_lru_ticket). REQUIRES: not queued.
void LruPush(Shard& s, Registration* r, uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Makes r findable by its exact range (Register's top half).
void RangeLink(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Makes r unfindable by its range (no-op if it is not indexed).
void RangeUnlink(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Stop-reference: after this no one can become a holder. REQUIRES !r->dying.
void StopReference(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// A holder is done: the registration joins the LRU, or marks itself used since it was queued.
void Unreferenced(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Tickets order LRU queueing across a tenant's shards.
extern std::atomic<uint64_t> g_lru_ticket;

}  // namespace cache::internal

#endif  // REGCACHE_CACHE_INTERNAL_INDEX_H_
