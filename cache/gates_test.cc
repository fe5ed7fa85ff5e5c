// Gates (cache/internal/gates.h): every layout reaches memory through its memory's gate; a close
// shuts the gates, one UMR per attached memory, and that alone refuses every key of the tenant
// while the keys are still on the device; a gate that cannot be shut falls back to invalidating
// every key; detach and reaping destroy the gates again; devices without the indirection for a
// gate, and CacheOptions::gate_backings = false, keep the one-UMR-per-key close.
#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "cache/internal/test_util.h"
#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

namespace regcache::cache {
namespace {

using ::regcache::cache::internal::HookPoint;
using ::regcache::cache::testing::CacheTest;
using ::regcache::cache::testing::Memory;
using ::regcache::cache::testing::Stall;

constexpr uint64_t kPage = 4096;
constexpr uint32_t kKeys = 64;

class GatesTest : public CacheTest {
 protected:
  uint64_t UmrsPosted() const { return cache_->stats().umr_posted.value(); }
  uint64_t RevokedByGates() const { return cache_->stats().revoked_by_gates.value(); }

  // kKeys one-page registrations over `mem` (the even ones released again, cached), and one
  // window on the first held one; every key written through by the peer.
  std::vector<KeyGrant> RegisterEach(Memory& mem) {
    std::vector<KeyGrant> grants;
    for (uint32_t i = 0; i < kKeys; ++i) {
      auto g = cache_->Register(tenant_, mem.va() + i * kPage, kPage, hca::kAllAccess);
      EXPECT_TRUE(g.ok()) << g.status();
      if (!g.ok()) return grants;
      grants.push_back(*g);
    }
    auto w = cache_->CreateWindow(tenant_, grants[1].handle, 0, kPage / 2, hca::kAllAccess);
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) grants.push_back(*w);
    for (uint32_t i = 0; i < kKeys; i += 2) {
      EXPECT_TRUE(cache_->Release(tenant_, grants[i].handle).ok());
    }
    for (const KeyGrant& g : grants) EXPECT_TRUE(PeerWrite(g.rkey, g.va, "live").ok());
    return grants;
  }

  void AwaitReaped() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while ((cache_->stats().tenants_reaping.value() != 0 ||
            device_->stats().live_keys.value() != baseline_keys_) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
};

TEST_F(GatesTest, LayoutsNameTheGateAndTheGateNamesTheMemory) {
  ASSERT_NO_FATAL_FAILURE(Init());
  const int64_t keys = device_->stats().live_keys.value();
  Memory mem(4 * kPage);
  const BackingId b = Attach(mem);
  EXPECT_EQ(cache_->stats().gates.value(), 1);
  EXPECT_EQ(device_->stats().live_keys.value(), keys + 2) << "the registration and its gate";
  auto g = cache_->Register(tenant_, mem.va() + kPage, kPage, hca::kAllAccess);
  ASSERT_TRUE(g.ok()) << g.status();
  auto info = device_->QueryKey(g->rkey);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->klm.size() > 0, true);
  const hca::Key gate = info->klm[0].key;
  auto gate_info = device_->QueryKey(gate);
  ASSERT_TRUE(gate_info.ok()) << gate_info.status();
  EXPECT_FALSE(gate_info->free);
  EXPECT_EQ(gate_info->start_addr, mem.va());
  EXPECT_EQ(gate_info->length, mem.size());
  ASSERT_FALSE(gate_info->klm.empty());
  EXPECT_NE(gate_info->klm[0].key, gate) << "the gate names the memory's registration";
  EXPECT_EQ(gate_info->klm[0].addr, mem.va());
  ASSERT_TRUE(PeerWrite(g->rkey, g->va, "through the gate").ok());

  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  ASSERT_TRUE(cache_->RemoveBacking(tenant_, b).ok());
  EXPECT_EQ(cache_->stats().gates.value(), 0);
  EXPECT_FALSE(device_->QueryKey(gate).ok()) << "detach destroys the gate";
}

TEST_F(GatesTest, ACloseShutsTheGatesAndThatAloneRefusesEveryKeyStillOnTheDevice) {
  CacheOptions o = testing::TestCacheOptions();
  o.background_maintenance = true;  // the reaper runs after the close, held back here
  ASSERT_NO_FATAL_FAILURE(Init(o));
  Memory mem(kKeys * kPage);
  Attach(mem);
  const std::vector<KeyGrant> grants = RegisterEach(mem);
  ASSERT_EQ(grants.size(), kKeys + 1);

  Stall stall(HookPoint::kReaping);  // the reaper, held at its first step
  stall.ArmAny();
  const uint64_t umrs = UmrsPosted();
  const uint64_t revoked = RevokedByGates();
  ASSERT_TRUE(cache_->CloseTenant(tenant_).ok());
  EXPECT_EQ(UmrsPosted() - umrs, 1u) << "one UMR: the one attached memory's gate";
  EXPECT_EQ(RevokedByGates() - revoked, grants.size());
  EXPECT_EQ(cache_->stats().live_registrations.value(), 0);
#ifndef NDEBUG
  ASSERT_TRUE(stall.WaitReached());
  // Nothing destroyed yet: every key is still mapped on the device, and refused all the same.
  for (const KeyGrant& g : grants) {
    auto info = device_->QueryKey(g.rkey);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_FALSE(info->free) << "not invalidated one by one";
    const absl::Status s = PeerWrite(g.rkey, g.va, "after the close");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find("key is free"), absl::string_view::npos) << s;
  }
#endif
  peer_.reset();  // the PD goes with the reaper
  stall.Resume();
  AwaitReaped();
  EXPECT_EQ(cache_->stats().tenants_reaping.value(), 0);
  EXPECT_EQ(device_->stats().live_keys.value(), baseline_keys_) << "keys and gates destroyed";
  EXPECT_EQ(cache_->stats().gates.value(), 0);
  OpenTestTenant();  // the close was the test's: TearDown closes a fresh tenant
}

TEST_F(GatesTest, AGateThatCannotBeShutFallsBackToInvalidatingEveryKey) {
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory mem(kKeys * kPage);
  Attach(mem);
  const std::vector<KeyGrant> grants = RegisterEach(mem);
  ASSERT_EQ(grants.size(), kKeys + 1);

  device_->FailNextUmrForTest(hca::Syndrome::kLocalProt);  // the gate's invalidation
  const uint64_t umrs = UmrsPosted();
  const uint64_t revoked = RevokedByGates();
  const uint64_t invalidated = cache_->stats().invalidations.value();
  ASSERT_TRUE(cache_->CloseTenant(tenant_).ok());
  EXPECT_EQ(RevokedByGates(), revoked);
  EXPECT_EQ(cache_->stats().invalidations.value() - invalidated, grants.size());
  EXPECT_GE(UmrsPosted() - umrs, 1 + grants.size()) << "the gate's, then one per key";
  for (const KeyGrant& g : grants) EXPECT_FALSE(PeerWrite(g.rkey, g.va, "after").ok());
  EXPECT_EQ(cache_->stats().live_registrations.value(), 0);
  EXPECT_EQ(device_->stats().live_keys.value(), baseline_keys_);
  OpenTestTenant();  // the close was the test's: TearDown closes a fresh tenant
}

TEST_F(GatesTest, WithoutGatesACloseInvalidatesEveryKey) {
  CacheOptions o = testing::TestCacheOptions();
  o.gate_backings = false;
  ASSERT_NO_FATAL_FAILURE(Init(o));
  Memory mem(kKeys * kPage);
  Attach(mem);
  EXPECT_EQ(cache_->stats().gates.value(), 0);
  const std::vector<KeyGrant> grants = RegisterEach(mem);
  ASSERT_EQ(grants.size(), kKeys + 1);

  const uint64_t umrs = UmrsPosted();
  ASSERT_TRUE(cache_->CloseTenant(tenant_).ok());
  EXPECT_EQ(UmrsPosted() - umrs, grants.size());
  EXPECT_EQ(RevokedByGates(), 0u);
  for (const KeyGrant& g : grants) EXPECT_FALSE(PeerWrite(g.rkey, g.va, "after").ok());
  EXPECT_EQ(device_->stats().live_keys.value(), baseline_keys_);
  OpenTestTenant();  // the close was the test's: TearDown closes a fresh tenant
}

TEST_F(GatesTest, NoGateWhereTheDeviceHasNoRoomForTheIndirection) {
  hca::sim::SimOptions sim;
  sim.max_indirection = 2;  // a window over a registration over memory, nothing more
  ASSERT_NO_FATAL_FAILURE(Init(testing::TestCacheOptions(), sim));
  Memory mem(4 * kPage);
  Attach(mem);
  EXPECT_EQ(cache_->stats().gates.value(), 0);
  auto g = cache_->Register(tenant_, mem.va(), 2 * kPage, hca::kAllAccess);
  ASSERT_TRUE(g.ok()) << g.status();
  auto w = cache_->CreateWindow(tenant_, g->handle, 0, kPage, hca::kAllAccess);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(PeerWrite(w->rkey, w->va, "two levels").ok());
  ASSERT_TRUE(cache_->Release(tenant_, w->handle).ok());
  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

}  // namespace
}  // namespace regcache::cache
