// The device's key budget against a real regcached process (docs/architecture.md, Device
// budget): a thousand idle sessions hold no pooled keys, so a newcomer still registers on a
// device whose table eager pools would have filled; a session that cached nearly the whole
// device gives back what is over its share when another session needs keys. Unix sockets in a
// temp dir; every loop is bounded by its count.
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;

// A session opened on a bare control connection (the cheapest client: one descriptor here).
int OpenRawSession(const std::string& dir) {
  const std::string path = dir + "/" + regcache::protocol::kControlSocketName;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  regcache::protocol::OpenMsg open =
      regcache::protocol::MakeControlMessage<regcache::protocol::OpenMsg>(
          regcache::protocol::ControlType::kOpen);
  if (!regcache::protocol::SendControlMessage(fd, &open, sizeof(open), -1).ok()) return -1;
  auto welcome = regcache::protocol::ReceiveControlMessage(fd, absl::Seconds(30));
  if (!welcome.ok() || welcome->type != regcache::protocol::ControlType::kWelcome) return -1;
  regcache::protocol::CloseFds(&welcome->fds);  // the rings: unused here
  return fd;
}

absl::StatusOr<std::unique_ptr<rc::Client>> Connect(const std::string& dir) {
  rc::ClientOptions o;
  o.client_cache = false;
  return rc::Client::Connect(dir, o);
}

TEST(BudgetE2e, AThousandIdleSessionsAndANewcomerThatRegisters) {
  if (regcache::testing::TestDevice() != "sim") GTEST_SKIP() << "a small key table is the sim's";
  rlimit fds{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &fds), 0);
  if (fds.rlim_cur < 1200 && fds.rlim_max >= 1200) {
    fds.rlim_cur = std::min<rlim_t>(fds.rlim_max, 4096);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &fds), 0);
  }
  if (fds.rlim_cur < 1200) GTEST_SKIP() << "needs 1,200 descriptors (RLIMIT_NOFILE)";
  // 8,192 keys: 1,000 sessions with eager pools (96 keys each) would need 96,000.
  regcache::testing::Regcached daemon({"--device=sim:max_keys=8192", "--max_sessions=1100"});
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) {
    const int fd = OpenRawSession(daemon.dir());
    ASSERT_GE(fd, 0) << "session " << i;
    idle.push_back(fd);
  }
  auto c = Connect(daemon.dir());
  ASSERT_TRUE(c.ok()) << c.status();
  auto mem = (*c)->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  for (int i = 0; i < 16; ++i) {
    auto k = (*c)->Register(static_cast<uint8_t*>(mem->data) + i * 4096, 4096, kRw);
    ASSERT_TRUE(k.ok()) << "register " << i << ": " << k.status();
    ASSERT_TRUE((*c)->Release(k->handle).ok());
  }
  auto info = (*c)->Status();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->sessions, 1001u);
  auto stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_LT(stats->Get("hca_sim", "live_keys").value_or(1 << 30), 1000)
      << "the idle sessions hold keys";
  for (int fd : idle) close(fd);
}

TEST(BudgetE2e, AHoggingSessionGivesBackItsShareToANeighbour) {
  if (regcache::testing::TestDevice() != "sim") GTEST_SKIP() << "a small key table is the sim's";
  // 1,024 keys: a budget of 960 pooled keys, a fair share of 480 with two sessions.
  regcache::testing::Regcached daemon({"--device=sim:max_keys=1024"});
  auto hog = Connect(daemon.dir());
  ASSERT_TRUE(hog.ok()) << hog.status();
  auto hog_mem = (*hog)->AllocateMemory(8 << 20);
  ASSERT_TRUE(hog_mem.ok()) << hog_mem.status();
  int cached = 0;
  for (int i = 0; i < 2000; ++i) {  // to its limit: cached, unreferenced registrations
    auto k = (*hog)->Register(static_cast<uint8_t*>(hog_mem->data) + i * 4096, 4096, kRw);
    if (!k.ok()) break;
    ASSERT_TRUE((*hog)->Release(k->handle).ok());
    ++cached;
  }
  EXPECT_GT(cached, 500) << "the hog did not get past its fair share while alone";
  auto neighbour = Connect(daemon.dir());
  ASSERT_TRUE(neighbour.ok()) << neighbour.status();
  auto mem = (*neighbour)->AllocateMemory(2 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  std::vector<uint64_t> held;
  for (int i = 0; i < 300; ++i) {  // within its share of 480
    auto k = (*neighbour)->Register(static_cast<uint8_t*>(mem->data) + i * 4096, 4096, kRw);
    ASSERT_TRUE(k.ok()) << "neighbour " << i << ": " << k.status();
    held.push_back(k->handle);
  }
  for (uint64_t h : held) ASSERT_TRUE((*neighbour)->Release(h).ok());
}

// Fairness covers held keys: a session holding nearly every key of the device (and releasing
// none) has registrations revoked while a newcomer under its share waits; the newcomer gets its
// share, each register within the bounded wait, and the hog's library is told why (reason
// kReclaimed) before the keys stop working.
TEST(BudgetE2e, ASessionHoldingEveryKeyGivesHeldKeysBackToANewcomer) {
  if (regcache::testing::TestDevice() != "sim") GTEST_SKIP() << "a small key table is the sim's";
  // 128 keys: a budget of 120, a fair share of 60 with two sessions.
  regcache::testing::Regcached daemon({"--device=sim:max_keys=128"});
  rc::ClientOptions o;  // the hog keeps its library cache: it hears revocations there
  auto hog = rc::Client::Connect(daemon.dir(), o);
  ASSERT_TRUE(hog.ok()) << hog.status();
  std::atomic<int> reclaimed{0};
  (*hog)->SetRevocationCallback([&](const rc::Revocation& r) {
    if (r.reason == rc::RevocationReason::kReclaimed) ++reclaimed;
  });
  auto hog_mem = (*hog)->AllocateMemory(2 << 20);
  ASSERT_TRUE(hog_mem.ok()) << hog_mem.status();
  int held_by_hog = 0;
  for (int i = 0; i < 200; ++i) {  // holds all it can get
    auto k = (*hog)->Register(static_cast<uint8_t*>(hog_mem->data) + i * 4096, 4096, kRw);
    if (!k.ok()) break;
    ++held_by_hog;
  }
  EXPECT_GT(held_by_hog, 100) << "alone, the hog may use the whole budget";
  auto newcomer = Connect(daemon.dir());
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  auto mem = (*newcomer)->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  std::vector<uint64_t> held;
  for (int i = 0; i < 50; ++i) {  // within its share of 60
    const absl::Time start = absl::Now();
    auto k = (*newcomer)->Register(static_cast<uint8_t*>(mem->data) + i * 4096, 4096, kRw);
    ASSERT_TRUE(k.ok()) << "newcomer " << i << ": " << k.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "the wait is bounded";
    held.push_back(k->handle);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (reclaimed.load() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_GT(reclaimed.load(), 0) << "the hog's library was told (kReclaimed)";
  for (uint64_t h : held) ASSERT_TRUE((*newcomer)->Release(h).ok());
}

}  // namespace
