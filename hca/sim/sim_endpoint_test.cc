// Target endpoints on the sim: the endpoint's address and Connect's checks, and the simulated
// remote node whose one-sided operations reach a PD's memory only through a live endpoint that
// is connected to it and allows the operation.
#include <cstring>
#include <memory>
#include <vector>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"

using ::regcache::base::StatusIs;

namespace regcache::hca::sim {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;
constexpr AccessFlags kAllRemote = kRemoteRead | kRemoteWrite | kRemoteAtomic;

Syndrome Syn(const absl::Status& s) {
  auto e = ErrorOf(s);
  return e ? e->syndrome : Syndrome::kNone;
}

class SimEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = NewSimDevice(SimOptions{}).value();
    pd_ = dev_->AllocPd().value();
    mem_.assign(5 * kPage, 0);
    base_ = (reinterpret_cast<uint64_t>(mem_.data()) + kPage - 1) & ~(kPage - 1);
    backing_ = dev_->RegisterBacking(pd_, base_, 4 * kPage, kAllAccess, {}).value();
  }

  std::unique_ptr<Endpoint> NewEndpoint(AccessFlags access = kAllRemote, Pd pd = {}) {
    auto ep = dev_->CreateEndpoint(pd.pdn == 0 ? pd_ : pd, EndpointOptions{access});
    EXPECT_TRUE(ep.ok()) << ep.status();
    return ep.ok() ? std::move(*ep) : nullptr;
  }

  // A remote requester connected both ways with `ep`.
  std::unique_ptr<Peer> Pair(Endpoint& ep) {
    std::unique_ptr<RemoteQp> qp = dev_->CreateRemoteQp();
    EXPECT_TRUE(ep.Connect(qp->local()).ok());
    auto peer = qp->Connect(ep.local());
    EXPECT_TRUE(peer.ok()) << peer.status();
    return peer.ok() ? std::move(*peer) : nullptr;
  }

  int64_t LiveEndpoints() { return dev_->stats().live_endpoints.value(); }

  std::unique_ptr<SimDevice> dev_;
  Pd pd_;
  std::vector<uint8_t> mem_;
  uint64_t base_ = 0;
  Backing backing_;
};

TEST_F(SimEndpointTest, CapabilityAndLocalAddress) {
  EXPECT_TRUE(dev_->capabilities().endpoints);
  std::unique_ptr<Endpoint> a = NewEndpoint();
  std::unique_ptr<Endpoint> b = NewEndpoint();
  EXPECT_EQ(a->pd(), pd_);
  const EndpointAddress& la = a->local();
  EXPECT_NE(la.qpn, 0u);
  EXPECT_LE(la.qpn, 0xffffffu);
  EXPECT_LE(la.psn, 0xffffffu);
  EXPECT_NE(la.gid, (std::array<uint8_t, 16>{}));
  EXPECT_EQ(la.lid, 0);  // RoCE
  EXPECT_EQ(la.mtu, 4096u);
  EXPECT_NE(la.qpn, b->local().qpn);
  EXPECT_EQ(la.gid, b->local().gid);
  // The QP number space is the device's: a queue created later gets yet another number, and
  // the remote node's GID is not the device's.
  EXPECT_NE(dev_->CreateRemoteQp()->local().gid, la.gid);
  EXPECT_EQ(LiveEndpoints(), 2);
  a.reset();
  EXPECT_EQ(LiveEndpoints(), 1);
}

TEST_F(SimEndpointTest, CreateChecksPdAndAccess) {
  EXPECT_THAT(dev_->CreateEndpoint(Pd{999}, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  auto local = dev_->CreateEndpoint(pd_, EndpointOptions{kRemoteRead | kLocalWrite});
  EXPECT_THAT(local, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(local.status().message(), HasSubstr("local bits"));
}

TEST_F(SimEndpointTest, ConnectValidatesTheAddressOnce) {
  std::unique_ptr<Endpoint> ep = NewEndpoint();
  EndpointAddress good = dev_->CreateRemoteQp()->local();
  auto bad = [&](auto mutate, absl::string_view what) {
    EndpointAddress a = good;
    mutate(a);
    absl::Status s = ep->Connect(a);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << what;
    EXPECT_THAT(s.message(), HasSubstr(what));
  };
  bad([](EndpointAddress& a) { a.qpn = 1u << 24; }, "qpn");
  bad([](EndpointAddress& a) { a.qpn = 0; }, "qpn");
  bad([](EndpointAddress& a) { a.psn = 1u << 24; }, "psn");
  bad([](EndpointAddress& a) { a.mtu = 1500; }, "mtu");
  bad([](EndpointAddress& a) { a.gid = {}; }, "GID");
  // A refused address leaves it unconnected: a good one is still taken, then never another.
  good.mtu = 1024;
  ASSERT_TRUE(ep->Connect(good).ok());
  EXPECT_THAT(ep->Connect(good), StatusIs(absl::StatusCode::kFailedPrecondition));
  for (uint32_t mtu : {0u, 256u, 512u, 2048u, 4096u}) {
    std::unique_ptr<Endpoint> other = NewEndpoint();
    good.mtu = mtu;
    EXPECT_TRUE(other->Connect(good).ok()) << mtu;
  }
}

TEST_F(SimEndpointTest, RemoteOneSidedOperationsReachThePdsMemory) {
  std::unique_ptr<Endpoint> ep = NewEndpoint();
  std::unique_ptr<Peer> remote = Pair(*ep);
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(remote->pd(), pd_);
  const char text[] = "through the endpoint";
  ASSERT_TRUE(remote
                  ->Write(backing_.key, base_ + 100,
                          absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text), sizeof text))
                  .ok());
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(base_ + 100), text, sizeof text), 0);
  std::vector<uint8_t> back(sizeof text);
  ASSERT_TRUE(remote->Read(backing_.key, base_ + 100, absl::MakeSpan(back)).ok());
  EXPECT_EQ(std::memcmp(back.data(), text, sizeof text), 0);
  EXPECT_EQ(remote->FetchAdd(backing_.key, base_ + kPage, 5).value(), 0u);
  EXPECT_EQ(remote->CompareSwap(backing_.key, base_ + kPage, 5, 9).value(), 5u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(base_ + kPage), 9u);
  // One-sided only; no local keys on the remote side.
  EXPECT_THAT(remote->SendWithInvalidate(backing_.key), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_EQ(remote->LocalRead(backing_.key, base_, absl::MakeSpan(back)).code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(SimEndpointTest, RkeyOfAnotherPdIsRefused) {
  const Pd other = dev_->AllocPd().value();
  std::unique_ptr<Endpoint> ep = NewEndpoint(kAllRemote, other);
  std::unique_ptr<Peer> remote = Pair(*ep);
  uint8_t b[8] = {};
  absl::Status s = remote->Read(backing_.key, base_, absl::MakeSpan(b));
  EXPECT_EQ(Syn(s), Syndrome::kRemoteAccess) << s;
  EXPECT_THAT(s.message(), HasSubstr("PD"));
}

TEST_F(SimEndpointTest, RemoteAccessOfTheEndpointIsHonoured) {
  std::unique_ptr<Endpoint> ep = NewEndpoint(kRemoteRead);
  std::unique_ptr<Peer> remote = Pair(*ep);
  uint8_t b[8] = {};
  EXPECT_TRUE(remote->Read(backing_.key, base_, absl::MakeSpan(b)).ok());
  absl::Status w = remote->Write(backing_.key, base_, absl::MakeConstSpan(b));
  EXPECT_EQ(Syn(w), Syndrome::kRemoteAccess) << w;
  EXPECT_THAT(w, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(w.message(), HasSubstr("accepts only"));
  EXPECT_EQ(Syn(remote->FetchAdd(backing_.key, base_, 1).status()), Syndrome::kRemoteAccess);
  EXPECT_GE(dev_->stats().endpoint_refusals.value(), 2);
}

TEST_F(SimEndpointTest, AccessesFailOnceTheEndpointIsDestroyed) {
  std::unique_ptr<Endpoint> ep = NewEndpoint();
  std::unique_ptr<Peer> remote = Pair(*ep);
  uint8_t b[8] = {1, 2, 3};
  ASSERT_TRUE(remote->Write(backing_.key, base_, absl::MakeConstSpan(b)).ok());
  ep.reset();
  EXPECT_EQ(LiveEndpoints(), 0);
  absl::Status s = remote->Write(backing_.key, base_ + 8, absl::MakeConstSpan(b));
  EXPECT_EQ(Syn(s), Syndrome::kWrFlush) << s;
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(s.message(), HasSubstr("transport retry exceeded"));
  EXPECT_EQ(mem_[base_ + 8 - reinterpret_cast<uint64_t>(mem_.data())], 0);
  EXPECT_EQ(Syn(remote->Read(backing_.key, base_, absl::MakeSpan(b))), Syndrome::kWrFlush);
  // A new endpoint is a new queue pair: the old connection does not reach it.
  std::unique_ptr<Endpoint> again = NewEndpoint();
  EXPECT_EQ(Syn(remote->Read(backing_.key, base_, absl::MakeSpan(b))), Syndrome::kWrFlush);
}

TEST_F(SimEndpointTest, OnlyTheConnectedRequesterGetsThrough) {
  std::unique_ptr<Endpoint> ep = NewEndpoint();
  uint8_t b[8] = {};
  // Not connected yet (the endpoint is not RTR).
  std::unique_ptr<RemoteQp> qp = dev_->CreateRemoteQp();
  std::unique_ptr<Peer> early = qp->Connect(ep->local()).value();
  absl::Status s = early->Read(backing_.key, base_, absl::MakeSpan(b));
  EXPECT_EQ(Syn(s), Syndrome::kWrFlush);
  EXPECT_THAT(s.message(), HasSubstr("not connected"));
  ASSERT_TRUE(ep->Connect(qp->local()).ok());
  EXPECT_TRUE(early->Read(backing_.key, base_, absl::MakeSpan(b)).ok());
  EXPECT_THAT(qp->Connect(ep->local()), StatusIs(absl::StatusCode::kFailedPrecondition));
  // Another requester aimed at the same endpoint is dropped.
  std::unique_ptr<Peer> stranger = dev_->CreateRemoteQp()->Connect(ep->local()).value();
  s = stranger->Read(backing_.key, base_, absl::MakeSpan(b));
  EXPECT_EQ(Syn(s), Syndrome::kWrFlush);
  EXPECT_THAT(s.message(), HasSubstr("not to this queue pair"));
  // A requester playing the connected peer's address but with another first PSN.
  EndpointAddress wrong_psn = qp->local();
  wrong_psn.psn = (wrong_psn.psn + 1) & 0xffffff;
  std::unique_ptr<Peer> off =
      dev_->CreateRemoteQpAs(wrong_psn).value()->Connect(ep->local()).value();
  EXPECT_THAT(off->Read(backing_.key, base_, absl::MakeSpan(b)).message(), HasSubstr("psn"));
  // The peer the client named, played by the remote node (what the daemon does).
  std::unique_ptr<Peer> as = ConnectRemotePeer(dev_.get(), qp->local(), ep->local()).value();
  EXPECT_TRUE(as->Read(backing_.key, base_, absl::MakeSpan(b)).ok());
  // An address of a GID that is not the device's reaches nothing.
  EndpointAddress elsewhere = ep->local();
  elsewhere.gid[15] ^= 0xff;
  std::unique_ptr<Peer> lost = ConnectRemotePeer(dev_.get(), qp->local(), elsewhere).value();
  EXPECT_EQ(Syn(lost->Read(backing_.key, base_, absl::MakeSpan(b))), Syndrome::kWrFlush);
}

TEST_F(SimEndpointTest, PdCannotGoWhileItHasEndpoints) {
  const Pd pd = dev_->AllocPd().value();
  std::unique_ptr<Endpoint> ep = NewEndpoint(kAllRemote, pd);
  EXPECT_THAT(dev_->DeallocPd(pd), StatusIs(absl::StatusCode::kFailedPrecondition));
  ep.reset();
  EXPECT_TRUE(dev_->DeallocPd(pd).ok());
}

TEST_F(SimEndpointTest, RemotePeerOfANonSimDeviceIsUnimplemented) {
  EXPECT_EQ(ConnectRemotePeer(nullptr, dev_->CreateRemoteQp()->local(), {}).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace regcache::hca::sim
