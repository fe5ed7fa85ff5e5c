// The UMR engine: the tenant's dedicated queues and the discipline for using them.
//
// A caller hands Execute() a batch of operations (map a pooled key, invalidate a key, rewrite
// MTT entries of an on-demand backing — odp/ owns one engine per PD for those). The engine
// posts them on one of its queues (chosen by the calling thread, so threads spread over
// queues), only the last one signalled (and those that ask) — selective signalling: a signalled
// success retires every earlier request on the queue, and errors always complete — rings the
// doorbell once, and waits until every operation of the batch has a result. Whoever waits polls
// the queue and hands each completion to its owner, so concurrent batches on one queue share
// the polling.
//
// Guarantees:
//   - Execute() returns only after each op's result is final: OK means the device completed it
//     (for a map: the key is usable; for an invalidate: the device refuses the key);
//   - an op that failed to post, completed with an error, or timed out reports that status;
//     the caller must treat the key of a failed or timed-out op as being in an unknown state
//     (the cache sends it to recovery, never back to the pool);
//   - ops with `fence` start only after everything posted before them on the queue completed.
//
// Thread safety: Execute may be called from any number of threads.
#ifndef REGCACHE_CACHE_UMR_ENGINE_H_
#define REGCACHE_CACHE_UMR_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "cache/backing_set.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "hca/device.h"

namespace regcache::cache {

struct UmrOp {
  enum class Kind { kMap, kInvalidate, kRewriteTranslation };
  Kind kind = Kind::kMap;
  hca::MapRequest map;  // kMap; map.klm is set to `klm` below when posted
  KlmLayout klm;        // storage for map.klm
  hca::Key key = 0;     // kInvalidate, kRewriteTranslation: the key's full value
  // kRewriteTranslation: MTT entries [first_entry, first_entry + mtt.size()) of a live direct
  // key (hca::Queue::PostRewriteTranslation: whole blocks of 8 entries). Not owned: `mtt` must
  // stay valid until Execute returns.
  uint32_t first_entry = 0;
  absl::Span<const hca::MttEntry> mtt;
  bool fence = false;
  // Ask for a completion even when the op is not the batch's last (the last, and every
  // UmrEngine::kSignalEvery-th, always ask). For WQEs so large that that many may not fit the
  // ring: an unsignalled request frees its ring space only when a later completion is polled.
  bool signaled = false;

  absl::Status result;  // set by Execute
  bool posted = false;  // set by Execute: the op reached the ring

  static UmrOp Invalidate(hca::Key key, bool fence) {
    UmrOp op;
    op.kind = Kind::kInvalidate;
    op.key = key;
    op.fence = fence;
    return op;
  }
  static UmrOp RewriteTranslation(hca::Key key, uint32_t first_entry,
                                  absl::Span<const hca::MttEntry> mtt, bool signaled) {
    UmrOp op;
    op.kind = Kind::kRewriteTranslation;
    op.key = key;
    op.first_entry = first_entry;
    op.mtt = mtt;
    op.signaled = signaled;
    return op;
  }
};

class UmrEngine {
 public:
  // Creates the tenant's queues in `pd`. `device` and `stats` must outlive the engine.
  static absl::StatusOr<std::unique_ptr<UmrEngine>> Create(hca::Device* device, hca::Pd pd,
                                                           const EngineOptions& options,
                                                           CacheStats* stats);
  ~UmrEngine();

  // Posts the ops as one batch and waits for all of them; see the guarantees above.
  void Execute(absl::Span<UmrOp* const> ops);
  // The same for a batch of independent ops (bulk revocation), spread over every queue of the
  // engine: posted in chunks of half a ring, round robin over the queues (this thread's
  // first), each chunk's doorbell rung as it is posted, and one wait for all of them at the
  // end. If the first op asks for a fence, so does the first op on each queue (ops on one
  // queue run in order; those on different queues in no order among themselves).
  void ExecuteSpread(absl::Span<UmrOp* const> ops);

 private:
  // Within a batch, every this many ops one is signalled (besides the last), so that results
  // of a long batch arrive while it is still being posted. Ring space is not this count's
  // business: the send ring itself signals a WQE whenever half the ring went by unsignalled
  // (umr/sq.h), so a batch of the largest maps cannot fill even the smallest ring silently.
  static constexpr size_t kSignalEvery = 8;

  struct Pending {
    uint64_t id = 0;
    UmrOp* op = nullptr;
    std::atomic<bool>* done = nullptr;
  };
  struct QueueSlot {
    base::Mutex mu;
    std::unique_ptr<hca::Queue> queue ABSL_GUARDED_BY(mu);
    uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
    std::deque<Pending> outstanding ABSL_GUARDED_BY(mu);  // in posting order
  };

  UmrEngine(hca::Device* device, hca::Pd pd, const EngineOptions& options, CacheStats* stats);

  absl::Status PostOne(QueueSlot& slot, UmrOp& op, uint64_t id, bool signaled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Polls the queue once and resolves the pending ops its completions decide.
  void PollAndDispatch(QueueSlot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Replaces a queue that stopped accepting work (error state); pending ops fail.
  void ResetQueue(QueueSlot& slot, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  size_t SlotIndexForThisThread() const;
  QueueSlot& SlotForThisThread() { return *slots_[SlotIndexForThisThread()]; }

  // The steps of Execute. `done` holds one flag per op of the batch, set once its result is final.
  // Posts each op, only the last one signalled (and those that ask); an op that cannot be posted
  // gets its error now, and a broken queue is reset. Returns how many ops reached the ring.
  size_t PostBatch(QueueSlot& slot, absl::Span<UmrOp* const> ops,
                   absl::Span<std::atomic<bool>> done, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // PostOne, retried while the ring is full and the deadline is ahead. `ring_first`: the batch
  // already has requests on the ring, which need the doorbell before they can complete.
  absl::Status PostWhenRoom(QueueSlot& slot, UmrOp& op, uint64_t id, bool signaled, bool ring_first,
                            absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Rings the doorbell once for the posted batch; flushes when its last op failed to post.
  // REQUIRES: at least one op was posted and the queue exists.
  void RingBatch(QueueSlot& slot, absl::Span<UmrOp* const> ops, absl::Span<std::atomic<bool>> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Polls the queue (sharing the polling with other waiters on it) until every flag of `done`
  // is set; at the deadline, what is left times out (AbandonBatch).
  void AwaitBatch(QueueSlot& slot, absl::Span<std::atomic<bool>> done, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(slot.mu);
  // Fails the batch's pending ops with kDeadlineExceeded and takes them out of the pending list,
  // so no dispatcher touches them after Execute returns.
  void AbandonBatch(QueueSlot& slot, absl::Span<std::atomic<bool>> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);

  hca::Device* const device_;
  const hca::Pd pd_;
  const EngineOptions options_;
  CacheStats* const stats_;
  std::vector<std::unique_ptr<QueueSlot>> slots_;
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_UMR_ENGINE_H_
