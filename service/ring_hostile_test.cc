// The fast path against clients that misbehave: garbage and truncated requests, broken
// indices, a flood next to a well-behaved session, a client killed with requests in flight,
// and many threads on many channels of many sessions. The misbehaving client is a forked
// child where it must be another process. Progress is asserted, never speed; every wait is
// bounded.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "service/test_util.h"

namespace regcache::service {

namespace shm = ::regcache::protocol::shm;
namespace {

using testing::Code;
using testing::HandleReq;
using testing::kPage;
using testing::kRw;
using testing::NopReq;
using testing::RegisterReq;
using RingTest = testing::RingFixture;
using Sess = testing::RingFixture::Sess;

// Waits for `pid` up to `timeout`; its exit status, or -1 (and the child killed).
int Reap(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    absl::SleepFor(absl::Milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

TEST_F(RingTest, GarbageGetsInvalidArgumentWithItsSeq) {
  Sess& s = Open();
  const int64_t bad_before = Stat("ring", "bad_requests");
  std::vector<shm::RingRequest> garbage(4);
  garbage[0].op = 0;
  garbage[1] = RegisterReq(s.va(0), 0, kRw);  // length 0
  garbage[2] = NopReq();
  garbage[2].reserved1 = 42;
  std::memset(&garbage[3], 0xa5, sizeof(garbage[3]));
  for (size_t i = 0; i < garbage.size(); ++i) {
    garbage[i].seq = 1000 + i;
    s.ring->Post(0, garbage[i]);
  }
  for (size_t i = 0; i < garbage.size(); ++i) {
    std::optional<shm::RingCompletion> c = s.ring->Next(0, absl::Seconds(10));
    ASSERT_TRUE(c.has_value()) << "request " << i << " never answered";
    EXPECT_EQ(c->seq, 1000 + i);
    EXPECT_EQ(c->code, Code(absl::StatusCode::kInvalidArgument)) << c->message;
    EXPECT_GT(strnlen(c->message, shm::kMessageBytes), 0u);
  }
  EXPECT_EQ(Stat("ring", "bad_requests"), bad_before + 4);
  EXPECT_EQ(s.ring->Call(0, NopReq()).code, 0u) << "the channel goes on";
}

TEST_F(RingTest, ATruncatedMessageDoesNotHurtTheDaemon) {
  Sess& s = Open();
  const pid_t child = ::fork();
  if (child == 0) {
    // Publishes the head first, then fills the entry byte by byte: the daemon sees whatever
    // is there when it looks.
    const uint32_t head = s.ring->channel(0)->control.req_head.load();
    s.ring->PostHeadOnly(0);
    auto* entry =
        reinterpret_cast<volatile uint8_t*>(&s.ring->channel(0)->requests[head % shm::kRingDepth]);
    for (size_t i = 0; i < sizeof(shm::RingRequest); ++i) entry[i] = static_cast<uint8_t>(i * 37);
    ::_exit(0);
  }
  ASSERT_EQ(Reap(child, absl::Seconds(10)), 0);
  std::optional<shm::RingCompletion> c = s.ring->Next(0, absl::Seconds(10));
  ASSERT_TRUE(c.has_value()) << "the truncated request got no completion";
  EXPECT_NE(c->code, 0u);
  EXPECT_EQ(s.ring->Call(0, NopReq()).code, 0u);
}

TEST_F(RingTest, BrokenIndicesBreakOnlyThatChannel) {
  Sess& a = Open();
  Sess& b = Open();
  const int64_t broken_before = Stat("ring", "broken_channels");
  a.ring->channel(0)->control.req_head.store(1000);  // 1000 requests "posted" on a 64-deep ring
  a.ring->channel(1)->control.cpl_tail.store(77);    // completions "consumed" that never came
  a.ring->RingDoorbell();
  a.ring->Post(1, NopReq());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline &&
         (a.ring->channel(0)->control.state.load() != shm::kChannelBroken ||
          a.ring->channel(1)->control.state.load() != shm::kChannelBroken)) {
    a.ring->RingDoorbell();
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(a.ring->channel(0)->control.state.load(), shm::kChannelBroken);
  EXPECT_EQ(a.ring->channel(1)->control.state.load(), shm::kChannelBroken);
  EXPECT_EQ(Stat("ring", "broken_channels"), broken_before + 2);
  EXPECT_EQ(a.ring->Call(2, RegisterReq(a.va(0), kPage, kRw)).code, 0u) << "other channels go on";
  EXPECT_EQ(b.ring->Call(0, NopReq()).code, 0u) << "other sessions go on";
}

TEST_F(RingTest, ManyThreadsOnManyChannelsOfManySessions) {
  constexpr int kSessions = 3, kThreads = 4, kRounds = 50;
  std::vector<Sess*> sessions;
  for (int i = 0; i < kSessions; ++i) sessions.push_back(&Open());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int si = 0; si < kSessions; ++si) {
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, si, t] {
        Sess& s = *sessions[si];
        for (int r = 0; r < kRounds; ++r) {
          const uint64_t va = s.va(static_cast<uint64_t>(t * 8 + r % 8) * kPage);
          shm::RingCompletion g = s.ring->Call(t, RegisterReq(va, kPage, kRw));
          if (g.code != 0) {
            ++failures;
            continue;
          }
          if (s.ring->Call(t, HandleReq(shm::RingOp::kRelease, g.handle)).code != 0) ++failures;
          if (s.ring->Call(t, NopReq()).code != 0) ++failures;
        }
      });
    }
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(RingTest, AFloodingSessionDoesNotStallAWellBehavedOne) {
  Sess& flood = Open();
  Sess& calm = Open();
  const pid_t child = ::fork();
  if (child == 0) {
    // Keeps every channel of its session full of requests until killed, reading completions
    // only to make room.
    const uint32_t channels = flood.ring->channels();
    while (true) {
      for (uint32_t ch = 0; ch < channels; ++ch) {
        shm::ChannelControl& c = flood.ring->channel(ch)->control;
        while (c.req_head.load() - c.cpl_tail.load() < shm::kRingDepth) {
          flood.ring->Post(ch, RegisterReq(flood.va((ch % 16) * kPage), kPage, kRw));
        }
        while (c.cpl_head.load() != c.cpl_tail.load()) c.cpl_tail.fetch_add(1);
      }
    }
  }
  // The flood is on before the well-behaved session starts: a ring's worth of it was served.
  shm::ChannelControl& flooded = flood.ring->channel(0)->control;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline && flooded.cpl_head.load() < shm::kRingDepth) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GE(flooded.cpl_head.load(), shm::kRingDepth) << "the flood never started";
  int completed = 0;
  for (int i = 0; i < 200; ++i) {
    shm::RingCompletion g = calm.ring->Call(0, RegisterReq(calm.va(i % 32 * kPage), kPage, kRw));
    ASSERT_EQ(g.code, 0u) << "call " << i << ": " << g.message;
    ASSERT_EQ(calm.ring->Call(0, HandleReq(shm::RingOp::kRelease, g.handle)).code, 0u);
    ++completed;
  }
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "the flood ran all along";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(completed, 200);
  EXPECT_GT(Stat("ring", "requests"), 400 + int64_t{shm::kRingDepth}) << "the flood was served";
}

TEST_F(RingTest, AClientKilledWithRequestsInFlightClosesCleanly) {
  Sess& victim = Open();
  Sess& other = Open();
  const int64_t workers = Stat("ring", "workers");
  const pid_t child = ::fork();
  if (child == 0) {
    for (uint32_t ch = 0; ch < 4; ++ch) {
      for (uint32_t i = 0; i < shm::kRingDepth; ++i) {
        victim.ring->Post(ch, RegisterReq(victim.va((ch * 8 + i % 8) * kPage), kPage, kRw));
      }
    }
    ::kill(::getpid(), SIGKILL);
    ::_exit(1);
  }
  const int status = Reap(child, absl::Seconds(10));
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // What the control socket's EOF does: close the session.
  ASSERT_TRUE(daemon_->CloseSession(victim.id).ok());
  EXPECT_EQ(Stat("ring", "workers"), workers - 1);
  EXPECT_EQ(Stat("daemon", "sessions_open"), 1);
  EXPECT_EQ(Stat("cache", "live_registrations"), 0) << "every key of the dead client is gone";
  EXPECT_EQ(other.ring->Call(0, RegisterReq(other.va(0), kPage, kRw)).code, 0u);
  EXPECT_EQ(Stat("cache", "live_registrations"), 1);
}

TEST_F(RingTest, AnIdleWorkerSleeps) {
  Sess& s = Open();
  ASSERT_EQ(s.ring->Call(0, NopReq()).code, 0u);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline && s.ring->header()->daemon_waiting.load() == 0) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(s.ring->header()->daemon_waiting.load(), 1u);
  EXPECT_GE(Stat("ring", "sleeps"), 1);
  EXPECT_EQ(s.ring->Call(0, NopReq()).code, 0u) << "and the doorbell wakes it";
}

}  // namespace
}  // namespace regcache::service
