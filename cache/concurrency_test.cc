// Many threads registering, releasing, invalidating and making windows at once, against the sim
// in engine-thread mode (completions arrive from another thread). Run under the tsan preset to
// check the locking; here it checks that every counter balances afterwards.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

namespace cache {
namespace {

using ::cache::testing::CacheTest;
using ::cache::testing::Memory;

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
  EXPECT_EQ(cache_->stats().releases.value(),
            cache_->stats().register_hits.value() + cache_->stats().register_misses.value() +
                cache_->stats().windows_created.value());
}

}  // namespace
}  // namespace cache
