// A daemon serving several devices (DaemonConfig::device "sim;sim:sim1"): each has its own
// cache, stats and identity; a session lives on the device it chose; a key of one device works
// on its own device and is refused on the other.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "service/daemon.h"

using ::regcache::base::StatusIs;

namespace regcache::service {
namespace {

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

absl::Span<const uint8_t> Bytes(const char* text) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text), std::strlen(text) + 1);
}

class DaemonDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hca::sim::RegisterBackend();
    config_.device = "sim; sim:sim1";  // spaces around items are trimmed
    config_.admin_uids = {0};          // the sessions here are root's; Sessions needs an admin
    config_.cache.background_maintenance = false;
    config_.cache.pool.low_watermark = 2;
    config_.cache.pool.high_watermark = 4;
    auto d = Daemon::Create(config_, &registry_);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }

  absl::StatusOr<SessionGrant> Open(absl::string_view device) {
    auto g = daemon_->OpenSession(PeerCredentials{::getpid(), 0, 0}, device);
    if (g.ok()) {
      ::close(g->channel_fd);  // the fast path's files: not used here
      ::close(g->state_fd);
    }
    return g;
  }

  // Daemon memory of the session, mapped here as a client would and attached at that address.
  uint8_t* Attach(SessionId s, uint64_t length) {
    auto m = daemon_->AllocateMemory(s, length, false);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return nullptr;
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    ::close(m->fd);
    EXPECT_NE(p, MAP_FAILED);
    EXPECT_TRUE(daemon_->AttachMemory(s, m->id, reinterpret_cast<uint64_t>(p), false).ok());
    mapped_.push_back(p);
    return static_cast<uint8_t*>(p);
  }

  int64_t Stat(absl::string_view component, absl::string_view name) {
    for (const auto& s : daemon_->Stats()) {
      if (s.component == component && s.name == name) return s.value;
    }
    return -1;
  }

  void TearDown() override {
    daemon_.reset();
    for (void* p : mapped_) ::munmap(p, 1 << 16);
  }

  DaemonConfig config_;
  base::stats::Registry registry_;
  std::unique_ptr<Daemon> daemon_;
  std::vector<void*> mapped_;
};

TEST_F(DaemonDevicesTest, StatusListsEveryDeviceWithItsIdentity) {
  DaemonStatus st = daemon_->Status();
  ASSERT_EQ(st.devices.size(), 2u);
  EXPECT_EQ(st.device, "sim:sim0") << "the first device is the daemon's default";
  EXPECT_EQ(st.devices[0].identity.name, "sim0");
  EXPECT_EQ(st.devices[1].identity.name, "sim1");
  EXPECT_EQ(st.devices[1].identity.index, 1u);
  EXPECT_EQ(st.devices[1].spec, "sim:sim1");
  EXPECT_EQ(st.devices[1].selection, "named sim:sim1");
  EXPECT_NE(st.devices[0].identity.node_guid, 0u);
  EXPECT_NE(st.devices[0].identity.node_guid, st.devices[1].identity.node_guid);
  EXPECT_NE(st.devices[0].identity.gid, st.devices[1].identity.gid);
  EXPECT_EQ(st.devices[0].identity.gid[0], 0xfe) << "a link-local GID";
}

TEST_F(DaemonDevicesTest, SessionsChooseTheirDeviceAndGrantsNameIt) {
  auto a = Open("");
  auto b = Open("sim1");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->device.name, "sim0");
  EXPECT_EQ(a->device.index, 0u);
  EXPECT_EQ(b->device.name, "sim1");
  EXPECT_EQ(b->device.index, 1u);
  DaemonStatus st = daemon_->Status();
  EXPECT_EQ(b->device.node_guid, st.devices[1].identity.node_guid);
  EXPECT_EQ(b->device.gid, st.devices[1].identity.gid);
  EXPECT_EQ(st.devices[0].sessions, 1u);
  EXPECT_EQ(st.devices[1].sessions, 1u);
  auto dev = daemon_->SessionDevice(b->id);
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ(dev->name, "sim1");
  auto sessions = daemon_->Sessions(a->id);
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 2u);
  EXPECT_EQ((*sessions)[0].device.name, "sim0");
  EXPECT_EQ((*sessions)[1].device.name, "sim1");
  ASSERT_TRUE(daemon_->CloseSession(b->id).ok());
  EXPECT_EQ(daemon_->Status().devices[1].sessions, 0u);
  EXPECT_THAT(daemon_->SessionDevice(b->id), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DaemonDevicesTest, UnknownDeviceIsNotFoundAndListsTheDevices) {
  auto g = Open("mlx5_7");
  ASSERT_THAT(g, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_NE(g.status().message().find("mlx5_7"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("sim0, sim1"), absl::string_view::npos) << g.status();
  EXPECT_EQ(daemon_->Status().sessions, 0u);
}

TEST_F(DaemonDevicesTest, KeysWorkOnTheirDeviceAndAreRefusedOnTheOther) {
  auto a = Open("sim0");
  auto b = Open("sim1");
  ASSERT_TRUE(a.ok() && b.ok());
  uint8_t* ma = Attach(a->id, 1 << 16);
  uint8_t* mb = Attach(b->id, 1 << 16);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  const uint64_t va = reinterpret_cast<uint64_t>(ma);
  const uint64_t vb = reinterpret_cast<uint64_t>(mb);
  auto ka = daemon_->Register(a->id, va, 4096, kRw);
  auto kb = daemon_->Register(b->id, vb, 4096, kRw);
  ASSERT_TRUE(ka.ok()) << ka.status();
  ASSERT_TRUE(kb.ok()) << kb.status();
  // Each key on its own device.
  ASSERT_TRUE(daemon_->sim_peer()->PeerWrite(a->id, ka->rkey, va, Bytes("on sim0")).ok());
  ASSERT_TRUE(daemon_->sim_peer()->PeerWrite(b->id, kb->rkey, vb, Bytes("on sim1")).ok());
  EXPECT_STREQ(reinterpret_cast<const char*>(ma), "on sim0");
  EXPECT_STREQ(reinterpret_cast<const char*>(mb), "on sim1");
  // sim0's key through sim1 (a peer in b's PD): refused — whatever key of that value sim1 may
  // have, it is not a's registration, and a's memory is untouched.
  absl::Status cross = daemon_->sim_peer()->PeerWrite(b->id, ka->rkey, va, Bytes("crossed"));
  EXPECT_FALSE(cross.ok());
  EXPECT_STREQ(reinterpret_cast<const char*>(ma), "on sim0");
  cross = daemon_->sim_peer()->PeerWrite(a->id, kb->rkey, vb, Bytes("crossed"));
  EXPECT_FALSE(cross.ok());
  EXPECT_STREQ(reinterpret_cast<const char*>(mb), "on sim1");
  // Each session's handles are its device's cache's (the values may coincide across devices).
  EXPECT_TRUE(daemon_->Release(a->id, ka->handle).ok());
  EXPECT_TRUE(daemon_->Release(b->id, kb->handle).ok());
  EXPECT_EQ(daemon_->Usage(b->id)->live_registrations, 1u) << "cached, unreferenced, on sim1";
}

TEST_F(DaemonDevicesTest, EachDeviceHasItsOwnLabelledStats) {
  auto b = Open("sim1");
  ASSERT_TRUE(b.ok());
  uint8_t* mb = Attach(b->id, 1 << 16);
  ASSERT_NE(mb, nullptr);
  auto k = daemon_->Register(b->id, reinterpret_cast<uint64_t>(mb), 4096, kRw);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(daemon_->sim_peer()
                  ->PeerWrite(b->id, k->rkey, reinterpret_cast<uint64_t>(mb), Bytes("x"))
                  .ok());
  EXPECT_EQ(Stat("cache{device=\"sim1\"}", "register_misses"), 1);
  EXPECT_EQ(Stat("cache{device=\"sim0\"}", "register_misses"), 0);
  EXPECT_EQ(Stat("cache", "register_misses"), -1) << "no unlabelled cache with several devices";
  EXPECT_GE(Stat("hca_sim{device=\"sim1\"}", "translations"), 1);
  EXPECT_EQ(Stat("hca_sim{device=\"sim0\"}", "translations"), 0);
  EXPECT_EQ(Stat("daemon", "sessions_open"), 1) << "the daemon's own stats stay unlabelled";
}

TEST_F(DaemonDevicesTest, SessionLimitPerDevice) {
  daemon_.reset();
  config_.max_sessions_per_device = 1;
  auto d = Daemon::Create(config_, &registry_);
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  auto a = Open("sim0");
  ASSERT_TRUE(a.ok());
  auto refused = Open("sim0");
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(refused.status().message().find("sim0"), absl::string_view::npos);
  EXPECT_TRUE(Open("sim1").ok()) << "the other device has its own limit";
  ASSERT_TRUE(daemon_->CloseSession(a->id).ok());
  EXPECT_TRUE(Open("").ok()) << "room again on sim0";
}

TEST(DaemonDeviceList, BadListsAreRefusedClearly) {
  hca::sim::RegisterBackend();
  auto code_and_message = [](const std::string& list) {
    DaemonConfig config;
    config.device = list;
    config.cache.background_maintenance = false;
    auto d = Daemon::Create(config, nullptr);
    return d.ok() ? absl::OkStatus() : d.status();
  };
  absl::Status s = code_and_message("sim;sim");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(s.message().find("two devices are named 'sim0'"), absl::string_view::npos) << s;
  s = code_and_message("sim;;sim:sim1");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(s.message().find("item 2 is empty"), absl::string_view::npos) << s;
  s = code_and_message("auto;sim");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(s.message().find("must stand alone"), absl::string_view::npos) << s;
  s = code_and_message("sim;nosuch");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound)) << s;
  EXPECT_NE(s.message().find("device 'nosuch'"), absl::string_view::npos) << s;
  EXPECT_TRUE(code_and_message("sim:sim0").ok()) << "one device: as always";
}

}  // namespace
}  // namespace regcache::service
