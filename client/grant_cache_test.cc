#include "client/internal/grant_cache.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "protocol/shm_protocol.h"

namespace regcache::api::internal {
namespace {

namespace shm = ::regcache::protocol::shm;

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

TEST_F(GrantCacheTest, InsertBatchKeepsWhatInsertWouldAcrossLockRuns) {
  // More grants than one hold of the lock takes, with two that Insert refuses among them.
  constexpr uint64_t kGrants = GrantCache::kLockRun + 10;
  std::vector<Key> keys;
  std::vector<GrantCache::Insertion> batch;
  for (uint64_t h = 1; h <= kGrants; ++h) keys.push_back(MakeKey(h, h << 16, 0x1000));
  for (uint64_t h = 1; h <= kGrants; ++h) {
    const uint32_t slot = h == 5 ? shm::kNoSlot : static_cast<uint32_t>(h % (kSlots - 1)) + 1;
    const uint32_t generation = h == GrantCache::kLockRun + 3 ? 6 : 7;  // stale: refused
    batch.push_back({&keys[h - 1], slot, generation});
  }
  cache_->InsertBatch(batch);
  EXPECT_EQ(cache_->size(), kGrants - 2);
  for (uint64_t h = 1; h <= kGrants; ++h) {
    const bool refused = h == 5 || h == GrantCache::kLockRun + 3;
    EXPECT_EQ(cache_->Acquire(h << 16, 0x1000, kLocalRead).has_value(), !refused) << h;
  }
}

// InsertBatch places each grant in the ordered index next to the one before it when it can: in
// address order that is right, and out of order, at an address already taken, or after a grant
// it did not add (a handle it holds already), it must still find each grant's place.
TEST_F(GrantCacheTest, InsertBatchInAnyOrderKeepsTheOrderedIndexWhole) {
  ASSERT_TRUE(cache_->Insert(MakeKey(100, 0x50000, 0x1000), 1, 7));
  const std::vector<Key> keys = {
      MakeKey(1, 0x10000, 0x1000),   MakeKey(2, 0x20000, 0x1000),
      MakeKey(3, 0x60000, 0x1000),    // past the grant already there
      MakeKey(4, 0x30000, 0x1000),    // backwards
      MakeKey(5, 0x30000, 0x2000),    // the same address
      MakeKey(100, 0x50000, 0x1000),  // held already: one more hold, no new entry
      MakeKey(6, 0x70000, 0x1000),   MakeKey(7, 0x5000, 0x1000),  // before everything
  };
  std::vector<GrantCache::Insertion> batch;
  for (const Key& k : keys) batch.push_back({&k, k.handle == 100 ? 1u : uint32_t(k.handle) + 1, 7});
  cache_->InsertBatch(batch);
  EXPECT_EQ(cache_->size(), 8u);
  // Inside each range but not at its start: answered by the ordered index alone.
  const std::vector<std::pair<uint64_t, uint64_t>> cover = {
      {0x10800, 1},   {0x20800, 2}, {0x60800, 3}, {0x31800, 5},
      {0x50800, 100}, {0x70800, 6}, {0x5800, 7}};
  for (const auto& [va, handle] : cover) {
    auto k = cache_->Acquire(va, 0x100, kLocalRead);
    ASSERT_TRUE(k.has_value()) << std::hex << va;
    EXPECT_EQ(k->handle, handle) << std::hex << va;
  }
  auto either = cache_->Acquire(0x30800, 0x100, kLocalRead);
  ASSERT_TRUE(either.has_value());
  EXPECT_TRUE(either->handle == 4 || either->handle == 5) << either->handle;
  EXPECT_FALSE(cache_->Acquire(0x40800, 0x100, kLocalRead).has_value()) << "no grant there";
}

TEST_F(GrantCacheTest, ARefusedInsertLeavesNoTraceOfItsHandle) {
  EXPECT_FALSE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 6)) << "stale generation";
  EXPECT_EQ(cache_->Forget(1), 0u);
  EXPECT_FALSE(cache_->Release(1).cached) << "the refused handle is not the cache's";
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  // The same handle, current now: cached as if the refusal had never been.
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  EXPECT_EQ(cache_->size(), 1u);
  ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  cache_->Release(1);
  cache_->Release(1);
  EXPECT_EQ(cache_->Forget(1), 1u) << "one daemon hold, no reference left";
}

// A batch's lookups through every path one Acquire takes (the table by start address, the
// ordered index under the lock, across more than one run of it), answered as each would be.
TEST_F(GrantCacheTest, AcquireBatchAnswersAsAcquireWouldAcrossLockRuns) {
  constexpr uint64_t kGrants = GrantCache::kLockRun + 10;
  for (uint64_t h = 1; h <= kGrants; ++h) {
    const uint32_t access = h % 7 == 0 ? kLocalRead : kLocalRead | kLocalWrite;
    ASSERT_TRUE(
        cache_->Insert(MakeKey(h, h << 16, 0x4000, access), static_cast<uint32_t>(h % 63) + 1, 7));
  }
  constexpr uint64_t kRevoked = 20;  // its slot is no other grant's
  Revoke(static_cast<uint32_t>(kRevoked % 63) + 1);
  std::vector<GrantCache::Lookup> lookups;
  std::vector<std::optional<uint64_t>> want;  // the handle each should hit
  for (uint64_t h = 1; h <= kGrants; ++h) {
    const bool revoked = h == kRevoked;
    // Its start exactly; then inside it (the ordered index); then with more rights than it has.
    lookups.push_back({h << 16, 0x1000, kLocalRead});
    want.push_back(revoked ? std::nullopt : std::optional<uint64_t>(h));
    lookups.push_back({(h << 16) + 0x800, 0x1000, kLocalWrite});
    want.push_back(revoked || h % 7 == 0 ? std::nullopt : std::optional<uint64_t>(h));
    lookups.push_back({(h << 16) + 0x3000, 0x2000, kLocalRead});  // past its end
    want.push_back(std::nullopt);
  }
  lookups.push_back({0x20000, 0, kLocalRead});  // length 0: not looked up
  want.push_back(std::nullopt);
  lookups.push_back({0x20000, 8, kRemoteWrite});  // rights the daemon refuses
  want.push_back(std::nullopt);
  std::vector<std::optional<Key>> out(lookups.size());
  int first_misses = 0;
  cache_->AcquireBatch(lookups, absl::MakeSpan(out), [&] {
    ++first_misses;
    // The first miss is the third lookup; the fourth (a hit later) is not looked up yet.
    EXPECT_TRUE(out[0].has_value() && out[1].has_value());
    EXPECT_FALSE(out[3].has_value()) << "told before the lookups after the miss";
  });
  EXPECT_EQ(first_misses, 1);
  std::vector<uint32_t> refs(kGrants + 1, 1);  // Insert's reference
  for (size_t i = 0; i < lookups.size(); ++i) {
    ASSERT_EQ(out[i].has_value(), want[i].has_value()) << i;
    if (!out[i].has_value()) continue;
    EXPECT_EQ(out[i]->handle, *want[i]) << i;
    EXPECT_EQ(out[i]->va, *want[i] << 16) << i;
    EXPECT_TRUE(out[i]->hit);
    ++refs[*want[i]];
  }
  // Each hit took exactly one reference; the revoked grant left the cache with its last one.
  for (uint64_t h = 1; h <= kGrants; ++h) {
    for (uint32_t r = 0; r < refs[h]; ++r) EXPECT_FALSE(cache_->Release(h).no_reference) << h;
    EXPECT_TRUE(h == kRevoked || cache_->Release(h).no_reference) << h;
  }
  EXPECT_EQ(cache_->size(), kGrants - 1);
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

TEST_F(GrantCacheTest, ReleaseFromAnotherThread) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));  // main: one reference
  std::optional<Key> k;
  std::thread([&] { k = cache_->Acquire(0x10000, 8, kLocalRead); }).join();  // another one
  ASSERT_TRUE(k.has_value());
  std::thread([&] {
    EXPECT_FALSE(cache_->Release(1).no_reference);
    EXPECT_FALSE(cache_->Release(1).no_reference);
    EXPECT_TRUE(cache_->Release(1).no_reference) << "two references, three releases";
  }).join();
  EXPECT_TRUE(cache_->Release(1).no_reference);
  EXPECT_EQ(cache_->Forget(1), 1u) << "nobody references it: the hold comes back now";
  EXPECT_EQ(cache_->size(), 0u);
}

TEST_F(GrantCacheTest, ReleasesOnAnotherThreadStayBalanced) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_FALSE(cache_->Release(1).no_reference);
  // Acquired here, released there, many times: the counts must still sum to zero.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
    std::thread([&] { EXPECT_FALSE(cache_->Release(1).no_reference); }).join();
  }
  ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  EXPECT_EQ(cache_->TakeUnreferenced().size(), 0u) << "one reference out";
  EXPECT_FALSE(cache_->Release(1).no_reference);
  EXPECT_TRUE(cache_->Release(1).no_reference);
  EXPECT_EQ(cache_->TakeUnreferenced(), (std::vector<std::pair<uint64_t, uint32_t>>{{1, 1}}));
}

TEST_F(GrantCacheTest, ThreadExitHandsItsReferencesBack) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_FALSE(cache_->Release(1).no_reference);
  std::thread([&] {
    ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
    ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  }).join();  // exits holding two
  EXPECT_TRUE(cache_->TakeUnreferenced().empty());
  EXPECT_EQ(cache_->TakeSole(1).sole, false);
  EXPECT_FALSE(cache_->Release(1).no_reference);
  EXPECT_EQ(cache_->Forget(1), 0u) << "one still out";
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value()) << "forgotten";
  EXPECT_EQ(cache_->Release(1).daemon_releases, 1u) << "the last reference gives the hold back";
  EXPECT_EQ(cache_->size(), 0u);
  // A thread that released everything before it exited leaves nothing behind.
  ASSERT_TRUE(cache_->Insert(MakeKey(2, 0x20000, 0x1000), 4, 7));
  std::thread([&] { EXPECT_FALSE(cache_->Release(2).no_reference); }).join();
  EXPECT_EQ(cache_->TakeUnreferenced(), (std::vector<std::pair<uint64_t, uint32_t>>{{2, 1}}));
}

TEST_F(GrantCacheTest, TakeSoleOnlyWithOneReference) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  GrantCache::Sole s = cache_->TakeSole(1);
  EXPECT_TRUE(s.cached);
  EXPECT_FALSE(s.sole) << "two references";
  EXPECT_TRUE(cache_->Acquire(0x10000, 8, kLocalRead).has_value()) << "unmarked again";
  cache_->Release(1);
  cache_->Release(1);
  s = cache_->TakeSole(1);
  EXPECT_TRUE(s.sole);
  EXPECT_EQ(s.daemon_holds, 1u);
  EXPECT_FALSE(cache_->Acquire(0x10000, 8, kLocalRead).has_value());
  EXPECT_FALSE(cache_->Release(1).cached);
}

// The front path (a thread's copies of the grants it hit): every check of the probe path holds.
TEST_F(GrantCacheTest, FrontHitStillReadsTheDaemonWord) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  for (int i = 0; i < 3; ++i) {  // the second and third come from the front copy
    auto k = cache_->Acquire(0x10000, 0x1000, kLocalRead);
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->lkey, 101u);
    EXPECT_EQ(cache_->Release(1).daemon_releases, 0u);
  }
  session_state_.store(shm::kSessionClosing);
  EXPECT_FALSE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value()) << "closing";
  session_state_.store(shm::kSessionOpen);
  ASSERT_TRUE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());
  EXPECT_FALSE(cache_->Release(1).no_reference);
  Revoke(3);
  EXPECT_FALSE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value()) << "revoked";
  // The insert's reference is still out: the holds come back with it.
  EXPECT_EQ(cache_->Release(1).daemon_releases, 1u);
  EXPECT_FALSE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());
  EXPECT_EQ(cache_->size(), 0u);
}

TEST_F(GrantCacheTest, FrontCopyDiesWithItsGrant) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_FALSE(cache_->Release(1).no_reference);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());
    ASSERT_FALSE(cache_->Release(1).no_reference);
  }
  auto taken = cache_->TakeUnreferenced();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0], std::make_pair(uint64_t{1}, uint32_t{1}));
  EXPECT_FALSE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value()) << "reaped";
  EXPECT_FALSE(cache_->Release(1).cached);
  // The same entry, another grant at the same address: the old copy never answers for it.
  ASSERT_TRUE(cache_->Insert(MakeKey(2, 0x10000, 0x1000), 4, 7));
  ASSERT_FALSE(cache_->Release(2).no_reference);
  for (int i = 0; i < 2; ++i) {
    auto k = cache_->Acquire(0x10000, 0x1000, kLocalRead);
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->handle, 2u);
    EXPECT_EQ(k->lkey, 102u);
    ASSERT_FALSE(cache_->Release(2).no_reference);
  }
}

TEST_F(GrantCacheTest, ForgetWhileFrontHitsAreHeld) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_FALSE(cache_->Release(1).no_reference);
  ASSERT_TRUE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());  // fills the front
  ASSERT_TRUE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());  // from the front
  EXPECT_EQ(cache_->Forget(1), 0u) << "still referenced twice";
  EXPECT_FALSE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value()) << "forgotten";
  EXPECT_EQ(cache_->Release(1).daemon_releases, 0u);
  EXPECT_EQ(cache_->Release(1).daemon_releases, 1u) << "the last reference";
  EXPECT_EQ(cache_->size(), 0u);
}

TEST_F(GrantCacheTest, FrontReleaseFromAnotherThreadStaysExact) {
  ASSERT_TRUE(cache_->Insert(MakeKey(1, 0x10000, 0x1000), 3, 7));
  ASSERT_TRUE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());
  ASSERT_TRUE(cache_->Acquire(0x10000, 0x1000, kLocalRead).has_value());  // 3 references here
  std::thread([&] {
    for (int i = 0; i < 2; ++i) EXPECT_FALSE(cache_->Release(1).no_reference);
  }).join();
  EXPECT_FALSE(cache_->Release(1).no_reference);
  EXPECT_TRUE(cache_->Release(1).no_reference) << "all three are back";
  EXPECT_EQ(cache_->TakeUnreferenced().size(), 1u);
}

// Per handle: holds given back, and whether a thread still used it after that.
struct Ledger {
  static constexpr uint64_t kMax = 1 << 20;
  std::vector<std::atomic<int>> returned = std::vector<std::atomic<int>>(kMax);
  std::atomic<int> used_after_return{0};
  void Return(uint64_t handle, uint32_t holds) { returned[handle % kMax] += holds; }
  void Return(const std::vector<std::pair<uint64_t, uint32_t>>& v) {
    for (const auto& [h, n] : v) Return(h, n);
  }
};

// Threads hit and release many grants while another reclaims and re-inserts: a grant whose
// hold came back is never held by a thread, and every hold comes back exactly once.
TEST(GrantCacheRaceTest, ReclaimRacingHitsOnManyThreads) {
  constexpr uint32_t kGrants = 32;
  std::vector<std::atomic<uint32_t>> words(kGrants);
  for (auto& w : words) w.store(shm::SlotWord(1, false));
  GrantCache cache(GrantStateView{words.data(), kGrants, nullptr});
  Ledger ledger;
  std::atomic<uint64_t> next_handle{1};
  std::vector<uint32_t> grant_of(Ledger::kMax);  // the inserting thread's only
  auto insert = [&](uint32_t g) {
    const uint64_t h = next_handle++;
    grant_of[h] = g;
    ASSERT_TRUE(cache.Insert(Key{h, 1, 1, 0x100000 + g * 0x1000ull, 0x1000, kLocalRead}, g, 1));
    EXPECT_FALSE(cache.Release(h).no_reference);
  };
  for (uint32_t g = 0; g < kGrants; ++g) insert(g);
  std::atomic<bool> stop{false};
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 88172645463325252ull * (t + 1);
      while (!stop.load()) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        auto k = cache.Acquire(0x100000 + (x % kGrants) * 0x1000ull, 8, kLocalRead);
        if (!k.has_value()) continue;
        ++hits;
        if (ledger.returned[k->handle % Ledger::kMax].load() != 0) ++ledger.used_after_return;
        auto r = cache.Release(k->handle);
        EXPECT_TRUE(r.cached);
        EXPECT_FALSE(r.no_reference);
      }
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  for (int round = 0; (round < 300 || hits.load() < 20000) && absl::Now() < deadline; ++round) {
    for (const auto& [h, n] : cache.TakeUnreferenced()) {
      ledger.Return(h, n);
      insert(grant_of[h]);  // back in, under a new handle
    }
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  ledger.Return(cache.TakeUnreferenced());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(ledger.used_after_return.load(), 0);
  for (uint64_t h = 1; h < next_handle.load(); ++h) EXPECT_EQ(ledger.returned[h].load(), 1) << h;
}

// Threads hit while the daemon revokes grant after grant (its word first, then the event's
// Forget): no hit returns a grant whose revoked word it could see, every hold comes back once.
TEST(GrantCacheRaceTest, RevocationRacingHits) {
  constexpr uint32_t kGrants = 64;
  std::vector<std::atomic<uint32_t>> words(kGrants);
  for (auto& w : words) w.store(shm::SlotWord(1, false));
  GrantCache cache(GrantStateView{words.data(), kGrants, nullptr});
  Ledger ledger;
  for (uint32_t g = 0; g < kGrants; ++g) {
    ASSERT_TRUE(cache.Insert(Key{g + 1, 1, 1, 0x100000 + g * 0x1000ull, 0x1000, kLocalRead}, g, 1));
    cache.Release(g + 1);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 88172645463325252ull * (t + 1);
      while (!stop.load()) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint32_t g = x % kGrants;
        const bool revoked_before = words[g].load() != shm::SlotWord(1, false);
        auto k = cache.Acquire(0x100000 + g * 0x1000ull, 8, kLocalRead);
        if (!k.has_value()) continue;
        if (revoked_before) ++bad;
        ledger.Return(k->handle, cache.Release(k->handle).daemon_releases);
      }
    });
  }
  for (uint32_t g = 0; g < kGrants; ++g) {
    words[g].store(shm::SlotWord(1, true));
    ledger.Return(g + 1, cache.Forget(g + 1));
    ledger.Return(cache.TakePending());
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  ledger.Return(cache.TakePending());
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(cache.size(), 0u);
  for (uint32_t g = 0; g < kGrants; ++g) EXPECT_EQ(ledger.returned[g + 1].load(), 1) << g;
}

// Threads hit few grants, mostly from their front copies, while another thread now and then
// reclaims, forgets and re-inserts: a held grant's holds never come back, each comes back once.
TEST(GrantCacheRaceTest, ReapersRacingFrontHits) {
  constexpr uint32_t kGrants = 8;
  std::vector<std::atomic<uint32_t>> words(kGrants);
  for (auto& w : words) w.store(shm::SlotWord(1, false));
  GrantCache cache(GrantStateView{words.data(), kGrants, nullptr});
  Ledger ledger;
  std::atomic<uint64_t> next_handle{1};
  std::vector<uint32_t> grant_of(Ledger::kMax);  // the reaping thread's only
  std::vector<uint64_t> current(kGrants);        // and the handle now cached for each grant
  auto insert = [&](uint32_t g) {
    const uint64_t h = next_handle++;
    grant_of[h] = g;
    current[g] = h;
    ASSERT_TRUE(cache.Insert(Key{h, 1, 1, 0x100000 + g * 0x1000ull, 0x1000, kLocalRead}, g, 1));
    EXPECT_FALSE(cache.Release(h).no_reference);
  };
  for (uint32_t g = 0; g < kGrants; ++g) insert(g);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 88172645463325252ull * (t + 1);
      while (!stop.load(std::memory_order_relaxed)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        auto k = cache.Acquire(0x100000 + (x % kGrants) * 0x1000ull, 8, kLocalRead);
        if (!k.has_value()) continue;
        hits.fetch_add(1, std::memory_order_relaxed);
        if (ledger.returned[k->handle % Ledger::kMax].load() != 0) ++ledger.used_after_return;
        auto r = cache.Release(k->handle);
        EXPECT_TRUE(r.cached);
        EXPECT_FALSE(r.no_reference);
        ledger.Return(k->handle, r.daemon_releases);  // the last reference of a forgotten one
      }
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  for (int round = 0; round < 600 && absl::Now() < deadline; ++round) {
    // Let the hitters run on their front copies for a while (bounded), then reap.
    const int64_t until = hits.load() + 200;
    while (hits.load() < until && absl::Now() < deadline) std::this_thread::yield();
    if (round % 2 == 0) {
      for (const auto& [h, n] : cache.TakeUnreferenced()) {
        ledger.Return(h, n);
        insert(grant_of[h]);
      }
    } else {
      const uint32_t g = round % kGrants;  // revoked by an event; the daemon grants it anew
      ledger.Return(current[g], cache.Forget(current[g]));
      ledger.Return(cache.TakePending());
      insert(g);
    }
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  ledger.Return(cache.TakePending());
  ledger.Return(cache.TakeUnreferenced());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(ledger.used_after_return.load(), 0);
  for (uint64_t h = 1; h < next_handle.load(); ++h) EXPECT_EQ(ledger.returned[h].load(), 1) << h;
}

// Several caches in one process (several clients): independent, and a cache destroyed while
// threads still have tables for it leaves them working with the next one.
TEST(GrantCacheRaceTest, ManyCachesStayIndependent) {
  std::atomic<uint32_t> words[4];
  for (auto& w : words) w.store(shm::SlotWord(1, false));
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<GrantCache>> caches;
    for (int c = 0; c < 4; ++c) {
      caches.push_back(std::make_unique<GrantCache>(GrantStateView{words, 4, nullptr}));
      ASSERT_TRUE(caches[c]->Insert(Key{uint64_t(c + 1), 1, 1, 0x10000, 0x1000, kLocalRead}, 0, 1));
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 2000; ++i) {
          for (int c = 0; c < 4; ++c) {
            auto k = caches[c]->Acquire(0x10000, 8, kLocalRead);
            ASSERT_TRUE(k.has_value());
            EXPECT_EQ(k->handle, uint64_t(c + 1)) << "each cache answers its own grant";
            EXPECT_FALSE(caches[c]->Release(k->handle).no_reference);
            EXPECT_FALSE(caches[(c + 1) % 4]->Release(k->handle).cached);
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_TRUE(caches[0]->TakeUnreferenced().empty()) << "the inserter still holds it";
    caches[0]->Release(1);
    EXPECT_EQ(caches[0]->TakeUnreferenced().size(), 1u);
    EXPECT_EQ(caches[1]->size(), 1u) << "the others keep theirs";
  }
}

TEST(GrantCacheScaleTest, ManyGrantsAllHit) {
  constexpr uint32_t kN = 100000;
  std::vector<std::atomic<uint32_t>> words(kN);
  for (auto& w : words) w.store(shm::SlotWord(1, false));
  GrantCache cache(GrantStateView{words.data(), kN, nullptr});
  for (uint32_t i = 0; i < kN; ++i) {
    const Key k{0x1000000ull + i * 7, 1, 1, 0x7f0000000000ull + i * 4096ull, 4096, kLocalRead};
    ASSERT_TRUE(cache.Insert(k, i, 1));
    ASSERT_FALSE(cache.Release(k.handle).no_reference);
  }
  int misses = 0;
  for (uint32_t i = 0; i < kN; ++i) {
    auto k = cache.Acquire(0x7f0000000000ull + i * 4096ull, 4096, kLocalRead);
    if (!k.has_value()) {
      ++misses;
      continue;
    }
    EXPECT_EQ(k->handle, 0x1000000ull + i * 7);
    EXPECT_FALSE(cache.Release(k->handle).no_reference);
  }
  EXPECT_EQ(misses, 0);
  EXPECT_EQ(cache.TakeUnreferenced().size(), kN);
}

}  // namespace
}  // namespace regcache::api::internal
