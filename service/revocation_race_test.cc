// The revocation invariant under the interleavings that used to break it (docs/fast_path.md,
// "The revocation invariant"): a key call stalled between the cache's hold and the grant record
// while an Invalidate, a parent's Invalidate or a detach runs to its end, and an Invalidate
// stalled between its first pass over the grant table and the cache while a register records
// a grant of the key. Each is forced with the key hook of service/internal/session_keys.h
// (compiled into builds without NDEBUG), so none of these tests can pass by luck.
#include <time.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "service/daemon.h"
#include "service/test_util.h"

namespace regcache::service {

namespace shm = ::regcache::protocol::shm;
namespace {

using testing::HandleReq;
using testing::kPage;
using testing::kRw;
using testing::RegisterReq;
using testing::WindowReq;
using RevocationRace = testing::RingFixture;
using Sess = testing::RingFixture::Sess;

#ifndef NDEBUG
using Stall = testing::KeyStall;

// A key of s's first page that the session no longer holds: cached in the daemon, no grant.
uint64_t CachedUnheld(Sess& s) {
  shm::RingCompletion c = s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw));
  EXPECT_EQ(c.code, 0u) << c.message;
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kRelease, c.handle)).code, 0u);
  return c.handle;
}

bool EventFor(Sess& s, uint64_t handle) {
  const uint32_t n = s.ring->state()->event_head.load();
  for (uint32_t i = 0; i < n; ++i) {
    if (s.ring->Event(i).handle == handle) return true;
  }
  return false;
}

TEST_F(RevocationRace, AnInvalidateWhileARegisterHoldsTheKeyUnrecordedIsNotMissed) {
  Sess& s = Open();
  const uint64_t old = CachedUnheld(s);
  Stall stall(internal::KeyHookPoint::kHeldNotRecorded);
  shm::RingCompletion got;
  std::thread ring([&] { got = s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw)); });
  ASSERT_TRUE(stall.Reached());
  // The register holds `old` in the cache; the grant table has no grant of it to mark.
  ASSERT_TRUE(daemon_->Invalidate(s.id, old).ok());
  stall.Resume();
  ring.join();
  ASSERT_EQ(got.code, 0u) << got.message;
  EXPECT_NE(got.handle, old) << "the register made a key that works, not the revoked one";
  EXPECT_EQ(s.ring->SlotWord(got.slot), shm::SlotWord(got.slot_generation, false));
  EXPECT_FALSE(got.flags & shm::kFlagRevoked);
  // The revoked key's hold was given back: nothing holds it, its handle is gone.
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kQuery, old)).code,
            testing::Code(absl::StatusCode::kNotFound));
}

TEST_F(RevocationRace, AParentInvalidatedWhileAWindowIsUnrecordedRevokesTheWindow) {
  Sess& s = Open();
  shm::RingCompletion p = s.ring->Call(0, RegisterReq(s.va(0), 4 * kPage, kRw));
  ASSERT_EQ(p.code, 0u) << p.message;
  Stall stall(internal::KeyHookPoint::kHeldNotRecorded);
  shm::RingCompletion w;
  std::thread ring([&] { w = s.ring->Call(0, WindowReq(p.handle, 0, kPage, kRw)); });
  ASSERT_TRUE(stall.Reached());
  ASSERT_TRUE(daemon_->Invalidate(s.id, p.handle).ok());
  stall.Resume();
  ring.join();
  ASSERT_EQ(w.code, 0u) << w.message;
  EXPECT_TRUE(w.flags & shm::kFlagRevoked);
  EXPECT_TRUE(shm::SlotRevoked(s.ring->SlotWord(w.slot))) << "a client never caches it as live";
  EXPECT_TRUE(EventFor(s, w.handle));
  shm::RingCompletion q = s.ring->Call(0, HandleReq(shm::RingOp::kQuery, w.handle));
  EXPECT_TRUE(q.flags & shm::kFlagRevoked);
}

TEST_F(RevocationRace, ADetachWhileARegisterHoldsTheKeyUnrecordedIsNotMissed) {
  Sess& s = Open();
  const uint64_t old = CachedUnheld(s);
  Stall stall(internal::KeyHookPoint::kHeldNotRecorded);
  shm::RingCompletion got;
  std::thread ring([&] { got = s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw)); });
  ASSERT_TRUE(stall.Reached());
  ASSERT_TRUE(daemon_->DetachMemory(s.id, s.memory).ok());
  stall.Resume();
  ring.join();
  // Made again, the registration finds its memory gone: no grant of the dead key goes out.
  EXPECT_EQ(got.code, testing::Code(absl::StatusCode::kOutOfRange)) << got.message;
  EXPECT_NE(got.handle, old);
}

TEST_F(RevocationRace, AGrantRecordedWhileTheCacheInvalidatesIsMarkedAfterwards) {
  Sess& s = Open();
  const uint64_t old = CachedUnheld(s);
  Stall stall(internal::KeyHookPoint::kRevokeMarked);
  absl::Status invalidated;
  std::thread revoker([&] { invalidated = daemon_->Invalidate(s.id, old); });
  ASSERT_TRUE(stall.Reached());
  // The Invalidate's first pass found no grant of `old`; a register now hits and records it.
  shm::RingCompletion got = s.ring->Call(0, RegisterReq(s.va(0), kPage, kRw));
  ASSERT_EQ(got.code, 0u) << got.message;
  ASSERT_EQ(got.handle, old);
  stall.Resume();
  revoker.join();
  ASSERT_TRUE(invalidated.ok()) << invalidated;
  EXPECT_TRUE(shm::SlotRevoked(s.ring->SlotWord(got.slot)))
      << "the grant recorded during the invalidation is revoked before Invalidate returns";
  EXPECT_TRUE(EventFor(s, old));
}

// Deadlines on the ring (RingRequest::deadline_ns, CLOCK_MONOTONIC): a request past its
// deadline does nothing; a register whose deadline passes while it is made gives its key back.
int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

uint32_t HeldKeys(Daemon& d, SessionId s) {
  auto keys = d.ListKeys(s);
  EXPECT_TRUE(keys.ok()) << keys.status();
  uint32_t held = 0;
  if (keys.ok()) {
    for (const auto& k : *keys) held += k.holders;
  }
  return held;
}

// The same race in a batch: the run's grants are recorded together (GrantedBatch), after the
// cache held them all; the item whose key was revoked meanwhile is made again, alone, and the
// others keep theirs.
TEST_F(RevocationRace, AnInvalidateWhileABatchHoldsItsKeysUnrecordedIsNotMissed) {
  Sess& s = Open();
  const uint64_t old = CachedUnheld(s);  // [va(0), +kPage): the batch's first item hits it
  Stall stall(internal::KeyHookPoint::kHeldNotRecorded);
  // One post of three registers: the worker serves them as one run.
  const std::vector<uint64_t> seqs =
      s.ring->PostMany(0, {RegisterReq(s.va(0), kPage, kRw), RegisterReq(s.va(kPage), kPage, kRw),
                           RegisterReq(s.va(2 * kPage), kPage, kRw)});
  ASSERT_TRUE(stall.Reached());
  ASSERT_TRUE(daemon_->Invalidate(s.id, old).ok());
  stall.Resume();
  std::vector<shm::RingCompletion> got;
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::optional<shm::RingCompletion> c = s.ring->Next(0, absl::Seconds(10));
    ASSERT_TRUE(c.has_value()) << i;
    EXPECT_EQ(c->seq, seqs[i]);
    ASSERT_EQ(c->code, 0u) << i << ": " << c->message;
    EXPECT_FALSE(c->flags & shm::kFlagRevoked) << i;
    EXPECT_EQ(s.ring->SlotWord(c->slot), shm::SlotWord(c->slot_generation, false)) << i;
    got.push_back(*c);
  }
  EXPECT_NE(got[0].handle, old) << "the first item got a key that works, not the revoked one";
  EXPECT_NE(got[1].handle, got[2].handle);
  EXPECT_EQ(s.ring->Call(0, HandleReq(shm::RingOp::kQuery, old)).code,
            testing::Code(absl::StatusCode::kNotFound));
  EXPECT_EQ(HeldKeys(*daemon_, s.id), 3u);
}

TEST_F(RevocationRace, ARingRequestPastItsDeadlineDoesNothing) {
  Sess& s = Open();
  shm::RingRequest r = RegisterReq(s.va(0), kPage, kRw);
  r.deadline_ns = static_cast<uint64_t>(MonotonicNs() - 1);
  shm::RingCompletion late = s.ring->Call(0, r);
  EXPECT_EQ(late.code, testing::Code(absl::StatusCode::kDeadlineExceeded)) << late.message;
  EXPECT_EQ(late.handle, 0u);
  EXPECT_EQ(Stat("ring", "expired"), 1);
  // Nothing was made: the same range is a miss now, and it was the only key.
  r.deadline_ns = static_cast<uint64_t>(MonotonicNs() + 10'000'000'000);
  shm::RingCompletion first = s.ring->Call(0, r);
  ASSERT_EQ(first.code, 0u) << first.message;
  EXPECT_FALSE(first.flags & shm::kFlagHit);
  EXPECT_EQ(HeldKeys(*daemon_, s.id), 1u);
}

TEST_F(RevocationRace, AGrantWhoseDeadlinePassedWhileItWasMadeIsReleasedAgain) {
  Sess& s = Open();
  Stall stall(internal::KeyHookPoint::kHeldNotRecorded);
  shm::RingRequest r = RegisterReq(s.va(0), kPage, kRw);
  r.deadline_ns = static_cast<uint64_t>(MonotonicNs() + 200'000'000);  // 200 ms
  shm::RingCompletion got;
  std::thread ring([&] { got = s.ring->Call(0, r); });
  ASSERT_TRUE(stall.Reached());
  while (MonotonicNs() < static_cast<int64_t>(r.deadline_ns)) absl::SleepFor(absl::Milliseconds(5));
  stall.Resume();
  ring.join();
  EXPECT_EQ(got.code, testing::Code(absl::StatusCode::kDeadlineExceeded)) << got.message;
  EXPECT_NE(std::string(got.message).find("was released"), std::string::npos) << got.message;
  EXPECT_EQ(HeldKeys(*daemon_, s.id), 0u) << "the expired call left no hold behind";
  EXPECT_EQ(Stat("ring", "expired"), 1);
}

#else
TEST(RevocationRace, NeedsTheKeyHook) { GTEST_SKIP() << "the key hook is compiled out (NDEBUG)"; }
#endif

}  // namespace
}  // namespace regcache::service
