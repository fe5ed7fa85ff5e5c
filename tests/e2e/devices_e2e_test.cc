// Several devices in one regcached (a separate process, --device="sim;sim:sim1"): a client
// chooses its device when it connects and learns which NIC it is; keys travel over the ring and
// over gRPC and say their device; a key of one device is refused on the other; unknown devices
// and protocol errors get clear answers; regcachectl lists every device. Unix sockets in a temp
// dir; every wait is bounded.
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "client/internal/client_testing.h"
#include "gtest/gtest.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "regcache/sim_peer.h"
#include "regcache/v1/regcache.grpc.pb.h"
#include "tests/e2e/regcached_process.h"

using ::regcache::base::StatusIs;

namespace {

namespace rc = regcache::api;
namespace pb = regcache::v1;

using regcache::testing::Regcached;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;

class DevicesE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (regcache::testing::TestDevice() != "sim") {
      GTEST_SKIP() << "two named devices in one daemon are the sim's (this run: "
                   << regcache::testing::TestDevice() << ")";
    }
    daemon_ = std::make_unique<Regcached>(
        std::vector<std::string>{"--device=sim;sim:sim1", regcache::testing::AdminSelfFlag()});
  }

  absl::StatusOr<std::unique_ptr<rc::Client>> Connect(const std::string& device,
                                                      bool fast_path = true) {
    rc::ClientOptions o;
    o.device = device;
    o.fast_path = fast_path;
    o.client_cache = false;
    return rc::Client::Connect(daemon_->dir(), o);
  }

  // A raw control connection.
  int Dial() {
    const std::string path = daemon_->dir() + "/" + regcache::protocol::kControlSocketName;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }

  // regcachectl's output (stdout), or "" when it failed.
  std::string Ctl(const std::string& args) {
    const std::string cmd =
        absl::StrCat(REGCACHECTL_PATH, " --socket_dir=", daemon_->dir(), " ", args);
    FILE* f = popen(cmd.c_str(), "r");
    if (f == nullptr) return "";
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), f) != nullptr) out += buf;
    return pclose(f) == 0 ? out : "";
  }

  std::unique_ptr<Regcached> daemon_;
};

TEST_F(DevicesE2e, ClientsChooseTheirDeviceAndLearnItsIdentity) {
  auto a = Connect("");
  auto b = Connect("sim1");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->device().name, "sim0");
  EXPECT_EQ((*b)->device().name, "sim1");
  EXPECT_EQ((*b)->device().index, 1u);
  auto st = (*a)->Status();
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->devices.size(), 2u);
  EXPECT_EQ(st->devices[1].info.name, "sim1");
  EXPECT_EQ(st->devices[1].info.node_guid, (*b)->device().node_guid);
  EXPECT_EQ(st->devices[1].info.gid, (*b)->device().gid);
  EXPECT_NE(st->devices[0].info.node_guid, st->devices[1].info.node_guid);
  // The sim checks every access against the key's range (docs/key_bounds.md).
  EXPECT_EQ((*b)->device().key_bounds, rc::KeyBounds::kKey);
  EXPECT_TRUE((*b)->device().key_range_enforced());
  EXPECT_EQ(st->devices[1].info.key_bounds, rc::KeyBounds::kKey);
  EXPECT_NE(st->devices[1].key_bounds_detail.find("by design"), std::string::npos);
  EXPECT_EQ(st->devices[1].health, "ok");
  EXPECT_EQ(st->devices[0].sessions, 1u);
  EXPECT_EQ(st->devices[1].sessions, 1u);
  auto sessions = (*a)->Sessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 2u);
  EXPECT_EQ((*sessions)[0].device, "sim0");
  EXPECT_EQ((*sessions)[1].device, "sim1");
  // A client that requires key bounds is welcome on a device that enforces them.
  rc::ClientOptions required;
  required.device = "sim1";
  required.require_key_bounds = true;
  auto c = rc::Client::Connect(daemon_->dir(), required);
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST_F(DevicesE2e, UnknownDeviceIsRefusedNamingTheDevices) {
  auto c = Connect("mlx5_9");
  ASSERT_THAT(c, StatusIs(absl::StatusCode::kNotFound)) << c.status();
  EXPECT_NE(c.status().message().find("sim0, sim1"), absl::string_view::npos) << c.status();
}

TEST_F(DevicesE2e, RingKeysWorkOnTheirDeviceOnlyAndStatsAreLabelled) {
  auto a = Connect("sim0");
  auto b = Connect("sim1");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(rc::testing::UsesFastPath(**a) && rc::testing::UsesFastPath(**b));
  auto ma = (*a)->AllocateMemory(1 << 16);
  auto mb = (*b)->AllocateMemory(1 << 16);
  ASSERT_TRUE(ma.ok() && mb.ok());
  auto ka = (*a)->Register(ma->data, 4096, kRw);
  auto kb = (*b)->Register(mb->data, 4096, kRw);
  ASSERT_TRUE(ka.ok()) << ka.status();
  ASSERT_TRUE(kb.ok()) << kb.status();
  const uint64_t va = reinterpret_cast<uint64_t>(ma->data);
  const uint64_t vb = reinterpret_cast<uint64_t>(mb->data);
  ASSERT_TRUE(SimPeerWrite(**a, ka->rkey, va, std::string("sim0 key", 9)).ok());
  ASSERT_TRUE(SimPeerWrite(**b, kb->rkey, vb, std::string("sim1 key", 9)).ok());
  EXPECT_STREQ(static_cast<const char*>(ma->data), "sim0 key");
  EXPECT_STREQ(static_cast<const char*>(mb->data), "sim1 key");
  // a's key, used by a peer on sim1 (b's PD): refused, a's memory untouched.
  EXPECT_FALSE(SimPeerWrite(**b, ka->rkey, va, std::string("crossed", 8)).ok());
  EXPECT_STREQ(static_cast<const char*>(ma->data), "sim0 key");
  auto stats = (*a)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->Get("cache{device=\"sim0\"}", "register_misses").value_or(-1), 1);
  EXPECT_EQ(stats->Get("cache{device=\"sim1\"}", "register_misses").value_or(-1), 1);
  EXPECT_GE(stats->Get("ring", "requests").value_or(-1), 2) << "both came over the rings";
}

TEST_F(DevicesE2e, GrpcGrantsNameTheirDevice) {
  // A raw session on sim1: Open, Welcome (the fast path's files closed: gRPC only).
  int fd = Dial();
  regcache::protocol::OpenMsg open =
      regcache::protocol::MakeControlMessage<regcache::protocol::OpenMsg>(
          regcache::protocol::ControlType::kOpen);
  ASSERT_TRUE(regcache::protocol::SetDeviceName("sim1", open.device).ok());
  ASSERT_TRUE(regcache::protocol::SendControlMessage(fd, &open, sizeof(open), -1).ok());
  auto welcome = regcache::protocol::ReceiveControlMessage(fd, absl::Seconds(10));
  ASSERT_TRUE(welcome.ok()) << welcome.status();
  ASSERT_EQ(welcome->type, regcache::protocol::ControlType::kWelcome);
  regcache::protocol::CloseFds(&welcome->fds);
  const regcache::protocol::WelcomeMsg w = welcome->As<regcache::protocol::WelcomeMsg>();
  EXPECT_EQ(w.device_index, 1u);
  EXPECT_EQ(regcache::protocol::DeviceNameOf(w.device).value_or("?"), "sim1");
  auto stub = pb::RegCacheService::NewStub(grpc::CreateChannel(
      absl::StrCat("unix:", daemon_->dir(), "/", regcache::protocol::kGrpcSocketName),
      grpc::InsecureChannelCredentials()));
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.AddMetadata(regcache::protocol::kSessionMetadataKey, std::string(w.token, sizeof(w.token)));
    return ((*stub).*method)(&ctx, req, resp);
  };
  pb::StatusResponse st;
  const grpc::Status status = call(&pb::RegCacheService::Stub::Status, pb::StatusRequest(), &st);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_EQ(st.devices_size(), 2);
  EXPECT_EQ(st.devices(1).name(), "sim1");
  EXPECT_EQ(st.devices(1).node_guid(), w.node_guid);
  EXPECT_EQ(st.devices(1).gid(), std::string(reinterpret_cast<const char*>(w.gid), 16));
  EXPECT_EQ(st.devices(0).selection(), "named sim");
  // Memory the daemon allocates is attached at any address the client names: the grant's
  // device is what is checked here, not the data path.
  pb::AllocateMemoryRequest alloc;
  alloc.set_length(1 << 16);
  pb::AllocateMemoryResponse mem;
  ASSERT_TRUE(call(&pb::RegCacheService::Stub::AllocateMemory, alloc, &mem).ok());
  pb::AttachMemoryRequest attach;
  attach.set_memory_id(mem.memory_id());
  attach.set_client_va(0x7f0000000000);
  pb::AttachMemoryResponse attached;
  ASSERT_TRUE(call(&pb::RegCacheService::Stub::AttachMemory, attach, &attached).ok());
  pb::RegisterRequest reg;
  reg.set_va(0x7f0000000000);
  reg.set_length(4096);
  reg.set_access(kRw);
  pb::RegisterResponse grant;
  grpc::Status s = call(&pb::RegCacheService::Stub::Register, reg, &grant);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(grant.grant().device_index(), 1u);
  ::close(fd);
}

TEST_F(DevicesE2e, ControlSocketWantsOpenFirst) {
  int fd = Dial();
  regcache::protocol::HelloMsg hello =
      regcache::protocol::MakeControlMessage<regcache::protocol::HelloMsg>(
          regcache::protocol::ControlType::kHello);
  ASSERT_TRUE(regcache::protocol::SendControlMessage(fd, &hello, sizeof(hello), -1).ok());
  auto reply = regcache::protocol::ReceiveControlMessage(fd, absl::Seconds(10));
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->type, regcache::protocol::ControlType::kError);
  absl::Status refused =
      regcache::protocol::StatusFromErrorMessage(reply->As<regcache::protocol::ErrorMsg>());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(refused.message().find("before Open"), absl::string_view::npos) << refused;
  EXPECT_EQ(regcache::protocol::ReceiveControlMessage(fd, absl::Seconds(10)).status().code(),
            absl::StatusCode::kUnavailable)
      << "and the connection is closed";
  ::close(fd);
}

TEST_F(DevicesE2e, RegcachectlListsEveryDevice) {
  auto b = Connect("sim1");
  ASSERT_TRUE(b.ok());
  const std::string status = Ctl("--device=sim1 status");
  EXPECT_NE(status.find("device=sim:sim0"), std::string::npos) << status;
  EXPECT_NE(status.find("device[0]=sim0 backend=sim"), std::string::npos) << status;
  EXPECT_NE(status.find("device[0]_selection=named sim\n"), std::string::npos) << status;
  EXPECT_NE(status.find("device[1]_selection=named sim:sim1"), std::string::npos) << status;
  EXPECT_NE(status.find("device[1]_key_bounds=key key_range_enforced=1 (by design"),
            std::string::npos)
      << status;
  EXPECT_NE(status.find("sessions=1\ndevice[1]_selection"), std::string::npos)
      << "b's session only: regcachectl's status is an observer, not a session: " << status;
  const std::string sessions = Ctl("sessions");
  EXPECT_NE(sessions.find("device=sim1\n"), std::string::npos) << sessions;
  EXPECT_EQ(sessions.find("device=sim0"), std::string::npos)
      << "regcachectl opened no session of its own: " << sessions;
  EXPECT_EQ(Ctl("--device=nosuch status"), "") << "an unknown device fails regcachectl";
}

}  // namespace
