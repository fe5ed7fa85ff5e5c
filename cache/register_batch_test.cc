// RegCache::RegisterBatch: a batch's misses are mapped together (one doorbell for a batch that
// fits half a ring, not one per key); every key works once returned; hits, repeats and bad
// items are answered one by one; items over the tenant's quota evict as single misses do; a UMR
// that fails mid-batch fails no other item; nothing leaks;
// a miss whose memory is detached and attached anew between its layout and its bind maps the new
// memory, not a key that is gone.
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "cache/internal/test_util.h"
#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

namespace regcache::cache {
namespace {

using ::regcache::cache::internal::HookPoint;
using testing::CacheTest;
using testing::Memory;
using testing::Stall;

constexpr uint64_t kPage = 4096;

class RegisterBatchTest : public CacheTest {
 protected:
  uint64_t Doorbells() const { return cache_->stats().umr_batches.value(); }

  static std::vector<RegisterItem> Pages(const Memory& mem, uint32_t n) {
    std::vector<RegisterItem> items;
    for (uint32_t i = 0; i < n; ++i)
      items.push_back({mem.va() + i * kPage, kPage, hca::kAllAccess});
    return items;
  }

  void ExpectWorks(const KeyGrant& g) {
    EXPECT_TRUE(PeerWrite(g.rkey, g.va, "batched").ok());
    EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(g.va), "batched", 7), 0);
  }
};

TEST_F(RegisterBatchTest, MissesOfABatchShareOneDoorbell) {
  ASSERT_NO_FATAL_FAILURE(Init());
  constexpr uint32_t kKeys = 24;  // fits half of TestCacheOptions' 64-deep ring
  Memory mem(kKeys * kPage);
  Attach(mem);
  const uint64_t before = Doorbells();
  const uint64_t misses = cache_->stats().register_misses.value();
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_, Pages(mem, kKeys));
  ASSERT_EQ(got.size(), kKeys);
  EXPECT_EQ(Doorbells() - before, 1u);
  EXPECT_EQ(cache_->stats().register_misses.value() - misses, kKeys);
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    EXPECT_FALSE(got[i]->hit);
    EXPECT_EQ(got[i]->va, mem.va() + i * kPage);
    ExpectWorks(*got[i]);
  }
  // The same again: every item a hit, no UMR at all.
  const uint64_t after = Doorbells();
  std::vector<absl::StatusOr<KeyGrant>> again = cache_->RegisterBatch(tenant_, Pages(mem, kKeys));
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(again[i].ok()) << again[i].status();
    EXPECT_TRUE(again[i]->hit);
    EXPECT_EQ(again[i]->handle, got[i]->handle);
  }
  EXPECT_EQ(Doorbells(), after);
  for (uint32_t i = 0; i < kKeys; ++i) {
    EXPECT_TRUE(cache_->Release(tenant_, got[i]->handle).ok());
    EXPECT_TRUE(cache_->Release(tenant_, again[i]->handle).ok());
  }
}

TEST_F(RegisterBatchTest, LargeBatchesSpreadOverTheQueuesInHalfRings) {
  ASSERT_NO_FATAL_FAILURE(Init());
  constexpr uint32_t kKeys = 256;
  Memory mem(kKeys * kPage);
  Attach(mem);
  const uint64_t before = Doorbells();
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_, Pages(mem, kKeys));
  EXPECT_LE(Doorbells() - before, kKeys / 32 + 1);
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    ExpectWorks(*got[i]);
    EXPECT_TRUE(cache_->Release(tenant_, got[i]->handle).ok());
  }
  EXPECT_EQ(UsageNow().cached_unreferenced, kKeys);
}

TEST_F(RegisterBatchTest, BadItemsFailAloneAndRepeatsHitTheFirst) {
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory mem(4 * kPage);
  Attach(mem, hca::kLocalRead | hca::kLocalWrite | hca::kRemoteRead);
  std::vector<RegisterItem> items = {
      {mem.va(), kPage, hca::kLocalWrite},                              // 0: miss
      {mem.va(), 0, hca::kLocalWrite},                                  // 1: length 0
      {mem.va() + 64 * kPage, kPage, hca::kLocalWrite},                 // 2: not attached
      {mem.va(), kPage, hca::kLocalWrite},                              // 3: repeats 0
      {mem.va() + kPage, kPage, hca::kRemoteWrite | hca::kLocalWrite},  // 4: rights it lacks
      {mem.va() + kPage, kPage, 0x8000'0000u},                          // 5: unknown access bit
      {~uint64_t{0} - kPage, 2 * kPage, hca::kLocalWrite},              // 6: wraps
      {mem.va() + 2 * kPage, 2 * kPage, hca::kRemoteRead},              // 7: miss
  };
  const uint64_t before = Doorbells();
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_, items);
  ASSERT_EQ(got.size(), items.size());
  EXPECT_EQ(Doorbells() - before, 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[2].status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(got[3].ok()) << got[3].status();
  EXPECT_TRUE(got[3]->hit);
  EXPECT_EQ(got[3]->handle, got[0]->handle);
  EXPECT_EQ(got[4].status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(got[5].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[6].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(got[7].ok()) << got[7].status();
  EXPECT_FALSE(got[7]->hit);
  EXPECT_EQ(UsageNow().live_registrations, 2u);
  for (size_t i : {0, 3, 7}) EXPECT_TRUE(cache_->Release(tenant_, got[i]->handle).ok());
}

// A batch in strictly increasing order of (address, length, rights) cannot repeat an item and
// is not searched for repeats; any other order is. A repeat right after its first breaks the
// order; two ranges at one address with different lengths do not.
TEST_F(RegisterBatchTest, RepeatsAreFoundInAnyOrderAndDistinctRangesAtOneAddressAreNot) {
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory mem(4 * kPage);
  Attach(mem);
  constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite;
  const std::vector<RegisterItem> items = {
      {mem.va(), kPage, kRw},                  // 0: miss
      {mem.va(), 2 * kPage, kRw},              // 1: miss, same address, longer
      {mem.va() + kPage, kPage, kRw},          // 2: miss
      {mem.va() + kPage, kPage, kRw},          // 3: repeats 2, right after it
      {mem.va() + 2 * kPage, 2 * kPage, kRw},  // 4: miss
  };
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_, items);
  ASSERT_EQ(got.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i)
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
  EXPECT_TRUE(got[3]->hit);
  EXPECT_EQ(got[3]->handle, got[2]->handle);
  for (size_t i : {0, 1, 2, 4}) EXPECT_FALSE(got[i]->hit) << i;
  EXPECT_NE(got[0]->handle, got[1]->handle);
  EXPECT_EQ(got[1]->length, 2 * kPage);
  EXPECT_EQ(UsageNow().live_registrations, 4u);
  for (const auto& g : got) ExpectWorks(*g);
  for (const auto& g : got) EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

TEST_F(RegisterBatchTest, AUmrThatFailsMidBatchFailsNoOtherItem) {
  ASSERT_NO_FATAL_FAILURE(Init());
  constexpr uint32_t kKeys = 8;
  Memory mem(kKeys * kPage);
  Attach(mem);
  device_->FailNextUmrForTest(hca::Syndrome::kLocalProt);
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_, Pages(mem, kKeys));
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    ExpectWorks(*got[i]);
    EXPECT_TRUE(cache_->Release(tenant_, got[i]->handle).ok());
  }
  EXPECT_EQ(UsageNow().live_registrations, kKeys);
}

// Items a batch cannot get a key for at once (the tenant's quota is spent) are mapped one by
// one after the rest, evicting unheld registrations as a single miss would; only the items
// left without a key when nothing more may be evicted fail, and nothing leaks.
TEST_F(RegisterBatchTest, ItemsOverTheQuotaEvictWhatTheyMayAndOnlyTheRestFail) {
  ASSERT_NO_FATAL_FAILURE(Init());
  constexpr uint32_t kQuota = 8, kFirst = 6, kReleased = 3;
  ASSERT_NO_FATAL_FAILURE(ReplaceTenant(TenantOptions{.max_keys = kQuota}));
  Memory mem(2 * (kFirst + kQuota) * kPage);
  Attach(mem);
  const std::vector<RegisterItem> pages = Pages(mem, kFirst + kQuota);
  const std::vector<RegisterItem> first(pages.begin(), pages.begin() + kFirst);
  std::vector<absl::StatusOr<KeyGrant>> held = cache_->RegisterBatch(tenant_, first);
  for (uint32_t i = 0; i < kFirst; ++i) ASSERT_TRUE(held[i].ok()) << i << ": " << held[i].status();
  // Some released: cached, unheld, evictable.
  for (uint32_t i = 0; i < kReleased; ++i) {
    ASSERT_TRUE(cache_->Release(tenant_, held[i]->handle).ok());
  }
  // Of the next batch, kQuota - kFirst items get keys at once, kReleased more by evicting, and
  // the rest are refused.
  const uint64_t evictions = cache_->stats().evictions.value();
  const std::vector<RegisterItem> second(pages.begin() + kFirst, pages.end());
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_, second);
  ASSERT_EQ(got.size(), second.size());
  uint32_t ok = 0;
  for (uint32_t i = 0; i < second.size(); ++i) {
    if (got[i].ok()) {
      ++ok;
      EXPECT_FALSE(got[i]->hit);
      EXPECT_EQ(got[i]->va, second[i].va);
      ExpectWorks(*got[i]);
    } else {
      EXPECT_EQ(got[i].status().code(), absl::StatusCode::kResourceExhausted) << got[i].status();
    }
  }
  EXPECT_EQ(ok, kQuota - kFirst + kReleased);
  EXPECT_EQ(cache_->stats().evictions.value() - evictions, kReleased);
  // The held ones were not touched.
  for (uint32_t i = kReleased; i < kFirst; ++i) {
    ExpectWorks(*held[i]);
    EXPECT_TRUE(cache_->Release(tenant_, held[i]->handle).ok());
  }
  for (const auto& g : got) {
    if (g.ok()) {
      EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
    }
  }
  EXPECT_EQ(UsageNow().live_registrations, kQuota);
}

TEST_F(RegisterBatchTest, AClosedTenantFailsEveryItem) {
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory mem(2 * kPage);
  std::vector<absl::StatusOr<KeyGrant>> got = cache_->RegisterBatch(tenant_ + 1, Pages(mem, 2));
  ASSERT_EQ(got.size(), 2u);
  for (const auto& g : got) EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(cache_->RegisterBatch(tenant_, {}).empty());
}

// A miss lays its range out under the tenant's read lock, then binds under its write lock. If
// the memory changed in between (here: detached, its registration and gate destroyed, and other
// memory attached at the same addresses), the bind lays out again: the key maps the new memory.
// A layout reused across the change would name keys that no longer exist.
TEST_F(RegisterBatchTest, AMissWhoseMemoryChangesBeforeItsBindMapsTheNewMemory) {
  if (!Stall::Available()) GTEST_SKIP() << "test hooks are compiled out (NDEBUG)";
  ASSERT_NO_FATAL_FAILURE(Init());
  Memory first(4 * kPage), second(4 * kPage);
  BackingId attached = Attach(first);
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "RegisterBatch" : "Register");
    Stall stall(HookPoint::kPlanned);
    absl::StatusOr<KeyGrant> got = absl::UnknownError("not run");
    std::thread miss([&] {
      stall.Arm();
      if (batch) {
        got = std::move(cache_->RegisterBatch(tenant_, {{first.va(), kPage, hca::kAllAccess}})[0]);
      } else {
        got = cache_->Register(tenant_, first.va(), kPage, hca::kAllAccess);
      }
    });
    ASSERT_TRUE(stall.WaitReached());
    // Nothing is bound over the memory yet, so the detach does not wait for the miss.
    ASSERT_TRUE(cache_->RemoveBacking(tenant_, attached).ok());
    BackingSpec spec;
    spec.va = first.va();  // the same addresses, other pages behind them
    spec.local_addr = batch ? first.data() : second.data();
    spec.length = first.size();
    spec.access = hca::kAllAccess;
    absl::StatusOr<BackingId> id = cache_->AddBacking(tenant_, spec);
    ASSERT_TRUE(id.ok()) << id.status();
    attached = *id;
    stall.Resume();
    miss.join();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->hit);
    ASSERT_TRUE(PeerWrite(got->rkey, got->va, batch ? "anew-b" : "anew-r").ok());
    uint8_t* behind = batch ? first.data() : second.data();
    EXPECT_EQ(std::memcmp(behind, batch ? "anew-b" : "anew-r", 6), 0)
        << "the write lands in the memory attached now";
    EXPECT_TRUE(cache_->Release(tenant_, got->handle).ok());
    ASSERT_TRUE(cache_->Invalidate(tenant_, got->handle).ok());
  }
}

}  // namespace
}  // namespace regcache::cache
