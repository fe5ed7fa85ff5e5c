// The device's key budget shared by every tenant (cache/internal/key_budget.h): idle tenants
// hold no pooled keys, so a thousand of them leave the table to the one that works; a tenant
// that filled the device with cached keys gives back what is over its fair share when another
// needs keys; a budget that is really spent says so with its numbers.
#include "cache/internal/key_budget.h"

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "base/mutex.h"
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

TEST(KeyBudget, TakesWhatIsLeftAndSharesFairly) {
  KeyBudget b(100, 100000);
  EXPECT_EQ(b.Take(60, 4), 60u);
  EXPECT_EQ(b.Take(60, 4), 40u);
  EXPECT_EQ(b.Take(1, 4), 0u);
  b.Give(10, 4);
  EXPECT_EQ(b.used(), 90u);
  EXPECT_EQ(b.used_entries(), 360u);
  EXPECT_EQ(b.FairShare(), 100u);  // no tenant: all of it
  b.TenantOpened();
  b.TenantOpened();
  b.TenantOpened();
  EXPECT_EQ(b.FairShare(), 33u);
  EXPECT_EQ(b.FairEntryShare(), 33333u);
  EXPECT_EQ(b.Describe(7, 28),
            "device key budget: 90 of 100 keys and 360 of 100000 translation entries in use by 3 "
            "tenants (fair share 33 keys, 33333 entries); this tenant holds 7 keys with 28 "
            "entries");
}

TEST(KeyBudget, LargeKeysRunOutOfTranslationEntriesFirst) {
  KeyBudget b(100, 1000);
  EXPECT_EQ(b.Take(60, 4), 60u);   // 240 entries
  EXPECT_EQ(b.Take(10, 100), 7u);  // 700 more: 60 entries left, 33 keys
  EXPECT_FALSE(b.HasRoom(100));
  EXPECT_TRUE(b.HasRoom(4));
  EXPECT_EQ(b.Take(1, 100), 0u);
  EXPECT_EQ(b.Take(50, 4), 15u);  // the 60 entries left
  EXPECT_EQ(b.used(), 82u);
  EXPECT_EQ(b.used_entries(), 1000u);
  b.Give(7, 100);
  EXPECT_EQ(b.used(), 75u);
  EXPECT_EQ(b.used_entries(), 300u);
  // Keys bind when entries do not: a full table refuses even the smallest key, and gives back
  // the entries it had counted.
  KeyBudget k(2, 1000);
  EXPECT_EQ(k.Take(5, 4), 2u);
  EXPECT_EQ(k.used_entries(), 8u);
}

TEST(KeyBudget, PressureLastsUntilTheLargestKeyPressedForFits) {
  KeyBudget b(100, 1000);
  EXPECT_EQ(b.Take(10, 100), 10u);
  b.Press(4);
  b.Press(100);
  EXPECT_FALSE(b.RelieveIfRoom()) << "no room for a 100-entry key yet";
  EXPECT_TRUE(b.pressed());
  b.Give(1, 100);
  EXPECT_TRUE(b.RelieveIfRoom());
  EXPECT_FALSE(b.pressed());
}

using KeyBudgetCacheTest = CacheTest;

TEST_F(KeyBudgetCacheTest, AThousandIdleTenantsHoldNoKeysAndANewcomerRegisters) {
  hca::sim::SimOptions sim;
  sim.max_keys = 4096;  // eager pools (12 keys each here) would need 12,000
  ASSERT_NO_FATAL_FAILURE(Init(testing::TestCacheOptions(), sim));
  const int64_t keys_before = device_->stats().live_keys.value();
  std::vector<TenantId> idle;
  for (int i = 0; i < 1000; ++i) {
    auto t = cache_->OpenTenant(TenantOptions{});
    ASSERT_TRUE(t.ok()) << "tenant " << i << ": " << t.status();
    idle.push_back(*t);
  }
  cache_->Maintain();
  EXPECT_EQ(device_->stats().live_keys.value(), keys_before) << "idle tenants made keys";
  Memory mem(1 << 20);
  Attach(mem);
  auto g = cache_->Register(tenant_, mem.va(), 8192, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(PeerWrite(g->rkey, mem.va(), "newcomer").ok());
  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  for (TenantId t : idle) ASSERT_TRUE(cache_->CloseTenant(t).ok());
}

TEST_F(KeyBudgetCacheTest, AHogGivesBackWhatIsOverItsShareWhenANeighbourNeedsKeys) {
  CacheOptions o = testing::TestCacheOptions();
  o.background_maintenance = true;  // the reclaim runs there
  o.pool.capacity_classes = {4};
  hca::sim::SimOptions sim;
  sim.max_keys = 1024;  // budget 960 (1/16 left to other users), fair share 480 with two
  ASSERT_NO_FATAL_FAILURE(Init(o, sim));
  Memory hog_mem(8 << 20);
  Attach(hog_mem);
  // The hog caches 900 registrations it no longer holds: nearly the whole budget.
  for (int i = 0; i < 900; ++i) {
    auto g = cache_->Register(tenant_, hog_mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << "hog " << i << ": " << g.status();
    ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  }
  Memory mem(1 << 20);
  const TenantId neighbour = OpenWith(mem);
  std::vector<KeyGrant> held;
  for (int i = 0; i < 200; ++i) {
    auto g = cache_->Register(neighbour, mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << "neighbour " << i << ": " << g.status();
    held.push_back(*g);
  }
  EXPECT_GT(cache_->stats().evictions.value(), 0u) << "the hog's cached keys were reclaimed";
  // The hog still works (within what is left to it).
  auto g = cache_->Register(tenant_, hog_mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  for (const KeyGrant& k : held) ASSERT_TRUE(cache_->Release(neighbour, k.handle).ok());
  ASSERT_TRUE(cache_->CloseTenant(neighbour).ok());
}

TEST_F(KeyBudgetCacheTest, ASpentBudgetSaysSoWithItsNumbers) {
  CacheOptions o = testing::TestCacheOptions();
  o.pool.capacity_classes = {4};
  o.held_reclaim_after = absl::Hours(1);  // no held key is taken back here
  hca::sim::SimOptions sim;
  sim.max_keys = 64;        // budget 60
  o.gate_backings = false;  // the 4 keys left hold the backings' keys, not gates as well
  ASSERT_NO_FATAL_FAILURE(Init(o, sim));
  Memory mem(1 << 20);
  Attach(mem);
  // Held keys are not taken back here: the first tenant holds 40, the second gets the rest.
  std::vector<KeyGrant> held;
  for (int i = 0; i < 40; ++i) {
    auto g = cache_->Register(tenant_, mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << g.status();
    held.push_back(*g);
  }
  Memory mem2(1 << 20);
  const TenantId second = OpenWith(mem2);
  std::vector<KeyGrant> held2;
  absl::Status refused;
  for (int i = 0; i < 40 && refused.ok(); ++i) {
    auto g = cache_->Register(second, mem2.va() + uint64_t{4096} * i, 4096, kRw);
    if (g.ok()) {
      held2.push_back(*g);
    } else {
      refused = g.status();
    }
  }
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted)) << refused;
  EXPECT_NE(refused.message().find("device key budget: 60 of 60 keys and 240 of 3840 "
                                   "translation entries in use by 2 tenants (fair share 30 keys, "
                                   "1920 entries); this tenant holds 20 keys with 80 entries"),
            absl::string_view::npos)
      << refused;
  EXPECT_EQ(held2.size(), 20u);
  for (const KeyGrant& k : held) ASSERT_TRUE(cache_->Release(tenant_, k.handle).ok());
  for (const KeyGrant& k : held2) ASSERT_TRUE(cache_->Release(second, k.handle).ok());
  ASSERT_TRUE(cache_->CloseTenant(second).ok());
}

// Fairness covers held keys: a hog that holds 50 of 60 keys while a newcomer waits (fair share
// 30 each) has registrations revoked — told first, through TenantOptions::reclaiming — until
// the newcomer gets its whole share, each register within the bounded wait.
TEST_F(KeyBudgetCacheTest, AHogHoldingKeysGivesBackItsHeldExcessToATenantUnderItsShare) {
  CacheOptions o = testing::TestCacheOptions();
  o.background_maintenance = true;  // the reclaim runs there
  o.pool.capacity_classes = {4};
  hca::sim::SimOptions sim;
  sim.max_keys = 64;        // budget 60
  o.gate_backings = false;  // the 4 keys left hold the backings' keys, not gates as well
  ASSERT_NO_FATAL_FAILURE(Init(o, sim));
  base::Mutex mu;
  std::vector<std::pair<Handle, bool>> told;  // (handle, revoked already when told)
  TenantOptions hog_options;
  Memory hog_mem(1 << 20);
  TenantId hog = 0;
  hog_options.reclaiming = [&](Handle h) {
    auto q = cache_->Query(hog, h);
    base::MutexLock l(&mu);
    told.emplace_back(h, q.ok() && q->revoked);
  };
  hog = OpenWith(hog_mem, hog_options);
  std::vector<KeyGrant> held;
  for (int i = 0; i < 50; ++i) {
    auto g = cache_->Register(hog, hog_mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << "hog " << i << ": " << g.status();
    held.push_back(*g);
  }
  // The fixture's tenant (two tenants: share 30) is the newcomer.
  Memory mem(1 << 20);
  Attach(mem);
  const TenantId newcomer = tenant_;
  std::vector<KeyGrant> mine;
  for (int i = 0; i < 30; ++i) {
    const absl::Time start = absl::Now();
    auto g = cache_->Register(newcomer, mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << "newcomer " << i << ": " << g.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "the wait is bounded";
    EXPECT_TRUE(PeerWrite(g->rkey, mem.va() + uint64_t{4096} * i, "mine").ok());
    mine.push_back(*g);
  }
  EXPECT_GE(cache_->stats().held_reclaimed.value(), 20u);
  // Each reclaimed handle was told twice: before its revocation, and after.
  int revoked = 0;
  {
    base::MutexLock l(&mu);
    ASSERT_EQ(told.size() % 2, 0u);
    for (size_t i = 0; i < told.size(); i += 2) {
      EXPECT_EQ(told[i].first, told[i + 1].first);
      EXPECT_FALSE(told[i].second) << "told before it was revoked";
      EXPECT_TRUE(told[i + 1].second) << "and once it was";
    }
    revoked = static_cast<int>(told.size() / 2);
  }
  EXPECT_GE(revoked, 20);
  int still_live = 0;
  for (const KeyGrant& k : held) {
    auto q = cache_->Query(hog, k.handle);
    ASSERT_TRUE(q.ok()) << q.status();
    still_live += !q->revoked;
    ASSERT_TRUE(cache_->Release(hog, k.handle).ok());  // revoked or not
  }
  EXPECT_EQ(still_live + revoked, 50);
  EXPECT_LE(still_live, 30) << "the hog kept no more than its share";
  for (const KeyGrant& k : mine) ASSERT_TRUE(cache_->Release(newcomer, k.handle).ok());
  ASSERT_TRUE(cache_->CloseTenant(hog).ok());
}

// While a tenant under its share waits, one at or over its share is refused at once, and the
// refusal says why.
TEST_F(KeyBudgetCacheTest, ATenantOverItsShareIsRefusedFirstWhileAnotherWaits) {
  CacheOptions o = testing::TestCacheOptions();
  o.background_maintenance = true;
  o.pool.capacity_classes = {4};
  o.held_reclaim_after = absl::Hours(1);  // the newcomer keeps waiting (1 s at most)
  hca::sim::SimOptions sim;
  sim.max_keys = 64;        // budget 60
  o.gate_backings = false;  // the 4 keys left hold the backings' keys, not gates as well
  ASSERT_NO_FATAL_FAILURE(Init(o, sim));
  Memory hog_mem(1 << 20);
  Attach(hog_mem);
  std::vector<KeyGrant> held;  // 50 of the 60: below its key limit (the whole budget)
  for (int i = 0; i < 50; ++i) {
    auto g = cache_->Register(tenant_, hog_mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << g.status();
    held.push_back(*g);
  }
  Memory mem(1 << 20);
  const TenantId newcomer = OpenWith(mem);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    // Under its share, it takes what room is left, then waits for more (and is refused after
    // its 1 s: held keys are not taken back in this test).
    std::vector<KeyGrant> mine;
    for (uint64_t page = 0; page < 30; ++page) {
      auto g = cache_->Register(newcomer, mem.va() + 4096 * page, 4096, kRw);
      if (!g.ok()) break;
      mine.push_back(*g);
    }
    for (const KeyGrant& k : mine) (void)cache_->Release(newcomer, k.handle);
    done.store(true);
  });
  absl::Status first;
  // New ranges (a hit needs no key): once its own pool's free keys are gone, the hog asks the
  // budget for more.
  for (uint64_t page = 100; !done.load() && page < 256; ++page) {
    auto g = cache_->Register(tenant_, hog_mem.va() + 4096 * page, 4096, kRw);
    if (g.ok()) {
      held.push_back(*g);
    } else if (g.status().message().find("refused first") != absl::string_view::npos) {
      first = g.status();
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  waiter.join();
  EXPECT_THAT(first, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(first.message().find("at or over its fair share while a tenant under its share "
                                 "waits for keys: refused first"),
            absl::string_view::npos)
      << first;
  for (const KeyGrant& k : held) ASSERT_TRUE(cache_->Release(tenant_, k.handle).ok());
  ASSERT_TRUE(cache_->CloseTenant(newcomer).ok());
}

// The translation entries bind before the key table: a hog of large keys cannot take another
// tenant's share of them.
TEST_F(KeyBudgetCacheTest, AHogOfLargeKeysGivesBackTranslationEntries) {
  CacheOptions o = testing::TestCacheOptions();
  o.background_maintenance = true;      // the reclaim runs there
  o.pool.capacity_classes = {64};       // every key holds 64 entries
  o.device_translation_entries = 2048;  // 1920 after the reserve: 30 keys, 15 each with two
  hca::sim::SimOptions sim;
  sim.max_keys = 1024;  // 960 keys: not what binds here
  ASSERT_NO_FATAL_FAILURE(Init(o, sim));
  Memory hog_mem(1 << 20);
  Attach(hog_mem);
  std::vector<KeyGrant> hog;
  absl::Status refused;
  for (int i = 0; i < 100; ++i) {
    auto g = cache_->Register(tenant_, hog_mem.va() + uint64_t{4096} * i, 4096, kRw);
    if (!g.ok()) {
      refused = g.status();
      break;
    }
    hog.push_back(*g);
  }
  // Alone, the hog may use the whole budget: it is cut off by entries, not by keys.
  EXPECT_EQ(hog.size(), 30u);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted)) << refused;
  EXPECT_NE(refused.message().find("1920 of 1920 translation entries"), absl::string_view::npos)
      << refused;
  // Its registrations stay cached, unheld.
  for (const KeyGrant& k : hog) ASSERT_TRUE(cache_->Release(tenant_, k.handle).ok());
  // A neighbour gets its share (15 keys) back from the hog's cached, unheld registrations.
  Memory mem(1 << 20);
  const TenantId neighbour = OpenWith(mem);
  std::vector<KeyGrant> held;
  for (int i = 0; i < 15; ++i) {
    auto g = cache_->Register(neighbour, mem.va() + uint64_t{4096} * i, 4096, kRw);
    ASSERT_TRUE(g.ok()) << "neighbour " << i << ": " << g.status();
    held.push_back(*g);
  }
  EXPECT_GT(cache_->stats().evictions.value(), 0u) << "the hog's cached keys were reclaimed";
  for (const KeyGrant& k : held) ASSERT_TRUE(cache_->Release(neighbour, k.handle).ok());
  ASSERT_TRUE(cache_->CloseTenant(neighbour).ok());
}

}  // namespace
}  // namespace regcache::cache
