// Target endpoints end to end (docs/endpoints.md): the C++ client asks the real regcached (a
// separate process, on the sim) for an endpoint connected to its peer over gRPC; the sim's
// remote node, playing that peer, reaches the client's own mapping only through the endpoint;
// the per-session limit, the wire's checks, destroy, teardown when the client goes, and
// regcachectl's view (endpoints, peer write --endpoint).
// Sockets live in a temp dir; every wait is bounded.
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "client/internal/client_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "regcache/descriptor.h"
#include "regcache/sim_peer.h"
#include "regcache/v1/regcache.pb.h"
#include "tests/e2e/regcached_process.h"

using ::regcache::base::StatusIs;

namespace {

namespace rc = regcache::api;
using regcache::testing::Regcached;
using ::testing::HasSubstr;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;

std::unique_ptr<rc::Client> Connect(const Regcached& d) {
  auto c = rc::Client::Connect(d.dir());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// The peer's queue pair, as its own ibv_query_qp / ibv_query_gid would say.
rc::RemoteQp Peer(uint32_t qpn = 0x1234) {
  rc::RemoteQp q;
  q.qpn = qpn;
  q.psn = 0x4242;
  q.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  q.mtu = 1024;
  return q;
}

int64_t Stat(rc::Client& c, const std::string& component, const std::string& name) {
  auto stats = c.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  auto v = stats.ok() ? stats->Get(component, name) : absl::StatusOr<int64_t>(-1);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : -1;
}

// The peer here is the sim's remote node (SimPeerWrite / SimPeerRead through an endpoint), and
// the sim's port figures (MTU 4096) are expected: on another device the tests skip, saying so.
// A real remote node through an endpoint is verbs_peer_e2e_test's (the vm and hw tiers).
class OnTheSim : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string device = regcache::testing::TestDevice();
    if (device.rfind("sim", 0) != 0) {
      GTEST_SKIP() << "the sim's remote node plays the peer here; REGCACHE_TEST_DEVICE is "
                   << device << " (verbs_peer_e2e_test is the endpoint test on a device)";
    }
  }
};
const auto* const kOnTheSim = ::testing::AddGlobalTestEnvironment(new OnTheSim);

TEST(EndpointE2e, ThePeersWritesReachTheClientsMemoryOnlyThroughItsEndpoint) {
  Regcached d;
  std::unique_ptr<rc::Client> c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto info = c->Status();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->endpoints);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);
  auto k = c->Register(base, 8192, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  const uint64_t addr = reinterpret_cast<uint64_t>(base) + 128;

  auto ep = c->CreateEndpoint(Peer());
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_NE(ep->id, 0u);
  EXPECT_NE(ep->local.qpn, 0u);
  EXPECT_LT(ep->local.qpn, 1u << 24);
  EXPECT_LT(ep->local.psn, 1u << 24);
  EXPECT_NE(ep->local.gid, (std::array<uint8_t, 16>{}));
  EXPECT_EQ(ep->local.mtu, 4096u);
  EXPECT_EQ(ep->peer.gid, Peer().gid);
  EXPECT_EQ(ep->peer.psn, Peer().psn);
  EXPECT_EQ(ep->access, rc::kRemoteRead | rc::kRemoteWrite | rc::kRemoteAtomic);

  const std::string text = "written by the peer through the endpoint";
  ASSERT_TRUE(SimPeerWrite(*c, k->rkey, addr, text, 0, ep->id).ok());
  EXPECT_EQ(std::memcmp(base + 128, text.data(), text.size()), 0);
  auto back = SimPeerRead(*c, k->rkey, addr, text.size(), 0, ep->id);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  auto list = c->ListEndpoints();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].local.qpn, ep->local.qpn);

  // No endpoint, no access; nor once it is destroyed.
  EXPECT_THAT(SimPeerWrite(*c, k->rkey, addr, "x", 0, ep->id + 100),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_TRUE(c->DestroyEndpoint(ep->id).ok());
  absl::Status gone = SimPeerWrite(*c, k->rkey, addr, "x", 0, ep->id);
  EXPECT_THAT(gone, StatusIs(absl::StatusCode::kNotFound)) << gone;
  EXPECT_EQ(base[128], static_cast<uint8_t>(text[0]));
  EXPECT_THAT(c->DestroyEndpoint(ep->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(c->ListEndpoints()->empty());
  EXPECT_EQ(Stat(*c, "hca_sim", "live_endpoints"), 0);

  // An endpoint that accepts reads only.
  auto ro = c->CreateEndpoint(Peer(0x77), rc::kRemoteRead);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_TRUE(SimPeerRead(*c, k->rkey, addr, 8, 0, ro->id).ok());
  EXPECT_EQ(SimPeerWrite(*c, k->rkey, addr, "x", 0, ro->id).code(),
            absl::StatusCode::kPermissionDenied);
}

// A second session plays the remote node a peer descriptor was handed to: it reaches the owner's
// memory through the endpoint connected to its queue pair, and only that way.
TEST(EndpointE2e, ARemoteNodeWritesThroughTheEndpointItsDescriptorNames) {
  Regcached d;
  std::unique_ptr<rc::Client> owner = Connect(d);
  std::unique_ptr<rc::Client> node = Connect(d);
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(node, nullptr);
  auto mem = owner->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);
  auto k = owner->Register(base, 8192, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  auto ep = owner->CreateEndpoint(Peer(0x5150), rc::kRemoteWrite | rc::kRemoteRead);
  ASSERT_TRUE(ep.ok()) << ep.status();
  auto desc = rc::DescribeKey(owner->device(), *k, &*ep);
  ASSERT_TRUE(desc.ok()) << desc.status();

  ASSERT_TRUE(SimPeerWrite(*node, *desc, Peer(0x5150), desc->addr + 16, "from the node").ok());
  EXPECT_EQ(std::memcmp(base + 16, "from the node", 13), 0);
  auto back = SimPeerRead(*node, *desc, Peer(0x5150), desc->addr + 16, 13);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "from the node");

  // Another queue pair is not connected to the endpoint; a descriptor without one names none.
  EXPECT_THAT(SimPeerWrite(*node, *desc, Peer(0x5151), desc->addr, "x"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("0x5151")));
  rc::PeerDescriptor bare = *desc;
  bare.endpoint.reset();
  EXPECT_THAT(SimPeerWrite(*node, bare, Peer(0x5150), desc->addr, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no endpoint")));
  // The wire: peer_qpn alone, or endpoint_qpn with a session or endpoint id, is malformed.
  regcache::v1::PeerWriteRequest req;
  req.set_rkey(desc->rkey);
  req.set_addr(desc->addr);
  req.set_data("x");
  req.set_peer_qpn(0x5150);
  EXPECT_THAT(
      rc::testing::RawCall(*node, "/regcache.v1.SimPeerService/PeerWrite", req.SerializeAsString()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("peer_qpn")));
  req.set_endpoint_qpn(desc->endpoint->qpn);
  req.set_endpoint_id(ep->id);
  EXPECT_THAT(
      rc::testing::RawCall(*node, "/regcache.v1.SimPeerService/PeerWrite", req.SerializeAsString()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be 0")));

  // Revoked: refused by the device, through the same endpoint. Ended: no endpoint.
  ASSERT_TRUE(owner->Invalidate(k->handle).ok());
  EXPECT_THAT(SimPeerWrite(*node, *desc, Peer(0x5150), desc->addr, "stale"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("REMOTE_ACCESS")));
  EXPECT_EQ(base[0], 0);
  // The owner goes: its session ends when the daemon sees the connection close, which is after
  // reset() returns, so wait (bounded) for the teardown to destroy the endpoint.
  owner.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline && Stat(*node, "hca_sim", "live_endpoints") != 0) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(SimPeerWrite(*node, *desc, Peer(0x5150), desc->addr, "x"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(EndpointE2e, LimitAndTheWiresChecks) {
  Regcached d({"--max_endpoints=2"});
  std::unique_ptr<rc::Client> c = Connect(d);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->CreateEndpoint(Peer(1)).ok());
  ASSERT_TRUE(c->CreateEndpoint(Peer(2)).ok());
  auto third = c->CreateEndpoint(Peer(3));
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(third.status().message(), HasSubstr("limit is 2"));

  rc::RemoteQp bad = Peer();
  bad.psn = 1u << 24;
  EXPECT_THAT(c->CreateEndpoint(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  bad = Peer();
  bad.mtu = 1500;
  EXPECT_THAT(c->CreateEndpoint(bad).status().message(), HasSubstr("mtu"));
  EXPECT_THAT(c->CreateEndpoint(Peer(), rc::kLocalWrite).status().message(), HasSubstr("access"));
  // What the typed client cannot send: a GID that is not 16 bytes, no peer at all.
  regcache::v1::CreateEndpointRequest raw;
  raw.mutable_peer()->set_qpn(5);
  raw.mutable_peer()->set_gid("abc");
  raw.set_access(rc::kRemoteRead);
  absl::Status short_gid = rc::testing::RawCall(*c, "/regcache.v1.RegCacheService/CreateEndpoint",
                                                raw.SerializeAsString());
  EXPECT_THAT(short_gid, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(short_gid.message(), HasSubstr("gid is 3 bytes"));
  raw.clear_peer();
  EXPECT_THAT(rc::testing::RawCall(*c, "/regcache.v1.RegCacheService/CreateEndpoint",
                                   raw.SerializeAsString())
                  .message(),
              HasSubstr("missing"));
  EXPECT_EQ(c->ListEndpoints()->size(), 2u);  // nothing refused was kept
}

TEST(EndpointE2e, EndpointsDieWithTheClientsSession) {
  Regcached d;
  std::unique_ptr<rc::Client> watcher = Connect(d);
  std::unique_ptr<rc::Client> c = Connect(d);
  ASSERT_NE(watcher, nullptr);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->CreateEndpoint(Peer(1)).ok());
  ASSERT_TRUE(c->CreateEndpoint(Peer(2)).ok());
  ASSERT_TRUE(watcher->CreateEndpoint(Peer(3)).ok());
  EXPECT_EQ(Stat(*watcher, "hca_sim", "live_endpoints"), 3);
  // The client goes (its control connection closes, as when it crashes): the daemon's session
  // teardown destroys its endpoints, and only its.
  c.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline && Stat(*watcher, "hca_sim", "live_endpoints") != 1) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Stat(*watcher, "hca_sim", "live_endpoints"), 1);
  EXPECT_EQ(Stat(*watcher, "endpoints", "endpoints_open"), 1);
  EXPECT_EQ(watcher->ListEndpoints()->size(), 1u);
}

// regcachectl's exit code and output (stdout and stderr), run to completion.
std::pair<int, std::string> Ctl(const Regcached& d, const std::string& args) {
  const std::string cmd =
      std::string(REGCACHECTL_PATH) + " --socket_dir=" + d.dir() + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return {-1, ""};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f) != nullptr) out += buf;
  const int status = ::pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(EndpointE2e, RegcachectlListsAndUsesASessionsEndpoints) {
  Regcached d({regcache::testing::AdminSelfFlag()});  // --session names another session
  std::unique_ptr<rc::Client> c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto k = c->Register(mem->data, 4096, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  auto ep = c->CreateEndpoint(Peer(0xabcd));
  ASSERT_TRUE(ep.ok()) << ep.status();
  const std::string session = "--session=" + std::to_string(c->session_id());

  auto [rc, out] = Ctl(d, "status");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("endpoints=1"));
  std::tie(rc, out) = Ctl(d, session + " endpoints");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("endpoint=" + std::to_string(ep->id) + " "));
  EXPECT_THAT(out, HasSubstr("peer_qpn=0x00abcd"));
  EXPECT_THAT(out, HasSubstr("access=rr|rw|a"));
  std::tie(rc, out) = Ctl(
      d, session + " --endpoint=" + std::to_string(ep->id) + " --rkey=" + std::to_string(k->rkey) +
             " --addr=" + std::to_string(reinterpret_cast<uint64_t>(mem->data)) +
             " --data=via-regcachectl peer write");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(std::memcmp(mem->data, "via-regcachectl", 15), 0);
  std::tie(rc, out) = Ctl(d, session + " --endpoint=99 --rkey=1 --addr=1 --data=x peer write");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("NOT_FOUND"));
}

}  // namespace
