#include "base/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

bool KernelHasPrivateExpedited() {
  const long supported = ::syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return supported > 0 && (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0;
}

// The daemon's functions are symmetric unless REGCACHE_MEMBARRIER=1; a user preferring
// membarrier gets it where the kernel has it, unless REGCACHE_MEMBARRIER=0.
TEST(AsymmetricFenceTest, ModeFollowsTheEnvironment) {
  const char* on = std::getenv("REGCACHE_MEMBARRIER");
  const int choice = on == nullptr || *on == '\0' ? -1 : *on == '0' ? 0 : 1;
  const bool kernel = KernelHasPrivateExpedited();
  EXPECT_EQ(AsymmetricFenceUsesMembarrier(), choice == 1 && kernel);
  const FenceMode membarrier =
      choice != 0 && kernel ? FenceMode::kMembarrier : FenceMode::kSymmetric;
  EXPECT_EQ(ChooseFenceMode(FenceMode::kMembarrier), membarrier);
  EXPECT_EQ(ChooseFenceMode(FenceMode::kSymmetric),
            choice == 1 ? membarrier : FenceMode::kSymmetric);
  HeavyFence();
  LightFence();
}

// Dekker: each side stores its flag, fences, then reads the other's. With the pair of fences
// at least one side must see the other's store, round after round. Without them x86 lets both
// reads miss (store buffering), which this loop finds within a few thousand rounds.
int BothMissed(FenceMode mode) {
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
      LightFence(mode);
      fast_saw.store(slow_flag.load(std::memory_order_relaxed), std::memory_order_relaxed);
      fast_done.store(r, std::memory_order_release);
    }
  });
  for (int r = 1; r <= kRounds; ++r) {
    round.store(r, std::memory_order_release);
    slow_flag.store(r, std::memory_order_relaxed);
    HeavyFence(mode);
    slow_saw.store(fast_flag.load(std::memory_order_relaxed), std::memory_order_relaxed);
    while (fast_done.load(std::memory_order_acquire) != r) {
    }
    if (fast_saw.load(std::memory_order_relaxed) != r &&
        slow_saw.load(std::memory_order_relaxed) != r) {
      both_missed++;
    }
  }
  fast.join();
  return both_missed;
}

TEST(AsymmetricFenceTest, StoreThenLoadIsOrderedOnBothSidesSymmetric) {
  EXPECT_EQ(BothMissed(FenceMode::kSymmetric), 0);
}

// The mode a client's grant cache takes (membarrier where the kernel has it).
TEST(AsymmetricFenceTest, StoreThenLoadIsOrderedOnBothSidesPreferringMembarrier) {
  EXPECT_EQ(BothMissed(ChooseFenceMode(FenceMode::kMembarrier)), 0);
}

}  // namespace
}  // namespace regcache::base