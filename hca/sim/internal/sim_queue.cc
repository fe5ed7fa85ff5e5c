#include "hca/sim/internal/sim_queue.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "umr/mkey.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_builder.h"

namespace regcache::hca::sim {

absl::StatusOr<std::unique_ptr<SimQueue>> SimQueue::Create(QueueContext ctx, Pd pd, uint32_t sqn,
                                                           uint32_t depth, ExecutionMode mode) {
  if (depth < 4 || (depth & (depth - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue depth ", depth, " is not a power of two >= 4"));
  }
  std::unique_ptr<SimQueue> q(new SimQueue(std::move(ctx), pd, sqn, depth, mode));
  UmrPosterOptions o;
  o.sqn = sqn;
  o.umr_fence = umr::FenceMode::kInitiatorSmall;
  o.modify = q->ctx_.rules.modify;
  SimQueue* p = q.get();
  if (q->ctx_.register_staging) {
    o.register_staging = [p](absl::Span<uint8_t> bytes) {
      return p->ctx_.register_staging(p->pd_, bytes);
    };
  }
  if (q->ctx_.destroy_staging) o.release_staging = [p](Key k) { p->ctx_.destroy_staging(k); };
  // Written by the engine before it publishes the error CQE; read after Poll's acquire.
  o.error_reason = [p](uint32_t slot) { return std::string(p->error_status_[slot].message()); };
  ASSIGN_OR_RETURN(
      q->poster_,
      UmrPoster::Create(absl::MakeSpan(q->ring_.get(), size_t{depth} * umr::kWqebb), std::move(o)));
  if (mode == ExecutionMode::kThread) q->engine_ = std::thread([p = q.get()] { p->EngineLoop(); });
  return q;
}

SimQueue::SimQueue(QueueContext ctx, Pd pd, uint32_t sqn, uint32_t depth, ExecutionMode mode)
    : ctx_(std::move(ctx)),
      pd_(pd),
      sqn_(sqn),
      depth_(depth),
      mode_(mode),
      ring_(new (std::align_val_t{64}) uint8_t[size_t{depth} * umr::kWqebb]()),
      cq_(new umr::CqeBytes[depth]),
      error_status_(depth) {
  // Every CQE starts invalid (opcode 0xf, owner 0), as the driver initializes a CQ.
  umr::Cqe invalid;
  invalid.opcode = umr::kCqeOpInvalid;
  const absl::StatusOr<umr::CqeBytes> bytes = umr::EncodeCqe(invalid);
  RC_CHECK(bytes.ok()) << bytes.status();
  for (uint32_t i = 0; i < depth; ++i) cq_[i] = *bytes;
}

SimQueue::~SimQueue() {
  if (engine_.joinable()) {
    {
      base::MutexLock lock(&engine_mu_);
      stop_ = true;
    }
    engine_cv_.SignalAll();
    engine_.join();
  }
  poster_.reset();  // gives its staging buffer back while the context is still here
}

uint32_t SimQueue::FreeSlots() const { return poster_->FreeSlots(); }

absl::Status SimQueue::PostMap(uint64_t request_id, const MapRequest& request) {
  return poster_->PostMap(request_id, request);
}

absl::Status SimQueue::PostUpdate(uint64_t request_id, const UpdateRequest& request) {
  return poster_->PostUpdate(request_id, request);
}

absl::Status SimQueue::PostInvalidate(uint64_t request_id, Key key, PostOptions options) {
  return poster_->PostInvalidate(request_id, key, options);
}

absl::Status SimQueue::PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                              absl::Span<const MttEntry> entries,
                                              PostOptions options) {
  return poster_->PostRewriteTranslation(request_id, key, first_entry, entries, options);
}

absl::Status SimQueue::Doorbell() {
  ctx_.core->stats().doorbells.Inc();
  published_.store(poster_->producer(), std::memory_order_release);
  base::MutexLock lock(&engine_mu_);
  if (mode_ == ExecutionMode::kInline) {
    Drain();
  } else {
    engine_cv_.SignalAll();
  }
  return absl::OkStatus();
}

void SimQueue::EngineLoop() {
  base::MutexLock lock(&engine_mu_);
  while (true) {
    while (!stop_ && executed_ == published_.load(std::memory_order_acquire)) {
      engine_cv_.Wait(&engine_mu_);
    }
    if (stop_) return;
    Drain();
    engine_cv_.SignalAll();  // Flush waiters
  }
}

void SimQueue::Drain() {
  uint32_t published = published_.load(std::memory_order_acquire);
  while (executed_ != published) {
    executed_ += ExecuteOne(executed_);
    published = published_.load(std::memory_order_acquire);
  }
}

uint32_t SimQueue::ExecuteOne(uint32_t counter) {
  const uint32_t slot = counter & (depth_ - 1);
  const absl::Span<const uint8_t> ring(ring_.get(), size_t{depth_} * umr::kWqebb);
  const WqeResult r = ctx_.core->ExecuteSendWqe(pd_.pdn, ring, counter, ctx_.rules,
                                                ctx_.take_injected_umr_failure, &scratch_);
  if (!r.status.ok()) error_status_[slot] = r.status;
  if (r.signaled || !r.status.ok()) WriteCqe(static_cast<uint16_t>(counter), r.opcode, r.status);
  return r.wqebbs;
}

void SimQueue::WriteCqe(uint16_t wqe_counter, uint8_t opcode, const absl::Status& status) {
  const absl::Duration delay = ctx_.completion_delay();
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  const uint32_t n = cq_producer_.load(std::memory_order_relaxed);
  umr::Cqe cqe;
  cqe.opcode = umr::kCqeOpReq;
  cqe.owner = ((n / depth_) & 1) != 0;
  cqe.wqe_counter = wqe_counter;
  cqe.qpn = sqn_;
  cqe.wqe_opcode = opcode;
  if (!status.ok()) {
    cqe.opcode = umr::kCqeOpReqErr;
    const std::optional<ErrorInfo> info = ErrorOf(status);
    cqe.syndrome = static_cast<uint8_t>(info ? info->syndrome : Syndrome::kLocalQpOp);
    cqe.vendor_err_synd = info ? info->vendor_syndrome : 0;
  }
  // Every field is the sim's own and fits its width (sqn < 2^24: SqRing::Create checked it).
  const absl::StatusOr<umr::CqeBytes> bytes = umr::EncodeCqe(cqe);
  RC_CHECK(bytes.ok()) << bytes.status();
  cq_[n & (depth_ - 1)] = *bytes;
  ctx_.core->stats().cqes_written.Inc();
  cq_producer_.store(n + 1, std::memory_order_release);
}

size_t SimQueue::Poll(absl::Span<Completion> out) {
  size_t got = 0;
  while (got < out.size()) {
    if (cq_consumer_ == cq_producer_.load(std::memory_order_acquire)) break;
    // A 64-byte CQE always decodes; validity is the opcode and the owner bit.
    const absl::StatusOr<umr::Cqe> cqe = umr::DecodeCqe(cq_[cq_consumer_ & (depth_ - 1)]);
    // The owner bit must match this pass over the ring (RC_CHECK: the producer counter said so).
    RC_CHECK(cqe.ok() && cqe->opcode != umr::kCqeOpInvalid &&
             cqe->owner == (((cq_consumer_ / depth_) & 1) != 0))
        << "CQE " << cq_consumer_ << " not valid";
    ++cq_consumer_;
    if (poster_->Retire(*cqe, &out[got])) ++got;
  }
  return got;
}

std::vector<uint8_t> SimQueue::CqRingForTest() {
  base::MutexLock lock(&engine_mu_);  // the engine writes CQEs under it
  std::vector<uint8_t> bytes(size_t{depth_} * sizeof(umr::CqeBytes));
  for (uint32_t i = 0; i < depth_; ++i) {
    std::memcpy(bytes.data() + size_t{i} * sizeof(umr::CqeBytes), cq_[i].data(),
                sizeof(umr::CqeBytes));
  }
  return bytes;
}

absl::Status SimQueue::Flush(absl::Duration timeout) {
  base::MutexLock lock(&engine_mu_);
  if (mode_ == ExecutionMode::kInline) {
    Drain();
    return absl::OkStatus();
  }
  const bool done = engine_cv_.WaitFor(&engine_mu_, timeout, [this]() {
    engine_mu_.AssertHeld();  // WaitFor calls the predicate with engine_mu_ held
    return executed_ == published_.load(std::memory_order_acquire);
  });
  return done ? absl::OkStatus() : absl::DeadlineExceededError("sim queue flush timed out");
}

}  // namespace regcache::hca::sim