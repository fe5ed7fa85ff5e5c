// Key variants continue device-wide (cache/internal/key_ledger.h): an index destroyed with one
// tenant and handed to another by the device carries on from its last variant, so no full key
// value is handed out twice, across tenants as within one.
#include "cache/internal/key_ledger.h"

#include <iomanip>
#include <set>

#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

namespace regcache::cache {
namespace {

using ::regcache::cache::testing::CacheTest;
using ::regcache::cache::testing::Memory;

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

TEST(KeyLedger, ResumesTheLastVariantOfADestroyedIndex) {
  KeyLedger ledger;
  EXPECT_EQ(ledger.Resume(hca::MakeKey(5, 0)), hca::MakeKey(5, 0));  // never destroyed
  ledger.Destroyed(hca::MakeKey(5, 9));
  EXPECT_EQ(ledger.Resume(hca::MakeKey(5, 0)), hca::MakeKey(5, 9));
  EXPECT_EQ(ledger.Resume(hca::MakeKey(6, 0)), hca::MakeKey(6, 0));
  ledger.Destroyed(hca::MakeKey(5, 0));  // a variant 0 is remembered too
  EXPECT_EQ(ledger.Resume(hca::MakeKey(5, 0)), hca::MakeKey(5, 0));
  ledger.Destroyed(hca::MakeKey(5, 255));  // the next map wraps to 0: 256 issues apart
  EXPECT_EQ(hca::KeyVariant(hca::NextVariant(ledger.Resume(hca::MakeKey(5, 0)))), 0);
  ledger.Destroyed(hca::MakeKey(0xffffff, 3));  // the largest index grows the table
  EXPECT_EQ(ledger.Resume(hca::MakeKey(0xffffff, 0)), hca::MakeKey(0xffffff, 3));
}

class KeyLedgerCacheTest : public CacheTest {
 protected:
  void SetUp() override { Init(); }

  // Tenant `tenant_` gone, a new one in its place (the device reuses the old one's indices).
  void NextTenant() { ReplaceTenant(); }
};

TEST_F(KeyLedgerCacheTest, NoKeyValueIsHandedOutTwiceAcrossTenants) {
  std::set<hca::Key> seen;
  std::set<uint32_t> indices_before;
  int reused_indices = 0;
  for (int tenant = 0; tenant < 4; ++tenant) {
    std::set<uint32_t> indices;
    {
      Memory mem(1 << 20);
      Attach(mem);
      for (int i = 0; i < 24; ++i) {
        auto g = cache_->Register(tenant_, mem.va() + (i % 8) * 4096, 4096, kRw);
        ASSERT_TRUE(g.ok()) << g.status();
        EXPECT_TRUE(seen.insert(g->rkey).second)
            << "tenant " << tenant << " got rkey 0x" << std::hex << g->rkey << " again";
        indices.insert(hca::KeyIndex(g->rkey));
        ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
        ASSERT_TRUE(cache_->Invalidate(tenant_, g->handle).ok());
        cache_->Maintain();
      }
      // The tenant's keys still work for it: a fresh one reaches its memory.
      auto g = cache_->Register(tenant_, mem.va(), 4096, kRw);
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_TRUE(seen.insert(g->rkey).second);
      EXPECT_TRUE(PeerWrite(g->rkey, mem.va(), "ok").ok());
      ASSERT_TRUE(cache_->Release(tenant_, g->handle).ok());
      NextTenant();  // before `mem` goes
    }
    for (uint32_t i : indices) reused_indices += indices_before.count(i);
    indices_before.insert(indices.begin(), indices.end());
  }
  EXPECT_GT(reused_indices, 0) << "the device never handed an index to a second tenant";
}

}  // namespace
}  // namespace regcache::cache
