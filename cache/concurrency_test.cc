// Many threads registering, releasing, invalidating and making windows at once, against the sim
// in engine-thread mode (completions arrive from another thread). Run under the tsan preset to
// check the locking; here it checks that every counter balances afterwards.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "base/test_util.h"
#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

using ::regcache::cache::testing::CacheTest;
using ::regcache::cache::testing::Memory;

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

class ConcurrencyTest : public CacheTest {
 protected:
  void SetUp() override {
    hca::sim::SimOptions sim;
    sim.mode = hca::sim::ExecutionMode::kThread;
    CacheOptions o = testing::TestCacheOptions();
    o.background_maintenance = true;  // refills race with takes, as in production
    o.maintenance_period = absl::Milliseconds(1);
    Init(o, sim);
  }
};

TEST_F(ConcurrencyTest, RegisterReleaseInvalidateFromManyThreadsBalances) {
  Memory mem(1 << 20);
  Attach(mem);
  constexpr int kThreads = 4;
  constexpr int kIterations = 1500;
  std::atomic<int> unexpected{0};
  std::atomic<uint64_t> writes_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + t);
      for (int i = 0; i < kIterations; ++i) {
        const uint64_t slot = rng() % 48;
        const uint64_t va = mem.va() + slot * 16384;
        auto g = cache_->Register(tenant_, va, 16384, kRw);
        if (!g.ok()) {
          unexpected++;
          continue;
        }
        const int action = static_cast<int>(rng() % 16);
        if (action < 4) {
          // A write through a key that may be revoked concurrently: success, or a clean refusal.
          uint64_t value = (static_cast<uint64_t>(t) << 32) | i;
          absl::Status s = peer_->Write(
              g->rkey, va + 8 * t,
              absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&value), sizeof(value)));
          if (s.ok()) {
            writes_ok++;
          } else if (s.code() != absl::StatusCode::kPermissionDenied) {
            unexpected++;
          }
        } else if (action < 6) {
          auto w = cache_->CreateWindow(tenant_, g->handle, 4096, 4096, hca::kRemoteRead);
          if (w.ok()) {
            if (!cache_->Release(tenant_, w->handle).ok()) unexpected++;
          } else if (w.status().code() != absl::StatusCode::kFailedPrecondition) {
            unexpected++;  // only a concurrently invalidated parent may refuse
          }
        } else if (action == 6) {
          absl::Status s = cache_->Invalidate(tenant_, g->handle);
          if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) unexpected++;
        }
        if (!cache_->Release(tenant_, g->handle).ok()) unexpected++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(writes_ok.load(), 0u);
  const TenantUsage u = UsageNow();
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.live_registrations, u.cached_unreferenced);  // everything released is cached
  EXPECT_EQ(u.pool_outstanding, u.live_registrations);
  EXPECT_EQ(cache_->stats().releases.value(), cache_->stats().register_hits.value() +
                                                  cache_->stats().register_misses.value() +
                                                  cache_->stats().windows_created.value());
}

// Lock-free hits and releases against CLOCK eviction under a small key quota: a key a thread
// holds is never evicted under it (a write through it always lands), and afterwards every
// counter balances.
TEST_F(ConcurrencyTest, HitsRaceEvictionAndHeldKeysStayMapped) {
  ASSERT_NO_FATAL_FAILURE(ReplaceTenant(TenantOptions{.max_keys = 8}));
  Memory mem(1 << 20);
  Attach(mem);
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  std::atomic<int> unexpected{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(99 + t);
      for (int i = 0; i < kIterations; ++i) {
        const uint64_t va = mem.va() + (rng() % 32) * 8192;
        auto g = cache_->Register(tenant_, va, 8192, kRw);
        if (!g.ok()) {
          // Eviction found nothing unheld and unreferenced in two turns of the hand.
          (g.status().code() == absl::StatusCode::kResourceExhausted ? refused : unexpected)++;
          continue;
        }
        const uint64_t value = (static_cast<uint64_t>(t) << 32) | i;
        if (!peer_
                 ->Write(
                     g->rkey, va + 8 * t,
                     absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&value), sizeof(value)))
                 .ok()) {
          unexpected++;  // a held key was unmapped under its holder
        }
        if (!cache_->Release(tenant_, g->handle).ok()) unexpected++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_LT(refused.load(), kThreads * kIterations / 100);
  EXPECT_GT(cache_->stats().evictions.value(), 0u);
  const TenantUsage u = UsageNow();
  EXPECT_LE(u.live_registrations, 8u);
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.live_registrations, u.cached_unreferenced);
  EXPECT_EQ(u.pool_outstanding, u.live_registrations);
  EXPECT_EQ(cache_->stats().releases.value(),
            cache_->stats().register_hits.value() + cache_->stats().register_misses.value());
}

// A handle names one publication of a record: after the record is recycled and published
// again (same slot), the old handle resolves to nothing.
TEST_F(ConcurrencyTest, StaleHandleOfARecycledRecordIsNotFound) {
  Memory mem(1 << 16);
  Attach(mem);
  auto first = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(cache_->Release(tenant_, first->handle).ok());
  ASSERT_TRUE(cache_->Invalidate(tenant_, first->handle).ok());
  auto second = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->hit);
  EXPECT_NE(second->handle, first->handle);
  EXPECT_THAT(cache_->Release(tenant_, first->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache_->Query(tenant_, first->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache_->Invalidate(tenant_, first->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache_->Query(tenant_, second->handle)->holders, 1u);
  EXPECT_TRUE(cache_->Release(tenant_, second->handle).ok());
}

}  // namespace
}  // namespace regcache::cache