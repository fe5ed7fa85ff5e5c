#include "base/spinlock.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace base {
namespace {

TEST(SpinLockTest, MutualExclusionUnderContention) {
  SpinLock mu;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {  // more threads than cores: exercises the yield path
    threads.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) {
        SpinLockHolder lock(&mu);
        ++counter;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counter, 200000);
}

TEST(SpinLockTest, TryLock) {
  SpinLock mu;
  if (!mu.TryLock()) FAIL() << "an unheld lock refused TryLock";
  EXPECT_FALSE(mu.TryLock()) << "a held lock granted TryLock";
  mu.Unlock();
}

}  // namespace
}  // namespace base
