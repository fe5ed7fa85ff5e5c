// The per-thread hold protocol (cache/internal/holds.h): holds taken in one thread's table and
// released from another, threads that exit while holding, more simultaneous holds than a table
// has entries, revocation of holds that live only in a thread's table, and hits racing
// stop-reference. Also run in the opt-in membarrier mode (REGCACHE_MEMBARRIER=1).
#include "cache/internal/holds.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/test_util.h"
#include "cache/internal/test_util.h"
#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

using ::regcache::cache::internal::HookPoint;
using ::regcache::cache::testing::CacheTest;
using ::regcache::cache::testing::Event;
using ::regcache::cache::testing::Memory;
using ::regcache::cache::testing::Stall;

#define REQUIRE_HOOKS() \
  if (!Stall::Available()) GTEST_SKIP() << "test hooks are compiled out (NDEBUG build)"

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

class HoldsTest : public CacheTest {
 protected:
  void SetUp() override { Init(); }

  // Registers [va, +len) and releases it, so that it is cached and the next Register hits.
  void Cache(uint64_t va, uint64_t len) {
    auto g = cache_->Register(tenant_, va, len, kRw);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  }
  // A hit on [va, +4096) taken on a thread that then exits without releasing it.
  KeyGrant HitOnAnotherThread(uint64_t va) {
    KeyGrant g;
    std::thread([&] {
      auto hit = cache_->Register(tenant_, va, 4096, kRw);
      ASSERT_TRUE(hit.ok() && hit->hit);
      g = *hit;
    }).join();
    return g;
  }
  uint32_t Holders(Handle h) {
    auto info = cache_->Query(tenant_, h);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->holders : UINT32_MAX;
  }
};

TEST_F(HoldsTest, AHoldTakenInOneThreadIsReleasedFromAnother) {
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  const KeyGrant g = HitOnAnotherThread(mem.va());
  EXPECT_EQ(Holders(g.handle), 1u);
  std::thread([&] { EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok()); }).join();
  EXPECT_EQ(Holders(g.handle), 0u);
  EXPECT_THAT(cache_->Release(tenant_, g.handle), StatusIs(absl::StatusCode::kFailedPrecondition));
  // Unheld: invalidation takes the handle at once.
  ASSERT_TRUE(cache_->Invalidate(tenant_, g.handle).ok());
  EXPECT_THAT(cache_->Query(tenant_, g.handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache_->stats().revoked_with_holders.value(), 0u);
}

TEST_F(HoldsTest, AStaleEntryLeftByACrossThreadReleaseIsReclaimed) {
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  // This thread holds it in its table; another thread releases: +1 here, -1 shared.
  auto held = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(held.ok() && held->hit);
  std::thread([&] { EXPECT_TRUE(cache_->Release(tenant_, held->handle).ok()); }).join();
  ASSERT_TRUE(cache_->Invalidate(tenant_, held->handle).ok());
  // The next registration reuses the record (same slot, so the same entry here).
  Cache(mem.va() + 4096, 4096);
  auto again = cache_->Register(tenant_, mem.va() + 4096, 4096, kRw);
  ASSERT_TRUE(again.ok() && again->hit);
  EXPECT_EQ(Holders(again->handle), 1u);
  EXPECT_TRUE(cache_->Release(tenant_, again->handle).ok());
  EXPECT_EQ(Holders(again->handle), 0u);
  // The old handle is stale wherever its count was kept.
  EXPECT_THAT(cache_->Release(tenant_, held->handle), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HoldsTest, RevokingAHoldKeptInAThreadsTableWaitsForItsRelease) {
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  Event held, revoked, released;
  KeyGrant g;
  std::thread holder([&] {
    auto hit = cache_->Register(tenant_, mem.va(), 4096, kRw);
    ASSERT_TRUE(hit.ok() && hit->hit);
    g = *hit;
    held.Notify();
    revoked.WaitForNotification();
    EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
    released.Notify();
  });
  held.WaitForNotification();
  ASSERT_TRUE(cache_->Invalidate(tenant_, g.handle).ok());
  auto info = cache_->Query(tenant_, g.handle);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->revoked);
  EXPECT_EQ(info->holders, 1u);
  EXPECT_EQ(UsageNow().revoked_held, 1u);
  const uint64_t v = 7;
  EXPECT_EQ(peer_
                ->Write(g.rkey, mem.va(),
                        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&v), sizeof(v)))
                .code(),
            absl::StatusCode::kPermissionDenied);
  revoked.Notify();
  released.WaitForNotification();
  holder.join();
  EXPECT_THAT(cache_->Query(tenant_, g.handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(UsageNow().revoked_held, 0u);
  EXPECT_EQ(cache_->stats().revoked_with_holders.value(), 1u);
  EXPECT_EQ(cache_->stats().releases_after_revoke.value(), 1u);
}

TEST_F(HoldsTest, AThreadThatExitsHoldingLeavesItsHoldCounted) {
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  const KeyGrant g = HitOnAnotherThread(mem.va());  // exits without releasing
  EXPECT_EQ(Holders(g.handle), 1u);
  // The next thread to get the exited one's index inherits its table; counts stay right.
  std::thread([&] {
    auto hit = cache_->Register(tenant_, mem.va(), 4096, kRw);
    ASSERT_TRUE(hit.ok() && hit->hit);
    EXPECT_EQ(Holders(g.handle), 2u);
    EXPECT_TRUE(cache_->Release(tenant_, hit->handle).ok());
  }).join();
  EXPECT_EQ(Holders(g.handle), 1u);
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
  EXPECT_EQ(Holders(g.handle), 0u);
  ASSERT_TRUE(cache_->Invalidate(tenant_, g.handle).ok());
  EXPECT_THAT(cache_->Query(tenant_, g.handle), StatusIs(absl::StatusCode::kNotFound));
}

// A thread without an index (here: exiting, in a thread_local destructor) holds and releases
// through the shared count.
struct ReleaseAtExit {
  RegCache* cache = nullptr;
  TenantId tenant = 0;
  uint64_t va = 0;
  absl::Status* result = nullptr;
  ~ReleaseAtExit() {
    if (cache == nullptr) return;
    auto g = cache->Register(tenant, va, 4096, kRw);
    *result = g.ok() ? cache->Release(tenant, g->handle) : g.status();
  }
};

TEST_F(HoldsTest, AThreadWithoutAnIndexUsesTheSharedCount) {
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  absl::Status at_exit = absl::UnknownError("not run");
  std::thread([&] {
    static thread_local ReleaseAtExit r;  // constructed first, so destroyed after the index
    r = ReleaseAtExit{cache_.get(), tenant_, mem.va(), &at_exit};
    auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);  // takes an index
    ASSERT_TRUE(g.ok() && g->hit);
    EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
  }).join();
  EXPECT_TRUE(at_exit.ok()) << at_exit;
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok() && g->hit);
  EXPECT_EQ(Holders(g->handle), 1u);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
  EXPECT_EQ(Holders(g->handle), 0u);
}

// More holds at once than a table has entries: the overflow goes to the shared count, and
// every hold is counted wherever it went.
TEST_F(HoldsTest, MoreHoldsThanTableEntriesAreAllCounted) {
  constexpr int kRanges = 3000;
  Memory mem(kRanges * 4096);
  Attach(mem);
  for (int i = 0; i < kRanges; ++i) Cache(mem.va() + i * 4096ull, 4096);
  std::vector<Handle> handles;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kRanges; ++i) {
      auto g = cache_->Register(tenant_, mem.va() + i * 4096ull, 4096, kRw);
      ASSERT_TRUE(g.ok() && g->hit);
      handles.push_back(g->handle);
    }
  }
  for (int i = 0; i < kRanges; i += 97) EXPECT_EQ(Holders(handles[i]), 2u);
  // Revoke them all while held, then release: every record goes away at its last release.
  for (int i = 0; i < kRanges; ++i) ASSERT_TRUE(cache_->Invalidate(tenant_, handles[i]).ok());
  EXPECT_EQ(UsageNow().revoked_held, static_cast<uint64_t>(kRanges));
  for (Handle h : handles) ASSERT_TRUE(cache_->Release(tenant_, h).ok());
  const TenantUsage u = UsageNow();
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.live_registrations, 0u);
  EXPECT_EQ(cache_->stats().revoked_with_holders.value(), static_cast<uint64_t>(kRanges));
}

// Hits racing stop-reference: a hold that Register granted must be counted by every stop, so
// its handle resolves (live or revoked) until released, and the key it names is never handed
// to another range meanwhile.
TEST_F(HoldsTest, HitsRacingInvalidationNeverLoseAHold) {
  constexpr int kRanges = 16;
  constexpr int kHitters = 3;
  constexpr int kIterations = 100000;
  Memory mem(kRanges * 4096);
  Attach(mem);
  for (int i = 0; i < kRanges; ++i) Cache(mem.va() + i * 4096ull, 4096);
  std::atomic<bool> stop{false};
  std::atomic<int> lost{0}, unexpected{0};
  std::atomic<uint64_t> hits{0};
  std::thread invalidator([&] {
    std::mt19937_64 rng(5);
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t va = mem.va() + (rng() % kRanges) * 4096;
      auto g = cache_->Register(tenant_, va, 4096, kRw);
      if (!g.ok()) {
        unexpected++;
        continue;
      }
      // Released first: the stop then finds only the hitters' holds (if it counts them).
      if (!cache_->Release(tenant_, g->handle).ok()) unexpected++;
      absl::Status s = cache_->Invalidate(tenant_, g->handle);
      if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) unexpected++;
    }
  });
  std::vector<std::thread> hitters;
  for (int t = 0; t < kHitters; ++t) {
    hitters.emplace_back([&, t] {
      std::mt19937_64 rng(17 + t);
      for (int i = 0; i < kIterations; ++i) {
        const uint64_t va = mem.va() + (rng() % kRanges) * 4096;
        auto g = cache_->Register(tenant_, va, 4096, kRw);
        if (!g.ok()) {
          unexpected++;
          continue;
        }
        if (g->hit) hits++;
        auto info = cache_->Query(tenant_, g->handle);
        if (!info.ok() || info->va != va || info->holders == 0) lost++;
        if (!cache_->Release(tenant_, g->handle).ok()) lost++;
      }
    });
  }
  for (auto& th : hitters) th.join();
  stop = true;
  invalidator.join();
  EXPECT_EQ(lost.load(), 0);
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(hits.load(), 0u);
  const TenantUsage u = UsageNow();
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.live_registrations, u.cached_unreferenced);
  EXPECT_EQ(u.pool_outstanding, u.live_registrations);
}

// A hit that read the state word as live, then stalls before its entry store while the
// registration is invalidated (unheld: its handle goes at once). The hit must notice on its
// recheck and not hand out the dead registration.
TEST_F(HoldsTest, AHitThatReadBeforeAStopDoesNotHoldTheStoppedRecord) {
  REQUIRE_HOOKS();
  Memory mem(1 << 16);
  Attach(mem);
  auto first = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(cache_->Release(tenant_, first->handle).ok());
  Stall stall(HookPoint::kHitRead);
  absl::StatusOr<KeyGrant> got;
  std::thread hitter([&] {
    stall.Arm();
    got = cache_->Register(tenant_, mem.va(), 4096, kRw);
  });
  ASSERT_TRUE(stall.WaitReached());
  ASSERT_TRUE(cache_->Invalidate(tenant_, first->handle).ok());
  EXPECT_EQ(cache_->stats().revoked_with_holders.value(), 0u);  // the stop saw no holder
  stall.Resume();
  hitter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NE(got->handle, first->handle);  // not the invalidated one: a fresh registration
  EXPECT_FALSE(got->hit);
  EXPECT_EQ(Holders(got->handle), 1u);
  EXPECT_TRUE(cache_->Release(tenant_, got->handle).ok());
  const TenantUsage u = UsageNow();
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.live_registrations, 1u);
}

// A local release that stored its entry, then stalls before reading the state while the
// registration is invalidated: the stop counts no holder and unpublishes, and the release
// still succeeds (it was a real hold).
TEST_F(HoldsTest, AReleaseRacingAStopSucceedsAndTheHandleGoes) {
  REQUIRE_HOOKS();
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  Stall stall(HookPoint::kReleaseStore);
  absl::Status released;
  Event holding;
  Handle handle = 0;
  std::thread holder([&] {
    auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
    ASSERT_TRUE(g.ok() && g->hit);
    handle = g->handle;
    holding.Notify();
    stall.Arm();
    released = cache_->Release(tenant_, g->handle);
  });
  holding.WaitForNotification();
  ASSERT_TRUE(stall.WaitReached());
  ASSERT_TRUE(cache_->Invalidate(tenant_, handle).ok());
  stall.Resume();
  holder.join();
  EXPECT_TRUE(released.ok()) << released;
  EXPECT_THAT(cache_->Query(tenant_, handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(UsageNow().revoked_held, 0u);
  EXPECT_EQ(cache_->stats().revoked_with_holders.value(), 0u);
}

// A stop that marked the record dead stalls before its fence and count, while the only holder
// releases: the release sees DEAD and waits (Settle) for the stop, which then finds no holder.
TEST_F(HoldsTest, ALastReleaseDuringAStopLeavesNoTombstone) {
  REQUIRE_HOOKS();
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok() && g->hit);
  Stall stall(HookPoint::kStopMarked);
  absl::Status invalidated;
  std::thread stopper([&] {
    stall.Arm();
    invalidated = cache_->Invalidate(tenant_, g->handle);
  });
  ASSERT_TRUE(stall.WaitReached());
  absl::Status released;
  std::thread releaser([&] { released = cache_->Release(tenant_, g->handle); });
  absl::SleepFor(absl::Milliseconds(20));  // the release reaches Settle and waits for the stop
  stall.Resume();
  stopper.join();
  releaser.join();
  EXPECT_TRUE(invalidated.ok()) << invalidated;
  EXPECT_TRUE(released.ok()) << released;
  EXPECT_THAT(cache_->Query(tenant_, g->handle), StatusIs(absl::StatusCode::kNotFound));
  const TenantUsage u = UsageNow();
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.live_registrations, 0u);
}

// Requests taken on one thread and released on another (a server's pattern) keep the shared
// count bounded: once it is negative, hits take shared holds.
TEST_F(HoldsTest, CrossThreadReleasesKeepTheSharedCountBounded) {
  Memory mem(1 << 16);
  Attach(mem);
  Cache(mem.va(), 4096);
  constexpr int kRounds = 2000;
  std::vector<Handle> handles(kRounds);
  std::thread taker([&] {
    for (int i = 0; i < kRounds; ++i) {
      auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
      ASSERT_TRUE(g.ok() && g->hit);
      handles[i] = g->handle;
    }
  });
  taker.join();
  std::thread giver([&] {
    for (Handle h : handles) EXPECT_TRUE(cache_->Release(tenant_, h).ok());
  });
  giver.join();
  EXPECT_EQ(Holders(handles[0]), 0u);
  // Interleaved one by one, too.
  for (int i = 0; i < kRounds; ++i) {
    Handle h = 0;
    std::thread([&] { h = cache_->Register(tenant_, mem.va(), 4096, kRw)->handle; }).join();
    std::thread([&] { EXPECT_TRUE(cache_->Release(tenant_, h).ok()); }).join();
  }
  EXPECT_EQ(Holders(handles[0]), 0u);
  EXPECT_THAT(cache_->Release(tenant_, handles[0]),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(cache_->Invalidate(tenant_, handles[0]).ok());
  EXPECT_THAT(cache_->Query(tenant_, handles[0]), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace regcache::cache