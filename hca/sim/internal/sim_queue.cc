#include "hca/sim/internal/sim_queue.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/sim/internal/mkc_convert.h"
#include "hca/sim/internal/umr_executor.h"
#include "umr/mkey.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_builder.h"

namespace regcache::hca::sim {
namespace {

// WQEBBs to reserve for a UMR WQE with `translation_bytes` of inline translation (64-B padded);
// beyond the largest WQE the builder fails, so the reservation stops there.
unsigned UmrWqebbs(size_t translation_bytes) {
  return static_cast<unsigned>(std::min<size_t>(
      umr::kUmrHeadWqebbs + translation_bytes / umr::kWqebb, umr::kMaxWqebbsPerWqe));
}

absl::Status PostError(absl::Status s) {
  // Builder failures are the caller's request breaking its REQUIRES.
  if (s.code() == absl::StatusCode::kResourceExhausted ||
      s.code() == absl::StatusCode::kUnimplemented) {
    return s;
  }
  return absl::InvalidArgumentError(s.message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<SimQueue>> SimQueue::Create(QueueContext ctx, Pd pd, uint32_t sqn,
                                                           uint32_t depth, ExecutionMode mode) {
  if (depth < 4 || (depth & (depth - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue depth ", depth, " is not a power of two >= 4"));
  }
  std::unique_ptr<SimQueue> q(new SimQueue(std::move(ctx), pd, sqn, depth, mode));
  umr::SqRing::Options o;
  o.sqn = sqn;
  o.umr_fence = umr::FenceMode::kInitiatorSmall;
  absl::StatusOr<umr::SqRing> ring =
      umr::SqRing::Create(absl::MakeSpan(q->ring_.get(), size_t{depth} * umr::kWqebb), o);
  if (!ring.ok()) return ring.status();
  q->sq_ = std::make_unique<umr::SqRing>(*std::move(ring));
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
      shadow_(depth),
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
  if (staging_.lkey != 0 && ctx_.destroy_staging) ctx_.destroy_staging(staging_.lkey);
}

absl::StatusOr<umr::TranslationStaging> SimQueue::ReserveStaging(size_t n) {
  if (staging_.bytes.empty()) {
    if (!ctx_.register_staging) {
      return absl::UnimplementedError("this queue cannot stage a translation (pointer mode)");
    }
    staging_.bytes.assign(kStagingBytes, 0);
    absl::StatusOr<Key> lkey = ctx_.register_staging(pd_, absl::MakeSpan(staging_.bytes));
    if (!lkey.ok()) {
      staging_.bytes.clear();
      return lkey.status();
    }
    staging_.lkey = *lkey;
  }
  const uint64_t size = staging_.bytes.size();
  if (n > size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a translation of ", n, " bytes exceeds the queue's staging buffer of ", size));
  }
  if (staging_.in_use.empty()) staging_.head = staging_.tail = 0;  // empty: the whole buffer
  uint64_t start = staging_.head;
  if (start % size + n > size) start += size - start % size;  // contiguous: skip to the start
  if (start + n - staging_.tail > size) {
    return absl::ResourceExhaustedError("translation staging full (maps not yet completed)");
  }
  staging_pending_ = start + n;
  uint8_t* p = staging_.bytes.data() + start % size;
  return umr::TranslationStaging{absl::MakeSpan(p, n), reinterpret_cast<uint64_t>(p),
                                 staging_.lkey};
}

void SimQueue::CommitStaging(uint32_t counter) {
  staging_.head = staging_pending_;
  staging_.in_use.emplace_back(counter, staging_.head);
  staging_pending_ = 0;
}

void SimQueue::ReleaseStaging() {
  while (!staging_.in_use.empty() &&
         static_cast<int32_t>(staging_.in_use.front().first - retired_) < 0) {
    staging_.tail = staging_.in_use.front().second;
    staging_.in_use.pop_front();
  }
}

uint32_t SimQueue::FreeSlots() const { return sq_->FreeWqebbs(retired_); }

absl::Status SimQueue::Post(
    uint64_t request_id, const PostOptions& options, unsigned max_wqebbs,
    const std::function<absl::StatusOr<umr::WqeSize>(const umr::WqeHeader&, absl::Span<uint8_t>)>&
        build) {
  const umr::WqeHeader header = sq_->NextHeader(/*is_umr=*/true, options.signaled, options.fence);
  absl::StatusOr<absl::Span<uint8_t>> buf = sq_->Begin(retired_, max_wqebbs);
  if (!buf.ok()) return buf.status();
  absl::StatusOr<umr::WqeSize> size = build(header, *buf);
  if (!size.ok()) return PostError(size.status());
  const uint32_t counter = sq_->producer();
  absl::StatusOr<uint32_t> committed = sq_->Commit(*size, header, /*is_umr=*/true);
  if (!committed.ok()) return committed.status();
  if (staging_pending_ != 0) CommitStaging(counter);
  shadow_[counter & (depth_ - 1)] = Shadow{request_id, options.signaled, size->wqebbs};
  return absl::OkStatus();
}

absl::Status SimQueue::PostMap(uint64_t request_id, const MapRequest& r) {
  umr::MapKeyRequest m;
  m.key = umr::MakeKey(KeyIndex(r.key), r.new_variant);
  m.access = ToMkeyAccess(r.access | kLocalRead);
  m.start_addr = r.start_addr;
  m.length = r.length;
  m.length64 = r.length64;
  m.en_rinval = r.remote_invalidate;
  m.check_free = r.require_free ? umr::FreeCheck::kMustBeFree : umr::FreeCheck::kNone;
  m.modify = ctx_.modify;
  if (m.access.remote_atomic && !m.modify.atomic) {
    return absl::InvalidArgumentError(
        "remote atomic access cannot be granted by a UMR on this device "
        "(umr_modify_atomic_disabled)");
  }
  switch (r.layout) {
    case Layout::kKlm:
      m.mode = umr::AccessMode::kKlm;
      for (const KlmEntry& e : r.klm) {
        if (e.length == 0 || e.length > umr::kMaxKlmByteCount) {
          return absl::InvalidArgumentError(
              absl::StrCat("KLM length ", e.length, " outside (0, 2^31]"));
        }
        m.klm.push_back(ToUmrKlm(e));
      }
      break;
    case Layout::kKsm:
      m.mode = umr::AccessMode::kKsm;
      m.log_entity_size = static_cast<uint8_t>(r.log_entity_size);
      for (const KlmEntry& e : r.klm) m.ksm.push_back(ToUmrKsm(e));
      break;
    case Layout::kMtt:
      m.mode = umr::AccessMode::kMtt;
      m.log_entity_size = static_cast<uint8_t>(r.log_entity_size);
      for (const MttEntry& e : r.mtt) m.mtt.push_back(ToUmrMtt(e));
      break;
  }
  const size_t n = m.mtt.size() + m.klm.size() + m.ksm.size();
  const size_t padded = umr::PaddedTranslationBytes(m.mode, n);
  const size_t inline_limit =
      m.mode == umr::AccessMode::kMtt ? umr::kMaxInlineMtts : umr::kMaxInlineKlms;
  if (n <= inline_limit) {
    return Post(request_id, r.options, UmrWqebbs(padded),
                [&m](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                  // Capacity is the device's check (MW_BIND), not the poster's.
                  return umr::BuildMapKey(h, m, /*capacity_entries=*/UINT32_MAX, out);
                });
  }
  // Too long to travel inline: by pointer, from the queue's staging buffer.
  ASSIGN_OR_RETURN(const umr::TranslationStaging staging, ReserveStaging(padded));
  constexpr unsigned kPointerWqebbs = (umr::kUmrHeadDs + 1 + 3) / 4;  // DS 9
  absl::Status s = Post(request_id, r.options, kPointerWqebbs,
                        [&](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                          return umr::BuildMapKeyByPointer(h, m, UINT32_MAX, staging, out);
                        });
  staging_pending_ = 0;  // committed by Post, or dropped
  return s;
}

absl::Status SimQueue::PostUpdate(uint64_t request_id, const UpdateRequest& r) {
  if (r.fields == 0) return absl::InvalidArgumentError("UpdateRequest with no fields");
  umr::UpdateKeyRequest u;
  u.key = umr::MakeKey(KeyIndex(r.key), r.new_variant);
  u.check_free = umr::FreeCheck::kMustNotBeFree;
  u.fields.access = ToMkeyAccess(r.access | kLocalRead);
  u.fields.start_addr = r.start_addr;
  u.fields.len = r.length;
  u.fields.length64 = r.length64;
  u.fields.mkey_7_0 = r.new_variant;
  u.fields.en_rinval = r.remote_invalidate;
  if (r.fields & kUpdateAccess) {
    if ((r.access & kRemoteAtomic) && !ctx_.modify.atomic) {
      return absl::InvalidArgumentError(
          "remote atomic access cannot be granted by a UMR on this device "
          "(umr_modify_atomic_disabled)");
    }
    u.mask |= ctx_.modify.atomic ? umr::kMaskAccess : umr::kMaskAccess & ~umr::kMaskA;
  }
  if (r.fields & kUpdateRange) u.mask |= umr::kMaskLen | umr::kMaskStartAddr;
  if (r.fields & kUpdateVariant) u.mask |= umr::kMaskKey;
  if (r.fields & kUpdateRemoteInvalidate) u.mask |= umr::kMaskEnRinval;
  return Post(request_id, r.options, umr::kUmrHeadWqebbs,
              [&u](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                return umr::BuildUpdateKey(h, u, out);
              });
}

absl::Status SimQueue::PostInvalidate(uint64_t request_id, Key key, PostOptions options) {
  umr::LocalInvalidateRequest r;
  r.key = key;
  return Post(request_id, options, umr::kUmrHeadWqebbs,
              [&r](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                return umr::BuildLocalInvalidate(h, r, out);
              });
}

absl::Status SimQueue::PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                              absl::Span<const MttEntry> entries,
                                              PostOptions options) {
  constexpr size_t kBlock = umr::EntriesPer64B(umr::AccessMode::kMtt);
  if (entries.empty() || entries.size() % kBlock != 0 || first_entry % kBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MTT rewrite [", first_entry, ", +", entries.size(), ") is not whole blocks of 8 entries"));
  }
  umr::RewriteTranslationRequest r;
  r.key = key;
  r.mode = umr::AccessMode::kMtt;
  r.first_entry = first_entry;
  r.check_free = umr::FreeCheck::kMustNotBeFree;
  for (const MttEntry& e : entries) r.mtt.push_back(ToUmrMtt(e));
  const unsigned wqebbs =
      UmrWqebbs(umr::PaddedTranslationBytes(umr::AccessMode::kMtt, entries.size()));
  return Post(request_id, options, wqebbs, [&r](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
    return umr::BuildRewriteTranslation(h, r, /*extended_offset=*/true, out);
  });
}

absl::Status SimQueue::Doorbell() {
  ctx_.stats->doorbells.Inc();
  published_.store(sq_->producer(), std::memory_order_release);
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
  ctx_.stats->wqes_executed.Inc();
  const uint32_t slot = counter & (depth_ - 1);
  const absl::Span<const uint8_t> ring(ring_.get(), size_t{depth_} * umr::kWqebb);
  absl::StatusOr<absl::Span<const uint8_t>> bytes = umr::GatherWqe(ring, slot, &scratch_);
  absl::Status status;
  uint32_t wqebbs = 1;
  bool signaled = true;  // a WQE we cannot parse completes with an error
  uint8_t opcode = umr::kOpcodeUmr;
  if (!bytes.ok()) {
    status = DeviceError(Syndrome::kLocalQpOp, bytes.status().message());
  } else {
    wqebbs = umr::WqebbsForDs(bytes->size() / umr::kOctoword);
    absl::StatusOr<umr::WqeDesc> wqe = umr::DecodeWqe(*bytes);
    if (!wqe.ok()) {
      status = DeviceError(Syndrome::kLocalQpOp, wqe.status().message());
    } else {
      signaled = wqe->ctrl.signaled();
      opcode = wqe->ctrl.opcode;
      if (opcode == umr::kOpcodeNop) {
        status = absl::OkStatus();
      } else if (opcode != umr::kOpcodeUmr) {
        status = DeviceError(Syndrome::kLocalQpOp,
                             absl::StrCat("opcode 0x", absl::Hex(opcode), " on a UMR queue"));
      } else if (Syndrome injected = ctx_.take_injected_umr_failure();
                 injected != Syndrome::kNone) {
        ctx_.stats->injected_failures.Inc();
        status = DeviceError(injected, "injected UMR failure");
      } else {
        UmrOutcome outcome;
        status = ExecuteUmr(ctx_.table, pd_.pdn, *wqe, ctx_.modify, &outcome,
                            [this](uint32_t lkey, uint64_t addr, absl::Span<uint8_t> out) {
                              return ctx_.read_local(pd_, lkey, addr, out);
                            });
        if (status.ok()) {
          ctx_.stats->umrs_executed.Inc();
          if (outcome.local_invalidate) ctx_.stats->local_invalidations.Inc();
        }
      }
    }
  }
  if (!status.ok()) ctx_.stats->umrs_failed.Inc();
  if (!status.ok()) error_status_[slot] = status;
  if (signaled || !status.ok()) WriteCqe(static_cast<uint16_t>(counter), opcode, status);
  return wqebbs;
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
  ctx_.stats->cqes_written.Inc();
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
    const uint16_t wqe_counter = cqe->wqe_counter;
    const uint32_t counter =
        retired_ + static_cast<uint16_t>(wqe_counter - static_cast<uint16_t>(retired_));
    const Shadow& sh = shadow_[counter & (depth_ - 1)];
    retired_ = counter + sh.wqebbs;
    ReleaseStaging();
    const bool error = cqe->is_error();
    if (!error && !sh.want_completion) continue;  // forced signal: retire only
    Completion& c = out[got++];
    c.request_id = sh.request_id;
    if (error) {
      c.syndrome = static_cast<Syndrome>(cqe->syndrome);
      c.vendor_syndrome = cqe->vendor_err_synd;
      // The reason text comes from the executor; the syndromes are the CQE's bytes.
      c.status = DeviceError(c.syndrome,
                             absl::StrFormat("WQE %u: %s", wqe_counter,
                                             error_status_[counter & (depth_ - 1)].message()),
                             c.vendor_syndrome);
    } else {
      c.syndrome = Syndrome::kNone;
      c.vendor_syndrome = 0;
      c.status = absl::OkStatus();
    }
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