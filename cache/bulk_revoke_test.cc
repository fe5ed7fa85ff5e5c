// Revocation in bulk (internal/lifecycle.h RetireBatch): detaching memory under many keys,
// invalidating a registration with many windows and closing a tenant revoke their keys in
// batches — one doorbell per half ring, not one per key — and every key still ends refused by
// the device, held handles revoked, counters balanced.
#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

namespace regcache::cache {
namespace {

using testing::CacheTest;
using testing::Memory;

constexpr uint64_t kPage = 4096;
constexpr uint32_t kKeys = 256;
// TestCacheOptions' rings hold 64 requests; bulk revocation rings once per half ring.
constexpr uint64_t kMostDoorbells = kKeys / 16;

class BulkRevokeTest : public CacheTest {
 protected:
  uint64_t Doorbells() const { return cache_->stats().umr_batches.value(); }

  // kKeys registrations of one page each over `mem`; the even ones released again (cached,
  // unheld), the odd ones still held.
  std::vector<KeyGrant> RegisterEach(TenantId tenant, Memory& mem) {
    std::vector<KeyGrant> grants;
    for (uint32_t i = 0; i < kKeys; ++i) {
      auto g = cache_->Register(tenant, mem.va() + i * kPage, kPage, hca::kAllAccess);
      EXPECT_TRUE(g.ok()) << g.status();
      if (!g.ok()) break;
      EXPECT_FALSE(g->hit);
      grants.push_back(*g);
    }
    for (size_t i = 0; i < grants.size(); i += 2) {
      EXPECT_TRUE(cache_->Release(tenant, grants[i].handle).ok());
    }
    return grants;
  }
};

TEST_F(BulkRevokeTest, DetachingMemoryRevokesEveryKeyOverItInBatches) {
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory mem(kKeys * kPage);
  const BackingId b = Attach(mem);
  const std::vector<KeyGrant> grants = RegisterEach(tenant_, mem);
  ASSERT_EQ(grants.size(), kKeys);
  for (const KeyGrant& g : grants) ASSERT_TRUE(PeerWrite(g.rkey, g.va, "before").ok());

  const uint64_t before = Doorbells();
  const uint64_t invalidated = cache_->stats().invalidations.value();
  ASSERT_TRUE(cache_->RemoveBacking(tenant_, b).ok());
  EXPECT_LE(Doorbells() - before, kMostDoorbells);
  EXPECT_EQ(cache_->stats().invalidations.value() - invalidated, kKeys);

  for (size_t i = 0; i < grants.size(); ++i) {
    EXPECT_FALSE(PeerWrite(grants[i].rkey, grants[i].va, "after").ok()) << "key " << i;
    if (i % 2 == 1) {  // held: revoked, its handle alive until released
      auto q = cache_->Query(tenant_, grants[i].handle);
      ASSERT_TRUE(q.ok()) << q.status();
      EXPECT_TRUE(q->revoked);
      EXPECT_TRUE(cache_->Release(tenant_, grants[i].handle).ok());
    }
  }
  EXPECT_EQ(UsageNow().live_registrations, 0u);
}

TEST_F(BulkRevokeTest, InvalidatingARegistrationRevokesItsWindowsInOneBatch) {
  ASSERT_NO_FATAL_FAILURE(Init());
  constexpr uint32_t kWindows = 100;
  Memory mem(kWindows * kPage);
  Attach(mem);
  auto parent = cache_->Register(tenant_, mem.va(), mem.size(), hca::kAllAccess);
  ASSERT_TRUE(parent.ok()) << parent.status();
  std::vector<KeyGrant> windows;
  for (uint32_t i = 0; i < kWindows; ++i) {
    auto w = cache_->CreateWindow(tenant_, parent->handle, i * kPage, kPage, hca::kAllAccess);
    ASSERT_TRUE(w.ok()) << w.status();
    windows.push_back(*w);
  }
  for (const KeyGrant& w : windows) ASSERT_TRUE(PeerWrite(w.rkey, w.va, "window").ok());

  const uint64_t before = Doorbells();
  ASSERT_TRUE(cache_->Invalidate(tenant_, parent->handle).ok());
  // The windows in batches, then the parent: a handful of doorbells, not one per window.
  EXPECT_LE(Doorbells() - before, kWindows / 16 + 1);
  EXPECT_FALSE(PeerWrite(parent->rkey, parent->va, "parent").ok());
  for (const KeyGrant& w : windows) {
    EXPECT_FALSE(PeerWrite(w.rkey, w.va, "window").ok());
    EXPECT_TRUE(cache_->Release(tenant_, w.handle).ok());
  }
  EXPECT_TRUE(cache_->Release(tenant_, parent->handle).ok());
  EXPECT_EQ(UsageNow().live_registrations, 0u);
}

TEST_F(BulkRevokeTest, ClosingATenantRevokesItsKeysInBatches) {
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory mem(kKeys * kPage);
  const TenantId other = OpenWith(mem);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<KeyGrant> grants = RegisterEach(other, mem);
  ASSERT_EQ(grants.size(), kKeys);
  // A window on a held registration: windows go first, in a batch of their own.
  ASSERT_TRUE(cache_->CreateWindow(other, grants[1].handle, 0, kPage, hca::kAllAccess).ok());

  const uint64_t before = Doorbells();
  const uint64_t invalidated = cache_->stats().invalidations.value();
  ASSERT_TRUE(cache_->CloseTenant(other).ok());
  EXPECT_LE(Doorbells() - before, kMostDoorbells + 1);
  EXPECT_EQ(cache_->stats().invalidations.value() - invalidated, kKeys + 1);
  EXPECT_FALSE(cache_->Usage(other).ok());
  // The fixture's tenant is untouched, and TearDown proves every key of both is gone.
  Memory mine(kPage);
  Attach(mine);
  auto g = cache_->Register(tenant_, mine.va(), kPage, hca::kAllAccess);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(PeerWrite(g->rkey, g->va, "still mine").ok());
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

// With the maintenance thread (as in regcached), a close returns once every key is refused; the
// pool's keys, the queues and the PD go afterwards on that thread, and the device budget gets
// every key back.
TEST_F(BulkRevokeTest, AClosedTenantsPoolIsDestroyedAfterTheCloseNotOnItsPath) {
  CacheOptions o = testing::TestCacheOptions();
  o.background_maintenance = true;
  ASSERT_NO_FATAL_FAILURE(Init(o));
  const int64_t keys_before = device_->stats().live_keys.value();
  Memory mem(kKeys * kPage);
  const TenantId other = OpenWith(mem);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<KeyGrant> grants = RegisterEach(other, mem);
  ASSERT_EQ(grants.size(), kKeys);

  ASSERT_TRUE(cache_->CloseTenant(other).ok());
  // Refused at once, every one: the reaper only destroys keys that already reach nothing.
  for (const KeyGrant& g : grants) EXPECT_FALSE(PeerWrite(g.rkey, g.va, "gone").ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((cache_->stats().tenants_reaping.value() != 0 ||
          device_->stats().live_keys.value() != keys_before) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(cache_->stats().tenants_reaping.value(), 0);
  EXPECT_EQ(device_->stats().live_keys.value(), keys_before) << "the pool's keys are destroyed";
  EXPECT_GE(cache_->stats().keys_destroyed.value(), kKeys);
}

}  // namespace
}  // namespace regcache::cache
