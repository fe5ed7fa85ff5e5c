// The fast path's daemon side, driven by a raw client (service/test_util.h) that maps the
// session's files itself: grants and their state slots, revocation, reclaim, garbage and
// truncated requests, broken indices, a flooding session next to a well-behaved one, a client
// killed with requests in flight. Children are forked where a misbehaving client must be
// another process. Every wait is bounded; nothing here asserts timing.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "cache/lifecycle.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "service/daemon.h"
#include "service/test_util.h"

namespace regcache::service {

namespace shm = ::regcache::protocol::shm;
namespace {

using testing::Code;
using testing::HandleReq;
using testing::kPage;
using testing::kRw;
using testing::NopReq;
using testing::RawRing;
using testing::RegisterReq;
using testing::WindowReq;
using RingTest = testing::RingFixture;
using Sess = testing::RingFixture::Sess;

TEST_F(RingTest, GrantsCarryTheirSlotUntilTheLastRelease) {
  Sess& s = Open();
  shm::RingCompletion a = s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw));
  ASSERT_EQ(a.code, 0u) << a.message;
  ASSERT_NE(a.slot, shm::kNoSlot);
  EXPECT_EQ(s.ring->SlotWord(a.slot), shm::SlotWord(a.slot_generation, false));
  shm::RingCompletion b = s.ring->Call(1, RegisterReq(s.va(0), kPage, kRw));
  ASSERT_EQ(b.code, 0u) << b.message;
  EXPECT_EQ(b.handle, a.handle);
  EXPECT_TRUE(b.flags & shm::kFlagHit);
  EXPECT_EQ(b.slot, a.slot) << "one slot per handle, however many holds";
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kRelease, a.handle)).code, 0u);
  EXPECT_EQ(s.ring->SlotWord(a.slot), shm::SlotWord(a.slot_generation, false));
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kRelease, a.handle)).code, 0u);
  EXPECT_EQ(s.ring->SlotWord(a.slot), shm::SlotWord(a.slot_generation + 1, false))
      << "the last release frees the slot: a new generation";
  // The registration stays cached; Query still finds it, with no holder.
  shm::RingCompletion q = s.ring->Call(0, HandleReq(shm::RingOp::kQuery, a.handle));
  EXPECT_EQ(q.code, 0u) << q.message;
  EXPECT_EQ(q.holders, 0u);
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kRelease, a.handle)).code,
            Code(absl::StatusCode::kFailedPrecondition));
}

// Register requests published together are served as one batch: their misses share a doorbell,
// each still gets its own answer in order (a bad one alone fails), with its state slot.
TEST_F(RingTest, RegisterRequestsOnTheRingTogetherAreOneBatch) {
  Sess& s = Open();
  constexpr int kKeys = 32;
  std::vector<shm::RingRequest> rs;
  for (int i = 0; i < kKeys; ++i) rs.push_back(RegisterReq(s.va(i * kPage), kPage, kRw));
  rs[5].access = 0x4000'0000u;  // unknown access bit: refused by validation
  rs.push_back(NopReq());
  const int64_t doorbells = Stat("cache", "umr_batches");
  const std::vector<uint64_t> seqs = s.ring->PostMany(0, rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    std::optional<shm::RingCompletion> c = s.ring->Next(0, absl::Seconds(10));
    ASSERT_TRUE(c.has_value()) << "answer " << i;
    EXPECT_EQ(c->seq, seqs[i]);
    if (i == 5) {
      EXPECT_EQ(c->code, Code(absl::StatusCode::kInvalidArgument));
    } else {
      ASSERT_EQ(c->code, 0u) << i << ": " << c->message;
    }
    if (i == 5 || i == kKeys) continue;
    EXPECT_EQ(c->va, s.va(i * kPage));
    EXPECT_NE(c->slot, shm::kNoSlot);
    EXPECT_EQ(s.ring->SlotWord(c->slot), shm::SlotWord(c->slot_generation, false));
    EXPECT_EQ(s.ring->Call(1, HandleReq(shm::RingOp::kRelease, c->handle)).code, 0u);
  }
  EXPECT_LE(Stat("cache", "umr_batches") - doorbells, 2);
}

TEST_F(RingTest, WindowsQueryAndNop) {
  Sess& s = Open();
  shm::RingCompletion p = s.ring->Call(0, RegisterReq(s.va(0), 4 * kPage, kRw));
  ASSERT_EQ(p.code, 0u) << p.message;
  shm::RingCompletion w = s.ring->Call(0, WindowReq(p.handle, kPage, kPage, hca::kRemoteRead));
  ASSERT_EQ(w.code, 0u) << w.message;
  EXPECT_NE(w.slot, p.slot);
  shm::RingCompletion q = s.ring->Call(0, HandleReq(shm::RingOp::kQuery, w.handle));
  ASSERT_EQ(q.code, 0u) << q.message;
  EXPECT_TRUE(q.flags & shm::kFlagWindow);
  EXPECT_EQ(q.parent, p.handle);
  EXPECT_EQ(q.holders, 1u);
  EXPECT_EQ(s.ring->Call(0, NopReq()).code, 0u);
  EXPECT_NE(s.ring->Call(0, HandleReq(shm::RingOp::kQuery, 0x12345)).code, 0u)
      << "an unknown handle is refused";
}

TEST_F(RingTest, InvalidateRevokesTheWordAndTheWindowsBeforeReturning) {
  Sess& s = Open();
  shm::RingCompletion p = s.ring->Call(0, RegisterReq(s.va(0), 4 * kPage, kRw));
  shm::RingCompletion w = s.ring->Call(0, WindowReq(p.handle, 0, kPage, hca::kRemoteRead));
  ASSERT_EQ(p.code | w.code, 0u);
  ASSERT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kInvalidate, p.handle)).code, 0u);
  EXPECT_TRUE(shm::SlotRevoked(s.ring->SlotWord(p.slot)));
  EXPECT_TRUE(shm::SlotRevoked(s.ring->SlotWord(w.slot)));
  EXPECT_EQ(shm::SlotGeneration(s.ring->SlotWord(p.slot)), p.slot_generation);
  ASSERT_EQ(s.ring->state()->event_head.load(), 2u);
  EXPECT_EQ(s.ring->Event(0).handle, w.handle);
  EXPECT_EQ(s.ring->Event(0).reason, static_cast<uint32_t>(shm::RevokeReason::kParentInvalidated));
  EXPECT_EQ(s.ring->Event(1).handle, p.handle);
  EXPECT_EQ(s.ring->Event(1).reason, static_cast<uint32_t>(shm::RevokeReason::kInvalidated));
  EXPECT_EQ(s.ring->Event(1).sequence, 1u);
  EXPECT_EQ(s.ring->Event(1).key, p.rkey);
  shm::RingCompletion q = s.ring->Call(0, HandleReq(shm::RingOp::kQuery, p.handle));
  EXPECT_TRUE(q.flags & shm::kFlagRevoked);
  // Released, the revoked slots are free again: new generation, bit clear.
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kRelease, w.handle)).code, 0u);
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kRelease, p.handle)).code, 0u);
  EXPECT_EQ(s.ring->SlotWord(p.slot), shm::SlotWord(p.slot_generation + 1, false));
}

TEST_F(RingTest, OtherTransportsAndDetachRevokeToo) {
  Sess& s = Open();
  auto g = daemon_->Register(s.id, s.va(0), kPage, kRw);  // the gRPC path's call
  ASSERT_TRUE(g.ok()) << g.status();
  shm::RingCompletion hit = s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw));
  ASSERT_EQ(hit.handle, g->handle);
  shm::RingCompletion other = s.ring->Call(0, RegisterReq(s.va(8 * kPage), kPage, kRw));
  ASSERT_EQ(other.code, 0u);
  ASSERT_TRUE(daemon_->Invalidate(s.id, g->handle).ok());
  EXPECT_TRUE(shm::SlotRevoked(s.ring->SlotWord(hit.slot)));
  EXPECT_FALSE(shm::SlotRevoked(s.ring->SlotWord(other.slot)));
  ASSERT_TRUE(daemon_->DetachMemory(s.id, s.memory).ok());
  EXPECT_TRUE(shm::SlotRevoked(s.ring->SlotWord(other.slot)));
  const uint32_t events = s.ring->state()->event_head.load();
  ASSERT_EQ(events, 2u) << "the handle revoked already is not reported twice";
  EXPECT_EQ(s.ring->Event(1).reason, static_cast<uint32_t>(shm::RevokeReason::kMemoryDetached));
}

TEST_F(RingTest, ClosingIsPublishedAndTheWorkerStops) {
  Sess& s = Open();
  const int64_t workers = Stat("ring", "workers");
  ASSERT_EQ(s.ring->Call(0, NopReq()).code, 0u);
  EXPECT_EQ(s.ring->state()->session_state.load(), shm::kSessionOpen);
  ASSERT_TRUE(daemon_->CloseSession(s.id).ok());
  EXPECT_EQ(s.ring->state()->session_state.load(), shm::kSessionClosing);
  EXPECT_EQ(Stat("ring", "workers"), workers - 1);
  // Nobody serves the rings now: a call times out rather than hanging.
  EXPECT_EQ(s.ring->Call(0, NopReq(), absl::Milliseconds(50)).code,
            Code(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(RingTest, QuotaExhaustionRaisesReclaim) {
  DaemonConfig config = Config();
  config.max_keys_per_session = 2;
  Start(config);
  Sess& s = Open();
  EXPECT_EQ(s.ring->state()->reclaim.load(), 0u);
  ASSERT_EQ(s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw)).code, 0u);
  ASSERT_EQ(s.ring->Call(0, RegisterReq(s.va(2 * kPage), kPage, kRw)).code, 0u);
  shm::RingCompletion third = s.ring->Call(0, RegisterReq(s.va(4 * kPage), kPage, kRw));
  EXPECT_EQ(third.code, Code(absl::StatusCode::kResourceExhausted)) << third.message;
  EXPECT_GE(s.ring->state()->reclaim.load(), 1u);
}

TEST_F(RingTest, GrantsBeyondTheSlotsCarryNoSlot) {
  DaemonConfig config = Config();
  config.grant_slots = 2;
  Start(config);
  Sess& s = Open();
  for (int i = 0; i < 2; ++i) {
    shm::RingCompletion c = s.ring->Call(0, RegisterReq(s.va(2 * i * kPage), kPage, kRw));
    EXPECT_NE(c.slot, shm::kNoSlot);
  }
  shm::RingCompletion c = s.ring->Call(0, RegisterReq(s.va(8 * kPage), kPage, kRw));
  EXPECT_EQ(c.code, 0u) << c.message;
  EXPECT_EQ(c.slot, shm::kNoSlot);
}

TEST_F(RingTest, TheStateFileCannotBeWrittenByTheClient) {
  auto g = daemon_->OpenSession(PeerCredentials{::getpid(), 0, 0});
  ASSERT_TRUE(g.ok()) << g.status();
  const uint64_t bytes = shm::StateFileBytes(Config().grant_slots);
  errno = 0;
  EXPECT_EQ(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->state_fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  void* ro = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, g->state_fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(::mprotect(ro, bytes, PROT_READ | PROT_WRITE), 0);
  ::munmap(ro, bytes);
  const uint32_t word = 1;
  EXPECT_LT(::pwrite(g->state_fd, &word, sizeof(word), 0), 0);
  EXPECT_NE(::ftruncate(g->state_fd, 0), 0);
  EXPECT_NE(::ftruncate(g->channel_fd, 0), 0) << "the channel file is sealed too";
  EXPECT_NE(::fcntl(g->channel_fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
  ::close(g->state_fd);
  ::close(g->channel_fd);
}

// A key's state crosses the ring as its number; the client names it from protocol/'s table,
// which must say what the cache says for every state.
TEST(RingWire, KeyStateNamesAreTheCachesNames) {
  for (uint32_t n = 0; n <= static_cast<uint32_t>(cache::KeyState::kDestroyed); ++n) {
    EXPECT_EQ(absl::string_view(shm::KeyStateName(n)),
              cache::KeyStateName(static_cast<cache::KeyState>(n)));
  }
  EXPECT_EQ(
      absl::string_view(shm::KeyStateName(static_cast<uint32_t>(cache::KeyState::kDestroyed) + 1)),
      "unknown");
}

}  // namespace
}  // namespace regcache::service
