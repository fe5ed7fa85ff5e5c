// Target endpoints through service::Daemon on the sim (docs/endpoints.md): creation and the
// exchange of addresses, the remote node's one-sided operations landing in the client's own
// mapping only through a live endpoint of the session, the per-session limit, validation, and
// teardown with the session.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"
#include "service/daemon.h"

using ::regcache::base::StatusIs;

namespace regcache::service {
namespace {

using ::testing::HasSubstr;

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;
constexpr hca::AccessFlags kAllRemote = hca::kRemoteRead | hca::kRemoteWrite | hca::kRemoteAtomic;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

hca::Syndrome Syn(const absl::Status& s) {
  auto e = hca::ErrorOf(s);
  return e ? e->syndrome : hca::Syndrome::kNone;
}

// The peer a client names: what its own RC queue pair would say.
hca::EndpointAddress PeerAddress(uint32_t qpn = 0x1234) {
  hca::EndpointAddress a;
  a.qpn = qpn;
  a.psn = 0x4242;
  a.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  a.mtu = 1024;
  return a;
}

class DaemonEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(16); }

  void Start(uint32_t max_endpoints, bool remote_node = true) {
    hca::sim::RegisterBackend();
    daemon_.reset();
    registry_ = std::make_unique<base::stats::Registry>();
    DaemonConfig config;
    config.cache.background_maintenance = false;
    config.max_endpoints = max_endpoints;
    if (remote_node) {
      config.remote_node = [this](hca::Device* d, const hca::EndpointAddress& peer,
                                  const hca::EndpointAddress& ep) {
        device_ = d;
        return hca::sim::ConnectRemotePeer(d, peer, ep);
      };
    }
    auto d = Daemon::Create(config, registry_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }

  SessionId Open() {
    auto g = daemon_->OpenSession(PeerCredentials{::getpid(), 0, 0});
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return 0;
    ::close(g->channel_fd);
    ::close(g->state_fd);
    return g->id;
  }

  int64_t Stat(absl::string_view component, absl::string_view name) {
    absl::StatusOr<int64_t> v = base::stats::FindValue(daemon_->Stats(), component, name);
    if (v.ok()) return *v;
    ADD_FAILURE() << v.status();
    return -1;
  }

  // Daemon memory mapped "client-side" at another address and attached there; one rkey over
  // its first page.
  struct Client {
    uint8_t* mem = nullptr;
    uint64_t va = 0;
    uint32_t rkey = 0;
  };
  Client Memory(SessionId s) {
    auto m = daemon_->AllocateMemory(s, kLength, false);
    EXPECT_TRUE(m.ok()) << m.status();
    void* p = ::mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    ::close(m->fd);
    Client c;
    c.mem = static_cast<uint8_t*>(p);
    c.va = reinterpret_cast<uint64_t>(p);
    EXPECT_TRUE(daemon_->AttachMemory(s, m->id, c.va, false).ok());
    auto g = daemon_->Register(s, c.va, 4096, kRw);
    EXPECT_TRUE(g.ok()) << g.status();
    c.rkey = g.ok() ? g->rkey : 0;
    mapped_.push_back(p);
    return c;
  }

  void TearDown() override {
    daemon_.reset();
    for (void* p : mapped_) ::munmap(p, kLength);
  }

  static constexpr uint64_t kLength = 1 << 16;
  std::unique_ptr<base::stats::Registry> registry_;
  std::unique_ptr<Daemon> daemon_;
  hca::Device* device_ = nullptr;  // seen by the remote node
  std::vector<void*> mapped_;
};

TEST_F(DaemonEndpointTest, RemoteWriteThroughTheEndpointLandsInTheClientsMapping) {
  EXPECT_TRUE(daemon_->Status().capabilities.endpoints);
  const SessionId s = Open();
  Client c = Memory(s);
  auto ep = daemon_->CreateEndpoint(s, PeerAddress(), kAllRemote);
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->id, 1u);
  EXPECT_NE(ep->local.qpn, 0u);
  EXPECT_LE(ep->local.psn, 0xffffffu);
  EXPECT_NE(ep->local.gid, (std::array<uint8_t, 16>{}));
  EXPECT_EQ(ep->local.mtu, 4096u);
  EXPECT_EQ(ep->remote, PeerAddress());
  EXPECT_EQ(ep->access, kAllRemote);

  const std::string text = "one-sided, through the session's endpoint";
  ASSERT_TRUE(daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va + 64, Bytes(text), ep->id).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(c.mem + 64), text.size()), text);
  auto back = daemon_->sim_peer()->PeerRead(s, c.rkey, c.va + 64, text.size(), ep->id);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::string(back->begin(), back->end()), text);

  auto list = daemon_->ListEndpoints(s);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].local, ep->local);
  EXPECT_EQ(Stat("endpoints", "endpoints_open"), 1);
  EXPECT_EQ(Stat("hca_sim", "live_endpoints"), 1);
}

TEST_F(DaemonEndpointTest, RefusedWithoutAnEndpointAndAfterDestroy) {
  const SessionId s = Open();
  Client c = Memory(s);
  EXPECT_THAT(daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va, Bytes("x"), 7),
              StatusIs(absl::StatusCode::kNotFound));
  auto ep = daemon_->CreateEndpoint(s, PeerAddress(), kAllRemote);
  ASSERT_TRUE(ep.ok()) << ep.status();
  ASSERT_TRUE(daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va, Bytes("x"), ep->id).ok());
  // A connection of the remote node that outlives the call: the device's view of the peer.
  ASSERT_NE(device_, nullptr);
  std::unique_ptr<hca::Peer> held =
      hca::sim::ConnectRemotePeer(device_, PeerAddress(), ep->local).value();
  ASSERT_TRUE(held->Write(c.rkey, c.va + 8, Bytes("y")).ok());
  EXPECT_EQ(c.mem[8], 'y');

  ASSERT_TRUE(daemon_->DestroyEndpoint(s, ep->id).ok());
  absl::Status gone = daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va, Bytes("z"), ep->id);
  EXPECT_THAT(gone, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(gone.message(), HasSubstr("no endpoint"));
  absl::Status dropped = held->Write(c.rkey, c.va + 8, Bytes("z"));
  EXPECT_EQ(Syn(dropped), hca::Syndrome::kWrFlush) << dropped;
  EXPECT_EQ(c.mem[8], 'y');
  EXPECT_THAT(daemon_->DestroyEndpoint(s, ep->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(daemon_->ListEndpoints(s)->empty());
  EXPECT_EQ(Stat("hca_sim", "live_endpoints"), 0);
}

TEST_F(DaemonEndpointTest, EndpointAccessAndPdAreHonoured) {
  const SessionId a = Open(), b = Open();
  Client ca = Memory(a);
  auto read_only = daemon_->CreateEndpoint(a, PeerAddress(), hca::kRemoteRead);
  ASSERT_TRUE(read_only.ok()) << read_only.status();
  EXPECT_TRUE(daemon_->sim_peer()->PeerRead(a, ca.rkey, ca.va, 8, read_only->id).ok());
  absl::Status w = daemon_->sim_peer()->PeerWrite(a, ca.rkey, ca.va, Bytes("x"), read_only->id);
  EXPECT_THAT(w, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(Syn(w), hca::Syndrome::kRemoteAccess);
  // b's endpoint lives in b's PD: a's rkey does not work through it, nor does b see a's id.
  auto eb = daemon_->CreateEndpoint(b, PeerAddress(0x999), kAllRemote);
  ASSERT_TRUE(eb.ok()) << eb.status();
  absl::Status cross = daemon_->sim_peer()->PeerWrite(b, ca.rkey, ca.va, Bytes("x"), eb->id);
  EXPECT_EQ(Syn(cross), hca::Syndrome::kRemoteAccess) << cross;
  EXPECT_THAT(cross.message(), HasSubstr("PD"));
  // Ids are the session's own: b holds its endpoint 1, not a's endpoint 2.
  auto a2 = daemon_->CreateEndpoint(a, PeerAddress(0x777), kAllRemote);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->id, 2u);
  EXPECT_THAT(daemon_->DestroyEndpoint(b, a2->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(daemon_->sim_peer()->PeerRead(b, ca.rkey, ca.va, 8, a2->id).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DaemonEndpointTest, PerSessionLimit) {
  Start(2);
  const SessionId a = Open(), b = Open();
  auto e1 = daemon_->CreateEndpoint(a, PeerAddress(1), kAllRemote);
  auto e2 = daemon_->CreateEndpoint(a, PeerAddress(2), kAllRemote);
  ASSERT_TRUE(e1.ok() && e2.ok());
  auto e3 = daemon_->CreateEndpoint(a, PeerAddress(3), kAllRemote);
  EXPECT_THAT(e3, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(e3.status().message(), HasSubstr("limit is 2"));
  EXPECT_TRUE(daemon_->CreateEndpoint(b, PeerAddress(3), kAllRemote).ok());  // per session
  ASSERT_TRUE(daemon_->DestroyEndpoint(a, e1->id).ok());
  EXPECT_TRUE(daemon_->CreateEndpoint(a, PeerAddress(3), kAllRemote).ok());
  EXPECT_EQ(daemon_->ListEndpoints(a)->size(), 2u);
}

TEST_F(DaemonEndpointTest, EveryFieldIsValidated) {
  const SessionId s = Open();
  auto refused = [&](hca::EndpointAddress a, hca::AccessFlags access, absl::string_view what) {
    auto ep = daemon_->CreateEndpoint(s, a, access);
    EXPECT_THAT(ep, StatusIs(absl::StatusCode::kInvalidArgument)) << what;
    EXPECT_THAT(ep.status().message(), HasSubstr(what));
  };
  hca::EndpointAddress a = PeerAddress();
  a.qpn = 0;
  refused(a, kAllRemote, "qpn");
  a.qpn = 1u << 24;
  refused(a, kAllRemote, "qpn");
  a = PeerAddress();
  a.psn = 1u << 24;
  refused(a, kAllRemote, "psn");
  a = PeerAddress();
  a.mtu = 9000;
  refused(a, kAllRemote, "mtu");
  refused(PeerAddress(), 0, "access");
  refused(PeerAddress(), hca::kRemoteWrite | hca::kLocalWrite, "access");
  a = PeerAddress();
  a.gid = {};
  refused(a, kAllRemote, "GID");  // the sim's port is RoCE: the device's own check
  EXPECT_TRUE(daemon_->ListEndpoints(s)->empty());
  EXPECT_EQ(Stat("endpoints", "endpoints_refused"), 7);
  EXPECT_EQ(Stat("hca_sim", "live_endpoints"), 0);  // the refused one was not kept
}

TEST_F(DaemonEndpointTest, EndpointsDieWithTheirSession) {
  const SessionId s = Open(), other = Open();
  Client c = Memory(s);
  Client co = Memory(other);
  auto ep = daemon_->CreateEndpoint(s, PeerAddress(), kAllRemote);
  ASSERT_TRUE(ep.ok()) << ep.status();
  ASSERT_TRUE(daemon_->CreateEndpoint(s, PeerAddress(2), hca::kRemoteRead).ok());
  auto keep = daemon_->CreateEndpoint(other, PeerAddress(3), kAllRemote);
  ASSERT_TRUE(keep.ok());
  ASSERT_TRUE(daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va, Bytes("x"), ep->id).ok());
  std::unique_ptr<hca::Peer> held =
      hca::sim::ConnectRemotePeer(device_, PeerAddress(), ep->local).value();
  EXPECT_EQ(Stat("hca_sim", "live_endpoints"), 3);

  // The session's teardown path (a client that disconnects or dies ends here too).
  ASSERT_TRUE(daemon_->CloseSession(s).ok());
  EXPECT_EQ(Stat("hca_sim", "live_endpoints"), 1);
  EXPECT_EQ(Stat("endpoints", "endpoints_open"), 1);
  EXPECT_EQ(Stat("endpoints", "endpoints_destroyed"), 2);
  EXPECT_EQ(Syn(held->Write(c.rkey, c.va, Bytes("y"))), hca::Syndrome::kWrFlush);
  EXPECT_THAT(daemon_->ListEndpoints(s), StatusIs(absl::StatusCode::kNotFound));
  // The other session's endpoint is untouched.
  EXPECT_TRUE(daemon_->sim_peer()->PeerWrite(other, co.rkey, co.va, Bytes("still"), keep->id).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(co.mem), 5), "still");
}

TEST_F(DaemonEndpointTest, WithoutARemoteNodeThePeerPathThroughAnEndpointIsUnimplemented) {
  Start(16, /*remote_node=*/false);
  const SessionId s = Open();
  Client c = Memory(s);
  auto ep = daemon_->CreateEndpoint(s, PeerAddress(), kAllRemote);
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va, Bytes("x"), ep->id).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(
      daemon_->sim_peer()->PeerWrite(s, c.rkey, c.va, Bytes("x")).ok());  // the PD's own peer
}

}  // namespace
}  // namespace regcache::service
