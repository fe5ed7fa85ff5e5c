#include "base/mutex.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(MutexTest, ExclusiveCountingIsExact) {
  Mutex mu;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counter, 80000);
}

TEST(MutexTest, ReadersShareWritersExclude) {
  Mutex mu;
  ReaderMutexLock a(&mu);
  // A second reader may enter while the first holds it; a writer may not.
  std::thread reader([&] { ReaderMutexLock b(&mu); });
  reader.join();
  EXPECT_FALSE(mu.TryLock());
}

TEST(CondVarTest, WaitForPredicateAndTimeout) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread producer([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    MutexLock lock(&mu);
    EXPECT_TRUE(cv.WaitFor(&mu, absl::Seconds(10), [&] { return ready; }));
  }
  producer.join();
  MutexLock lock(&mu);
  EXPECT_FALSE(cv.WaitFor(&mu, absl::Milliseconds(5), [] { return false; }));
}

}  // namespace
}  // namespace regcache::base