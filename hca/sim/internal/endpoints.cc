#include "hca/sim/internal/endpoints.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"

namespace regcache::hca::sim {
namespace {

constexpr uint32_t kMax24 = (1u << 24) - 1;

std::string GidString(const std::array<uint8_t, 16>& gid) {
  std::string out;
  for (size_t i = 0; i < gid.size(); i += 2) {
    absl::StrAppendFormat(&out, "%s%02x%02x", i == 0 ? "" : ":", gid[i], gid[i + 1]);
  }
  return out;
}

class SimEndpoint final : public Endpoint {
 public:
  SimEndpoint(std::shared_ptr<EndpointState> state, EndpointTable* table)
      : state_(std::move(state)), table_(table) {}
  ~SimEndpoint() override { table_->Remove(state_); }

  Pd pd() const override { return state_->pd; }
  const EndpointAddress& local() const override { return state_->local; }

  absl::Status Connect(const EndpointAddress& remote) override {
    RETURN_IF_ERROR(CheckEndpointAddress(remote));
    base::MutexLock lock(&state_->mu);
    if (state_->remote.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("endpoint qpn 0x%06x is already connected (to qpn 0x%06x)",
                          state_->local.qpn, state_->remote->qpn));
    }
    EndpointAddress resolved = remote;
    // The path MTU is the smaller of the two ports' (0: the local port's).
    resolved.mtu = remote.mtu == 0 ? kSimPortMtu : std::min(remote.mtu, kSimPortMtu);
    state_->remote = resolved;
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<EndpointState> state_;
  EndpointTable* const table_;
};

// A connected requester: every access finds its target endpoint afresh (endpoints.h).
class RemotePeer final : public Peer {
 public:
  RemotePeer(const EndpointAddress& self, const EndpointAddress& target, EndpointTable* table,
             PeerFactory make_peer)
      : self_(self), target_(target), table_(table), make_peer_(std::move(make_peer)) {}

  // The endpoint's PD while it lives (Pd{0} once it is gone).
  Pd pd() const override {
    std::shared_ptr<EndpointState> st = table_->Find(target_.qpn);
    return st != nullptr ? st->pd : Pd{};
  }
  absl::Status Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data) override {
    ASSIGN_OR_RETURN(std::unique_ptr<Peer> through, Arrive(kRemoteWrite, "RDMA WRITE"));
    return through->Write(rkey, remote_addr, data);
  }
  absl::Status Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out) override {
    ASSIGN_OR_RETURN(std::unique_ptr<Peer> through, Arrive(kRemoteRead, "RDMA READ"));
    return through->Read(rkey, remote_addr, out);
  }
  absl::StatusOr<uint64_t> CompareSwap(Key rkey, uint64_t remote_addr, uint64_t compare,
                                       uint64_t swap) override {
    ASSIGN_OR_RETURN(std::unique_ptr<Peer> through, Arrive(kRemoteAtomic, "compare-and-swap"));
    return through->CompareSwap(rkey, remote_addr, compare, swap);
  }
  absl::StatusOr<uint64_t> FetchAdd(Key rkey, uint64_t remote_addr, uint64_t add) override {
    ASSIGN_OR_RETURN(std::unique_ptr<Peer> through, Arrive(kRemoteAtomic, "fetch-and-add"));
    return through->FetchAdd(rkey, remote_addr, add);
  }
  absl::Status SendWithInvalidate(Key) override {
    return absl::UnimplementedError(
        "a target endpoint serves one-sided operations only (it posts no receives for a SEND)");
  }
  absl::Status LocalRead(Key, uint64_t, absl::Span<uint8_t>) override { return NoLocal(); }
  absl::Status LocalWrite(Key, uint64_t, absl::Span<const uint8_t>) override { return NoLocal(); }

 private:
  static absl::Status NoLocal() {
    return absl::UnimplementedError("a remote node has no local keys on this device");
  }

  // The endpoint's checks on one arriving request; on success, the device's data path on the
  // endpoint's queue pair (its PD and QPN).
  absl::StatusOr<std::unique_ptr<Peer>> Arrive(AccessBits op, absl::string_view what) {
    auto refuse = [&](Syndrome syndrome, const std::string& why) {
      table_->stats()->endpoint_refusals.Inc();
      return DeviceError(syndrome, absl::StrFormat("%s from qpn 0x%06x to qpn 0x%06x: %s", what,
                                                   self_.qpn, target_.qpn, why));
    };
    constexpr absl::string_view kRetry = "transport retry exceeded: ";
    std::shared_ptr<EndpointState> st = table_->Find(target_.qpn);
    if (st == nullptr || st->local.gid != target_.gid) {
      return refuse(Syndrome::kWrFlush,
                    absl::StrCat(kRetry, "no queue pair at the target (endpoint destroyed?)"));
    }
    {
      base::MutexLock lock(&st->mu);
      if (!st->alive) {
        return refuse(Syndrome::kWrFlush, absl::StrCat(kRetry, "the endpoint was destroyed"));
      }
      if (!st->remote.has_value()) {
        return refuse(Syndrome::kWrFlush,
                      absl::StrCat(kRetry, "the endpoint is not connected (not RTR)"));
      }
      const EndpointAddress& peer = *st->remote;
      if (peer.qpn != self_.qpn || peer.gid != self_.gid) {
        return refuse(Syndrome::kWrFlush,
                      absl::StrFormat("%sthe endpoint is connected to qpn 0x%06x at %s, not to "
                                      "this queue pair",
                                      kRetry, peer.qpn, GidString(peer.gid)));
      }
      if (peer.psn != self_.psn) {
        return refuse(Syndrome::kWrFlush,
                      absl::StrFormat("%sthe endpoint expects psn 0x%06x, the requester sends "
                                      "0x%06x (sequence error NAKs)",
                                      kRetry, peer.psn, self_.psn));
      }
    }
    if ((st->remote_access & op) == 0) {
      return refuse(Syndrome::kRemoteAccess, absl::StrFormat("the endpoint accepts only %s",
                                                             AccessToString(st->remote_access)));
    }
    return make_peer_(st->pd, st->local.qpn);
  }

  const EndpointAddress self_;
  const EndpointAddress target_;
  EndpointTable* const table_;
  const PeerFactory make_peer_;
};

class SimRemoteQp final : public RemoteQp {
 public:
  SimRemoteQp(const EndpointAddress& self, EndpointTable* table, PeerFactory make_peer)
      : self_(self), table_(table), make_peer_(std::move(make_peer)) {}

  const EndpointAddress& local() const override { return self_; }

  absl::StatusOr<std::unique_ptr<Peer>> Connect(const EndpointAddress& endpoint) override {
    RETURN_IF_ERROR(CheckEndpointAddress(endpoint));
    if (connected_.exchange(true)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("remote qpn 0x%06x is already connected", self_.qpn));
    }
    return std::unique_ptr<Peer>(new RemotePeer(self_, endpoint, table_, make_peer_));
  }

 private:
  const EndpointAddress self_;
  EndpointTable* const table_;
  const PeerFactory make_peer_;
  std::atomic<bool> connected_{false};
};

}  // namespace

std::array<uint8_t, 16> SimGid(uint16_t node) {
  return {0xfe,
          0x80,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0x53,
          0x49,
          static_cast<uint8_t>(node >> 8),
          static_cast<uint8_t>(node)};
}

absl::Status CheckEndpointAddress(const EndpointAddress& a) {
  if (a.qpn == 0 || a.qpn > kMax24) {
    return absl::InvalidArgumentError(
        absl::StrFormat("endpoint address: qpn 0x%x is outside 1..0xffffff", a.qpn));
  }
  if (a.psn > kMax24) {
    return absl::InvalidArgumentError(
        absl::StrFormat("endpoint address: psn 0x%x is over 24 bits", a.psn));
  }
  const uint32_t m = a.mtu;
  if (m != 0 && m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "endpoint address: mtu %d is not one of 0 (the port's), 256, 512, 1024, 2048, 4096", m));
  }
  if (a.gid == std::array<uint8_t, 16>{}) {
    return absl::InvalidArgumentError(
        "endpoint address: a zero GID on a RoCE port (the sim's port is RoCE)");
  }
  return absl::OkStatus();
}

EndpointTable::EndpointTable(SimStats* stats) : stats_(stats), psn_rng_(std::random_device{}()) {}

uint32_t EndpointTable::NewPsn() {
  base::MutexLock lock(&mu_);
  return static_cast<uint32_t>(psn_rng_()) & kMax24;
}

EndpointAddress EndpointTable::NewRemoteAddress() {
  EndpointAddress a;
  a.gid = SimGid(kSimRemoteNode);
  a.mtu = kSimPortMtu;
  base::MutexLock lock(&mu_);
  a.qpn = next_remote_qpn_++ & kMax24;
  a.psn = static_cast<uint32_t>(psn_rng_()) & kMax24;
  return a;
}

absl::StatusOr<std::unique_ptr<Endpoint>> EndpointTable::Create(Pd pd, uint32_t qpn,
                                                                AccessFlags remote_access) {
  if ((remote_access & ~(kRemoteRead | kRemoteWrite | kRemoteAtomic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("endpoint remote_access %s has local bits (only rr, rw, a)",
                        AccessToString(remote_access)));
  }
  auto st = std::make_shared<EndpointState>();
  st->local.qpn = qpn;
  st->local.psn = NewPsn();
  st->local.gid = SimGid(kSimDeviceNode);
  st->local.mtu = kSimPortMtu;
  st->pd = pd;
  st->remote_access = remote_access;
  {
    base::MutexLock lock(&mu_);
    by_qpn_[qpn] = st;
  }
  stats_->live_endpoints.Add();
  return std::unique_ptr<Endpoint>(new SimEndpoint(std::move(st), this));
}

std::shared_ptr<EndpointState> EndpointTable::Find(uint32_t qpn) const {
  base::MutexLock lock(&mu_);
  auto it = by_qpn_.find(qpn);
  return it == by_qpn_.end() ? nullptr : it->second;
}

size_t EndpointTable::CountInPd(Pd pd) const {
  base::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [qpn, st] : by_qpn_) n += st->pd == pd ? 1 : 0;
  return n;
}

void EndpointTable::Remove(const std::shared_ptr<EndpointState>& state) {
  {
    base::MutexLock lock(&mu_);
    by_qpn_.erase(state->local.qpn);
  }
  {
    base::MutexLock lock(&state->mu);
    state->alive = false;
  }
  stats_->live_endpoints.Sub();
}

absl::StatusOr<std::unique_ptr<Peer>> ConnectRemotePeer(Device* device, const EndpointAddress& as,
                                                        const EndpointAddress& endpoint) {
  auto* sim = dynamic_cast<SimDevice*>(device);
  if (sim == nullptr) {
    return absl::UnimplementedError("a simulated remote node needs the sim device");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteQp> qp, sim->CreateRemoteQpAs(as));
  return qp->Connect(endpoint);
}

std::unique_ptr<RemoteQp> NewRemoteQp(const EndpointAddress& self, EndpointTable* table,
                                      PeerFactory make_peer) {
  return std::unique_ptr<RemoteQp>(new SimRemoteQp(self, table, std::move(make_peer)));
}

}  // namespace regcache::hca::sim
