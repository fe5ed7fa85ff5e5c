#include "base/thread_index.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(ThreadIndexTest, StableWithinAThread) {
  const uint32_t i = ThreadIndex();
  ASSERT_LT(i, kMaxThreadIndices);
  EXPECT_EQ(ThreadIndex(), i);
  EXPECT_GT(ThreadIndexLimit(), i);
}

TEST(ThreadIndexTest, UniqueAmongLiveThreadsAndBelowTheLimit) {
  constexpr int kThreads = 16;
  std::vector<uint32_t> got(kThreads);
  absl::Barrier* all_have_one = new absl::Barrier(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      got[t] = ThreadIndex();
      // Everyone holds a number at once before anyone exits.
      if (all_have_one->Block()) delete all_have_one;
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint32_t> distinct(got.begin(), got.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads));
  for (uint32_t i : got) EXPECT_LT(i, ThreadIndexLimit());
}

TEST(ThreadIndexTest, AnExitedThreadsNumberIsReusedLowestFirst) {
  (void)ThreadIndex();
  const uint32_t in_use = ThreadIndicesInUse();
  uint32_t first = kNoThreadIndex;
  std::thread([&] { first = ThreadIndex(); }).join();
  EXPECT_EQ(ThreadIndicesInUse(), in_use);  // given back at exit
  uint32_t second = kNoThreadIndex;
  std::thread([&] { second = ThreadIndex(); }).join();
  EXPECT_EQ(second, first);
  // The numbers stay dense: many short-lived threads never push the limit past the peak.
  const uint32_t limit = ThreadIndexLimit();
  for (int i = 0; i < 100; ++i) std::thread([] { (void)ThreadIndex(); }).join();
  EXPECT_EQ(ThreadIndexLimit(), limit);
}

// A thread-local destroyed after the thread gave its number back (constructed before the
// first ThreadIndex call, so destroyed after it) sees none, and does not take a new one.
struct AskAtExit {
  uint32_t* seen = nullptr;
  ~AskAtExit() {
    if (seen != nullptr) *seen = ThreadIndex();
  }
};

TEST(ThreadIndexTest, AnExitingThreadHasNone) {
  uint32_t during = 0, at_exit = 0;
  const uint32_t in_use = ThreadIndicesInUse();
  std::thread([&] {
    static thread_local AskAtExit ask;
    ask.seen = &at_exit;
    during = ThreadIndex();
  }).join();
  EXPECT_LT(during, kMaxThreadIndices);
  EXPECT_EQ(at_exit, kNoThreadIndex);
  EXPECT_EQ(ThreadIndicesInUse(), in_use);
}

TEST(ThreadIndexTest, ThreadsThatNeverAskTakeNone) {
  const uint32_t in_use = ThreadIndicesInUse();
  std::thread([] {}).join();
  EXPECT_EQ(ThreadIndicesInUse(), in_use);
}

}  // namespace
}  // namespace regcache::base