// RegCache::Reregister against the software HCA: every path (unchanged, in place, narrowed,
// replaced) and every error, checked by a simulated peer using the keys the cache hands out.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/test_util.h"
#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"
#include "hca/status.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

using ::regcache::cache::testing::CacheTest;
using ::regcache::cache::testing::Memory;

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;
constexpr uint64_t kPage = 4096;

class ReregTest : public CacheTest {
 protected:
  void SetUp() override { Init(); }

  // A registration the test holds once.
  KeyGrant Reg(uint64_t va, uint64_t length, hca::AccessFlags access) {
    auto g = cache_->Register(tenant_, va, length, access);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : KeyGrant{};
  }
  RegistrationInfo Info(Handle h) {
    auto i = cache_->Query(tenant_, h);
    EXPECT_TRUE(i.ok()) << i.status();
    return i.ok() ? *i : RegistrationInfo{};
  }
  // The peer's write of one byte at `addr` through `rkey` is refused as a remote access error.
  void ExpectRefused(hca::Key rkey, uint64_t addr) {
    absl::Status s = PeerWrite(rkey, addr, "x");
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kPermissionDenied)) << s;
    ASSERT_TRUE(hca::ErrorOf(s).has_value());
    EXPECT_EQ(hca::ErrorOf(s)->syndrome, hca::Syndrome::kRemoteAccess);
  }
};

TEST_F(ReregTest, GrowInPlaceKeepsTheRkeyAndThePeerReachesTheNewBytes) {
  Memory mem(16 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va() + 4 * kPage, kPage, kRw);
  ExpectRefused(g.rkey, mem.va() + 2 * kPage);
  ExpectRefused(g.rkey, mem.va() + 6 * kPage);
  const uint64_t umrs = device_->stats().umrs_executed.value();

  auto r = cache_->Reregister(tenant_, g.handle, mem.va() + 2 * kPage, 6 * kPage, kRw);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->same_key);
  EXPECT_EQ(r->handle, g.handle);
  EXPECT_EQ(r->rkey, g.rkey);
  EXPECT_EQ(r->va, mem.va() + 2 * kPage);
  EXPECT_EQ(r->length, 6 * kPage);
  EXPECT_EQ(device_->stats().umrs_executed.value(), umrs + 1);  // one UMR, nothing else
  // The same rkey now reaches both new ends, and still refuses what lies outside.
  ASSERT_TRUE(PeerWrite(g.rkey, mem.va() + 2 * kPage, "low").ok());
  ASSERT_TRUE(PeerWrite(g.rkey, mem.va() + 8 * kPage - 4, "high").ok());
  EXPECT_EQ(std::memcmp(mem.data() + 2 * kPage, "low", 3), 0);
  EXPECT_EQ(std::memcmp(mem.data() + 8 * kPage - 4, "high", 4), 0);
  ExpectRefused(g.rkey, mem.va() + 8 * kPage);
  const RegistrationInfo info = Info(g.handle);
  EXPECT_EQ(info.holders, 1u);
  EXPECT_EQ(info.va, mem.va() + 2 * kPage);
  EXPECT_EQ(info.key_state, KeyState::kActive);
  // Re-indexed: the new exact range and the old sub-range both hit it.
  for (auto [va, len] :
       {std::pair{mem.va() + 2 * kPage, 6 * kPage}, {mem.va() + 4 * kPage, kPage}}) {
    const KeyGrant h = Reg(va, len, kRw);
    EXPECT_TRUE(h.hit);
    EXPECT_EQ(h.handle, g.handle);
    EXPECT_TRUE(cache_->Release(tenant_, h.handle).ok());
  }
  EXPECT_EQ(cache_->stats().reregisters_in_place.value(), 1u);
  EXPECT_EQ(UsageNow().live_registrations, 1u);
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
  EXPECT_EQ(UsageNow().cached_unreferenced, 1u);
}

TEST_F(ReregTest, AddingRightsInPlaceLetsThePeerWrite) {
  Memory mem(4 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va(), kPage, hca::kRemoteRead);
  ExpectRefused(g.rkey, mem.va());
  auto r = cache_->Reregister(tenant_, g.handle, mem.va(), kPage, kRw | hca::kRemoteAtomic);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->same_key);
  EXPECT_EQ(r->rkey, g.rkey);
  EXPECT_EQ(r->access, kRw | hca::kRemoteAtomic | hca::kLocalRead);
  ASSERT_TRUE(PeerWrite(g.rkey, mem.va() + 10, "written").ok());
  EXPECT_EQ(std::memcmp(mem.data() + 10, "written", 7), 0);
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
}

TEST_F(ReregTest, UnchangedIsANoOp) {
  Memory mem(4 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va(), kPage, kRw);
  const uint64_t umrs = device_->stats().umrs_executed.value();
  auto r = cache_->Reregister(tenant_, g.handle, mem.va(), kPage, kRw);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->same_key);
  EXPECT_EQ(r->handle, g.handle);
  EXPECT_EQ(device_->stats().umrs_executed.value(), umrs);
  EXPECT_EQ(Info(g.handle).holders, 1u);
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
}

// The caller learns which handle the call revokes from the call itself, before the key refuses
// anything, and only then: narrowed yes; in place, unchanged and replaced no.
TEST_F(ReregTest, TheRevokingHookNamesExactlyTheHandleAboutToBeRevoked) {
  Memory mem(16 * kPage);
  Attach(mem);
  std::vector<Handle> revoked;
  std::vector<bool> key_still_worked;  // at the moment of the call
  hca::Key rkey = 0;
  auto hook = [&](Handle h) {
    revoked.push_back(h);
    key_still_worked.push_back(PeerWrite(rkey, mem.va(), "x").ok());
  };
  // In place (grows, the only holder): nothing revoked.
  const KeyGrant g = Reg(mem.va(), kPage, kRw);
  rkey = g.rkey;
  auto grown = cache_->Reregister(tenant_, g.handle, mem.va(), 2 * kPage, kRw, hook);
  ASSERT_TRUE(grown.ok()) << grown.status();
  ASSERT_TRUE(grown->same_key);
  // Unchanged: nothing revoked.
  ASSERT_TRUE(cache_->Reregister(tenant_, g.handle, mem.va(), 2 * kPage, kRw, hook).ok());
  EXPECT_TRUE(revoked.empty());
  // Replaced (another holder): nothing revoked, the other holder keeps the key.
  const KeyGrant twice = Reg(mem.va(), 2 * kPage, kRw);
  ASSERT_EQ(twice.handle, g.handle);
  auto replaced = cache_->Reregister(tenant_, g.handle, mem.va(), kPage, kRw, hook);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_TRUE(revoked.empty());
  ASSERT_TRUE(cache_->Release(tenant_, replaced->handle).ok());
  // Narrowed (the only holder again, fewer rights): the hook names it while its key still works.
  auto narrowed =
      cache_->Reregister(tenant_, g.handle, mem.va(), 2 * kPage, hca::kRemoteRead, hook);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_FALSE(narrowed->same_key);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0], g.handle);
  EXPECT_TRUE(key_still_worked[0]) << "the hook ran after the key was revoked";
  ExpectRefused(g.rkey, mem.va());
  EXPECT_TRUE(cache_->Release(tenant_, narrowed->handle).ok());
}

TEST_F(ReregTest, NarrowingGoesThroughTheLifecycleAndTheOldRkeyFails) {
  Memory mem(8 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va(), 4 * kPage, kRw);
  ASSERT_TRUE(PeerWrite(g.rkey, mem.va() + 3 * kPage, "old").ok());
  // Fewer bytes: a new key; the old one refuses even the bytes both cover.
  auto r = cache_->Reregister(tenant_, g.handle, mem.va(), 2 * kPage, kRw);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->same_key);
  EXPECT_NE(r->handle, g.handle);
  EXPECT_NE(r->rkey, g.rkey);
  ExpectRefused(g.rkey, mem.va());
  EXPECT_THAT(cache_->Query(tenant_, g.handle), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_TRUE(PeerWrite(r->rkey, mem.va(), "new").ok());
  ExpectRefused(r->rkey, mem.va() + 3 * kPage);
  EXPECT_EQ(cache_->stats().invalidations.value(), 1u);
  // Fewer rights: again a new key, and the peer may no longer write through either.
  auto ro = cache_->Reregister(tenant_, r->handle, mem.va(), 2 * kPage, hca::kRemoteRead);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_FALSE(ro->same_key);
  ExpectRefused(ro->rkey, mem.va());
  ExpectRefused(r->rkey, mem.va());
  uint8_t buf[3];
  ASSERT_TRUE(peer_->Read(ro->rkey, mem.va(), absl::MakeSpan(buf)).ok());
  EXPECT_EQ(std::memcmp(buf, "new", 3), 0);
  EXPECT_EQ(cache_->stats().reregisters_replaced.value(), 2u);
  EXPECT_EQ(cache_->stats().reregisters_in_place.value(), 0u);
  EXPECT_EQ(UsageNow().live_registrations, 1u);
  EXPECT_EQ(UsageNow().revoked_held, 0u);
  EXPECT_TRUE(cache_->Release(tenant_, ro->handle).ok());
}

TEST_F(ReregTest, ASharedRegistrationIsNeverChangedUnderItsOtherHolder) {
  Memory mem(8 * kPage);
  Attach(mem);
  const KeyGrant mine = Reg(mem.va() + kPage, kPage, kRw);
  const KeyGrant theirs = Reg(mem.va() + kPage, kPage, kRw);
  ASSERT_EQ(theirs.handle, mine.handle);
  // Grow: a new registration for me; theirs keeps its range exactly.
  auto grown = cache_->Reregister(tenant_, mine.handle, mem.va(), 4 * kPage, kRw);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_FALSE(grown->same_key);
  EXPECT_NE(grown->rkey, mine.rkey);
  EXPECT_TRUE(PeerWrite(grown->rkey, mem.va(), "grown").ok());
  EXPECT_TRUE(PeerWrite(theirs.rkey, mem.va() + kPage, "theirs").ok());
  ExpectRefused(theirs.rkey, mem.va());
  RegistrationInfo info = Info(theirs.handle);
  EXPECT_EQ(info.holders, 1u);
  EXPECT_EQ(info.va, mem.va() + kPage);
  EXPECT_EQ(info.length, kPage);
  // A second holder joins the new one; narrowing it now must not revoke their key either:
  // the narrower request is served by the registration both hold (a hit, the same key).
  const KeyGrant joined = Reg(mem.va(), 4 * kPage, kRw);
  ASSERT_EQ(joined.handle, grown->handle);
  auto narrowed = cache_->Reregister(tenant_, grown->handle, mem.va(), kPage, hca::kRemoteRead);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_TRUE(narrowed->hit);
  EXPECT_TRUE(narrowed->same_key);
  EXPECT_EQ(narrowed->handle, joined.handle);
  EXPECT_TRUE(PeerWrite(joined.rkey, mem.va() + 3 * kPage, "still").ok());
  EXPECT_EQ(Info(joined.handle).holders, 2u);
  EXPECT_EQ(Info(joined.handle).length, 4 * kPage);
  EXPECT_EQ(cache_->stats().invalidations.value(), 0u);
  // A sub-range with the same rights hits the registration the caller already holds.
  const KeyGrant twice = Reg(mem.va() + kPage, kPage, kRw);
  auto sub = cache_->Reregister(tenant_, twice.handle, mem.va() + kPage, 16, hca::kRemoteRead);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(sub->hit);
  EXPECT_TRUE(sub->same_key);
  EXPECT_EQ(sub->handle, theirs.handle);
  EXPECT_EQ(Info(theirs.handle).holders, 2u);
  for (Handle h : {theirs.handle, sub->handle, joined.handle, narrowed->handle}) {
    EXPECT_TRUE(cache_->Release(tenant_, h).ok());
  }
}

TEST_F(ReregTest, WindowsKeepTheirParentAndAWindowIsReplaced) {
  Memory mem(8 * kPage);
  Attach(mem);
  const KeyGrant parent = Reg(mem.va(), 2 * kPage, kRw);
  auto w = cache_->CreateWindow(tenant_, parent.handle, kPage, 100, hca::kRemoteRead);
  ASSERT_TRUE(w.ok()) << w.status();
  // The parent has a window: it is replaced, and the window still reaches its bytes.
  auto grown = cache_->Reregister(tenant_, parent.handle, mem.va(), 4 * kPage, kRw);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_FALSE(grown->same_key);
  uint8_t buf[4];
  EXPECT_TRUE(peer_->Read(w->rkey, mem.va() + kPage, absl::MakeSpan(buf)).ok());
  EXPECT_TRUE(PeerWrite(parent.rkey, mem.va(), "parent").ok());  // held by its window
  EXPECT_EQ(Info(parent.handle).windows, 1u);
  // A window is re-registered as a registration; its last release retires it.
  auto from_window = cache_->Reregister(tenant_, w->handle, mem.va() + kPage, kPage, kRw);
  ASSERT_TRUE(from_window.ok()) << from_window.status();
  EXPECT_FALSE(from_window->same_key);
  EXPECT_THAT(cache_->Query(tenant_, w->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Info(parent.handle).windows, 0u);
  EXPECT_TRUE(cache_->Release(tenant_, from_window->handle).ok());
  EXPECT_TRUE(cache_->Release(tenant_, grown->handle).ok());
}

TEST_F(ReregTest, BadRequestsChangeNothing) {
  Memory mem(4 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va(), kPage, kRw);
  const auto code = [&](Handle h, uint64_t va, uint64_t len, hca::AccessFlags a) {
    return cache_->Reregister(tenant_, h, va, len, a).status().code();
  };
  using absl::StatusCode;
  EXPECT_EQ(code(0, mem.va(), kPage, kRw), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(g.handle, mem.va(), 0, kRw), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(g.handle, ~uint64_t{0} - 10, 100, kRw), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(g.handle, mem.va(), kPage, 1u << 30), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(g.handle, mem.va(), 8 * kPage, kRw), StatusCode::kOutOfRange);
  EXPECT_EQ(code(g.handle, mem.va() - kPage, 2 * kPage, kRw), StatusCode::kOutOfRange);
  EXPECT_EQ(code(g.handle ^ 0x1000000, mem.va(), kPage, kRw), StatusCode::kNotFound);
  EXPECT_EQ(code(g.handle + (uint64_t{1} << 48), mem.va(), kPage, kRw), StatusCode::kNotFound);
  EXPECT_EQ(cache_->Reregister(tenant_ + 7, g.handle, mem.va(), kPage, kRw).status().code(),
            StatusCode::kNotFound);
  // After all that the caller's hold and key are as they were.
  const RegistrationInfo info = Info(g.handle);
  EXPECT_EQ(info.holders, 1u);
  EXPECT_EQ(info.length, kPage);
  EXPECT_TRUE(PeerWrite(g.rkey, mem.va(), "intact").ok());
  ExpectRefused(g.rkey, mem.va() + kPage);
  // Revoked: refused, still held until released. Released: no holder left to trade.
  ASSERT_TRUE(cache_->Invalidate(tenant_, g.handle).ok());
  EXPECT_EQ(code(g.handle, mem.va(), 2 * kPage, kRw), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Info(g.handle).revoked);
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
  const KeyGrant cached = Reg(mem.va(), kPage, kRw);
  ASSERT_TRUE(cache_->Release(tenant_, cached.handle).ok());
  EXPECT_EQ(code(cached.handle, mem.va(), 2 * kPage, kRw), StatusCode::kFailedPrecondition);
  EXPECT_EQ(UsageNow().cached_unreferenced, 1u);
}

TEST_F(ReregTest, AFailedInPlaceUmrRevokesTheKeyAndTheCallerStillHoldsIt) {
  Memory mem(4 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va(), kPage, kRw);
  device_->FailNextUmrForTest(hca::Syndrome::kLocalQpOp);
  auto r = cache_->Reregister(tenant_, g.handle, mem.va(), 2 * kPage, kRw);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(hca::ErrorOf(r.status()).has_value()) << r.status();
  const RegistrationInfo info = Info(g.handle);
  EXPECT_TRUE(info.revoked);
  EXPECT_EQ(info.holders, 1u);
  ExpectRefused(g.rkey, mem.va());
  EXPECT_EQ(UsageNow().live_registrations, 0u);
  EXPECT_EQ(UsageNow().revoked_held, 1u);
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
  EXPECT_EQ(UsageNow().revoked_held, 0u);
  // The memory's references went with it: it detaches at once.
  auto again = cache_->Register(tenant_, mem.va(), 2 * kPage, kRw);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->hit);
  EXPECT_TRUE(cache_->Release(tenant_, again->handle).ok());
}

// One key per class and a long quarantine: a second key cannot be had.
class ReregOneKeyTest : public ReregTest {
 protected:
  void SetUp() override {
    CacheOptions o = testing::TestCacheOptions();
    o.pool.capacity_classes = {4};
    o.pool.max_keys_per_class = 1;
    o.pool.low_watermark = 0;
    o.pool.high_watermark = 1;
    o.pool.quarantine_time = absl::Hours(1);
    Init(o);
  }
};

TEST_F(ReregOneKeyTest, ReplacingWithoutAKeyLeavesTheOldHoldsAlone) {
  Memory mem(4 * kPage);
  Attach(mem);
  const KeyGrant a = Reg(mem.va(), kPage, kRw);
  const KeyGrant b = Reg(mem.va(), kPage, kRw);
  auto r = cache_->Reregister(tenant_, a.handle, mem.va(), 2 * kPage, kRw);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kResourceExhausted)) << r.status();
  EXPECT_EQ(Info(a.handle).holders, 2u);
  EXPECT_TRUE(PeerWrite(a.rkey, mem.va(), "kept").ok());
  EXPECT_TRUE(cache_->Release(tenant_, a.handle).ok());
  EXPECT_TRUE(cache_->Release(tenant_, b.handle).ok());
}

TEST_F(ReregOneKeyTest, NarrowingWithoutAKeyLeavesTheCallerTheRevokedHandle) {
  Memory mem(4 * kPage);
  Attach(mem);
  const KeyGrant g = Reg(mem.va(), 2 * kPage, kRw);
  auto r = cache_->Reregister(tenant_, g.handle, mem.va(), kPage, kRw);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kResourceExhausted)) << r.status();
  EXPECT_TRUE(Info(g.handle).revoked);
  ExpectRefused(g.rkey, mem.va());
  EXPECT_TRUE(cache_->Release(tenant_, g.handle).ok());
  EXPECT_EQ(UsageNow().live_registrations, 0u);
  EXPECT_EQ(UsageNow().pool_quarantined, 1u);
}

// Key classes of 1 and 4 entries: a range over two attachments does not fit a 1-entry key.
class ReregSmallClassTest : public ReregTest {
 protected:
  void SetUp() override {
    CacheOptions o = testing::TestCacheOptions();
    o.pool.capacity_classes = {1, 4};
    Init(o);
  }
};

TEST_F(ReregSmallClassTest, AGrowTheKeyCannotHoldIsReplaced) {
  Memory lo(4 * kPage), hi(4 * kPage);
  Attach(lo);
  BackingSpec spec;  // `hi` seen by the tenant right after `lo`
  spec.va = lo.va() + lo.size();
  spec.local_addr = hi.data();
  spec.length = hi.size();
  ASSERT_TRUE(cache_->AddBacking(tenant_, spec).ok());
  const KeyGrant g = Reg(lo.va(), kPage, kRw);
  ASSERT_EQ(Info(g.handle).key_capacity, 1u);
  auto r = cache_->Reregister(tenant_, g.handle, lo.va(), 6 * kPage, kRw);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->same_key);
  EXPECT_EQ(Info(r->handle).klm_entries, 2u);
  ASSERT_TRUE(PeerWrite(r->rkey, lo.va() + 5 * kPage, "far").ok());
  EXPECT_EQ(std::memcmp(hi.data() + kPage, "far", 3), 0);
  // Nothing was taken away, so the old registration stays cached (unheld) and working.
  EXPECT_EQ(Info(g.handle).holders, 0u);
  EXPECT_TRUE(PeerWrite(g.rkey, lo.va(), "old").ok());
  EXPECT_TRUE(cache_->Release(tenant_, r->handle).ok());
}

// Hits on the old range race the owner's re-registrations; every hit gets a key that covers
// what it asked (or one revoked by the owner's Invalidate), and the holder counts balance.
TEST_F(ReregTest, HitsRacingInPlaceRewritesAlwaysGetACoveringKey) {
  Memory mem(64 * kPage);
  Attach(mem);
  const uint64_t old_va = mem.va() + 32 * kPage;
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread hitter([&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!stop.load() && absl::Now() < deadline) {
      auto h = cache_->Register(tenant_, old_va, kPage, kRw);
      if (!h.ok()) continue;
      const bool covers = h->va <= old_va && h->va + h->length >= old_va + kPage;
      if (!covers || (!PeerWrite(h->rkey, old_va + kPage - 1, "h").ok() &&
                      !cache_->Query(tenant_, h->handle)->revoked)) {
        bad++;
      }
      if (!cache_->Release(tenant_, h->handle).ok()) bad++;
    }
  });
  int in_place = 0;
  for (int i = 0; i < 300; ++i) {
    const KeyGrant g = Reg(old_va, kPage, kRw);
    auto r = cache_->Reregister(tenant_, g.handle, old_va - kPage, 3 * kPage, kRw);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    in_place += r->same_key ? 1 : 0;
    EXPECT_TRUE(PeerWrite(r->rkey, old_va - kPage, "r").ok());
    EXPECT_TRUE(cache_->Release(tenant_, r->handle).ok());
    (void)cache_->Invalidate(tenant_, r->handle);  // the next round starts with a miss
  }
  stop = true;
  hitter.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(cache_->stats().reregisters_in_place.value(), static_cast<uint64_t>(in_place));
  auto list = cache_->List(tenant_);
  ASSERT_TRUE(list.ok());
  for (const RegistrationInfo& i : *list) {
    if (!i.revoked) {
      EXPECT_EQ(i.holders, 0u) << i.handle;
    }
  }
}

}  // namespace
}  // namespace regcache::cache
