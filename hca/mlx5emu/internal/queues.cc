// Completion queues and queue pairs: the device's half (executing WQEs and work requests,
// writing CQEs) and the provider's half (poll_cq, post_send, the state machine).
#include <endian.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hca/mlx5emu/internal/emu.h"
#include "hca/mlx5emu/internal/verbs_ops.h"
#include "hca/status.h"
#include "umr/cqe.h"
#include "umr/prm.h"
#include "umr/sq.h"
#include "umr/wqe_builder.h"

namespace regcache::hca::mlx5emu {
namespace {

constexpr uint8_t kSynFlush = umr::kCqeSyndWrFlush;

// --- device memory: what the caller writes with plain stores, read back as a DMA would ---
uint32_t LoadBe32(const void* p) { return be32toh(*static_cast<const volatile uint32_t*>(p)); }
void StoreBe32(void* p, uint32_t v) { *static_cast<volatile uint32_t*>(p) = htobe32(v); }
uint8_t LoadByte(const uint8_t* p) { return *static_cast<const volatile uint8_t*>(p); }

// Copies WQEBBs [slot, slot+n) of the SQ ring (wrapping) into the same slots of `snap`.
void CopyWqebbs(const uint8_t* ring, uint8_t* snap, uint32_t slots, uint32_t slot, uint32_t n) {
  std::atomic_thread_fence(std::memory_order_acquire);  // after the doorbell record's load
  for (uint32_t i = 0; i < n; ++i) {
    const size_t off = size_t{(slot + i) & (slots - 1)} * umr::kWqebb;
    const volatile uint64_t* src = reinterpret_cast<const volatile uint64_t*>(ring + off);
    uint64_t* dst = reinterpret_cast<uint64_t*>(snap + off);
    for (size_t w = 0; w < umr::kWqebb / 8; ++w) dst[w] = src[w];
  }
}

// Writes one CQE at the CQ's producer position with that pass's owner bit, the ownership byte
// last. A CQ whose consumer (its doorbell record) is a whole ring behind has overrun.
void WriteCqe(Cq* cq, umr::Cqe cqe) {
  const uint32_t consumer = LoadBe32(cq->dbrec.get()) & 0xffffff;
  if (((cq->producer - consumer) & 0xffffff) >= cq->cqe_cnt) {
    Violation(
        absl::StrFormat("CQ 0x%x overrun: %u CQEs unconsumed in a ring of %u (CQE for "
                        "QP 0x%x dropped)",
                        cq->cq.handle, (cq->producer - consumer) & 0xffffff, cq->cqe_cnt, cqe.qpn));
    return;
  }
  cqe.owner = ((cq->producer / cq->cqe_cnt) & 1) != 0;
  const absl::StatusOr<umr::CqeBytes> bytes = umr::EncodeCqe(cqe);
  if (!bytes.ok()) {
    Violation(absl::StrCat("emulator bug: CQE does not encode: ", bytes.status().message()));
    return;
  }
  volatile uint8_t* slot = cq->buf.get() + size_t{cq->producer & (cq->cqe_cnt - 1)} * 64;
  for (size_t i = 0; i + 1 < bytes->size(); ++i) slot[i] = (*bytes)[i];
  std::atomic_thread_fence(std::memory_order_release);
  slot[bytes->size() - 1] = (*bytes)[bytes->size() - 1];
  ++cq->producer;
  cq->published.store(cq->producer, std::memory_order_release);
}

// Counts a fault countdown down by one unless it is at 0; returns its value before.
uint32_t CountDown(std::atomic<uint32_t>& n) {
  uint32_t v = n.load();
  while (v != 0 && !n.compare_exchange_weak(v, v - 1)) {
  }
  return v;
}

// A CQE now, or after the completion delay a test asked for (in order behind earlier ones).
void EmitUmrCqe(Cq* cq, const umr::Cqe& cqe) {
  Faults& f = GetFaults();
  if (CountDown(f.lose_umr_cqes) != 0) return;
  const int64_t delay = f.umr_cqe_delay_ns.load();
  if (delay > 0 || !cq->delayed.empty()) {
    cq->delayed.push_back({absl::Now() + absl::Nanoseconds(delay), cqe});
    return;
  }
  WriteCqe(cq, cqe);
}

bool DrainDelayed(Cq* cq) {
  bool any = false;
  const absl::Time now = absl::Now();
  while (!cq->delayed.empty() && cq->delayed.front().due <= now) {
    WriteCqe(cq, cq->delayed.front().cqe);
    cq->delayed.pop_front();
    any = true;
  }
  return any || !cq->delayed.empty();
}

umr::Cqe RequesterCqe(uint32_t qpn, uint16_t counter, uint8_t opcode, uint8_t syndrome,
                      uint8_t vendor) {
  umr::Cqe c;
  c.opcode = syndrome == 0 ? umr::kCqeOpReq : umr::kCqeOpReqErr;
  c.qpn = qpn;
  c.wqe_counter = counter;
  c.wqe_opcode = opcode;
  c.syndrome = syndrome;
  c.vendor_err_synd = syndrome == 0 ? 0 : vendor;
  return c;
}

// The device's own rules for a UMR (mlx5emu.h's options): the behaviours no source states.
absl::Status HardwareRules(Device* dev, const umr::WqeDesc& wqe) {
  dev->mu.AssertHeld();  // called from StepQp
  const Options& o = dev->options();
  const uint32_t index = KeyIndex(wqe.ctrl.imm);
  if (!o.umr_on_devx_mkey && dev->devx_mkeys.count(index) != 0) {
    return DeviceError(
        Syndrome::kLocalQpOp,
        absl::StrFormat("user QP may not UMR DevX mkey 0x%x (umr_on_devx_mkey=0)", wqe.ctrl.imm));
  }
  if (!o.variant_on_dv_mkey && dev->dv_mkeys.count(index) != 0 &&
      (wqe.umr.mkey_mask & umr::kMaskKey) != 0) {
    return DeviceError(Syndrome::kLocalQpOp,
                       absl::StrFormat("UMR may not change the variant of mlx5dv mkey 0x%x "
                                       "(variant_on_dv_mkey=0)",
                                       wqe.ctrl.imm));
  }
  if (!o.pointer_mr_lkey && wqe.translation_pointer.has_value() &&
      dev->mrs.count(KeyIndex(wqe.translation_pointer->lkey)) != 0) {
    return DeviceError(Syndrome::kLocalProt,
                       "pointer-mode UMR list through a memory region's lkey (pointer_mr_lkey=0)");
  }
  return absl::OkStatus();
}

sim::SendRules RulesOf(Device* dev, Qp* qp) {
  const umr::HcaCaps& caps = dev->image().general;
  sim::SendRules r;
  r.modify = umr::UmrModifyCapsOf(caps);
  r.max_wqe_bytes = caps.max_wqe_sz_sq;
  if (absl::StatusOr<umr::FenceMode> f = umr::FenceForUmrCap(caps.umr_fence); f.ok()) {
    r.min_umr_fence = *f;
  } else {
    r.min_umr_fence = umr::FenceMode::kStrongOrdering;
  }
  r.indirect_umr = !caps.umr_indirect_mkey_disabled;
  r.qpn = qp->qp.qp_num;
  r.check_wqe_index = true;
  r.pointer_faults = sim::FaultPolicy::kResolve;
  r.umr_check = [dev](const umr::WqeDesc& wqe) { return HardwareRules(dev, wqe); };
  return r;
}

// Executes (or, in the error state, flushes) the raw WQE at the device's position.
void ExecuteRawWqe(Device* dev, Qp* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu) {
  const uint32_t counter = qp->executed;
  const uint32_t slot = counter & (qp->wqe_cnt - 1);
  const uint8_t* ctrl = qp->sq.get() + size_t{slot} * umr::kWqebb;
  const uint8_t ds = LoadByte(ctrl + 7) & 0x3f;
  const uint8_t opcode = LoadByte(ctrl + 3);
  const uint32_t wqebbs = std::max<uint32_t>(1, umr::WqebbsForDs(ds));
  CopyWqebbs(qp->sq.get(), qp->snapshot.get(), qp->wqe_cnt, slot,
             std::min<uint32_t>(wqebbs, qp->wqe_cnt));
  const uint16_t index = static_cast<uint16_t>(counter);
  if (qp->qp.state == IBV_QPS_ERR) {
    EmitUmrCqe(qp->send_cq, RequesterCqe(qp->qp.qp_num, index, opcode, kSynFlush, 0));
    qp->executed += wqebbs;
    return;
  }
  Faults& f = GetFaults();
  if (CountDown(f.fail_nth_umr_wqe) == 1) {
    EmitUmrCqe(qp->send_cq, RequesterCqe(qp->qp.qp_num, index, opcode, f.fail_syndrome.load(),
                                         f.fail_vendor.load()));
    ToError(qp);
    qp->executed += wqebbs;
    return;
  }
  const absl::Span<const uint8_t> ring(qp->snapshot.get(), size_t{qp->wqe_cnt} * umr::kWqebb);
  if (!qp->rules.has_value()) qp->rules = RulesOf(dev, qp);  // fixed while the context is open
  const sim::WqeResult r =
      dev->core().ExecuteSendWqe(qp->pd->pdn, ring, counter, *qp->rules, nullptr, &qp->scratch);
  if (!r.status.ok()) {
    const std::optional<ErrorInfo> e = ErrorOf(r.status);
    const uint8_t syn = static_cast<uint8_t>(e ? e->syndrome : Syndrome::kLocalQpOp);
    EmitUmrCqe(qp->send_cq,
               RequesterCqe(qp->qp.qp_num, index, r.opcode, syn, e ? e->vendor_syndrome : 0));
    ToError(qp);
  } else if (r.signaled) {
    EmitUmrCqe(qp->send_cq, RequesterCqe(qp->qp.qp_num, index, r.opcode, 0, 0));
  }
  qp->executed += r.wqebbs;
}

bool StepRaw(Device* dev, Qp* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu) {
  bool busy = DrainDelayed(qp->send_cq);
  const uint16_t producer = static_cast<uint16_t>(LoadBe32(qp->dbrec.get() + 4));
  const uint16_t done = static_cast<uint16_t>(qp->executed);
  if (producer == done) return busy;
  switch (qp->qp.state) {
    case IBV_QPS_RESET:
      if (qp->reported_producer != producer) {
        qp->reported_producer = producer;
        Violation(absl::StrFormat("QP 0x%x: doorbell record %u rung in RESET (ignored)",
                                  qp->qp.qp_num, producer));
      }
      return busy;
    case IBV_QPS_INIT:
    case IBV_QPS_RTR:
      return busy;  // the send queue is not yet enabled: WQEs wait
    default:
      break;
  }
  if (static_cast<uint16_t>(producer - done) > qp->wqe_cnt) {
    if (qp->reported_producer != producer) {
      qp->reported_producer = producer;
      Violation(absl::StrFormat(
          "QP 0x%x: doorbell record %u is %u WQEBBs past the device's "
          "position %u in a ring of %u (ignored)",
          qp->qp.qp_num, producer, static_cast<uint16_t>(producer - done), done, qp->wqe_cnt));
    }
    return busy;
  }
  while (static_cast<uint16_t>(qp->executed) != producer) ExecuteRawWqe(dev, qp);
  return true;
}

uint8_t PrmOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
      return umr::kOpcodeRdmaWrite;
    case IBV_WR_RDMA_READ:
      return umr::kOpcodeRdmaRead;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return umr::kOpcodeAtomicCs;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return umr::kOpcodeAtomicFa;
    default:
      return umr::kOpcodeSend;
  }
}

// One RDMA READ / WRITE / atomic of a verbs requester whose responder is on this device.
uint8_t ExecuteHere(Device* dev, Qp* qp, const SendWr& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu) {
  RdmaRequest req;
  std::vector<uint8_t> data;
  if (const uint8_t s = PrepareWr(dev, qp, w, &req, &data); s != 0) return s;
  std::vector<uint8_t> back;
  const std::optional<uint8_t> answer = Respond(dev, req, data, &back);
  return Conclude(dev, qp, w, answer, back);
}

bool StepVerbs(Device* dev, Qp* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu) {
  if (qp->pending.empty() || qp->on_fabric || qp->qp.state == IBV_QPS_RESET ||
      qp->qp.state == IBV_QPS_INIT || qp->qp.state == IBV_QPS_RTR) {
    return false;
  }
  if (qp->qp.state != IBV_QPS_ERR && !ConnectedHere(dev, qp)) {
    qp->on_fabric = true;
    SendOnFabric(dev, qp->qp.qp_num);
    return true;
  }
  while (!qp->pending.empty()) {
    const SendWr w = qp->pending.front();
    qp->pending.pop_front();
    CompleteWr(qp, w, qp->qp.state == IBV_QPS_ERR ? kSynFlush : ExecuteHere(dev, qp, w));
  }
  return true;
}

ibv_wc_status WcStatus(uint8_t syndrome) {
  switch (syndrome) {
    case 0x01:
      return IBV_WC_LOC_LEN_ERR;
    case 0x02:
      return IBV_WC_LOC_QP_OP_ERR;
    case 0x04:
      return IBV_WC_LOC_PROT_ERR;
    case 0x05:
      return IBV_WC_WR_FLUSH_ERR;
    case 0x06:
      return IBV_WC_MW_BIND_ERR;
    case 0x10:
      return IBV_WC_BAD_RESP_ERR;
    case 0x11:
      return IBV_WC_LOC_ACCESS_ERR;
    case 0x12:
      return IBV_WC_REM_INV_REQ_ERR;
    case 0x13:
      return IBV_WC_REM_ACCESS_ERR;
    case 0x14:
      return IBV_WC_REM_OP_ERR;
    case 0x15:
      return IBV_WC_RETRY_EXC_ERR;
    case 0x16:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    case 0x22:
      return IBV_WC_REM_ABORT_ERR;
    default:
      return IBV_WC_GENERAL_ERR;
  }
}

ibv_wc_opcode WcOpcode(uint8_t prm) {
  switch (prm) {
    case umr::kOpcodeRdmaWrite:
      return IBV_WC_RDMA_WRITE;
    case umr::kOpcodeRdmaRead:
      return IBV_WC_RDMA_READ;
    case umr::kOpcodeAtomicCs:
      return IBV_WC_COMP_SWAP;
    case umr::kOpcodeAtomicFa:
      return IBV_WC_FETCH_ADD;
    case umr::kOpcodeUmr:
      return IBV_WC_DRIVER1;
    default:
      return IBV_WC_SEND;
  }
}

}  // namespace

std::unique_ptr<Cq> NewCq(Device* dev, ibv_context* ctx, int cqe) {
  auto cq = std::make_unique<Cq>();
  uint32_t n = 2;
  while (n < static_cast<uint32_t>(cqe) + 1) n <<= 1;
  cq->cqe_cnt = n;
  cq->buf = AllocDeviceMemory(size_t{n} * 64);
  for (uint32_t i = 0; i < n; ++i) cq->buf[size_t{i} * 64 + 63] = umr::kCqeOpInvalid << 4;
  cq->dbrec = AllocDeviceMemory(64);
  cq->cq.context = ctx;
  cq->cq.cqe = static_cast<int>(n - 1);
  base::MutexLock lock(&dev->mu);
  cq->cq.handle = dev->next_cqn++;
  return cq;
}

int ModifyQp(Device* dev, Qp* qp, const ibv_qp_attr& attr, int mask) {
  const ibv_qp_state cur = qp->qp.state;
  const ibv_qp_state next = (mask & IBV_QP_STATE) != 0 ? attr.qp_state : cur;
  int required = 0;
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
    required = IBV_QP_STATE;
  } else if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
    required = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    required = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    required = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
               IBV_QP_MAX_QP_RD_ATOMIC;
  } else if (!(cur == next && (cur == IBV_QPS_INIT || cur == IBV_QPS_RTS))) {
    return EINVAL;  // no such transition
  }
  if ((mask & required) != required) return EINVAL;
  if ((mask & IBV_QP_PORT) != 0 && attr.port_num != 1) return EINVAL;
  if (dev->fatal() && next != IBV_QPS_RESET && next != IBV_QPS_ERR) return EIO;
  // RoCE: the address vector must carry a GRH (the kernel's rdma_check_ah_attr).
  if ((mask & IBV_QP_AV) != 0 && attr.ah_attr.is_global == 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) != 0 &&
      (attr.path_mtu < IBV_MTU_256 || attr.path_mtu > IBV_MTU_4096)) {
    return EINVAL;
  }
  if ((mask & IBV_QP_ACCESS_FLAGS) != 0) qp->access = attr.qp_access_flags;
  if ((mask & IBV_QP_DEST_QPN) != 0) qp->dest_qpn = attr.dest_qp_num;
  if ((mask & IBV_QP_AV) != 0) qp->dgid = attr.ah_attr.grh.dgid;
  if ((mask & IBV_QP_PATH_MTU) != 0) qp->path_mtu = 128u << static_cast<int>(attr.path_mtu);
  if ((mask & IBV_QP_RQ_PSN) != 0) qp->rq_psn = attr.rq_psn & 0xffffff;
  if ((mask & IBV_QP_SQ_PSN) != 0) qp->sq_psn = attr.sq_psn & 0xffffff;
  if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT && !qp->dv) AttachToFabric(dev);
  if (next == IBV_QPS_RESET) {
    // The provider re-initializes its indices and clears the doorbell record.
    qp->executed = 0;
    qp->reported_producer = 0;
    qp->pending.clear();
    qp->wr_ids.clear();
    qp->next_index = 0;
    ++qp->epoch;
    if (qp->dbrec) {
      StoreBe32(qp->dbrec.get(), 0);
      StoreBe32(qp->dbrec.get() + 4, 0);
    }
  }
  qp->qp.state = next;
  return 0;
}

void ToError(Qp* qp) { qp->qp.state = IBV_QPS_ERR; }

uint8_t PrepareWr(Device* dev, Qp* qp, const SendWr& w, RdmaRequest* req,
                  std::vector<uint8_t>* data) {
  const ibv_gid gid = GidOf(dev);
  std::memcpy(req->gid, gid.raw, sizeof(req->gid));
  req->src_qpn = qp->qp.qp_num;
  req->dest_qpn = qp->dest_qpn;
  req->rkey = w.rkey;
  req->opcode = w.opcode;
  req->remote_addr = w.remote_addr;
  req->length = w.has_sge ? w.sge.length : 0;
  req->compare_add = w.compare_add;
  req->swap = w.swap;
  if (w.opcode == IBV_WR_RDMA_WRITE) {  // gathered before anything is sent
    sim::Segments local;
    if (absl::Status s =
            dev->core().Translate(qp->pd->pdn, qp->qp.qp_num, w.sge.lkey, w.sge.addr, req->length,
                                  sim::AccessKind::kLocalRead, sim::FaultPolicy::kResolve, &local);
        !s.ok()) {
      return SyndromeOf(s, Syndrome::kLocalProt);
    }
    data->resize(req->length);
    sim::CopyOut(local, absl::MakeSpan(*data));
  }
  req->psn = qp->sq_psn;
  qp->sq_psn = (qp->sq_psn + PsnSpan(*req, qp->path_mtu)) & 0xffffff;
  return 0;
}

uint8_t FinishWr(Device* dev, Qp* qp, const SendWr& w, absl::Span<const uint8_t> data) {
  const uint64_t len = w.has_sge ? w.sge.length : 0;
  if (data.size() != len) return static_cast<uint8_t>(Syndrome::kLocalLength);
  sim::Segments local;
  if (absl::Status s =
          dev->core().Translate(qp->pd->pdn, qp->qp.qp_num, w.sge.lkey, w.sge.addr, len,
                                sim::AccessKind::kLocalWrite, sim::FaultPolicy::kResolve, &local);
      !s.ok()) {
    return SyndromeOf(s, Syndrome::kLocalProt);
  }
  sim::CopyIn(local, data);
  return 0;
}

uint8_t SyndromeOf(const absl::Status& s, Syndrome fallback) {
  const std::optional<ErrorInfo> e = ErrorOf(s);
  return static_cast<uint8_t>(e ? e->syndrome : fallback);
}

uint8_t Conclude(Device* dev, Qp* qp, const SendWr& w, std::optional<uint8_t> answer,
                 absl::Span<const uint8_t> back) {
  if (!answer.has_value()) return kSynRetryExceeded;  // nobody answers: retries, then gives up
  if (*answer != 0 || w.opcode == IBV_WR_RDMA_WRITE) return *answer;
  return FinishWr(dev, qp, w, back);
}

void CompleteWr(Qp* qp, const SendWr& w, uint8_t syndrome) {
  if (syndrome != 0) ToError(qp);
  if (w.signaled || syndrome != 0) {
    WriteCqe(qp->send_cq, RequesterCqe(qp->qp.qp_num, w.index, PrmOpcode(w.opcode), syndrome, 0));
  } else {
    qp->wr_ids.erase(w.index);
  }
}

bool ConnectedHere(Device* dev, const Qp* qp) {
  const ibv_gid gid = GidOf(dev);
  return std::memcmp(gid.raw, qp->dgid.raw, sizeof(gid.raw)) == 0;
}

bool StepQp(Device* dev, Qp* qp) { return qp->dv ? StepRaw(dev, qp) : StepVerbs(dev, qp); }

int PollCq(Device* dev, Cq* cq, int n, ibv_wc* wc) {
  if (cq->dv_owned) {
    Violation(
        absl::StrFormat("ibv_poll_cq on CQ 0x%x, which mlx5dv_init_obj handed out", cq->cq.handle));
    return -1;
  }
  const uint32_t published = cq->published.load(std::memory_order_acquire);
  int got = 0;
  base::MutexLock lock(&dev->mu);
  while (got < n && cq->consumer != published) {
    const uint8_t* slot = cq->buf.get() + size_t{cq->consumer & (cq->cqe_cnt - 1)} * 64;
    umr::CqeBytes bytes;
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = LoadByte(slot + i);
    ++cq->consumer;
    StoreBe32(cq->dbrec.get(), cq->consumer & 0xffffff);
    const absl::StatusOr<umr::Cqe> cqe = umr::DecodeCqe(bytes);
    if (!cqe.ok()) {
      Violation(absl::StrCat("emulator bug: CQE does not decode: ", cqe.status().message()));
      continue;
    }
    ibv_wc& w = wc[got++];
    w = ibv_wc{};
    w.qp_num = cqe->qpn;
    w.status = cqe->is_error() ? WcStatus(cqe->syndrome) : IBV_WC_SUCCESS;
    w.vendor_err = cqe->vendor_err_synd;
    w.opcode = WcOpcode(cqe->wqe_opcode);
    if (auto q = dev->qps.find(cqe->qpn); q != dev->qps.end()) {
      auto id = q->second->wr_ids.find(cqe->wqe_counter);
      if (id != q->second->wr_ids.end()) {
        w.wr_id = id->second;
        q->second->wr_ids.erase(id);
      }
    }
  }
  return got;
}

int PostSend(Device* dev, Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  base::MutexLock lock(&dev->mu);
  for (; wr != nullptr; wr = wr->next) {
    *bad = wr;
    if (qp->qp.state != IBV_QPS_RTS && qp->qp.state != IBV_QPS_ERR) return EINVAL;
    if (wr->num_sge > 1) return EINVAL;  // created with max_send_sge 1
    if (qp->pending.size() >= qp->max_send_wr) return ENOMEM;
    SendWr w;
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    w.has_sge = wr->num_sge == 1;
    if (w.has_sge) w.sge = wr->sg_list[0];
    switch (wr->opcode) {
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_READ:
        w.remote_addr = wr->wr.rdma.remote_addr;
        w.rkey = wr->wr.rdma.rkey;
        break;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        w.remote_addr = wr->wr.atomic.remote_addr;
        w.rkey = wr->wr.atomic.rkey;
        w.compare_add = wr->wr.atomic.compare_add;
        w.swap = wr->wr.atomic.swap;
        break;
      default:
        return EINVAL;  // the emulated requester does one-sided operations only
    }
    w.index = qp->next_index++;
    qp->wr_ids[w.index] = w.wr_id;
    qp->pending.push_back(w);
  }
  *bad = nullptr;
  dev->Kick();
  return 0;
}

}  // namespace regcache::hca::mlx5emu
