// Direct tests of the key pool (cache/internal/key_pool.h) over the sim device: classes, hand-out
// order, variants, quarantine, watermarks, accounting and exhaustion. Time is passed in explicitly,
// so every quarantine decision here is deterministic.
#include "cache/internal/key_pool.h"

#include <memory>
#include <set>
#include <vector>

#include "base/test_util.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

PoolOptions NoQuarantine() {
  PoolOptions o;
  o.capacity_classes = {4, 16, 48};
  o.low_watermark = 2;
  o.high_watermark = 4;
  o.quarantine_time = absl::ZeroDuration();
  o.quarantine_count = 0;
  return o;
}

class KeyPoolTest : public ::testing::Test {
 protected:
  void Init(const PoolOptions& options, hca::sim::SimOptions sim = {}) {
    ASSERT_NO_FATAL_FAILURE(::regcache::cache::testing::OpenSimWithPd(sim, &device_, &pd_));
    pool_ = std::make_unique<KeyPool>(device_.get(), pd_, options, &stats_);
  }

  int64_t LiveKeys() const { return device_->stats().live_keys.value(); }

  TakenKey MustTake(int cls, absl::Time now = kT0) {
    absl::StatusOr<TakenKey> t = pool_->Take(cls, now);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : TakenKey{};
  }

  // What the cache does once a key's invalidation completed: the key, as the device now knows
  // it (the variant its map gave it), goes to quarantine.
  void Return(const TakenKey& t, absl::Time now = kT0) {
    pool_->Quarantine(PooledKey{t.mapped_key(), t.pooled.cls}, now);
  }

  // The pool's counters and the stats gauges tell the same story.
  void ExpectCounts(uint64_t free, uint64_t quarantined, uint64_t outstanding) {
    EXPECT_EQ(pool_->free_keys(), free);
    EXPECT_EQ(pool_->quarantined_keys(), quarantined);
    EXPECT_EQ(pool_->outstanding_keys(), outstanding);
    EXPECT_EQ(pool_->total_keys(), free + quarantined + outstanding);
    EXPECT_EQ(stats_.keys_free.value(), static_cast<int64_t>(free));
    EXPECT_EQ(stats_.keys_quarantined_now.value(), static_cast<int64_t>(quarantined));
    EXPECT_EQ(stats_.keys_in_use.value(), static_cast<int64_t>(quarantined + outstanding));
  }

  CacheStats stats_;
  std::unique_ptr<hca::sim::SimDevice> device_;
  hca::Pd pd_;
  std::unique_ptr<KeyPool> pool_;  // declared last: destroyed before the device
};

TEST_F(KeyPoolTest, ClassForPicksTheSmallestClassThatHolds) {
  Init(NoQuarantine());
  ASSERT_EQ(pool_->num_classes(), 3);
  EXPECT_EQ(pool_->capacity(0), 4u);
  EXPECT_EQ(pool_->capacity(1), 16u);
  EXPECT_EQ(pool_->capacity(2), 48u);
  EXPECT_EQ(*pool_->ClassFor(0), 0);
  EXPECT_EQ(*pool_->ClassFor(1), 0);
  EXPECT_EQ(*pool_->ClassFor(4), 0);
  EXPECT_EQ(*pool_->ClassFor(5), 1);
  EXPECT_EQ(*pool_->ClassFor(16), 1);
  EXPECT_EQ(*pool_->ClassFor(17), 2);
  EXPECT_EQ(*pool_->ClassFor(48), 2);
  absl::StatusOr<int> none = pool_->ClassFor(49);
  EXPECT_THAT(none, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(none.status().message().find("48"), absl::string_view::npos) << none.status();
}

TEST_F(KeyPoolTest, TakeCreatesABatchOfFreeKeysOfTheClassCapacity) {
  Init(NoQuarantine());
  const int64_t before = LiveKeys();
  for (int cls = 0; cls < 3; ++cls) {
    TakenKey t = MustTake(cls);
    EXPECT_EQ(t.pooled.cls, cls);
    EXPECT_EQ(hca::KeyVariant(t.pooled.key), 0);  // as created
    EXPECT_EQ(t.new_variant, 1);
    EXPECT_EQ(t.mapped_key(), hca::MakeKey(hca::KeyIndex(t.pooled.key), 1));
    absl::StatusOr<hca::KeyInfo> info = device_->QueryKey(t.pooled.key);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(info->free);
    EXPECT_TRUE(info->umr_en);
    EXPECT_EQ(info->pd, pd_);
    EXPECT_EQ(info->layout, hca::Layout::kKlm);
    EXPECT_EQ(info->capacity_entries, pool_->capacity(cls));
  }
  // One batch of high_watermark keys per class, one of each taken.
  EXPECT_EQ(LiveKeys() - before, 3 * 4);
  EXPECT_EQ(stats_.keys_created.value(), 12u);
  EXPECT_EQ(stats_.keys_taken.value(), 3u);
  ExpectCounts(/*free=*/9, /*quarantined=*/0, /*outstanding=*/3);
}

TEST_F(KeyPoolTest, HandsOutFreeKeysOldestFirstAndDistinct) {
  Init(NoQuarantine());
  std::set<hca::Key> seen;
  for (int i = 0; i < 10; ++i) {
    TakenKey t = MustTake(1);
    EXPECT_TRUE(seen.insert(t.pooled.key).second) << "key handed out twice";
  }
}

TEST_F(KeyPoolTest, ReturnedKeysComeBackInTheOrderTheyReturned) {
  PoolOptions o = NoQuarantine();
  o.high_watermark = 2;
  Init(o);
  TakenKey a = MustTake(0);
  TakenKey b = MustTake(0);
  Return(a);
  Return(b);
  EXPECT_EQ(hca::KeyIndex(MustTake(0).pooled.key), hca::KeyIndex(a.pooled.key));
  EXPECT_EQ(hca::KeyIndex(MustTake(0).pooled.key), hca::KeyIndex(b.pooled.key));
}

TEST_F(KeyPoolTest, EveryReuseBumpsTheVariant) {
  PoolOptions o = NoQuarantine();
  o.high_watermark = 1;
  o.max_keys_per_class = 1;  // one key: every take is a reuse of the same index
  Init(o);
  TakenKey t = MustTake(0);
  const uint32_t index = hca::KeyIndex(t.pooled.key);
  std::set<uint8_t> variants = {t.new_variant};
  for (int i = 0; i < 300; ++i) {  // past the 8-bit wrap
    const uint8_t expected = static_cast<uint8_t>(t.new_variant + 1);
    Return(t);
    t = MustTake(0);
    ASSERT_EQ(hca::KeyIndex(t.pooled.key), index);
    // The pool hands the key out as the device knows it (the variant of the last map) ...
    ASSERT_EQ(t.pooled.key, hca::MakeKey(index, static_cast<uint8_t>(expected - 1)));
    // ... and the next map moves it on by one.
    ASSERT_EQ(t.new_variant, expected) << i;
    variants.insert(t.new_variant);
  }
  EXPECT_EQ(variants.size(), 256u);  // all of them, in turn
  EXPECT_EQ(stats_.keys_created.value(), 1u);
}

TEST_F(KeyPoolTest, QuarantineHoldsAKeyForItsTime) {
  PoolOptions o = NoQuarantine();
  o.high_watermark = 1;
  o.max_keys_per_class = 1;
  o.quarantine_time = absl::Milliseconds(10);
  Init(o);
  TakenKey t = MustTake(0);
  Return(t, kT0);
  ExpectCounts(0, 1, 0);

  absl::StatusOr<TakenKey> early = pool_->Take(0, kT0 + absl::Milliseconds(9));
  EXPECT_THAT(early, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(early.status().message().find("1 keys wait in quarantine"), absl::string_view::npos)
      << early.status();
  EXPECT_EQ(stats_.pool_exhausted.value(), 1u);
  ExpectCounts(0, 1, 0);

  TakenKey again = MustTake(0, kT0 + absl::Milliseconds(10));
  EXPECT_EQ(hca::KeyIndex(again.pooled.key), hca::KeyIndex(t.pooled.key));
  EXPECT_EQ(stats_.keys_released_from_quarantine.value(), 1u);
  ExpectCounts(0, 0, 1);
}

TEST_F(KeyPoolTest, QuarantineHoldsAKeyUntilEnoughOthersFollowIt) {
  PoolOptions o = NoQuarantine();
  o.high_watermark = 3;
  o.max_keys_per_class = 3;
  o.quarantine_count = 2;
  Init(o);
  TakenKey a = MustTake(0), b = MustTake(0), c = MustTake(0);

  Return(a);  // none after a
  EXPECT_THAT(pool_->Take(0, kT0), StatusIs(absl::StatusCode::kResourceExhausted));
  Return(b);  // one after a
  EXPECT_THAT(pool_->Take(0, kT0), StatusIs(absl::StatusCode::kResourceExhausted));
  Return(c);  // two after a: a may go, b (one after it) may not
  TakenKey next = MustTake(0);
  EXPECT_EQ(hca::KeyIndex(next.pooled.key), hca::KeyIndex(a.pooled.key));
  EXPECT_THAT(pool_->Take(0, kT0), StatusIs(absl::StatusCode::kResourceExhausted));
  ExpectCounts(0, 2, 1);
  EXPECT_EQ(stats_.keys_quarantined.value(), 3u);
}

TEST_F(KeyPoolTest, QuarantineNeedsTimeAndCountBoth) {
  PoolOptions o = NoQuarantine();
  o.high_watermark = 2;
  o.max_keys_per_class = 2;
  o.quarantine_time = absl::Milliseconds(10);
  o.quarantine_count = 1;
  Init(o);
  TakenKey a = MustTake(0), b = MustTake(0);
  Return(a, kT0);
  Return(b, kT0 + absl::Milliseconds(1));
  // Count met for a (b followed it), time not yet.
  EXPECT_FALSE(pool_->Take(0, kT0 + absl::Milliseconds(5)).ok());
  // Time met for both, count only for a.
  TakenKey next = MustTake(0, kT0 + absl::Milliseconds(20));
  EXPECT_EQ(hca::KeyIndex(next.pooled.key), hca::KeyIndex(a.pooled.key));
  EXPECT_FALSE(pool_->Take(0, kT0 + absl::Seconds(60)).ok());
  ExpectCounts(0, 1, 1);
}

TEST_F(KeyPoolTest, MaintainRefillsBelowTheLowWatermarkToTheHigh) {
  Init(NoQuarantine());  // low 2, high 4
  const int64_t before = LiveKeys();
  ASSERT_TRUE(pool_->Maintain(kT0).ok());
  ExpectCounts(0, 0, 0);  // no class used yet: an idle tenant holds no keys
  EXPECT_EQ(LiveKeys() - before, 0);

  MustTake(0);  // the first use makes a batch of 4
  MustTake(0);
  ASSERT_TRUE(pool_->Maintain(kT0).ok());  // 2 free: at the low watermark, nothing to do
  ExpectCounts(2, 0, 2);
  MustTake(0);
  ASSERT_TRUE(pool_->Maintain(kT0).ok());  // 1 free: topped up to 4; classes 1, 2 unused
  ExpectCounts(4, 0, 3);
  EXPECT_EQ(stats_.keys_created.value(), 7u);
  EXPECT_EQ(LiveKeys() - before, 7);
}

TEST_F(KeyPoolTest, IdleClassesGiveTheirFreeKeysBack) {
  PoolOptions o = NoQuarantine();  // low 2, high 4
  o.idle_release = absl::Seconds(5);
  Init(o);
  const int64_t before = LiveKeys();
  TakenKey t = MustTake(0, kT0);
  EXPECT_TRUE(pool_->Shrink(kT0 + absl::Seconds(4), UINT64_MAX).empty()) << "not idle yet";
  std::vector<PooledKey> idle = pool_->Shrink(kT0 + absl::Seconds(5), UINT64_MAX);
  EXPECT_EQ(idle.size(), 3u);  // the free ones; the one taken stays its user's
  EXPECT_TRUE(pool_->DestroyKeys(idle).ok());
  ExpectCounts(0, 0, 1);
  EXPECT_EQ(LiveKeys() - before, 1);
  ASSERT_TRUE(pool_->Maintain(kT0 + absl::Seconds(6)).ok());
  ExpectCounts(0, 0, 1);  // an emptied class is not refilled until used again
  Return(t);
  // Over a limit (budget pressure), quarantined keys go back too.
  std::vector<PooledKey> over = pool_->Shrink(kT0 + absl::Seconds(6), 0);
  EXPECT_EQ(over.size(), 1u);
  EXPECT_TRUE(pool_->DestroyKeys(over).ok());
  ExpectCounts(0, 0, 0);
  EXPECT_EQ(LiveKeys() - before, 0);
  MustTake(0);  // used again: a new batch
  ExpectCounts(3, 0, 1);
}

TEST_F(KeyPoolTest, MaintainReleasesEligibleQuarantinedKeys) {
  PoolOptions o = NoQuarantine();
  o.low_watermark = 0;  // no refills: only the release shows
  o.quarantine_time = absl::Milliseconds(10);
  Init(o);
  TakenKey t = MustTake(2);
  Return(t, kT0);
  ASSERT_TRUE(pool_->Maintain(kT0 + absl::Milliseconds(5)).ok());
  ExpectCounts(3, 1, 0);
  ASSERT_TRUE(pool_->Maintain(kT0 + absl::Milliseconds(10)).ok());
  ExpectCounts(4, 0, 0);
}

// Idle tells the maintenance thread it may sleep longer: no class below its low watermark
// (quarantined keys do not keep it busy: see KeyPool::Idle).
TEST_F(KeyPoolTest, IdleOnlyWithNothingToRefill) {
  PoolOptions o = NoQuarantine();  // low 2, high 4
  o.quarantine_time = absl::Milliseconds(10);
  Init(o);
  EXPECT_TRUE(pool_->Idle()) << "classes never used want nothing";
  TakenKey t = MustTake(0);
  EXPECT_TRUE(pool_->Idle()) << "3 free: still above the low watermark";
  Return(t, kT0);
  EXPECT_TRUE(pool_->Idle()) << "a key in quarantine needs no polling";
  MustTake(0);
  MustTake(0);
  EXPECT_FALSE(pool_->Idle()) << "1 free: below the low watermark";
  ASSERT_TRUE(pool_->Maintain(kT0).ok());
  EXPECT_TRUE(pool_->Idle());
}

TEST_F(KeyPoolTest, MaintainReportsAClassAtItsLimitAndStaysUsable) {
  PoolOptions o = NoQuarantine();
  o.max_keys_per_class = 4;
  Init(o);
  for (int i = 0; i < 3; ++i) MustTake(0);
  absl::Status s = pool_->Maintain(kT0);  // class 0 wants 3 more, may have none
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted)) << s;
  ExpectCounts(1, 0, 3);
  MustTake(0);  // the free one is still there
  EXPECT_THAT(pool_->Take(0, kT0), StatusIs(absl::StatusCode::kResourceExhausted));
  MustTake(1);  // other classes unaffected
}

TEST_F(KeyPoolTest, ExhaustedAtTheClassLimit) {
  PoolOptions o = NoQuarantine();
  o.max_keys_per_class = 2;  // below the batch of 4: the batch is cut to what fits
  Init(o);
  MustTake(0);
  MustTake(0);
  EXPECT_EQ(pool_->total_keys(), 2u);
  absl::StatusOr<TakenKey> t = pool_->Take(0, kT0);
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(t.status().message().find("at its limit of 2 keys"), absl::string_view::npos)
      << t.status();
  EXPECT_EQ(stats_.pool_exhausted.value(), 1u);
}

TEST_F(KeyPoolTest, ExhaustedWhenTheDeviceCannotCreateKeys) {
  hca::sim::SimOptions sim;
  sim.max_keys = 8;
  PoolOptions o = NoQuarantine();
  o.high_watermark = 16;  // more than the key table holds
  Init(o, sim);
  const int64_t before = LiveKeys();
  absl::StatusOr<TakenKey> t = pool_->Take(0, kT0);
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kResourceExhausted)) << t.status();
  EXPECT_NE(t.status().message().find("key pool exhausted"), absl::string_view::npos) << t.status();
  EXPECT_EQ(stats_.pool_exhausted.value(), 1u);
  EXPECT_EQ(LiveKeys(), before);  // the failed batch left nothing behind
  ExpectCounts(0, 0, 0);
}

TEST_F(KeyPoolTest, ForgetDropsADestroyedKeyFromTheAccounts) {
  Init(NoQuarantine());
  TakenKey t = MustTake(0);
  ExpectCounts(3, 0, 1);
  // Recovery destroyed the key on the device; the pool stops counting it.
  ASSERT_TRUE(device_->DestroyKey(t.pooled.key).ok());
  pool_->Forget(t.pooled);
  ExpectCounts(3, 0, 0);
  EXPECT_EQ(pool_->total_keys(), 3u);
}

TEST_F(KeyPoolTest, DestroyAllDestroysFreeAndQuarantinedKeysOnly) {
  PoolOptions o = NoQuarantine();
  o.quarantine_count = 100;  // nothing leaves quarantine
  Init(o);
  const int64_t before = LiveKeys();
  TakenKey kept = MustTake(0);
  TakenKey back = MustTake(0);
  Return(back);
  ExpectCounts(2, 1, 1);
  ASSERT_TRUE(pool_->DestroyAll().ok());
  ExpectCounts(0, 0, 1);
  EXPECT_EQ(LiveKeys() - before, 1);  // the key still handed out is the caller's
  EXPECT_EQ(stats_.keys_destroyed.value(), 3u);
  EXPECT_TRUE(device_->QueryKey(kept.pooled.key).ok());
  EXPECT_FALSE(device_->QueryKey(back.pooled.key).ok());
}

TEST_F(KeyPoolTest, TeardownDestroysWhatThePoolHolds) {
  Init(NoQuarantine());
  const int64_t before = LiveKeys();
  MustTake(1);
  pool_.reset();
  EXPECT_EQ(LiveKeys() - before, 1);  // only the outstanding one remains
}

}  // namespace
}  // namespace regcache::cache