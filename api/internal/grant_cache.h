// GrantCache — the client library's cache of the grants its process holds, so that a Register
// a held grant already covers never leaves the process.
//
// Each cached grant keeps exactly the daemon holds the library took for it (usually one) and a
// local reference count of its own: Acquire takes a local reference, Release gives one back,
// and a grant nobody in the process references stays cached — still held at the daemon, so
// its key stays mapped — until the daemon revokes it or asks for memory back (reclaim).
//
// Trust runs one way: the daemon publishes a state word per grant in the session's read-only
// state file (service/shm_protocol.h, "Grant state") and sets its revoked bit BEFORE it revokes
// the key. A hit reads that word, after it has taken its reference, and refuses a grant whose
// word is no longer (generation << 1) or whose session is closing, so a revoked grant is never
// handed out again. Nothing the library keeps here is trusted by the daemon.
//
// Speed. A hit is meant to cost about what the daemon's own cache costs in-process, without
// touching a cache line another thread writes:
//   - each thread has a direct-mapped table of the grants it used recently (kThreadSlots
//     entries, indexed by the request's address), which answers most hits with one compare-
//     and-swap on the grant's reference word and one load of its state word;
//   - behind it, the shared index: the grants ordered by start address under a reader lock.
//     A lookup looks at the kScanLimit grants starting nearest below the address; a covering
//     grant further away is missed and the request goes to the daemon, which answers from its
//     own cache — slower, never wrong.
// Releases go through a handle table sharded by handle, so threads releasing different grants
// do not share a lock.
//
// Reference word: (incarnation << 32) | (dead << 31) | refs. Entries live in a pool that never
// shrinks (addresses stay valid for every thread's table); an entry reused for another grant
// gets a new incarnation, so a stale per-thread slot fails its compare-and-swap.
//
// Thread safety: every method may be called from any thread.
#ifndef REGCACHE_API_INTERNAL_GRANT_CACHE_H_
#define REGCACHE_API_INTERNAL_GRANT_CACHE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "regcache/client.h"

namespace regcache::api::internal {

// Where the daemon's state words are (read-only for us).
struct GrantStateView {
  const std::atomic<uint32_t>* slots = nullptr;
  uint32_t slot_count = 0;
  const std::atomic<uint32_t>* session_state = nullptr;  // 0 while the session is open
};

class GrantCache {
 public:
  static constexpr size_t kThreadSlots = 4096;  // per thread and process, shared by all caches
  static constexpr int kScanLimit = 8;

  explicit GrantCache(const GrantStateView& state);
  ~GrantCache();
  GrantCache(const GrantCache&) = delete;
  GrantCache& operator=(const GrantCache&) = delete;

  // A cached grant that covers [addr, addr + length) with at least `access` and whose state
  // word is current, with one more local reference; nullopt otherwise. Never blocks on the
  // daemon. REQUIRES length > 0.
  std::optional<Key> Acquire(uint64_t addr, uint64_t length, uint32_t access);

  // A grant the daemon just returned, with one daemon hold the caller took. Caches it and takes
  // one local reference for the caller; returns false (nothing cached, the caller keeps the
  // daemon hold to itself) when it cannot be cached: no slot, a slot out of range, its state
  // word no longer current, or the session closing. A handle already cached gains the daemon
  // hold (the library lost a race between two misses).
  bool Insert(const Key& key, uint32_t slot, uint32_t generation);

  struct ReleaseOutcome {
    bool cached = false;           // the handle is ours: nothing to send unless daemon_releases
    bool no_reference = false;     // cached, but no local reference was left to give back
    uint32_t daemon_releases = 0;  // daemon holds to give back now (a stale grant's last ref)
  };
  // Gives back one local reference of `handle`. A grant found revoked whose last reference
  // this was leaves the cache, and its daemon holds are returned in the outcome.
  ReleaseOutcome Release(uint64_t handle);

  // Takes every grant no one references out of the cache (reclaim, close) and returns its
  // handle and daemon holds, for the caller to release at the daemon.
  std::vector<std::pair<uint64_t, uint32_t>> TakeUnreferenced();

  // The grant will not be handed out again (its key was invalidated, or an event said it was
  // revoked); it leaves the cache when its last local reference goes (Release reports the
  // daemon holds then), at once if it has none (the returned holds).
  uint32_t Forget(uint64_t handle);

  struct Sole {
    bool cached = false;        // the handle is in the cache
    bool sole = false;          // and the caller's reference was its only one: it left the cache
    uint32_t daemon_holds = 0;  // when sole: the daemon holds now the caller's
  };
  // For re-registering `handle`: when the caller's reference is the only one in the process,
  // takes the grant out of the cache and hands its daemon holds to the caller; otherwise
  // changes nothing (other references share it: it must not change under them).
  Sole TakeSole(uint64_t handle);

  // Every cached handle whose state word says revoked (for a reader that lost events).
  std::vector<uint64_t> RevokedHandles();

  size_t size() const;

 private:
  struct Entry {
    std::atomic<uint64_t> word{0};  // incarnation, dead bit, local refs
    std::atomic<bool> stale{false};
    Key key;
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint32_t daemon_holds = 0;  // guarded by the handle shard's mutex
  };
  struct Shard {
    base::Mutex mu;
    absl::flat_hash_map<uint64_t, Entry*> by_handle ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kShards = 16;

  bool Current(const Entry& e) const;
  // Takes one local reference if the entry is still incarnation `inc` and alive.
  static bool TryRef(Entry& e, uint32_t inc);
  Entry* FindCovering(uint64_t addr, uint64_t end, uint32_t access) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes `e` (incarnation `inc`) if exactly `refs` references are out (0: no one references
  // it); returns its daemon holds (0 if the references changed, or it is already gone).
  uint32_t Reap(Entry* e, uint32_t inc, uint64_t refs = 0) ABSL_LOCKS_EXCLUDED(mu_);
  void Remember(const Entry& e, uint32_t inc, uint64_t addr);
  Shard& ShardOf(uint64_t handle) { return shards_[(handle * 0x9e3779b97f4a7c15ull) >> 60]; }

  const GrantStateView state_;
  const uint64_t id_;  // this cache in the per-thread tables; never reused in a process

  mutable base::Mutex mu_;  // the index and the entry pool
  absl::btree_map<std::pair<uint64_t, uint64_t>, Entry*> index_
      ABSL_GUARDED_BY(mu_);  // (va, handle)
  std::deque<Entry> pool_ ABSL_GUARDED_BY(mu_);
  std::vector<Entry*> free_ ABSL_GUARDED_BY(mu_);
  std::array<Shard, kShards> shards_;
};

}  // namespace regcache::api::internal
#endif  // REGCACHE_API_INTERNAL_GRANT_CACHE_H_
