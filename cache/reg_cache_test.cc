// End-to-end tests of the registration cache against the software HCA: keys handed out by the
// cache are used by a simulated remote peer, so every claim is checked by real accesses.
#include "cache/reg_cache.h"

#include <cstring>
#include <string>

#include "base/test_util.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"
#include "hca/status.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

using ::regcache::cache::testing::CacheTest;
using ::regcache::cache::testing::Memory;

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

class RegCacheTest : public CacheTest {
 protected:
  void SetUp() override { Init(); }
};

TEST_F(RegCacheTest, PeerWriteThroughRkeyLandsInCallerMemory) {
  Memory mem(1 << 20);
  Attach(mem);
  auto g = cache_->Register(tenant_, mem.va() + 4096, 8192, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->lkey, g->rkey);
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va() + 4096 + 100, "hello regcache").ok());
  EXPECT_EQ(std::memcmp(mem.data() + 4096 + 100, "hello regcache", 14), 0);
  // The registration's range is enforced: one byte past the end is refused.
  absl::Status past = PeerWrite(g->rkey, mem.va() + 4096 + 8192 - 2, "xyz");
  EXPECT_THAT(past, StatusIs(absl::StatusCode::kPermissionDenied)) << past;
  ASSERT_TRUE(hca::ErrorOf(past).has_value());
  EXPECT_EQ(hca::ErrorOf(past)->syndrome, hca::Syndrome::kRemoteAccess);
  // The lkey works for local SGEs too.
  uint8_t buf[14];
  ASSERT_TRUE(peer_->LocalRead(g->lkey, mem.va() + 4096 + 100, absl::MakeSpan(buf)).ok());
  EXPECT_EQ(std::memcmp(buf, "hello regcache", 14), 0);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

TEST_F(RegCacheTest, HitReturnsTheLiveRegistrationAndCountsHolders) {
  Memory mem(1 << 20);
  Attach(mem);
  auto a = cache_->Register(tenant_, mem.va(), 65536, kRw);
  ASSERT_TRUE(a.ok());
  auto b = cache_->Register(tenant_, mem.va(), 65536, hca::kRemoteRead);  // fewer rights
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->hit);
  EXPECT_EQ(b->handle, a->handle);
  EXPECT_EQ(b->rkey, a->rkey);
  // A sub-range is covered by the wider registration.
  auto c = cache_->Register(tenant_, mem.va() + 4096, 100, hca::kRemoteWrite | hca::kLocalWrite);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->hit);
  EXPECT_EQ(c->handle, a->handle);
  auto info = cache_->Query(tenant_, a->handle);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->holders, 3u);
  EXPECT_EQ(info->key_state, KeyState::kActive);
  // More rights than the live registration has: a miss, a new key.
  auto d = cache_->Register(tenant_, mem.va(), 65536, kRw | hca::kRemoteAtomic);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->hit);
  EXPECT_NE(d->rkey, a->rkey);
  for (Handle h : {a->handle, b->handle, c->handle, d->handle}) {
    EXPECT_TRUE(cache_->Release(tenant_, h).ok());
  }
  EXPECT_EQ(cache_->stats().register_hits.value(), 2u);
  EXPECT_EQ(UsageNow().cached_unreferenced, 2u);
  auto list = cache_->List(tenant_);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  for (const RegistrationInfo& i : *list) {
    EXPECT_EQ(i.holders, 0u);
    EXPECT_EQ(i.key_state, KeyState::kActive);
  }
}

TEST_F(RegCacheTest, InvalidatedKeyRefusesThePeerAndIsNeverHitAgain) {
  Memory mem(1 << 16);
  Attach(mem);
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va(), "before").ok());
  ASSERT_TRUE(cache_->Invalidate(tenant_, g->handle).ok());
  absl::Status after = PeerWrite(g->rkey, mem.va(), "after!");
  EXPECT_THAT(after, StatusIs(absl::StatusCode::kPermissionDenied)) << after;
  EXPECT_EQ(hca::ErrorOf(after)->syndrome, hca::Syndrome::kRemoteAccess);
  EXPECT_EQ(std::memcmp(mem.data(), "before", 6), 0);
  // Holders see a revoked handle until they release it.
  auto info = cache_->Query(tenant_, g->handle);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->revoked);
  EXPECT_THAT(cache_->Invalidate(tenant_, g->handle),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  auto again = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->hit);
  EXPECT_NE(again->handle, g->handle);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
  EXPECT_THAT(cache_->Release(tenant_, g->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(cache_->Release(tenant_, again->handle).ok());
  EXPECT_EQ(cache_->stats().revoked_with_holders.value(), 1u);
  EXPECT_EQ(cache_->stats().releases_after_revoke.value(), 1u);
}

TEST_F(RegCacheTest, StaleRkeyFromBeforeReuseFailsOnItsVariant) {
  Memory mem(1 << 16);
  Attach(mem);
  // One key class of one key, no quarantine: the next registration must reuse the index.
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok());
  const hca::Key stale = g->rkey;
  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  ASSERT_TRUE(cache_->Invalidate(tenant_, g->handle).ok());
  cache_->Maintain();
  // Draw keys until the stale index comes back (FIFO: after the pool's other free keys).
  std::vector<KeyGrant> grants;
  hca::Key reused = 0;
  for (int i = 0; i < 16 && reused == 0; ++i) {
    auto n = cache_->Register(tenant_, mem.va() + 4096 * (i + 1), 64, kRw);
    ASSERT_TRUE(n.ok()) << n.status();
    grants.push_back(*n);
    if (hca::KeyIndex(n->rkey) == hca::KeyIndex(stale)) reused = n->rkey;
  }
  ASSERT_NE(reused, 0u) << "the index was not reused";
  EXPECT_EQ(hca::KeyVariant(reused), static_cast<uint8_t>(hca::KeyVariant(stale) + 1));
  const uint64_t target = grants.back().va;
  absl::Status s = PeerWrite(stale, target, "stale");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kPermissionDenied)) << s;
  EXPECT_TRUE(PeerWrite(reused, target, "fresh").ok());
  for (auto& n : grants) EXPECT_TRUE(cache_->Release(tenant_, n.handle).ok());
}

TEST_F(RegCacheTest, QuarantineHoldsAnIndexBackUntilTimeAndCountPass) {
  CacheOptions o = testing::TestCacheOptions();
  o.pool.capacity_classes = {4};
  o.pool.low_watermark = 0;
  o.pool.high_watermark = 1;  // keys are made one at a time
  o.pool.quarantine_time = absl::Hours(1);
  o.pool.quarantine_count = 0;
  cache_.reset();
  Init(o);
  Memory mem(1 << 16);
  Attach(mem);
  auto g = cache_->Register(tenant_, mem.va(), 64, kRw);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(cache_->Invalidate(tenant_, g->handle).ok());
  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  EXPECT_EQ(UsageNow().pool_quarantined, 1u);
  auto n = cache_->Register(tenant_, mem.va(), 64, kRw);
  ASSERT_TRUE(n.ok());
  EXPECT_NE(hca::KeyIndex(n->rkey), hca::KeyIndex(g->rkey)) << "reused inside quarantine";
  EXPECT_TRUE(cache_->Release(tenant_, n->handle).ok());
}

TEST_F(RegCacheTest, RangeAcrossTwoAdjacentBackingsUsesTwoEntries) {
  Memory mem(1 << 16);
  // Two attachments of one mapping: [0, 32K) and [32K, 64K).
  for (uint64_t off : {0u, 32768u}) {
    BackingSpec spec;
    spec.va = mem.va() + off;
    spec.local_addr = mem.data() + off;
    spec.length = 32768;
    ASSERT_TRUE(cache_->AddBacking(tenant_, spec).ok());
  }
  auto g = cache_->Register(tenant_, mem.va() + 30000, 6000, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  auto info = cache_->Query(tenant_, g->handle);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->klm_entries, 2u);
  std::string text(4000, 'k');
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va() + 31000, text).ok());  // crosses 32768
  EXPECT_EQ(std::string(reinterpret_cast<char*>(mem.data()) + 31000, 4000), text);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

TEST_F(RegCacheTest, WindowCannotReachOutsideItselfAndHasNarrowerRights) {
  Memory mem(1 << 16);
  Attach(mem);
  auto p = cache_->Register(tenant_, mem.va(), 16384, kRw);
  ASSERT_TRUE(p.ok());
  auto w = cache_->CreateWindow(tenant_, p->handle, 4096, 4096, kRw);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_NE(w->rkey, p->rkey);
  EXPECT_EQ(w->va, mem.va() + 4096);
  ASSERT_TRUE(PeerWrite(w->rkey, mem.va() + 4096 + 10, "inside").ok());
  EXPECT_EQ(std::memcmp(mem.data() + 4096 + 10, "inside", 6), 0);
  EXPECT_EQ(PeerWrite(w->rkey, mem.va() + 100, "before").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(PeerWrite(w->rkey, mem.va() + 8190, "across").code(),
            absl::StatusCode::kPermissionDenied);
  // A read-only window on the same parent.
  auto ro = cache_->CreateWindow(tenant_, p->handle, 0, 4096, hca::kRemoteRead);
  ASSERT_TRUE(ro.ok());
  EXPECT_THAT(PeerWrite(ro->rkey, mem.va(), "nope"), StatusIs(absl::StatusCode::kPermissionDenied));
  uint8_t buf[6];
  EXPECT_TRUE(peer_->Read(ro->rkey, mem.va() + 4096 + 10, absl::MakeSpan(buf)).code() ==
              absl::StatusCode::kPermissionDenied);  // outside the read-only window
  // Invalidating a window never touches its parent.
  ASSERT_TRUE(cache_->Invalidate(tenant_, w->handle).ok());
  EXPECT_EQ(PeerWrite(w->rkey, mem.va() + 4096, "gone").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(PeerWrite(p->rkey, mem.va() + 4096, "parent").ok());
  // Invalidating the parent takes its windows with it, first.
  ASSERT_TRUE(cache_->Invalidate(tenant_, p->handle).ok());
  EXPECT_THAT(PeerWrite(ro->rkey, mem.va(), "x"), StatusIs(absl::StatusCode::kPermissionDenied));
  auto ro_info = cache_->Query(tenant_, ro->handle);
  ASSERT_TRUE(ro_info.ok());
  EXPECT_TRUE(ro_info->revoked);
  for (Handle h : {w->handle, ro->handle, p->handle}) EXPECT_TRUE(cache_->Release(tenant_, h).ok());
  EXPECT_EQ(UsageNow().live_registrations, 0u);
}

TEST_F(RegCacheTest, ReleasingTheLastWindowHolderRetiresTheWindow) {
  Memory mem(1 << 16);
  Attach(mem);
  auto p = cache_->Register(tenant_, mem.va(), 8192, kRw);
  ASSERT_TRUE(p.ok());
  auto w = cache_->CreateWindow(tenant_, p->handle, 0, 4096, kRw);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(cache_->Query(tenant_, p->handle)->windows, 1u);
  ASSERT_TRUE(cache_->Release(tenant_, w->handle).ok());
  EXPECT_THAT(PeerWrite(w->rkey, mem.va(), "x"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(cache_->Query(tenant_, w->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache_->Query(tenant_, p->handle)->windows, 0u);
  EXPECT_TRUE(cache_->Release(tenant_, p->handle).ok());
}

TEST_F(RegCacheTest, LruEvictionUnderQuotaPressure) {
  ASSERT_NO_FATAL_FAILURE(ReplaceTenant(TenantOptions{.max_keys = 2}));
  Memory mem(1 << 16);
  Attach(mem);
  auto a = cache_->Register(tenant_, mem.va(), 64, kRw);
  auto b = cache_->Register(tenant_, mem.va() + 4096, 64, kRw);
  ASSERT_TRUE(a.ok() && b.ok());
  // Both held: the quota refuses a third.
  auto c = cache_->Register(tenant_, mem.va() + 8192, 64, kRw);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kResourceExhausted)) << c.status();
  EXPECT_EQ(cache_->stats().quota_refusals.value(), 1u);
  // Release both (a first: a is the least recently used) — the third evicts a.
  ASSERT_TRUE(cache_->Release(tenant_, a->handle).ok());
  ASSERT_TRUE(cache_->Release(tenant_, b->handle).ok());
  c = cache_->Register(tenant_, mem.va() + 8192, 64, kRw);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(cache_->stats().evictions.value(), 1u);
  EXPECT_THAT(cache_->Query(tenant_, a->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(PeerWrite(a->rkey, mem.va(), "evicted"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  auto b_again = cache_->Register(tenant_, mem.va() + 4096, 64, kRw);
  ASSERT_TRUE(b_again.ok());
  EXPECT_TRUE(b_again->hit);
  EXPECT_TRUE(cache_->Release(tenant_, b_again->handle).ok());
  EXPECT_TRUE(cache_->Release(tenant_, c->handle).ok());
}

TEST_F(RegCacheTest, PoolExhaustedIsAPreciseError) {
  CacheOptions o = testing::TestCacheOptions();
  o.pool.capacity_classes = {4};
  o.pool.max_keys_per_class = 2;
  o.pool.quarantine_time = absl::Hours(1);
  cache_.reset();
  Init(o);
  Memory mem(1 << 16);
  Attach(mem);
  auto a = cache_->Register(tenant_, mem.va(), 64, kRw);
  auto b = cache_->Register(tenant_, mem.va() + 64, 64, kRw);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = cache_->Register(tenant_, mem.va() + 128, 64, kRw);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(c.status().message().find("key pool exhausted"), absl::string_view::npos) << c.status();
  EXPECT_GE(cache_->stats().pool_exhausted.value(), 1u);
  for (Handle h : {a->handle, b->handle}) EXPECT_TRUE(cache_->Release(tenant_, h).ok());
}

TEST_F(RegCacheTest, InjectedUmrFailureFailsCleanlyAndTheKeyIsRecovered) {
  Memory mem(1 << 16);
  Attach(mem);
  const auto before = UsageNow();
  device_->FailNextUmrForTest(hca::Syndrome::kLocalProt);
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_FALSE(g.ok());
  ASSERT_TRUE(hca::ErrorOf(g.status()).has_value()) << g.status();
  EXPECT_EQ(hca::ErrorOf(g.status())->syndrome, hca::Syndrome::kLocalProt);
  EXPECT_EQ(cache_->stats().keys_recovered.value(), 1u);
  const auto after = UsageNow();
  EXPECT_EQ(after.live_registrations, 0u);
  EXPECT_EQ(after.pool_outstanding, 0u);  // quarantined or destroyed, never half-mapped in use
  EXPECT_EQ(after.pool_total, after.pool_free + after.pool_quarantined);
  EXPECT_EQ(before.live_registrations, after.live_registrations);
  // The next attempt works.
  auto ok = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(PeerWrite(ok->rkey, mem.va(), "works").ok());
  EXPECT_TRUE(cache_->Release(tenant_, ok->handle).ok());
}

TEST_F(RegCacheTest, BadInputGetsPreciseErrorsAndCountersBalance) {
  Memory mem(1 << 16);
  Attach(mem);
  auto p = cache_->Register(tenant_, mem.va(), 8192, kRw);
  ASSERT_TRUE(p.ok());
  auto other = cache_->OpenTenant(TenantOptions{});
  ASSERT_TRUE(other.ok());

  struct Case {
    const char* name;
    absl::StatusCode code;
    absl::Status status;
  };
  const uint64_t va = mem.va();
  std::vector<Case> cases = {
      {"zero length", absl::StatusCode::kInvalidArgument,
       cache_->Register(tenant_, va, 0, kRw).status()},
      {"va + len overflow", absl::StatusCode::kInvalidArgument,
       cache_->Register(tenant_, ~uint64_t{0} - 10, 100, kRw).status()},
      {"not covered", absl::StatusCode::kOutOfRange,
       cache_->Register(tenant_, va + (1 << 16) - 10, 100, kRw).status()},
      {"unknown access bits", absl::StatusCode::kInvalidArgument,
       cache_->Register(tenant_, va, 64, 1u << 9).status()},
      {"remote write without local write", absl::StatusCode::kInvalidArgument,
       cache_->Register(tenant_, va, 64, hca::kRemoteWrite).status()},
      {"window outside parent", absl::StatusCode::kInvalidArgument,
       cache_->CreateWindow(tenant_, p->handle, 8192, 1, kRw).status()},
      {"window wider than parent", absl::StatusCode::kInvalidArgument,
       cache_->CreateWindow(tenant_, p->handle, 4096, 8192, kRw).status()},
      {"window offset overflow", absl::StatusCode::kInvalidArgument,
       cache_->CreateWindow(tenant_, p->handle, ~uint64_t{0}, 2, kRw).status()},
      {"window rights wider than parent", absl::StatusCode::kInvalidArgument,
       cache_->CreateWindow(tenant_, p->handle, 0, 64, kRw | hca::kRemoteAtomic).status()},
      {"handle of another tenant (release)", absl::StatusCode::kNotFound,
       cache_->Release(*other, p->handle)},
      {"handle of another tenant (invalidate)", absl::StatusCode::kNotFound,
       cache_->Invalidate(*other, p->handle)},
      {"handle of another tenant (window)", absl::StatusCode::kNotFound,
       cache_->CreateWindow(*other, p->handle, 0, 64, kRw).status()},
      {"garbage handle", absl::StatusCode::kNotFound,
       cache_->Invalidate(tenant_, p->handle ^ 0xff00)},
      {"handle 0", absl::StatusCode::kInvalidArgument, cache_->Release(tenant_, 0)},
      {"unknown tenant", absl::StatusCode::kNotFound,
       cache_->Register(tenant_ + 7, va, 64, kRw).status()},
      {"overlapping memory", absl::StatusCode::kAlreadyExists,
       cache_->AddBacking(tenant_, BackingSpec{va + 4096, mem.data(), 4096}).status()},
      {"zero-length memory", absl::StatusCode::kInvalidArgument,
       cache_->AddBacking(tenant_, BackingSpec{va, mem.data(), 0}).status()},
  };
  for (const Case& c : cases) EXPECT_EQ(c.status.code(), c.code) << c.name << ": " << c.status;

  ASSERT_TRUE(cache_->Invalidate(tenant_, p->handle).ok());
  EXPECT_THAT(cache_->Invalidate(tenant_, p->handle),
              StatusIs(absl::StatusCode::kFailedPrecondition))
      << "double invalidate";
  EXPECT_EQ(cache_->CreateWindow(tenant_, p->handle, 0, 64, kRw).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "window on a revoked parent";
  EXPECT_TRUE(cache_->Release(tenant_, p->handle).ok());
  EXPECT_THAT(cache_->Release(tenant_, p->handle), StatusIs(absl::StatusCode::kNotFound))
      << "double release";
  EXPECT_TRUE(cache_->CloseTenant(*other).ok());

  // Every counter balances: nothing live, every key handed out came back.
  const TenantUsage u = UsageNow();
  EXPECT_EQ(u.live_registrations, 0u);
  EXPECT_EQ(u.revoked_held, 0u);
  EXPECT_EQ(u.pool_outstanding, 0u);
  EXPECT_EQ(u.backed_bytes, mem.size());
  EXPECT_EQ(cache_->stats().live_registrations.value(), 0);
}

TEST_F(RegCacheTest, RemovingMemoryInvalidatesTheRegistrationsOverIt) {
  Memory mem(1 << 16);
  BackingId id = Attach(mem);
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
  auto held = cache_->Register(tenant_, mem.va() + 8192, 4096, kRw);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(cache_->RemoveBacking(tenant_, id).ok());
  EXPECT_THAT(PeerWrite(g->rkey, mem.va(), "x"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(PeerWrite(held->rkey, mem.va() + 8192, "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(cache_->Query(tenant_, held->handle)->revoked);
  EXPECT_TRUE(cache_->Release(tenant_, held->handle).ok());
  EXPECT_EQ(UsageNow().backed_bytes, 0u);
  EXPECT_EQ(cache_->Register(tenant_, mem.va(), 64, kRw).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_THAT(cache_->RemoveBacking(tenant_, id), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RegCacheTest, TenantsAreIsolatedByProtectionDomain) {
  Memory mem(1 << 16);
  Attach(mem);
  auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok());
  auto other = cache_->OpenTenant(TenantOptions{});
  ASSERT_TRUE(other.ok());
  auto other_pd = cache_->Usage(*other)->pd;
  EXPECT_NE(other_pd.pdn, UsageNow().pd.pdn);
  auto other_peer = device_->CreatePeer(other_pd);
  ASSERT_TRUE(other_peer.ok());
  // A peer connected to the other tenant's PD cannot use this tenant's rkey.
  const uint8_t b = 1;
  EXPECT_EQ((*other_peer)->Write(g->rkey, mem.va(), absl::MakeConstSpan(&b, 1)).code(),
            absl::StatusCode::kPermissionDenied);
  other_peer->reset();
  EXPECT_TRUE(cache_->CloseTenant(*other).ok());
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

TEST_F(RegCacheTest, MemoryQuotaIsEnforced) {
  ASSERT_NO_FATAL_FAILURE(ReplaceTenant(TenantOptions{.max_backed_bytes = 1 << 16}));
  Memory a(1 << 16), b(4096);
  Attach(a);
  BackingSpec spec{b.va(), b.data(), b.size()};
  EXPECT_EQ(cache_->AddBacking(tenant_, spec).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(RegCacheTest, AttachedMemoriesAreCounted) {
  ASSERT_NO_FATAL_FAILURE(ReplaceTenant(TenantOptions{.max_attached = 2}));
  Memory a(4096), b(4096), c(4096);
  const BackingId first = Attach(a);
  Attach(b);
  const int64_t keys = device_->stats().live_keys.value();
  BackingSpec spec{c.va(), c.data(), c.size()};
  const absl::StatusOr<BackingId> third = cache_->AddBacking(tenant_, spec);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_NE(third.status().message().find("2 memories attached"), absl::string_view::npos)
      << third.status();
  EXPECT_EQ(device_->stats().live_keys.value(), keys) << "the refusal made no key";
  ASSERT_TRUE(cache_->RemoveBacking(tenant_, first).ok());
  EXPECT_TRUE(cache_->AddBacking(tenant_, spec).ok());
}

TEST_F(RegCacheTest, ClosingATenantRunsEveryKeyThroughTheLifecycle) {
  Memory mem(1 << 16);
  Attach(mem);
  auto held = cache_->Register(tenant_, mem.va(), 4096, kRw);
  auto cached = cache_->Register(tenant_, mem.va() + 4096, 4096, kRw);
  ASSERT_TRUE(held.ok() && cached.ok());
  ASSERT_TRUE(cache_->Release(tenant_, cached->handle).ok());
  auto w = cache_->CreateWindow(tenant_, held->handle, 0, 64, kRw);
  ASSERT_TRUE(w.ok());
  const uint64_t invalidations = cache_->stats().invalidations.value();
  peer_.reset();
  ASSERT_TRUE(cache_->CloseTenant(tenant_).ok());
  EXPECT_EQ(cache_->stats().invalidations.value(), invalidations + 3);
  // The keys are gone from the device altogether (the pool destroyed them after invalidation).
  for (hca::Key k : {held->rkey, cached->rkey, w->rkey}) {
    auto info = device_->QueryKey(k);
    EXPECT_TRUE(!info.ok() || info->free) << std::hex << k;
  }
  EXPECT_EQ(cache_->Register(tenant_, mem.va(), 64, kRw).status().code(),
            absl::StatusCode::kNotFound);
  // Reopen so TearDown has a tenant to close; device keys are checked there.
  auto t = cache_->OpenTenant(TenantOptions{});
  ASSERT_TRUE(t.ok());
  tenant_ = *t;
}

}  // namespace
}  // namespace regcache::cache
namespace regcache::cache {
namespace {

using ::regcache::cache::testing::Memory;
constexpr hca::AccessFlags kRwAll = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

class RegCacheLimitsTest : public testing::CacheTest {
 protected:
  void SetUp() override { Init(); }
};

// A range over more attachments than one map carries inline (52) maps by pointer with a key of
// the on-demand 1024-entry class; beyond the largest configured class it is refused.
TEST_F(RegCacheLimitsTest, LongLayoutsMapByPointerAndBeyondTheLargestClassAreRefused) {
  Memory mem(64 * 4096);
  for (int i = 0; i < 64; ++i) {  // 64 adjacent attachments of one page each
    BackingSpec spec{mem.va() + 4096 * i, mem.data() + 4096 * i, 4096};
    ASSERT_TRUE(cache_->AddBacking(tenant_, spec).ok());
  }
  auto fits = cache_->Register(tenant_, mem.va(), 48 * 4096, kRwAll);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(cache_->Query(tenant_, fits->handle)->klm_entries, 48u);
  EXPECT_TRUE(cache_->Release(tenant_, fits->handle).ok());
  auto longer = cache_->Register(tenant_, mem.va(), 64 * 4096, kRwAll);
  ASSERT_TRUE(longer.ok()) << longer.status();
  auto info = cache_->Query(tenant_, longer->handle);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->klm_entries, 64u);
  EXPECT_EQ(info->key_capacity, 1024u);
  EXPECT_TRUE(cache_->Release(tenant_, longer->handle).ok());
  EXPECT_EQ(UsageNow().pool_outstanding, UsageNow().live_registrations);

  // With 48 entries as the largest class, 49 attachments are refused, clearly.
  CacheOptions o = testing::TestCacheOptions();
  o.pool.capacity_classes = {4, 16, 48};
  auto small = RegCache::Create(device_.get(), o);
  ASSERT_TRUE(small.ok());
  auto t = (*small)->OpenTenant(TenantOptions{});
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 49; ++i) {
    BackingSpec spec{mem.va() + 4096 * i, mem.data() + 4096 * i, 4096};
    ASSERT_TRUE((*small)->AddBacking(*t, spec).ok());
  }
  auto too_many = (*small)->Register(*t, mem.va(), 49 * 4096, kRwAll);
  EXPECT_THAT(too_many, StatusIs(absl::StatusCode::kInvalidArgument)) << too_many.status();
  EXPECT_TRUE((*small)->CloseTenant(*t).ok());
}

TEST(RegCacheCreateTest, ClassesMustFitTheDevice) {
  auto device = hca::sim::NewSimDevice({});
  ASSERT_TRUE(device.ok());
  CacheOptions o = testing::TestCacheOptions();
  // Longer than one inline map is fine where maps travel by pointer; more than a key holds not.
  o.pool.capacity_classes = {4, 64};
  EXPECT_TRUE(RegCache::Create(device->get(), o).ok());
  o.pool.capacity_classes = {4, (*device)->capabilities().max_klm_entries + 1};
  auto c = RegCache::Create(device->get(), o);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(RegCache::FitClasses({4, 16, 48, 1024}, (*device)->capabilities()),
            (std::vector<uint32_t>{4, 16, 48, 1024}));
  hca::Capabilities inline_only = (*device)->capabilities();
  inline_only.umr_pointer_translation = false;
  EXPECT_EQ(RegCache::FitClasses({4, 16, 48, 1024}, inline_only),
            (std::vector<uint32_t>{4, 16, 48, 52}));
  o.pool.capacity_classes = {16, 4};
  EXPECT_THAT(RegCache::Create(device->get(), o), StatusIs(absl::StatusCode::kInvalidArgument));
}

// On a device whose UMRs may not change a key's A bit (umr_modify_atomic_disabled), pooled keys
// never carry remote atomics: a register asking for them is refused before any key is taken,
// naming the device's limit, and everything else registers as usual.
TEST(RegCacheDeviceLimitsTest, NoAtomicsWhereAUmrCannotGrantThem) {
  hca::sim::SimOptions so;
  so.umr_modify_atomic_disabled = true;
  auto device = hca::sim::NewSimDevice(so);
  ASSERT_TRUE(device.ok());
  auto c = RegCache::Create(device->get(), testing::TestCacheOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  auto t = (*c)->OpenTenant(TenantOptions{});
  ASSERT_TRUE(t.ok());
  Memory mem(1 << 16);
  ASSERT_TRUE((*c)->AddBacking(*t, BackingSpec{mem.va(), mem.data(), 1 << 16}).ok());
  auto refused = (*c)->Register(*t, mem.va(), 4096, hca::kAllAccess);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition)) << refused.status();
  EXPECT_NE(refused.status().message().find("umr_modify_atomic_disabled"), std::string::npos);
  auto g = (*c)->Register(*t, mem.va(), 4096, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  auto grown = (*c)->Reregister(*t, g->handle, mem.va(), 8192, hca::kAllAccess);
  EXPECT_THAT(grown, StatusIs(absl::StatusCode::kFailedPrecondition)) << grown.status();
  EXPECT_TRUE((*c)->CloseTenant(*t).ok());
}

}  // namespace
}  // namespace regcache::cache