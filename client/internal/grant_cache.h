// GrantCache — the client library's cache of the grants its process holds, so that a Register
// a held grant already covers never leaves the process.
//
// Each cached grant keeps exactly the daemon holds the library took for it (usually one) and
// local references of its own: Acquire takes one, Release gives one back, and a grant nobody in
// the process references stays cached — still held at the daemon, so its key stays mapped —
// until the daemon revokes it or asks for memory back (reclaim).
//
// Trust runs one way: the daemon publishes a state word per grant in the session's read-only
// state file (protocol/shm_protocol.h, "Grant state") and sets its revoked bit BEFORE it revokes
// the key. A hit reads that word, after it has taken its reference, and refuses a grant whose
// word is no longer (generation << 1) or whose session is closing, so a revoked grant is never
// handed out again. Nothing the library keeps here is trusted by the daemon.
//
// Speed: a hit and its release write no cache line another thread writes, and take no lock.
//   - Front (the hot path): each thread keeps, per cache, a 2-way table of the grants it hit
//     lately (kFrontSets sets by requested address, ~256 KiB allocated on its first hit), each
//     slot a COPY of the grant (range, rights, key, handle), its entry index and incarnation,
//     where its daemon word is and what it must read, and the epoch at which it was checked.
//     The cache's epoch_ is bumped by every reaper (below) before it marks anything and again
//     when it is done: odd while one runs. A slot is filled only by a hit that read an even
//     epoch E0 before it validated the entry, so "epoch_ still E0" means no reaper has started
//     since the entry was seen live, unmarked, of that incarnation, with that grant.
//       front hit:     slot covers the range and rights, epoch_ == E0; count += 1 (this
//                      thread's word for the entry); HolderFence; epoch_ == E0 again, session
//                      open, daemon word == (generation << 1) → the copy. Else undo (as below).
//       front release: the slot of the handle (the last hit, or by handle), epoch_ == E0,
//                      own count > 0; count -= 1; HolderFence; epoch_ == E0 → done; else the
//                      state decides as in the probe path below (forgotten → Settle).
//     Proof against a reaper R that bumps epoch_ (seq_cst RMW), then ReaperFence, then sums
//     every thread's counts: the thread stores its count, HolderFence, loads epoch_. By the
//     fences, either the load sees R's bump (the thread undoes, or for a release lets the
//     state decide) or R's sum sees the store. So a front hit that returns is counted by every
//     reaper that might reap the entry, and a front release that saw no bump is seen by R,
//     whose own sum then finds out it was the last. Reapers that finished before E0 was read
//     are seen by the validation (the acquire load of E0 orders their state changes). The
//     daemon word is read after the count is taken, as in the probe path.
//     The path touches this thread's slot and count word, epoch_ (read-mostly) and the
//     daemon's words: no entry line and no shared table. It is inline (Acquire, Release), so
//     the copy goes straight into the caller's result. A thread whose hits mostly miss its
//     front (more grants in use than it holds) turns it off for a while (ThreadRefs::Retune):
//     a miss there costs a cold line and a fill.
//   - Probe path (a front miss): two lock-free tables (base/probe_table.h), entry indexes by
//     start address and by handle; writers serialise on mu_. A reader validates what it finds
//     through the entry's state word, so an entry that moves or goes under it can only make it
//     miss. A Register whose
//     address is not a grant's start looks at this thread's hints (the grant it last used at
//     that address), then at the ordered index under a reader lock (kScanLimit grants nearest
//     below the address). A miss goes to the daemon, which answers from its own cache: slower,
//     never wrong.
//   - References: each thread counts its own references per entry in its own table (one
//     base::HoldWord per entry, tagged with the incarnation, written by that thread only),
//     plus one shared signed count per entry (releases from another thread than the one that
//     acquired, references handed back by threads that exited, and hits of threads without a
//     table). An entry's references are its shared count plus every thread's word for it.
//     A front slot is filled only when its hit counted in the thread's word (shared >= 0), and
//     only a reaper section (ReleaseSlow) makes shared negative, so a front hit may count in
//     the thread's word as long as epoch_ is unchanged.
//   - The protocol is the hold protocol (docs/hold-protocol.md; the daemon's cache runs it too):
//       hit:     read state (live, incarnation i, nothing marked) and range; count += 1;
//                HolderFence; read state again: unchanged → held (then the daemon's word). Else
//                undo (count -= 1; HolderFence; forgotten → Settle).
//       release: count -= 1; HolderFence; read state: forgotten → Settle.
//       reaper:  (Forget, TakeUnreferenced, TakeSole, Settle, ReleaseSlow and a hit that finds
//                its grant revoked; each under mu_ and the registry, between the two bumps of
//                epoch_) set kForgotten or kMarked; ReaperFence; sum the counts of incarnation
//                i: the wanted number → the entry leaves the cache (its incarnation moves on,
//                its daemon holds go to the caller exactly once); otherwise a kMarked entry is
//                unmarked.
//     Either the hit's recheck sees the mark or the reaper's sum sees the hit; either the
//     release sees kForgotten or the reaper's sum sees the release. So daemon holds are given
//     back only when no reference is left, and the last release of a forgotten grant always
//     finds out it was the last.
//   - A thread that exits hands its counts to the entries' shared counts (under the registry
//     lock), so what it referenced stays referenced and what it released can be reclaimed.
//   - Holds that a hit finds it must give back (its undo was the last reference of a forgotten
//     grant, or it found a grant revoked) wait in a pending list: TakePending.
// Several caches per process are independent: each has its id (never reused) and its own
// per-thread tables, found through a thread's list (heap-allocated, so a library loaded with
// dlopen needs only a few words of static TLS).
//
// Thread safety: every method may be called from any thread.
#ifndef REGCACHE_CLIENT_INTERNAL_GRANT_CACHE_H_
#define REGCACHE_CLIENT_INTERNAL_GRANT_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "base/hold_protocol.h"
#include "base/mutex.h"
#include "base/probe_table.h"
#include "protocol/shm_protocol.h"
#include "regcache/client.h"

namespace regcache::api::internal {

// Where the daemon's state words are (read-only for us).
struct GrantStateView {
  const std::atomic<uint32_t>* slots = nullptr;
  uint32_t slot_count = 0;
  const std::atomic<uint32_t>* session_state = nullptr;  // 0 while the session is open
};

class GrantCache;
namespace grant_cache_detail {
struct ThreadRefs;    // one thread's reference counts for one cache
struct FrontTable;    // one thread's copies of the grants it hit lately (see the header)
struct ThreadTables;  // a thread's tables, one per cache it used
// A cache's thread tables; shared with the threads, so it outlives the cache while a thread
// keeps a table of it.
struct Registry {
  base::Mutex mu;
  GrantCache* cache ABSL_GUARDED_BY(mu) = nullptr;  // nullptr once the cache is gone
  std::vector<ThreadRefs*> tables ABSL_GUARDED_BY(mu);
};
}  // namespace grant_cache_detail

class GrantCache {
 public:
  static constexpr uint32_t kChunk = 1024;      // entries per pool chunk (and per count chunk)
  static constexpr uint32_t kMaxChunks = 1024;  // at most kChunk * kMaxChunks cached grants
  static constexpr uint32_t kHints = 1024;      // per thread and cache
  static constexpr int kScanLimit = 8;
  static constexpr int kMaxProbe = 16;
  static constexpr uint32_t kFrontSets = 2048;  // 2 ways each, per thread and cache

  explicit GrantCache(const GrantStateView& state);
  ~GrantCache();
  GrantCache(const GrantCache&) = delete;
  GrantCache& operator=(const GrantCache&) = delete;

  // A cached grant that covers [addr, addr + length) with at least `access` and whose state
  // word is current, with one more local reference; nullopt otherwise. Never blocks on the
  // daemon. REQUIRES length > 0.
  // Inline: the front path (see the header comment), then the rest out of line.
  std::optional<Key> Acquire(uint64_t addr, uint64_t length, uint32_t access);
  // The same, into *out (left as it was on a miss): the client's Register writes the hit
  // straight into the StatusOr it returns, with no copy of an optional between.
  bool AcquireInto(uint64_t addr, uint64_t length, uint32_t access, Key* out);
  // Acquire for each of a batch's lookups in order, a hit into its `out` (left as it was on a
  // miss; a lookup of length 0 misses). `first_miss` runs once, as soon as one misses (before
  // the rest are settled). After that, what neither the front nor the lock-free tables answer
  // looks for a covering grant under one reader hold of the lock per kLockRun lookups, not one
  // each. REQUIRES out.size() == lookups.size().
  struct Lookup {
    uint64_t addr = 0;
    uint64_t length = 0;
    uint32_t access = 0;
  };
  void AcquireBatch(absl::Span<const Lookup> lookups, absl::Span<std::optional<Key>> out,
                    absl::FunctionRef<void()> first_miss);

  // A grant the daemon just returned, with one daemon hold the caller took. Caches it and takes
  // one local reference for the caller; returns false (nothing cached, the caller keeps the
  // daemon hold to itself) when it cannot be cached: no slot, a slot out of range, its state
  // word no longer current, the session closing, or the cache full. A handle already cached
  // gains the daemon hold (the library lost a race between two misses).
  bool Insert(const Key& key, uint32_t slot, uint32_t generation);
  // Insert for each of a batch's grants, under one hold of the lock per kLockRun of them.
  static constexpr size_t kLockRun = base::kBatchLockRun;
  struct Insertion {
    const Key* key = nullptr;
    uint32_t slot = 0;
    uint32_t generation = 0;
  };
  void InsertBatch(absl::Span<const Insertion> grants);

  struct ReleaseOutcome {
    bool cached = false;           // the handle is ours: nothing to send unless daemon_releases
    bool no_reference = false;     // cached, but no local reference was left to give back
    uint32_t daemon_releases = 0;  // daemon holds to give back now (a stale grant's last ref)
  };
  // Gives back one local reference of `handle`. A grant found revoked whose last reference
  // this was leaves the cache, and its daemon holds are returned in the outcome. Fastest from
  // the thread that acquired the reference; any thread may release it.
  ReleaseOutcome Release(uint64_t handle);  // inline: the front path, then the rest

  // Takes every grant no one references out of the cache (reclaim, close) and returns its
  // handle and daemon holds, for the caller to release at the daemon; pending holds too.
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

  // Daemon holds that Acquire found it must give back (see the header comment); the caller
  // releases them at the daemon. HasPending is one load, for hot callers.
  bool HasPending() const { return has_pending_.load(std::memory_order_acquire); }
  std::vector<std::pair<uint64_t, uint32_t>> TakePending();

  size_t size() const;

 private:
  friend struct grant_cache_detail::ThreadTables;
  // One cached grant. The key fields change only while the entry is not live (Insert, under mu_,
  // before the release store of its state), so a reader that finds the state unchanged around
  // its reads, or holds a reference, reads one grant.
  struct alignas(64) Entry {
    std::atomic<uint64_t> state{0};
    std::atomic<int64_t> shared{0};  // references not in a thread's counts (signed: see header)
    std::atomic<uint64_t> va{0};
    std::atomic<uint64_t> end{0};
    std::atomic<uint64_t> handle{0};
    std::atomic<uint32_t> lkey{0};
    std::atomic<uint32_t> rkey{0};
    std::atomic<uint32_t> access{0};
    std::atomic<uint32_t> slot{0};
    std::atomic<uint32_t> generation{0};
    uint32_t daemon_holds = 0;  // guarded by mu_
  };
  using Refs = grant_cache_detail::ThreadRefs;
  // A reaper's section (under mu_): epoch_ odd while it lasts; see the header.
  class Reaping {
   public:
    explicit Reaping(std::atomic<uint64_t>& epoch) : epoch_(epoch) {
      epoch_.fetch_add(1, std::memory_order_seq_cst);  // before any mark, and its ReaperFence
    }
    ~Reaping() { epoch_.fetch_add(1, std::memory_order_release); }
    Reaping(const Reaping&) = delete;
    Reaping& operator=(const Reaping&) = delete;

   private:
    std::atomic<uint64_t>& epoch_;
  };

  Entry& At(uint32_t idx) const {
    return chunks_[idx / kChunk].load(std::memory_order_acquire)[idx % kChunk];
  }
  bool CurrentWord(uint32_t slot, uint32_t generation) const;
  // This thread's table (nullptr: none, and `create` false or the thread is exiting).
  Refs* MyRefs(bool create);
  Refs* MyRefsSlow(bool create);
  // The hold protocol's reaper fence, skipping membarrier's IPIs when no other thread has a
  // table of counts for this cache.
  void ReaperFenceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_->mu);
  // The probe path's hit; one that counted in `t`'s word fills its front slot when `epoch`
  // (epoch_ read before anything of the entry) is even.
  std::optional<Key> TryHit(Refs* t, uint32_t idx, uint64_t addr, uint64_t end, uint32_t access,
                            uint64_t epoch);
  void Remember(Refs& t, uint32_t idx, uint64_t addr, const Key& k, uint64_t epoch);
  std::optional<Key> AcquireSlow(uint64_t addr, uint64_t length, uint32_t access);
  // AcquireSlow's lock-free part: the table by start address, then `t`'s hint for `addr`
  // (where it is, into *hint, for the covering lookup's hit to update).
  std::optional<Key> AcquireUnlocked(Refs* t, uint64_t addr, uint64_t end, uint32_t access,
                                     uint64_t epoch, uint32_t** hint);
  // Its covering part: the hit on `idx`, the grant FindCovering offered (none: a miss), which
  // becomes `hint`'s grant.
  std::optional<Key> CoverHit(Refs* t, std::optional<uint32_t> idx, uint64_t addr, uint64_t end,
                              uint32_t access, uint64_t epoch, uint32_t* hint);
  // FindCovering under a reader hold of the lock, then CoverHit.
  std::optional<Key> AcquireCovering(Refs* t, uint64_t addr, uint64_t end, uint32_t access,
                                     uint64_t epoch, uint32_t* hint) ABSL_LOCKS_EXCLUDED(mu_);
  ReleaseOutcome ReleaseProbe(uint64_t handle);
  // The front paths (inline below). REQUIRES t != nullptr.
  bool FrontHit(Refs* t, uint64_t addr, uint64_t end, uint32_t access, Key* out);
  // FrontHit where the front is on, with its accounting (Retune's window, its hits).
  bool FrontAcquire(Refs* t, uint64_t addr, uint64_t end, uint32_t access, Key* out);
  bool FrontRelease(Refs* t, uint64_t handle, ReleaseOutcome* out);
  // After this thread's word `mine` for `idx` went from `w` to w - 1: what the state says.
  ReleaseOutcome Released(uint32_t idx, std::atomic<uint64_t>* mine, uint64_t w, uint64_t handle);
  void Unref(Refs* t, uint32_t idx, uint32_t inc);
  void AddRefLocked(uint32_t idx, uint32_t inc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ordered index: (va, handle) → entry.
  using Index = absl::btree_map<std::pair<uint64_t, uint64_t>, uint32_t>;
  using IndexHint = Index::iterator;
  // Insert's work, for a grant whose slot and range it checked, under the lock. The ordered
  // index is tried at `hint` first (any position of it: a wrong one costs two comparisons before
  // the search), and `hint` is left just past the new entry, where the next of a batch in
  // address order goes; without a new entry it is left as it was.
  bool InsertLocked(const Key& key, uint32_t slot, uint32_t generation, IndexHint& hint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<uint32_t> FindCovering(uint64_t addr, uint64_t end, uint32_t access)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  ReleaseOutcome ReleaseSlow(uint64_t handle) ABSL_LOCKS_EXCLUDED(mu_);

  // Reapers. Every reference to entry `idx` of incarnation `inc`.
  int64_t Holders(uint32_t idx, uint32_t inc) const ABSL_SHARED_LOCKS_REQUIRED(registry_->mu);
  // Takes `idx` out of the cache; returns its daemon holds.
  uint32_t ReapLocked(uint32_t idx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, registry_->mu);
  // Marks `idx` forgotten; reaps it when unreferenced (the holds; 0 if referenced or gone).
  uint32_t ForgetLocked(uint32_t idx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, registry_->mu);
  // For a forgotten entry whose reference was just dropped: reaps it when that was the last.
  std::pair<uint64_t, uint32_t> Settle(uint32_t idx, uint32_t inc) ABSL_LOCKS_EXCLUDED(mu_);
  void AddPending(uint64_t handle, uint32_t holds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A thread's counts go to the shared counts (the thread exits).
  void HandBack(Refs& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_->mu);

  // The front path's shared reads, on a line of their own: reapers alone write epoch_.
  alignas(64) const GrantStateView state_;
  std::atomic<uint64_t> epoch_{0};
  // The hold protocol's fences: membarrier unless REGCACHE_MEMBARRIER=0 or the kernel has none
  // (base/asymmetric_fence.h says why the client's default differs from the daemon's).
  const base::FenceMode fence_ = base::ChooseFenceMode(base::FenceMode::kMembarrier);
  alignas(64) const uint64_t id_;  // this cache in the per-thread tables; never reused in a process
  const std::shared_ptr<grant_cache_detail::Registry> registry_;

  // Entries by index: chunks allocated under mu_, published with a release store, never freed
  // while the cache lives (an index a reader found always names memory).
  std::unique_ptr<std::atomic<Entry*>[]> chunks_;
  // Entry indexes by start address and by handle (base/probe_table.h): probed without a lock,
  // written under mu_.
  base::ProbeTable by_va_{256};
  base::ProbeTable by_handle_{256};
  std::atomic<bool> has_pending_{false};

  mutable base::Mutex mu_;  // writers of everything; readers of the ordered index
  Index index_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint32_t> handles_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);
  uint32_t next_ ABSL_GUARDED_BY(mu_) = 0;  // entries ever used
  std::vector<std::pair<uint64_t, uint32_t>> pending_ ABSL_GUARDED_BY(mu_);
};

namespace grant_cache_detail {

struct ThreadRefs {
  explicit ThreadRefs(uint64_t id) : cache_id(id) {}
  ~ThreadRefs() {
    for (auto& c : chunks) delete[] c.load(std::memory_order_relaxed);
  }
  // The owner's word for `idx`, its chunk allocated on first use.
  std::atomic<uint64_t>& Mine(uint32_t idx) {
    std::atomic<uint64_t>* c = chunks[idx / GrantCache::kChunk].load(std::memory_order_relaxed);
    if (c == nullptr) [[unlikely]] {
      c = new std::atomic<uint64_t>[GrantCache::kChunk]();
      chunks[idx / GrantCache::kChunk].store(c, std::memory_order_release);
    }
    return c[idx % GrantCache::kChunk];
  }
  // Anyone's view: nullptr when the owner never counted in that chunk.
  std::atomic<uint64_t>* Find(uint32_t idx) const {
    std::atomic<uint64_t>* c = chunks[idx / GrantCache::kChunk].load(std::memory_order_acquire);
    return c == nullptr ? nullptr : &c[idx % GrantCache::kChunk];
  }
  const uint64_t cache_id;
  std::atomic<std::atomic<uint64_t>*> chunks[GrantCache::kMaxChunks] = {};
  uint32_t hints[GrantCache::kHints] = {};  // owner only: entry index + 1 last hit at an address
  std::unique_ptr<FrontTable> front;        // owner only; allocated on the first hit
  // Owner only: whether the front is in use, and how it did in this window of acquisitions.
  // Off, it costs nothing; it goes off for kFrontOff acquisitions when fewer than a quarter of a
  // window's hits came from it (more grants in use than it holds), then is sampled again.
  static constexpr uint32_t kFrontWindow = 1024;
  static constexpr uint32_t kFrontOff = 15 * kFrontWindow;
  bool front_on = true;
  // Owner only: the grant this thread hit last outside the front, so that its release (most
  // often the next call) finds it without probing the handle table (one cache miss less).
  uint64_t last_handle = 0;
  uint32_t last_idx = 0;
  uint32_t front_left = kFrontWindow;
  uint32_t front_hits = 0;
  void Retune() {
    front_on = !front_on || 4 * front_hits >= kFrontWindow;
    front_left = front_on ? kFrontWindow : kFrontOff;
    front_hits = 0;
  }
};

// A copy of a grant this thread hit, good while the cache's epoch is `epoch` (see the header).
struct alignas(64) Front {
  uint64_t va = 0;
  uint64_t end = 0;
  uint64_t handle = 0;
  uint64_t epoch = ~uint64_t{0};  // odd: empty (a filled slot's epoch is even)
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;
  uint32_t slot = 0;  // its daemon word, and the value it must hold
  uint32_t word = 0;
  uint32_t inc = 0;  // the entry and its incarnation
  uint32_t idx = 0;
};
static_assert(sizeof(Front) == 64);

struct FrontTable {
  static constexpr uint32_t kSlots = 2 * GrantCache::kFrontSets;
  static uint32_t Set(uint64_t addr) {  // Fibonacci hashing: the top bits of the product
    return static_cast<uint32_t>((addr * 0x9e3779b97f4a7c15ull) >> 53) % GrantCache::kFrontSets;
  }
  static uint32_t ByHandle(uint64_t handle) {
    return static_cast<uint32_t>((handle * 0x9e3779b97f4a7c15ull) >> 52) % kSlots;
  }
  Front slots[kSlots];              // set s: slots 2s (the newer) and 2s + 1
  uint16_t by_handle[kSlots] = {};  // a slot that may hold the handle
  uint32_t last = 0;                // the slot of the last front hit
};

// The hot path's way to this thread's table: the last cache it used (a few words of TLS; a
// library loaded with dlopen needs no more).
inline constinit thread_local uint64_t tls_last_id = 0;
inline constinit thread_local ThreadRefs* tls_last = nullptr;

}  // namespace grant_cache_detail

// --- Small methods ---
inline bool GrantCache::AcquireInto(uint64_t addr, uint64_t length, uint32_t access, Key* out) {
  if (grant_cache_detail::tls_last_id == id_ && addr + length > addr) [[likely]] {
    if (FrontAcquire(grant_cache_detail::tls_last, addr, addr + length, access, out)) return true;
  }
  std::optional<Key> k = AcquireSlow(addr, length, access);
  if (!k.has_value()) return false;
  *out = *k;
  return true;
}

inline bool GrantCache::FrontAcquire(Refs* t, uint64_t addr, uint64_t end, uint32_t access,
                                     Key* out) {
  if (--t->front_left == 0) [[unlikely]]
    t->Retune();
  if (!t->front_on || !FrontHit(t, addr, end, access, out)) return false;
  ++t->front_hits;
  return true;
}

inline std::optional<Key> GrantCache::Acquire(uint64_t addr, uint64_t length, uint32_t access) {
  Key k;
  if (AcquireInto(addr, length, access, &k)) return k;
  return std::nullopt;
}

inline GrantCache::ReleaseOutcome GrantCache::Release(uint64_t handle) {
  if (grant_cache_detail::tls_last_id == id_ && grant_cache_detail::tls_last->front_on) [[likely]] {
    if (ReleaseOutcome out; FrontRelease(grant_cache_detail::tls_last, handle, &out)) return out;
  }
  return ReleaseProbe(handle);
}

inline void GrantCache::AddPending(uint64_t handle, uint32_t holds) {
  pending_.emplace_back(handle, holds);
  has_pending_.store(true, std::memory_order_release);
}

inline std::vector<std::pair<uint64_t, uint32_t>> GrantCache::TakePending() {
  if (!HasPending()) return {};
  base::MutexLock l(&mu_);
  has_pending_.store(false, std::memory_order_relaxed);
  return std::exchange(pending_, {});
}

inline uint32_t GrantCache::Forget(uint64_t handle) {
  base::MutexLock l(&mu_);
  base::MutexLock r(&registry_->mu);
  Reaping reaping(epoch_);
  auto it = handles_.find(handle);
  return it == handles_.end() ? 0 : ForgetLocked(it->second);
}

inline std::vector<uint64_t> GrantCache::RevokedHandles() {
  std::vector<uint64_t> out;
  base::ReaderMutexLock lock(&mu_);
  for (const auto& [handle, idx] : handles_) {
    const Entry& e = At(idx);
    if (!CurrentWord(e.slot.load(std::memory_order_relaxed),
                     e.generation.load(std::memory_order_relaxed))) {
      out.push_back(handle);
    }
  }
  return out;
}

inline size_t GrantCache::size() const {
  base::ReaderMutexLock lock(&mu_);
  return handles_.size();
}

inline bool GrantCache::FrontHit(Refs* t, uint64_t addr, uint64_t end, uint32_t access, Key* out) {
  grant_cache_detail::FrontTable* ft = t->front.get();
  if (ft == nullptr) return false;
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);
  uint32_t i = 2 * grant_cache_detail::FrontTable::Set(addr);
  const grant_cache_detail::Front* f = &ft->slots[i];
  if (f->epoch != epoch || f->va > addr || f->end < end || (access & ~f->access) != 0) {
    f = &ft->slots[++i];
    if (f->epoch != epoch || f->va > addr || f->end < end || (access & ~f->access) != 0) {
      return false;
    }
  }
  std::atomic<uint64_t>& mine =
      t->chunks[f->idx / kChunk].load(std::memory_order_relaxed)[f->idx % kChunk];
  const uint64_t w = mine.load(std::memory_order_relaxed);
  if (base::HoldWord::Tag(w) != f->inc || base::HoldWord::Count(w) >= base::HoldWord::kMaxCount) {
    return false;
  }
  mine.store(w + 1, std::memory_order_relaxed);
  base::HolderFence(fence_);  // the count, before epoch_ (pairs with a reaper's bump + ReaperFence)
  if (epoch_.load(std::memory_order_acquire) != epoch ||
      (state_.session_state != nullptr &&
       state_.session_state->load(std::memory_order_acquire) != protocol::shm::kSessionOpen) ||
      state_.slots[f->slot].load(std::memory_order_acquire) != f->word) [[unlikely]] {
    Unref(t, f->idx, f->inc);  // the probe path decides (a revoked grant is forgotten there)
    return false;
  }
  ft->last = i;
  *out = Key{f->handle, f->lkey, f->rkey, f->va, f->end - f->va, f->access, true};
  return true;
}

inline bool GrantCache::FrontRelease(Refs* t, uint64_t handle, ReleaseOutcome* out) {
  grant_cache_detail::FrontTable* ft = t->front.get();
  if (ft == nullptr) return false;
  const grant_cache_detail::Front* f = &ft->slots[ft->last];
  if (f->handle != handle) {
    f = &ft->slots[ft->by_handle[grant_cache_detail::FrontTable::ByHandle(handle)]];
    if (f->handle != handle) return false;
  }
  const uint64_t epoch = f->epoch;
  if (epoch_.load(std::memory_order_acquire) != epoch) return false;
  std::atomic<uint64_t>& mine =
      t->chunks[f->idx / kChunk].load(std::memory_order_relaxed)[f->idx % kChunk];
  const uint64_t w = mine.load(std::memory_order_relaxed);
  if (base::HoldWord::Tag(w) != f->inc || base::HoldWord::Count(w) == 0) return false;
  mine.store(w - 1, std::memory_order_release);
  base::HolderFence(fence_);  // the count, before epoch_ (pairs with a reaper's bump + ReaperFence)
  if (epoch_.load(std::memory_order_acquire) == epoch) [[likely]] {
    out->cached = true;
    return true;
  }
  *out = Released(f->idx, &mine, w, handle);
  return true;
}

}  // namespace regcache::api::internal
#endif  // REGCACHE_CLIENT_INTERNAL_GRANT_CACHE_H_
