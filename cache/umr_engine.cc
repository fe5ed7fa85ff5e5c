#include "cache/umr_engine.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace regcache::cache {

absl::StatusOr<std::unique_ptr<UmrEngine>> UmrEngine::Create(hca::Device* device, hca::Pd pd,
                                                             const EngineOptions& options,
                                                             CacheStats* stats) {
  if (options.queues_per_tenant == 0) {
    return absl::InvalidArgumentError("engine needs at least one queue");
  }
  std::unique_ptr<UmrEngine> engine(new UmrEngine(device, pd, options, stats));
  for (uint32_t i = 0; i < options.queues_per_tenant; ++i) {
    auto slot = std::make_unique<QueueSlot>();
    ASSIGN_OR_RETURN(std::unique_ptr<hca::Queue> q,
                     device->CreateQueue(pd, hca::QueueOptions{options.queue_depth}));
    base::MutexLock lock(&slot->mu);
    slot->queue = std::move(q);
    engine->slots_.push_back(std::move(slot));
  }
  return engine;
}

UmrEngine::UmrEngine(hca::Device* device, hca::Pd pd, const EngineOptions& options,
                     CacheStats* stats)
    : device_(device), pd_(pd), options_(options), stats_(stats) {}

UmrEngine::~UmrEngine() {
  for (auto& slot : slots_) {
    base::MutexLock lock(&slot->mu);
    RC_CHECK(slot->outstanding.empty()) << "UMR engine destroyed with requests in flight";
    slot->queue.reset();
  }
}

size_t UmrEngine::SlotIndexForThisThread() const {
  static std::atomic<uint32_t> next_thread{0};
  thread_local const uint32_t thread_slot = next_thread.fetch_add(1, std::memory_order_relaxed);
  return thread_slot % slots_.size();
}

absl::Status UmrEngine::PostOne(QueueSlot& slot, UmrOp& op, uint64_t id, bool signaled) {
  hca::PostOptions po;
  po.fence = op.fence;
  po.signaled = signaled;
  if (op.kind == UmrOp::Kind::kMap) {
    op.map.klm = op.klm;
    op.map.options = po;
    return slot.queue->PostMap(id, op.map);
  }
  if (op.kind == UmrOp::Kind::kRewriteTranslation) {
    return slot.queue->PostRewriteTranslation(id, op.key, op.first_entry, op.mtt, po);
  }
  return slot.queue->PostInvalidate(id, op.key, po);
}

void UmrEngine::PollAndDispatch(QueueSlot& slot) {
  hca::Completion cqes[16];
  for (;;) {
    const size_t n = slot.queue->Poll(absl::MakeSpan(cqes));
    for (size_t i = 0; i < n; ++i) {
      const hca::Completion& c = cqes[i];
      // Requests execute in order and errors always complete, so every pending request
      // before this completion's succeeded (unsignalled); this one has the CQE's status.
      while (!slot.outstanding.empty() && slot.outstanding.front().id <= c.request_id) {
        Pending p = slot.outstanding.front();
        slot.outstanding.pop_front();
        p.op->result = p.id == c.request_id ? c.status : absl::OkStatus();
        if (!p.op->result.ok()) stats_->umr_failed.Inc();
        p.done->store(true, std::memory_order_release);
        if (p.id == c.request_id) break;
      }
    }
    if (n < std::size(cqes)) return;
  }
}

void UmrEngine::ResetQueue(QueueSlot& slot, const absl::Status& why) {
  RC_LOG(WARNING) << "UMR queue reset: " << why;
  for (Pending& p : slot.outstanding) {
    p.op->result = base::Annotate(why, "queue reset");
    p.done->store(true, std::memory_order_release);
  }
  slot.outstanding.clear();
  slot.queue.reset();
  auto q = device_->CreateQueue(pd_, hca::QueueOptions{options_.queue_depth});
  if (q.ok()) {
    slot.queue = std::move(*q);
  } else {
    RC_LOG(ERROR) << "UMR queue could not be recreated: " << q.status();
  }
}

size_t UmrEngine::PostBatch(QueueSlot& slot, absl::Span<UmrOp* const> ops,
                            absl::Span<std::atomic<bool>> done, absl::Time deadline) {
  if (slot.queue == nullptr) ResetQueue(slot, absl::UnavailableError("queue missing"));
  size_t posted = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    UmrOp& op = *ops[i];
    if (slot.queue == nullptr) {
      op.result = absl::UnavailableError("no UMR queue available");
      done[i].store(true, std::memory_order_relaxed);
      continue;
    }
    const bool last = i + 1 == ops.size();
    const uint64_t id = slot.next_id++;
    // Besides the last op, every kSignalEvery-th: a batch larger than the ring then still gets
    // completions that give ring room back while it is being posted.
    const bool signaled = last || op.signaled || i % kSignalEvery == kSignalEvery - 1;
    absl::Status s = PostWhenRoom(slot, op, id, signaled, /*ring_first=*/posted > 0, deadline);
    if (!s.ok()) {
      op.result = base::Annotate(s, "post UMR");
      done[i].store(true, std::memory_order_relaxed);
      stats_->umr_failed.Inc();
      if (!absl::IsInvalidArgument(s) && !absl::IsResourceExhausted(s) &&
          !absl::IsUnimplemented(s)) {
        ResetQueue(slot, s);  // the queue itself is broken
      }
      continue;
    }
    slot.outstanding.push_back({id, &op, &done[i]});
    op.posted = true;
    ++posted;
  }
  stats_->umr_posted.Inc(posted);
  return posted;
}

absl::Status UmrEngine::PostWhenRoom(QueueSlot& slot, UmrOp& op, uint64_t id, bool signaled,
                                     bool ring_first, absl::Time deadline) {
  absl::Status s = PostOne(slot, op, id, signaled);
  // A full ring: retire what completed and try again, until the deadline. The batch's requests
  // already on the ring complete only once the doorbell announced them.
  while (!s.ok() && absl::IsResourceExhausted(s) && base::MonotonicNow() < deadline) {
    if (ring_first) {
      s = slot.queue->Doorbell();
      if (!s.ok()) break;
    }
    PollAndDispatch(slot);
    std::this_thread::yield();
    s = PostOne(slot, op, id, signaled);
  }
  return s;
}

void UmrEngine::RingBatch(QueueSlot& slot, absl::Span<UmrOp* const> ops,
                          absl::Span<std::atomic<bool>> done) {
  absl::Status s = slot.queue->Doorbell();
  stats_->umr_batches.Inc();
  if (!s.ok()) ResetQueue(slot, s);
  // If the batch's last op failed to post, the last posted one is unsignalled: a signalled
  // success must still arrive for the batch to retire, so post nothing more and flush.
  if (ops.back()->result.ok() || !done[ops.size() - 1].load()) return;
  if (slot.queue == nullptr) return;  // the reset failed every outstanding op already
  absl::Status f = slot.queue->Flush(options_.completion_timeout);
  PollAndDispatch(slot);
  // Anything still pending had no error completion after a full flush: it succeeded.
  if (f.ok()) {
    while (!slot.outstanding.empty()) {
      Pending p = slot.outstanding.front();
      slot.outstanding.pop_front();
      p.op->result = absl::OkStatus();
      p.done->store(true, std::memory_order_release);
    }
  }
}

void UmrEngine::AwaitBatch(QueueSlot& slot, absl::Span<std::atomic<bool>> done,
                           absl::Time deadline) {
  auto all_done = [done] {
    for (const std::atomic<bool>& d : done) {
      if (!d.load(std::memory_order_acquire)) return false;
    }
    return true;
  };
  int spins = 0;
  while (!all_done()) {
    {
      base::MutexLock lock(&slot.mu);
      if (slot.queue != nullptr) PollAndDispatch(slot);
      if (all_done()) break;
      if (base::MonotonicNow() >= deadline) {
        AbandonBatch(slot, done);
        break;
      }
    }
    if (++spins < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Microseconds(20));
    }
  }
}

void UmrEngine::AbandonBatch(QueueSlot& slot, absl::Span<std::atomic<bool>> done) {
  for (auto it = slot.outstanding.begin(); it != slot.outstanding.end();) {
    bool mine = false;
    for (std::atomic<bool>& d : done) mine |= it->done == &d;
    if (mine) {
      it->op->result = absl::DeadlineExceededError(
          absl::StrFormat("UMR request %d had no completion after %s", it->id,
                          absl::FormatDuration(options_.completion_timeout)));
      it->done->store(true, std::memory_order_release);
      stats_->umr_timeouts.Inc();
      it = slot.outstanding.erase(it);
    } else {
      ++it;
    }
  }
}

void UmrEngine::Execute(absl::Span<UmrOp* const> ops) {
  if (ops.empty()) return;
  const absl::Time start = base::MonotonicNow();
  const absl::Time deadline = start + options_.completion_timeout;
  QueueSlot& slot = SlotForThisThread();
  // One flag per op; stable storage for the dispatcher.
  std::unique_ptr<std::atomic<bool>[]> flags(new std::atomic<bool>[ops.size()]);
  const absl::Span<std::atomic<bool>> done(flags.get(), ops.size());
  for (std::atomic<bool>& d : done) d.store(false, std::memory_order_relaxed);
  {
    base::MutexLock lock(&slot.mu);
    const size_t posted = PostBatch(slot, ops, done, deadline);
    if (posted > 0 && slot.queue != nullptr) RingBatch(slot, ops, done);
  }
  // Wait: poll (shared with other waiters on this queue) until every op of the batch is done.
  AwaitBatch(slot, done, deadline);
  stats_->umr_latency_ns.Record(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(base::MonotonicNow() - start)));
}

void UmrEngine::ExecuteSpread(absl::Span<UmrOp* const> ops) {
  if (ops.empty()) return;
  const absl::Time start = base::MonotonicNow();
  const absl::Time deadline = start + options_.completion_timeout;
  std::unique_ptr<std::atomic<bool>[]> flags(new std::atomic<bool>[ops.size()]);
  for (size_t i = 0; i < ops.size(); ++i) flags[i].store(false, std::memory_order_relaxed);
  const size_t chunk = std::max<size_t>(1, options_.queue_depth / 2);
  const size_t first = SlotIndexForThisThread();
  const bool fence = ops.front()->fence;
  struct Chunk {
    QueueSlot* slot;
    absl::Span<std::atomic<bool>> done;
  };
  std::vector<Chunk> chunks;
  chunks.reserve(ops.size() / chunk + 1);
  for (size_t lo = 0, n = 0; lo < ops.size(); lo += chunk, ++n) {
    const size_t len = std::min(chunk, ops.size() - lo);
    const absl::Span<UmrOp* const> part = ops.subspan(lo, len);
    const absl::Span<std::atomic<bool>> done(flags.get() + lo, len);
    // The first chunk on each queue carries the batch's fence: what was posted on that queue
    // before the batch completes before any of it starts.
    if (fence && n < slots_.size()) part.front()->fence = true;
    QueueSlot& slot = *slots_[(first + n) % slots_.size()];
    {
      base::MutexLock lock(&slot.mu);
      const size_t posted = PostBatch(slot, part, done, deadline);
      if (posted > 0 && slot.queue != nullptr) RingBatch(slot, part, done);
    }
    chunks.push_back({&slot, done});
  }
  for (const Chunk& c : chunks) AwaitBatch(*c.slot, c.done, deadline);
  stats_->umr_latency_ns.Record(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(base::MonotonicNow() - start)));
}

}  // namespace regcache::cache
