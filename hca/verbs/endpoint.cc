#include "hca/verbs/endpoint.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

constexpr size_t kMaxBuffer = size_t{64} << 20;

}  // namespace

namespace {

class RequesterPeer final : public Peer {
 public:
  RequesterPeer(Pd pd, std::unique_ptr<TargetEndpoint> target, std::unique_ptr<Requester> requester,
                std::string no_send_inv, std::string no_local)
      : pd_(pd),
        target_(std::move(target)),
        requester_(std::move(requester)),
        no_send_inv_(std::move(no_send_inv)),
        no_local_(std::move(no_local)) {}
  Pd pd() const override { return pd_; }
  absl::Status Write(Key rkey, uint64_t addr, absl::Span<const uint8_t> data) override {
    return requester_->Write(rkey, addr, data);
  }
  absl::Status Read(Key rkey, uint64_t addr, absl::Span<uint8_t> out) override {
    return requester_->Read(rkey, addr, out);
  }
  absl::StatusOr<uint64_t> CompareSwap(Key rkey, uint64_t addr, uint64_t compare,
                                       uint64_t swap) override {
    return requester_->Atomic(rkey, addr, /*compare_swap=*/true, compare, swap);
  }
  absl::StatusOr<uint64_t> FetchAdd(Key rkey, uint64_t addr, uint64_t add) override {
    return requester_->Atomic(rkey, addr, /*compare_swap=*/false, add, 0);
  }
  absl::Status SendWithInvalidate(Key) override { return absl::UnimplementedError(no_send_inv_); }
  absl::Status LocalRead(Key, uint64_t, absl::Span<uint8_t>) override {
    return absl::UnimplementedError(no_local_);
  }
  absl::Status LocalWrite(Key, uint64_t, absl::Span<const uint8_t>) override {
    return absl::UnimplementedError(no_local_);
  }

 private:
  const Pd pd_;
  std::unique_ptr<TargetEndpoint> target_;
  std::unique_ptr<Requester> requester_;
  const std::string no_send_inv_;
  const std::string no_local_;
};

}  // namespace

absl::Status CheckRemoteAddress(const Context& c, const EndpointAddress& a) {
  if (a.qpn == 0 || a.qpn >= (1u << 24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("remote qpn %d is not a 24-bit QP number", a.qpn));
  }
  if (a.psn >= (1u << 24)) {
    return absl::InvalidArgumentError(absl::StrFormat("remote psn %d exceeds 24 bits", a.psn));
  }
  if (a.mtu != 0 && !MtuFromBytes(a.mtu).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mtu %d is not one of 256, 512, 1024, 2048, 4096", a.mtu));
  }
  bool any_gid = false;
  for (uint8_t b : a.gid) any_gid |= b != 0;
  if (c.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET && !any_gid) {
    return absl::InvalidArgumentError("a RoCE port needs the remote GID (it is all zero)");
  }
  if (c.port_attr.link_layer != IBV_LINK_LAYER_ETHERNET && !any_gid && a.lid == 0) {
    return absl::InvalidArgumentError("an InfiniBand port needs the remote LID or GID");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TargetEndpoint>> TargetEndpoint::Create(
    Context* c, Pd pd, const EndpointOptions& options) {
  if ((options.remote_access & ~(kRemoteRead | kRemoteWrite | kRemoteAtomic)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("endpoint rights %s include local ones",
                                                      AccessToString(options.remote_access)));
  }
  ASSIGN_OR_RETURN(ibv_pd * vpd, c->FindPd(pd));
  std::unique_ptr<TargetEndpoint> e(new TargetEndpoint(c, pd));
  e->access_ = RemoteAccessFlags(options.remote_access);
  e->cq_ = ibv_create_cq(c->ctx(), 4, nullptr, nullptr, 0);
  if (e->cq_ == nullptr) return ErrnoStatus(errno, "ibv_create_cq for an endpoint");
  ASSIGN_OR_RETURN(e->qp_, CreateRcQp(vpd, e->cq_, 1));
  RETURN_IF_ERROR(QpToInit(*c, e->qp_, e->access_));
  e->local_ = LocalAddress(*c, e->qp_->qp_num, RandomPsn());
  return e;
}

TargetEndpoint::~TargetEndpoint() { DestroyQpAndCq(qp_, cq_, "destroying an endpoint"); }

absl::Status TargetEndpoint::Connect(const EndpointAddress& remote) {
  if (connected_) return absl::FailedPreconditionError("endpoint already connected");
  RETURN_IF_ERROR(CheckRemoteAddress(*c_, remote));
  RETURN_IF_ERROR(QpToRtr(*c_, qp_, remote));
  RETURN_IF_ERROR(QpToRts(*c_, qp_, local_.psn));
  connected_ = true;
  c_->stats().endpoints_connected.Inc();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Requester>> Requester::Create(Context* c) {
  std::unique_ptr<Requester> r(new Requester(c));
  r->pd_ = ibv_alloc_pd(c->ctx());
  if (r->pd_ == nullptr) return ErrnoStatus(errno, "ibv_alloc_pd for a requester");
  r->cq_ = ibv_create_cq(c->ctx(), 4, nullptr, nullptr, 0);
  if (r->cq_ == nullptr) return ErrnoStatus(errno, "ibv_create_cq for a requester");
  ASSIGN_OR_RETURN(r->qp_, CreateRcQp(r->pd_, r->cq_, 4));
  RETURN_IF_ERROR(QpToInit(*c, r->qp_, 0));
  RETURN_IF_ERROR(r->EnsureBuffer(4096));
  r->local_ = LocalAddress(*c, r->qp_->qp_num, RandomPsn());
  return r;
}

Requester::~Requester() {
  DestroyQpAndCq(qp_, cq_, "destroying a requester");
  if (mr_ != nullptr) (void)ibv_dereg_mr(mr_);
  if (pd_ != nullptr) (void)ibv_dealloc_pd(pd_);
}

absl::Status Requester::Connect(const EndpointAddress& remote) {
  if (connected_) return absl::FailedPreconditionError("requester already connected");
  RETURN_IF_ERROR(CheckRemoteAddress(*c_, remote));
  RETURN_IF_ERROR(QpToRtr(*c_, qp_, remote));
  RETURN_IF_ERROR(QpToRts(*c_, qp_, local_.psn));
  connected_ = true;
  return absl::OkStatus();
}

absl::Status Requester::EnsureBuffer(size_t bytes) {
  if (bytes > kMaxBuffer) {
    return absl::InvalidArgumentError(
        absl::StrFormat("one peer transfer is at most %d bytes, not %d", kMaxBuffer, bytes));
  }
  if (mr_ != nullptr && buffer_.size() >= bytes) return absl::OkStatus();
  if (mr_ != nullptr) {
    (void)ibv_dereg_mr(mr_);
    mr_ = nullptr;
  }
  buffer_.assign(std::max<size_t>(bytes, 4096), 0);
  // An int, not the enumerator: the rdma-core 44 macro ANDs it with another enum type.
  mr_ = ibv_reg_mr(pd_, buffer_.data(), buffer_.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  if (mr_ == nullptr) return ErrnoStatus(errno, "ibv_reg_mr of the requester's buffer");
  return absl::OkStatus();
}

absl::Status Requester::Execute(ibv_send_wr& wr, const char* what, Key rkey) {
  if (!connected_) return absl::FailedPreconditionError("requester not connected");
  if (broken_) {
    return absl::FailedPreconditionError(
        "requester queue pair in error after a failed access (a remote node would reconnect)");
  }
  wr.wr_id = next_wr_++;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(qp_, &wr, &bad); err != 0) return ErrnoStatus(err, what);
  const absl::Time deadline = absl::Now() + timeout_;
  ibv_wc wc{};
  for (;;) {
    const int n = ibv_poll_cq(cq_, 1, &wc);
    if (n < 0) return absl::InternalError("ibv_poll_cq failed");
    if (n == 1) break;
    if (absl::Now() > deadline) {
      broken_ = true;
      return absl::DeadlineExceededError(
          absl::StrFormat("%s: no completion in %s", what, absl::FormatDuration(timeout_)));
    }
    std::this_thread::yield();
  }
  if (wc.status != IBV_WC_SUCCESS) {
    broken_ = true;  // an RC queue pair goes to the error state on any failed request
    return StatusForWc(wc.status, absl::StrFormat("%s through rkey 0x%08x", what, rkey));
  }
  return absl::OkStatus();
}

absl::Status Requester::Rdma(ibv_wr_opcode opcode, Key rkey, uint64_t remote_addr, size_t bytes,
                             const char* what) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buffer_.data()), static_cast<uint32_t>(bytes), mr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = opcode;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return Execute(wr, what, rkey);
}

absl::Status Requester::Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data) {
  RETURN_IF_ERROR(EnsureBuffer(data.size()));
  if (!data.empty()) std::memcpy(buffer_.data(), data.data(), data.size());
  return Rdma(IBV_WR_RDMA_WRITE, rkey, remote_addr, data.size(), "RDMA WRITE");
}

absl::Status Requester::Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out) {
  RETURN_IF_ERROR(EnsureBuffer(out.size()));
  RETURN_IF_ERROR(Rdma(IBV_WR_RDMA_READ, rkey, remote_addr, out.size(), "RDMA READ"));
  if (!out.empty()) std::memcpy(out.data(), buffer_.data(), out.size());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Requester::Atomic(Key rkey, uint64_t remote_addr, bool compare_swap,
                                           uint64_t compare_or_add, uint64_t swap) {
  if (remote_addr % 8 != 0) {
    return DeviceError(Syndrome::kRemoteInvalReq,
                       absl::StrFormat("atomic at 0x%x is not 8-byte aligned", remote_addr));
  }
  RETURN_IF_ERROR(EnsureBuffer(8));
  ibv_sge sge{reinterpret_cast<uint64_t>(buffer_.data()), 8, mr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = compare_swap ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_or_add;
  wr.wr.atomic.swap = swap;
  RETURN_IF_ERROR(Execute(wr, compare_swap ? "CMP_AND_SWP" : "FETCH_AND_ADD", rkey));
  uint64_t before;
  std::memcpy(&before, buffer_.data(), 8);
  return before;
}

absl::StatusOr<std::unique_ptr<Peer>> NewRequesterPeer(Context* c, Pd pd, std::string no_send_inv,
                                                       std::string no_local) {
  ASSIGN_OR_RETURN(std::unique_ptr<TargetEndpoint> target,
                   TargetEndpoint::Create(c, pd, EndpointOptions{}));
  ASSIGN_OR_RETURN(std::unique_ptr<Requester> requester, Requester::Create(c));
  RETURN_IF_ERROR(target->Connect(requester->local()));
  RETURN_IF_ERROR(requester->Connect(target->local()));
  return std::unique_ptr<Peer>(new RequesterPeer(pd, std::move(target), std::move(requester),
                                                 std::move(no_send_inv), std::move(no_local)));
}

}  // namespace regcache::hca::verbs
