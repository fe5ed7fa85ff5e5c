#include "api/internal/grant_cache.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "service/shm_protocol.h"

namespace regcache::api::internal {
namespace {

namespace shm = ::regcache::service::shm;

// The daemon's side of the state file, in this process.
class GrantCacheTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kSlots = 64;
  GrantCacheTest() {
    for (auto& w : words_) w.store(shm::SlotWord(7, false));
    cache_ = std::make_unique<GrantCache>(GrantStateView{words_, kSlots, &session_state_});
  }
  Key MakeKey(uint64_t handle, uint64_t va, uint64_t length, uint32_t access = kLocalRead) {
    return Key{handle, uint32_t(handle) + 100, uint32_t(handle) + 100, va, length, access, false};
  }
  void Revoke(uint32_t slot) { words_[slot].store(shm::SlotWord(7, true)); }

  std::atomic<uint32_t> words_[kSlots];
  std::atomic<uint32_t> session_state_{shm::kSessionOpen};
  std::unique_ptr<GrantCache> cache_;
};

TEST_F(GrantCacheTest, HitCoversSubrangeWithFewerRights) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x4000, kLocalRead | kLocalWrite), 3, 7));
  auto k = cache_->Acquire(0x11000, 0x100, kLocalRead);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->handle, 1u);
  EXPECT_EQ(k->va, 0x10000u);
  EXPECT_EQ(k->length, 0x4000u);
  EXPECT_TRUE(k->hit);
  // A second hit comes from this thread's table.
  EXPECT_TRUE(cache_->Acquire(0x11000, 0x100, kLocalRead).has_value());
  EXPECT_FALSE(cache_->Acquire(0x11000, 0x100, kRemoteWrite).has_value()) << "more rights";
  EXPECT_FALSE(cache_->Acquire(0x13f00, 0x200, kLocalRead).has_value()) << "past the end";
  EXPECT_FALSE(cache_->Acquire(0xff00, 0x200, kLocalRead).has_value()) << "before the start";
  EXPECT_FALSE(cache_->Acquire(0x11000, 0, kLocalRead).has_value()) << "empty";
  // Three local references (insert + two hits).
  for (int i = 0; i < 3; ++i) {
    auto r = cache_->Release(1);
    EXPECT_TRUE(r.cached);
    EXPECT_FALSE(r.no_reference);
    EXPECT_EQ(r.daemon_releases, 0u);
  }
  EXPECT_TRUE(cache_->Release(1).no_reference);
  EXPECT_FALSE(cache_->Release(99).cached);
  EXPECT_EQ(cache_->size(), 1u) << "unreferenced grants stay cached";
}

TEST_F(GrantCacheTest, RevokedGrantIsNeverHandedOutAgain) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x4000), 3, 7));
  ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());  // in this thread's table
  Revoke(3);
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value()) << "nor from the index";
  EXPECT_EQ(cache_->RevokedHandles(), std::vector<uint64_t>{1});
  EXPECT_EQ(cache_->Release(1).daemon_releases, 0u) << "one reference still out";
  EXPECT_EQ(cache_->Release(1).daemon_releases, 1u) << "the last one gives the hold back";
  EXPECT_EQ(cache_->size(), 0u);
  EXPECT_FALSE(cache_->Release(1).cached);
}

TEST_F(GrantCacheTest, NewGenerationOrClosingSessionMisses) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  words_[3].store(shm::SlotWord(8, false));  // the slot went to another grant
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  ASSERT_TRUE(cache_->Insert(MakeKey(2, 0x20000, 0x1000), 4, 7));
  session_state_.store(shm::kSessionClosing);
  EXPECT_FALSE(cache_->Acquire(0x20000, 8, kLocalRead).has_value());
  EXPECT_FALSE(cache_->Insert(MakeKey(3, 0x30000, 0x1000), 5, 7));
}

TEST_F(GrantCacheTest, InsertRefusesWhatItCannotTrack) {
  EXPECT_FALSE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), shm::kNoSlot, 0));
  EXPECT_FALSE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), kSlots, 7));
  EXPECT_FALSE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 6)) << "stale generation";
  EXPECT_FALSE(cache_->Insert(MakeKey(1, ~uint64_t{0} - 10, 0x1000), 3, 7)) << "wraps";
  EXPECT_EQ(cache_->size(), 0u);
}

TEST_F(GrantCacheTest, DuplicateInsertKeepsBothDaemonHolds) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  EXPECT_EQ(cache_->size(), 1u);
  EXPECT_EQ(cache_->Forget(1), 0u) << "referenced twice";
  cache_->Release(1);
  EXPECT_EQ(cache_->Release(1).daemon_releases, 2u);
}

TEST_F(GrantCacheTest, TakeUnreferencedLeavesReferencedGrants) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 1, 7));
  ASSERT_TRUE(cache_->Insert(MakeKey(2, 0x20000, 0x1000), 2, 7));
  cache_->Release(1);
  auto taken = cache_->TakeUnreferenced();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0], std::make_pair(uint64_t{1}, uint32_t{1}));
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  EXPECT_TRUE(cache_->Acquire(0x20000, 8, kLocalRead).has_value());
  // The reused entry serves a new grant; a stale thread-table slot does not resurrect grant 1.
  ASSERT_TRUE(cache_->Insert(MakeKey(3, 0x10000, 0x1000), 5, 7));
  auto k = cache_->Acquire(0x10000, 8, kLocalRead);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->handle, 3u);
}

TEST_F(GrantCacheTest, CachesDoNotShareThreadTables) {
  std::atomic<uint32_t> other_words[kSlots];
  for (auto& w : other_words) w.store(shm::SlotWord(7, false));
  GrantCache other(GrantStateView{other_words, kSlots, nullptr});
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 1, 7));
  ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  EXPECT_FALSE(other.Acquire(0x10000, 8, kLocalRead).has_value());
}

// Threads hit and release while the daemon revokes: once the revoked bit is visible, no thread
// gets the grant again.
TEST_F(GrantCacheTest, ConcurrentHitsNeverReturnARevokedGrant) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  cache_->Release(1);
  std::atomic<bool> revoked{false}, stop{false};
  std::atomic<int> after_revoke{0}, hits{0}, given_back{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        bool was_revoked = revoked.load();
        if (auto k = cache_->Acquire(0x10000 + 64 * (hits % 8), 8, kLocalRead)) {
          ++hits;
          if (was_revoked) ++after_revoke;
          given_back += cache_->Release(k->handle).daemon_releases;
        }
      }
    });
  }
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (hits.load() < 1000 && absl::Now() < deadline) std::this_thread::yield();
  Revoke(3);
  revoked.store(true);
  absl::SleepFor(absl::Milliseconds(20));
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(after_revoke.load(), 0);
  for (const auto& [handle, holds] : cache_->TakeUnreferenced()) given_back += holds;
  EXPECT_EQ(given_back.load(), 1) << "the one daemon hold comes back exactly once";
  EXPECT_EQ(cache_->size(), 0u);
}

}  // namespace
}  // namespace regcache::api::internal
