#include "hca/sim/internal/fault_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "umr/prm.h"
#include "umr/segments.h"

namespace regcache::hca::sim {
namespace {

constexpr uint32_t kMask = FaultQueue::kDepth - 1;
constexpr uint32_t kTokenLimit = umr::kMaxPageFaultToken + 1;

bool PassParity(uint32_t counter) { return ((counter / FaultQueue::kDepth) & 1) != 0; }

}  // namespace

FaultQueue::FaultQueue(SimStats* stats, absl::Duration timeout)
    : stats_(stats),
      timeout_(timeout),
      event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      eq_(new umr::Eqe[kDepth]),
      requester_wqes_(new Wqebb[kDepth]()) {
  // The driver initializes every EQE with owner 1: invalid on the first pass (owner 0).
  for (uint32_t i = 0; i < kDepth; ++i) {
    eq_[i].fill(0);
    eq_[i][offsetof(umr::EqeLayout, owner)] = 1;
  }
}

FaultQueue::~FaultQueue() = default;

uint32_t FaultQueue::Raise(const FaultNeed& need, AccessKind kind, uint32_t qpn) {
  uint32_t token = next_token_;
  while (parked_.count(token) != 0) token = token + 1 < kTokenLimit ? token + 1 : 1;
  next_token_ = token + 1 < kTokenLimit ? token + 1 : 1;

  const uint32_t n = eq_producer_;
  const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(need.length, kMaxFaultLength));
  umr::PageFaultEvent e;
  e.owner = PassParity(n) ? 1 : 0;
  if (IsRemote(kind)) {
    e.subtype = umr::PageFaultSubtype::kRdma;
    e.type = umr::kPageFaultRdma | (need.write ? umr::kPageFaultWrite : 0);
    e.wq_number = token;
    e.rkey = need.key;
    e.rdma_va = need.address;
    e.rdma_op_len = len;
  } else {
    // The faulting WQE: a SEND-shaped requester WQE whose one data segment is the SGE (the
    // direction is the WRITE flag; the sim's peer has no real SQ to hold READ WQEs).
    umr::CtrlSegDesc ctrl;
    ctrl.opcode = umr::kOpcodeSend;
    ctrl.wqe_index = static_cast<uint16_t>(n);
    ctrl.qpn = qpn;
    ctrl.ds = (sizeof(umr::CtrlSegLayout) + sizeof(umr::DataSegLayout)) / umr::kOctoword;
    umr::CtrlSegLayout c{};
    umr::DataSegLayout d{};
    absl::Status s = umr::EncodeCtrlSeg(ctrl, &c);
    if (s.ok()) s = umr::EncodeDataSeg(umr::DataSegDesc{len, need.key, need.address}, &d);
    RC_CHECK(s.ok()) << s;  // the sim's own values fit (qpn < 2^24, len < 2^31)
    Wqebb& w = requester_wqes_[n & kMask];
    w.fill(0);
    std::memcpy(w.data(), &c, sizeof(c));
    std::memcpy(w.data() + sizeof(c), &d, sizeof(d));
    e.subtype = umr::PageFaultSubtype::kWqe;
    e.type = umr::kPageFaultRequestor | (need.write ? umr::kPageFaultWrite : 0);
    e.wq_number = qpn;
    e.wqe_index = static_cast<uint16_t>(n);
    e.token = token;
  }
  const absl::StatusOr<umr::Eqe> eqe = umr::EncodePageFaultEqe(e);
  RC_CHECK(eqe.ok()) << eqe.status();
  eq_[n & kMask] = *eqe;
  eq_producer_ = n + 1;
  parked_[token] = Parked{n, e.type, e.wq_number};
  const uint64_t one = 1;
  (void)!write(event_fd_.get(), &one, sizeof(one));
  cv_.SignalAll();
  return token;
}

absl::Status FaultQueue::Park(const FaultNeed& need, AccessKind kind, uint32_t qpn) {
  stats_->page_faults.Inc();
  stats_->parked_accesses.Add();
  base::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout_;
  // A full event ring holds the access back, as a stalled QP waits for the EQ to drain.
  const bool room = cv_.WaitFor(&mu_, timeout_, [this]() {
    mu_.AssertHeld();  // WaitFor calls the predicate with mu_ held
    return eq_producer_ - eq_consumer_ < kDepth;
  });
  bool resumed = false, ok = false;
  if (room) {
    const uint32_t token = Raise(need, kind, qpn);
    resumed = cv_.WaitFor(&mu_, deadline - absl::Now(), [this, token]() {
      mu_.AssertHeld();
      return parked_[token].resumed;
    });
    ok = parked_[token].ok;
    parked_.erase(token);
    delivered_.erase(token);
  }
  stats_->parked_accesses.Sub();
  if (!resumed) {
    stats_->fault_timeouts.Inc();
    return absl::DeadlineExceededError(absl::StrFormat(
        "page fault on key 0x%08x at 0x%x not resumed in time", need.key, need.address));
  }
  if (!ok) {
    return DeviceError(IsRemote(kind) ? Syndrome::kRemoteAccess : Syndrome::kLocalProt,
                       absl::StrFormat("page fault on key 0x%08x at 0x%x resumed with error",
                                       need.key, need.address),
                       kVendorSyndromeOdpFault);
  }
  return absl::OkStatus();
}

absl::Status FaultQueue::Resume(const umr::PageFaultResumeIn& in) {
  base::MutexLock lock(&mu_);
  auto it = parked_.find(in.token);
  if (it == parked_.end() || it->second.resumed) {
    return absl::NotFoundError(absl::StrFormat("no parked fault with token %u", in.token));
  }
  if (it->second.wq_number != in.wq_number || it->second.type != in.page_fault_type) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resume of token %u names wq 0x%x type %u, the fault has wq 0x%x type %u", in.token,
        in.wq_number, in.page_fault_type, it->second.wq_number, it->second.type));
  }
  it->second.resumed = true;
  it->second.ok = !in.error;
  (in.error ? stats_->faults_resumed_error : stats_->faults_resumed_ok).Inc();
  cv_.SignalAll();
  return absl::OkStatus();
}

uint32_t FaultQueue::Decode(FaultEvent* ev, umr::PageFaultEvent* raw) {
  const uint32_t n = eq_consumer_;
  const absl::StatusOr<umr::PageFaultEvent> e = umr::DecodePageFaultEqe(eq_[n & kMask]);
  // Only Raise writes the ring, and the producer counter says this EQE is written.
  RC_CHECK(e.ok() && e->owner == (PassParity(n) ? 1 : 0)) << "EQE " << n << " not valid";
  *raw = *e;
  uint32_t token;
  if (e->subtype == umr::PageFaultSubtype::kRdma) {
    token = e->wq_number;
    *ev = FaultEvent{token, e->rkey, e->rdma_va, e->rdma_op_len, false};
  } else {
    // Read the faulting WQE back by its index, as the kernel does (docs/prm.md, Page faults (ODP)).
    token = e->token & (kTokenLimit - 1);
    const Wqebb& w = requester_wqes_[e->wqe_index & kMask];
    umr::DataSegLayout d;
    std::memcpy(&d, w.data() + sizeof(umr::CtrlSegLayout), sizeof(d));
    const absl::StatusOr<umr::DataSegDesc> seg = umr::DecodeDataSeg(d);
    RC_CHECK(seg.ok()) << seg.status();
    *ev = FaultEvent{token, seg->lkey, seg->addr, seg->byte_count, false};
  }
  ev->write = (e->type & umr::kPageFaultWrite) != 0;
  return token;
}

absl::StatusOr<FaultEvent> FaultQueue::Next(absl::Duration timeout) {
  base::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const bool got = cv_.WaitFor(&mu_, deadline - absl::Now(), [this]() {
      mu_.AssertHeld();  // WaitFor calls the predicate with mu_ held
      return eq_consumer_ != eq_producer_;
    });
    if (!got) return absl::DeadlineExceededError("no page-fault event");
    const uint32_t n = eq_consumer_;
    FaultEvent ev;
    umr::PageFaultEvent raw;
    const uint32_t token = Decode(&ev, &raw);
    ++eq_consumer_;
    cv_.SignalAll();  // ring room
    if (eq_consumer_ == eq_producer_) {
      uint64_t v;
      (void)!read(event_fd_.get(), &v, sizeof(v));  // drain: not readable while nothing is pending
    }
    auto it = parked_.find(token);
    if (it == parked_.end() || it->second.eqe_counter != n || it->second.resumed) {
      continue;  // stale: its access gave up (or was resumed from raw mailbox bytes)
    }
    delivered_[token] = raw;
    return ev;
  }
}

absl::StatusOr<umr::PageFaultResumeIn> FaultQueue::ResumeCommandFor(uint64_t token, bool error) {
  base::MutexLock lock(&mu_);
  auto it = token < kTokenLimit ? delivered_.find(static_cast<uint32_t>(token)) : delivered_.end();
  if (it == delivered_.end()) {
    return absl::NotFoundError(absl::StrFormat("no delivered fault with token %u", token));
  }
  const umr::PageFaultResumeIn in = umr::ResumeFor(it->second, error);
  delivered_.erase(it);
  return in;
}

std::vector<uint8_t> FaultQueue::EventRingForTest() {
  base::MutexLock lock(&mu_);
  std::vector<uint8_t> bytes(size_t{kDepth} * sizeof(umr::Eqe));
  for (uint32_t i = 0; i < kDepth; ++i) {
    std::memcpy(bytes.data() + size_t{i} * sizeof(umr::Eqe), eq_[i].data(), sizeof(umr::Eqe));
  }
  return bytes;
}

}  // namespace regcache::hca::sim