#include "base/asymmetric_fence.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(AsymmetricFenceTest, ModeFollowsTheEnvironment) {
  const char* on = std::getenv("REGCACHE_MEMBARRIER");
  if (on == nullptr || *on == '\0' || *on == '0') {
    EXPECT_FALSE(AsymmetricFenceUsesMembarrier());
  }
  // Otherwise membarrier is used where the kernel has it; either mode must be correct.
  HeavyFence();
  LightFence();
}

// Dekker: each side stores its flag, fences, then reads the other's. With the pair of fences
// at least one side must see the other's store, round after round. Without them x86 lets both
// reads miss (store buffering), which this loop finds within a few thousand rounds.
TEST(AsymmetricFenceTest, StoreThenLoadIsOrderedOnBothSides) {
  constexpr int kRounds = 20000;
  std::atomic<int> fast_flag{0}, slow_flag{0};
  std::atomic<int> round{0};
  std::atomic<int> fast_done{-1};
  std::atomic<int> fast_saw{0}, slow_saw{0};
  int both_missed = 0;

  std::thread fast([&] {
    for (int r = 1; r <= kRounds; ++r) {
      while (round.load(std::memory_order_acquire) != r) {
      }
      fast_flag.store(r, std::memory_order_relaxed);
      LightFence();
      fast_saw.store(slow_flag.load(std::memory_order_relaxed), std::memory_order_relaxed);
      fast_done.store(r, std::memory_order_release);
    }
  });
  for (int r = 1; r <= kRounds; ++r) {
    round.store(r, std::memory_order_release);
    slow_flag.store(r, std::memory_order_relaxed);
    HeavyFence();
    slow_saw.store(fast_flag.load(std::memory_order_relaxed), std::memory_order_relaxed);
    while (fast_done.load(std::memory_order_acquire) != r) {
    }
    if (fast_saw.load(std::memory_order_relaxed) != r &&
        slow_saw.load(std::memory_order_relaxed) != r) {
      both_missed++;
    }
  }
  fast.join();
  EXPECT_EQ(both_missed, 0);
}

}  // namespace
}  // namespace regcache::base