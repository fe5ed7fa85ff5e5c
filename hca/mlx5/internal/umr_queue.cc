#include "hca/mlx5/internal/umr_queue.h"

#include <endian.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/mlx5/internal/mmio.h"
#include "hca/verbs/wc_status.h"
#include "umr/cqe.h"

namespace regcache::hca::mlx5 {
namespace {

constexpr int kSendDbr = 1;  // the doorbell record's send counter (MLX5_SND_DBR)
constexpr int kCqSetCi = 0;  // the CQ doorbell record's consumer index (MLX5_CQ_SET_CI)
constexpr uint64_t kNopId = ~uint64_t{0};  // Flush's NOP: never reported

absl::Status QueueBroken() {
  return absl::UnavailableError(
      "mlx5 UMR queue pair in the error state with completions outstanding: poll them, or "
      "replace the queue");
}

}  // namespace

absl::StatusOr<std::unique_ptr<UmrQueue>> UmrQueue::Create(verbs::Context* c, Pd pd, ibv_pd* vpd,
                                                           uint32_t depth,
                                                           const UmrQueueParams& params) {
  if (depth < 4 || (depth & (depth - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue depth ", depth, " is not a power of two >= 4"));
  }
  std::unique_ptr<UmrQueue> q(new UmrQueue(c, pd, vpd, params));
  // Every WQE completes at most once: a CQ as deep as the ring never overflows.
  q->cq_ = ibv_create_cq(c->ctx(), static_cast<int>(depth), nullptr, nullptr, 0);
  if (q->cq_ == nullptr) return verbs::ErrnoStatus(errno, "mlx5: ibv_create_cq (UMR queue)");
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_RC;
  a.send_cq = q->cq_;
  a.recv_cq = q->cq_;
  a.pd = vpd;
  a.cap.max_send_wr = depth;
  a.cap.max_recv_wr = 0;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  // LOCAL_INV makes the provider size send WQEs for a UMR; the WQEs themselves are written
  // into the buffer directly, as a raw WQE is.
  a.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
  mlx5dv_qp_init_attr dv{};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
  dv.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
  q->qp_ = mlx5dv_create_qp(c->ctx(), &a, &dv);
  if (q->qp_ == nullptr) return verbs::ErrnoStatus(errno, "mlx5: mlx5dv_create_qp (UMR queue)");
  mlx5dv_obj obj{};
  obj.qp.in = q->qp_;
  obj.qp.out = &q->dv_qp_;
  obj.cq.in = q->cq_;
  obj.cq.out = &q->dv_cq_;
  if (const int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ); rc != 0) {
    return verbs::ErrnoStatus(rc, "mlx5: mlx5dv_init_obj (UMR queue)");
  }
  if (q->dv_qp_.sq.stride != umr::kWqebb || q->dv_qp_.sq.wqe_cnt < depth ||
      (q->dv_cq_.cqe_size != 64 && q->dv_cq_.cqe_size != 128)) {
    return absl::InternalError(absl::StrFormat(
        "mlx5: unexpected queue geometry (SQ %u x %u bytes for depth %u, CQE %u bytes)",
        q->dv_qp_.sq.wqe_cnt, q->dv_qp_.sq.stride, depth, q->dv_cq_.cqe_size));
  }
  RETURN_IF_ERROR(q->Connect());
  RETURN_IF_ERROR(q->MakePoster());
  return q;
}

UmrQueue::~UmrQueue() {
  poster_.reset();  // gives its staging buffer back first
  verbs::DestroyQpAndCq(qp_, cq_, "mlx5 UMR queue");
}

absl::Status UmrQueue::Connect() {
  psn_ = verbs::RandomPsn();
  RETURN_IF_ERROR(verbs::QpToInit(*c_, qp_, 0));
  RETURN_IF_ERROR(verbs::QpToRtr(*c_, qp_, verbs::LocalAddress(*c_, qp_->qp_num, psn_)));
  return verbs::QpToRts(*c_, qp_, psn_);
}

absl::Status UmrQueue::MakePoster() {
  UmrPosterOptions o;
  o.sqn = qp_->qp_num;
  o.umr_fence = params_.umr_fence;
  o.modify = params_.modify;
  o.max_inline_klm = params_.max_inline_klm;
  if (params_.pointer_umr) {
    o.register_staging = [this](absl::Span<uint8_t> bytes) -> absl::StatusOr<Key> {
      const int access = IBV_ACCESS_LOCAL_WRITE;
      staging_mr_ = ibv_reg_mr(vpd_, bytes.data(), bytes.size(), access);
      if (staging_mr_ == nullptr) {
        return verbs::ErrnoStatus(errno, "mlx5: ibv_reg_mr (UMR staging buffer)");
      }
      return staging_mr_->lkey;
    };
    o.release_staging = [this](Key) {
      if (staging_mr_ != nullptr && ibv_dereg_mr(staging_mr_) != 0) {
        RC_LOG(WARNING) << "mlx5: ibv_dereg_mr of a UMR staging buffer failed (errno " << errno
                        << ")";
      }
      staging_mr_ = nullptr;
    };
  }
  const size_t bytes = size_t{dv_qp_.sq.wqe_cnt} * dv_qp_.sq.stride;
  ASSIGN_OR_RETURN(
      poster_,
      UmrPoster::Create(absl::MakeSpan(static_cast<uint8_t*>(dv_qp_.sq.buf), bytes), std::move(o)));
  published_ = 0;
  broken_ = false;
  return absl::OkStatus();
}

absl::Status UmrQueue::Ready() {
  if (!broken_) return absl::OkStatus();
  if (!poster_->Idle()) return QueueBroken();
  // The provider re-initializes its indices and clears the doorbell record on RESET.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RESET;
  if (ibv_modify_qp(qp_, &attr, IBV_QP_STATE) != 0) {
    return verbs::ErrnoStatus(errno, "mlx5: resetting a UMR queue pair");
  }
  RETURN_IF_ERROR(Connect());
  poster_.reset();
  return MakePoster();
}

absl::Status UmrQueue::PostMap(uint64_t request_id, const MapRequest& request) {
  RETURN_IF_ERROR(Ready());
  return poster_->PostMap(request_id, request);
}

absl::Status UmrQueue::PostUpdate(uint64_t request_id, const UpdateRequest& request) {
  RETURN_IF_ERROR(Ready());
  return poster_->PostUpdate(request_id, request);
}

absl::Status UmrQueue::PostInvalidate(uint64_t request_id, Key key, PostOptions options) {
  RETURN_IF_ERROR(Ready());
  return poster_->PostInvalidate(request_id, key, options);
}

absl::Status UmrQueue::PostRewriteTranslation(uint64_t, Key, uint32_t, absl::Span<const MttEntry>,
                                              PostOptions) {
  return absl::UnimplementedError(
      "mlx5: MTT translations belong to the kernel's memory regions (no translation offset)");
}

absl::Status UmrQueue::Doorbell() {
  const uint32_t producer = poster_->producer();
  if (producer == published_) return absl::OkStatus();
  // 1. WQEs before the record; 2. the record before the register; 3. the register write out.
  ToDeviceBarrier();
  dv_qp_.dbrec[kSendDbr] = htobe32(producer & 0xffff);
  const uint8_t* ctrl = static_cast<const uint8_t*>(dv_qp_.sq.buf) +
                        size_t{poster_->last_wqe() & (poster_->depth() - 1)} * umr::kWqebb;
  {
    base::MutexLock lock(params_.doorbell_mu);
    WcStartBarrier();
    MmioWrite64(static_cast<uint8_t*>(dv_qp_.bf.reg) + bf_offset_, ctrl);
    FlushWrites();
    bf_offset_ ^= dv_qp_.bf.size;
  }
  published_ = producer;
  return absl::OkStatus();
}

size_t UmrQueue::Harvest(absl::Span<Completion> out) {
  size_t got = 0;
  const uint32_t n = dv_cq_.cqe_cnt;
  bool consumed = false;
  while (true) {
    uint8_t* slot =
        static_cast<uint8_t*>(dv_cq_.buf) + size_t{cq_consumer_ & (n - 1)} * dv_cq_.cqe_size;
    uint8_t* cqe64 = slot + dv_cq_.cqe_size - sizeof(umr::CqeBytes);  // 128-B CQEs: 2nd half
    const uint8_t op_own = *static_cast<volatile uint8_t*>(cqe64 + sizeof(umr::CqeBytes) - 1);
    const bool owner = (op_own & 1) != 0;
    if ((op_own >> 4) == umr::kCqeOpInvalid || owner != ((cq_consumer_ & n) != 0)) break;
    FromDeviceBarrier();  // the rest of the CQE only after its owner byte
    umr::CqeBytes bytes;
    std::memcpy(bytes.data(), cqe64, bytes.size());
    ++cq_consumer_;
    consumed = true;
    const absl::StatusOr<umr::Cqe> cqe = umr::DecodeCqe(bytes);
    if (!cqe.ok()) {
      RC_LOG(ERROR) << "mlx5: undecodable CQE on a UMR queue: " << cqe.status();
      broken_ = true;
      continue;
    }
    if (cqe->is_error()) broken_ = true;
    Completion c;
    if (!poster_->Retire(*cqe, &c) || c.request_id == kNopId) continue;
    if (got < out.size()) {
      out[got++] = std::move(c);
    } else {
      pending_.push_back(std::move(c));
    }
  }
  if (consumed) {
    ToDeviceBarrier();
    dv_cq_.dbrec[kCqSetCi] = htobe32(cq_consumer_ & 0xffffff);
  }
  return got;
}

size_t UmrQueue::Poll(absl::Span<Completion> out) {
  size_t got = 0;
  while (got < out.size() && !pending_.empty()) {
    out[got++] = std::move(pending_.front());
    pending_.pop_front();
  }
  if (got < out.size() && pending_.empty()) got += Harvest(out.subspan(got));
  return got;
}

absl::Status UmrQueue::Flush(absl::Duration timeout) {
  const absl::Time deadline = base::MonotonicNow() + timeout;
  // A signalled NOP after everything rung: its CQE comes once all before it executed (an error
  // state flushes it too). Room for it may have to be made by retiring first.
  if (!broken_) {
    RETURN_IF_ERROR(Doorbell());
    absl::Status s = poster_->PostNop(kNopId);
    while (absl::IsResourceExhausted(s) && base::MonotonicNow() < deadline) {
      Harvest({});
      s = poster_->PostNop(kNopId);
    }
    RETURN_IF_ERROR(s);
    RETURN_IF_ERROR(Doorbell());
  }
  while (!poster_->Idle()) {
    Harvest({});
    if (poster_->Idle()) break;
    if (base::MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError("mlx5 UMR queue flush timed out");
    }
    std::this_thread::yield();
  }
  return absl::OkStatus();
}

}  // namespace regcache::hca::mlx5
