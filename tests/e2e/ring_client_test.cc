// The client's ring transport against an in-process daemon: what it checks when it maps the
// files, calls and batches (more than a ring holds), threads sharing channels, and the errors
// it maps (the daemon's codes; closing).
#include "client/internal/ring_client.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/stats.h"
#include "base/test_util.h"
#include "client/internal/ring_keys.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "service/daemon.h"
#include "service/test_util.h"

using ::regcache::base::StatusIs;

namespace regcache::api::internal {
namespace {

constexpr uint32_t kRw = kLocalWrite | kRemoteWrite | kRemoteRead;
constexpr uint64_t kPage = 4096;

class RingClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hca::sim::RegisterBackend();
    service::DaemonConfig config;
    config.cache.background_maintenance = false;
    config.ring_channels = 2;
    config.grant_slots = 256;
    auto d = service::Daemon::Create(config, &registry_);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    auto g = daemon_->OpenSession(service::PeerCredentials{::getpid(), 0, 0});
    ASSERT_TRUE(g.ok()) << g.status();
    grant_ = *g;
    auto m = daemon_->AllocateMemory(grant_.id, 256 * kPage, false);
    ASSERT_TRUE(m.ok()) << m.status();
    void* p = ::mmap(nullptr, 256 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    ::close(m->fd);
    ASSERT_NE(p, MAP_FAILED);
    mem_ = static_cast<uint8_t*>(p);
    ASSERT_TRUE(
        daemon_->AttachMemory(grant_.id, m->id, reinterpret_cast<uint64_t>(mem_), false).ok());
  }
  void TearDown() override {
    ring_.reset();
    daemon_.reset();
    if (mem_ != nullptr) ::munmap(mem_, 256 * kPage);
  }

  void Map(absl::Duration timeout = absl::Seconds(10)) {
    auto r = RingClient::Create(grant_.channel_fd, grant_.state_fd, grant_.id, grant_.ring_channels,
                                grant_.grant_slots, timeout);
    ASSERT_TRUE(r.ok()) << r.status();
    ring_ = std::move(*r);
  }

  // `n` register requests of a page each, over the first `pages` pages of mem_ in turn.
  std::vector<shm::RingRequest> Registers(size_t n, size_t pages) const {
    std::vector<shm::RingRequest> out(n);
    for (size_t i = 0; i < n; ++i) {
      out[i].op = static_cast<uint16_t>(shm::RingOp::kRegister);
      out[i].va = reinterpret_cast<uint64_t>(mem_) + (i % pages) * kPage;
      out[i].length = kPage;
      out[i].access = kRw;
    }
    return out;
  }
  int64_t Stat(absl::string_view component, absl::string_view name) {
    for (const base::stats::Sample& s : registry_.Snapshot()) {
      if (s.component == component && s.name == name) return s.value;
    }
    ADD_FAILURE() << "no statistic " << component << "." << name;
    return -1;
  }

  base::stats::Registry registry_;  // before the daemon, which registers in it
  std::unique_ptr<service::Daemon> daemon_;
  service::SessionGrant grant_;
  uint8_t* mem_ = nullptr;
  std::unique_ptr<RingClient> ring_;
};

TEST_F(RingClientTest, RefusesFilesThatDoNotMatchTheWelcome) {
  auto dup = [](int fd) { return ::dup(fd); };
  auto wrong_session =
      RingClient::Create(dup(grant_.channel_fd), dup(grant_.state_fd), grant_.id + 1,
                         grant_.ring_channels, grant_.grant_slots, absl::Seconds(1));
  EXPECT_THAT(wrong_session, StatusIs(absl::StatusCode::kInvalidArgument));
  auto more_channels =
      RingClient::Create(dup(grant_.channel_fd), dup(grant_.state_fd), grant_.id,
                         grant_.ring_channels + 5, grant_.grant_slots, absl::Seconds(1));
  EXPECT_THAT(more_channels, StatusIs(absl::StatusCode::kInvalidArgument));
  auto swapped = RingClient::Create(dup(grant_.state_fd), dup(grant_.channel_fd), grant_.id,
                                    grant_.ring_channels, grant_.grant_slots, absl::Seconds(1));
  EXPECT_FALSE(swapped.ok());
  Map();  // the right ones still map
}

TEST_F(RingClientTest, KeyCallsMapCompletionsToTheirStatus) {
  Map();
  absl::StatusOr<Granted> g = RingRegister(*ring_, mem_, kPage, kRw, PrefetchMode::kNone);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NE(g->slot, shm::kNoSlot);
  const Key* k = &g->key;
  absl::StatusOr<Key> w = RingWindow(*ring_, k->handle, 0, 512, kRemoteRead);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<KeyInfo> q = RingQuery(*ring_, w->handle);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->is_window);
  EXPECT_EQ(q->parent, k->handle);
  EXPECT_EQ(q->key_state, "active");
  EXPECT_TRUE(RingInvalidate(*ring_, k->handle).ok());
  absl::Status again = RingInvalidate(*ring_, k->handle);
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kFailedPrecondition)) << again;
  EXPECT_FALSE(again.message().empty());
  EXPECT_EQ(
      RingRegister(*ring_, mem_ + 1024 * kPage, kPage, kRw, PrefetchMode::kNone).status().code(),
      absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(RingNop(*ring_).ok());
  EXPECT_TRUE(RingRelease(*ring_, w->handle).ok());
  EXPECT_TRUE(RingRelease(*ring_, k->handle).ok());
}

TEST_F(RingClientTest, ABatchLargerThanTheRingCompletesInOrder) {
  Map();
  const std::vector<shm::RingRequest> batch = Registers(3 * shm::kRingDepth + 5, 128);
  auto out = ring_->CallBatch(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ((*out)[i].code, 0u) << i << ": " << (*out)[i].message;
    EXPECT_EQ((*out)[i].va, batch[i].va) << i;
  }
  EXPECT_TRUE(ring_->CallBatch({}).ok());
}

TEST_F(RingClientTest, ALongBatchReachesTheWorkerInRunsOfHalfARing) {
  // Posting goes on as answers free room, but only half a ring (or the rest) at a time: the
  // worker takes each post whole, one batch of misses, never a request per answer read.
  Map();
  constexpr size_t kItems = 16 * shm::kRingDepth + 3;
  const std::vector<shm::RingRequest> batch = Registers(kItems, 200);
  const int64_t runs_before = Stat("ring", "register_runs");
  const int64_t requests_before = Stat("ring", "requests");
  auto out = ring_->CallBatch(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t i = 0; i < batch.size(); ++i) ASSERT_EQ((*out)[i].code, 0u) << i;
  EXPECT_EQ(Stat("ring", "requests") - requests_before, static_cast<int64_t>(kItems));
  // The first post fills the ring; every later one is half a ring, the last one the 3 left.
  const int64_t most_runs =
      1 + (kItems - shm::kRingDepth + shm::kRingDepth / 2 - 1) / (shm::kRingDepth / 2);
  EXPECT_LE(Stat("ring", "register_runs") - runs_before, most_runs);
}

TEST_F(RingClientTest, AnnouncingWakesTheWorkerAndItsSpinStaysBounded) {
  Map();
  // Idle, the worker falls asleep (after its spin).
  auto until = [&](absl::string_view name, int64_t at_least) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (Stat("ring", name) < at_least && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return Stat("ring", name) >= at_least;
  };
  ASSERT_TRUE(until("sleeps", 1));
  const int64_t sleeps = Stat("ring", "sleeps");
  const int64_t wakeups = Stat("ring", "wakeups");
  // An announcement rings the doorbell: the worker wakes before any request is posted.
  ring_->Announce();
  ASSERT_TRUE(until("wakeups", wakeups + 1));
  // Nothing is ever posted: the worker spins awhile for it, then sleeps again regardless.
  EXPECT_TRUE(until("sleeps", sleeps + 1));
  // The next post clears the announcement, and calls are served as ever.
  auto got = ring_->Call(Registers(1, 1)[0]);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->code, 0u);
}

TEST_F(RingClientTest, MoreThreadsThanChannelsShare) {
  Map();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        auto k =
            RingRegister(*ring_, mem_ + (t * 16 + i % 16) * kPage, kPage, kRw, PrefetchMode::kNone);
        if (!k.ok() || !RingRelease(*ring_, k->key.handle).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(RingClientTest, AClosedSessionAnswersUnavailableNotAHang) {
  Map(absl::Seconds(30));
  ASSERT_TRUE(RingNop(*ring_).ok());
  ASSERT_TRUE(daemon_->CloseSession(grant_.id).ok());
  EXPECT_THAT(RingNop(*ring_), StatusIs(absl::StatusCode::kUnavailable));
}

// Files laid out like the daemon's, which nobody serves.
std::pair<int, int> UnservedFiles(uint64_t session, uint32_t channels, uint32_t slots) {
  const int c = ::memfd_create("unserved-channels", MFD_CLOEXEC);
  const int st = ::memfd_create("unserved-state", MFD_CLOEXEC);
  EXPECT_EQ(::ftruncate(c, static_cast<off_t>(shm::ChannelFileBytes(channels))), 0);
  EXPECT_EQ(::ftruncate(st, static_cast<off_t>(shm::StateFileBytes(slots))), 0);
  shm::ChannelFileHeader h{};
  h.magic = shm::kChannelFileMagic;
  h.version = shm::kShmVersion;
  h.channels = channels;
  h.depth = shm::kRingDepth;
  h.session_id = session;
  h.channel_offset = shm::kPageBytes;
  h.channel_stride = sizeof(shm::Channel);
  EXPECT_EQ(::pwrite(c, &h, sizeof(h), 0), static_cast<ssize_t>(sizeof(h)));
  shm::StateHeader sh{};
  sh.magic = shm::kStateFileMagic;
  sh.version = shm::kShmVersion;
  sh.slots = slots;
  sh.event_capacity = shm::kEventCapacity;
  sh.session_id = session;
  sh.event_offset = shm::kPageBytes;
  sh.slot_offset = shm::kPageBytes + shm::kEventCapacity * sizeof(shm::RevocationEvent);
  EXPECT_EQ(::pwrite(st, &sh, sizeof(sh), 0), static_cast<ssize_t>(sizeof(sh)));
  return {c, st};
}

#ifndef NDEBUG
// A grant that comes after its call gave up (the daemon checked the deadline, then was slow to
// answer) is released by the channel's next call: the daemon holds nothing for it afterwards.
TEST_F(RingClientTest, AGrantAnsweredAfterItsCallGaveUpIsReleased) {
  Map(absl::Milliseconds(100));
  service::testing::KeyStall stall(service::internal::KeyHookPoint::kAnswered);
  absl::Notification gave_up, answered;
  absl::Status first, next;
  std::thread caller([&] {  // both calls from one thread: one channel
    first = RingRegister(*ring_, mem_, kPage, kRw, PrefetchMode::kNone).status();
    gave_up.Notify();
    answered.WaitForNotification();
    next = RingNop(*ring_);
  });
  ASSERT_TRUE(stall.Reached());
  ASSERT_TRUE(gave_up.WaitForNotificationWithTimeout(absl::Seconds(10)));
  stall.Resume();  // the daemon now writes the grant nobody waits for
  answered.Notify();
  caller.join();
  EXPECT_THAT(first, StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_TRUE(next.ok()) << next;
  auto keys = daemon_->ListKeys(grant_.id);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 1u) << "the late grant's registration stays cached";
  EXPECT_EQ((*keys)[0].holders, 0u) << "and nobody holds it";
}
#endif

TEST(RingClientAlone, NoAnswerInTimeIsDeadlineExceeded) {
  auto [c, st] = UnservedFiles(7, 1, 16);
  auto ring = RingClient::Create(c, st, 7, 1, 16, absl::Milliseconds(30));
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_THAT(RingNop(**ring), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(RingNop(**ring), StatusIs(absl::StatusCode::kDeadlineExceeded)) << "and again";
}

TEST(RingClientAlone, ShortFilesAreRefused) {
  auto [c, st] = UnservedFiles(7, 1, 16);
  ASSERT_EQ(::ftruncate(c, 4096), 0);
  EXPECT_EQ(RingClient::Create(c, st, 7, 1, 16, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace regcache::api::internal
