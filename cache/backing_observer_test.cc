// The cache tells its BackingObserver about every backing: after attaching it, and before its
// device registration goes away (RemoveBacking, CloseTenant) — with the key still alive then.
#include "cache/backing_observer.h"

#include <vector>

#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"

namespace regcache::cache {
namespace {

using ::regcache::cache::testing::Memory;

class RecordingObserver final : public BackingObserver {
 public:
  explicit RecordingObserver(hca::Device** device) : device_(device) {}
  void OnBackingAdded(const BackingEvent& e) override { added.push_back(e); }
  void OnBackingRemoving(const BackingEvent& e) override {
    removing.push_back(e);
    // The device registration is still there: the observer may still zap through it.
    key_alive_when_removing.push_back((*device_)->QueryKey(e.device.key).ok());
  }
  std::vector<BackingEvent> added, removing;
  std::vector<bool> key_alive_when_removing;

 private:
  hca::Device** device_;
};

class BackingObserverTest : public ::regcache::cache::testing::CacheTest {
 protected:
  void SetUp() override {
    CacheOptions o = ::regcache::cache::testing::TestCacheOptions();
    o.backing_observer = &observer_;
    Init(o);
    raw_device_ = device_.get();
  }
  hca::Device* raw_device_ = nullptr;
  RecordingObserver observer_{&raw_device_};
};

TEST_F(BackingObserverTest, AddedAndRemovingCarryTheBackingAndPrecedeDeregistration) {
  Memory a(1 << 16), b(1 << 16);
  BackingSpec spec;
  spec.va = a.va();
  spec.local_addr = a.data();
  spec.length = a.size();
  spec.on_demand = true;
  spec.access = hca::kLocalRead | hca::kRemoteRead;
  auto id = cache_->AddBacking(tenant_, spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const BackingId id_b = Attach(b);
  ASSERT_EQ(observer_.added.size(), 2u);
  const BackingEvent& e = observer_.added[0];
  EXPECT_EQ(e.tenant, tenant_);
  EXPECT_EQ(e.id, *id);
  EXPECT_EQ(e.va, a.va());
  EXPECT_EQ(e.device.addr, a.va());
  EXPECT_EQ(e.device.length, a.size());
  EXPECT_TRUE(e.device.on_demand);
  EXPECT_FALSE(observer_.added[1].device.on_demand);
  EXPECT_EQ(e.access, hca::kLocalRead | hca::kRemoteRead);

  ASSERT_TRUE(cache_->RemoveBacking(tenant_, *id).ok());
  ASSERT_EQ(observer_.removing.size(), 1u);
  EXPECT_EQ(observer_.removing[0].device.key, e.device.key);
  EXPECT_TRUE(observer_.key_alive_when_removing[0]);
  EXPECT_FALSE(device_->QueryKey(e.device.key).ok());  // destroyed after the call

  // CloseTenant reports the backing left over, again before destroying it.
  peer_.reset();
  ASSERT_TRUE(cache_->CloseTenant(tenant_).ok());
  cache_.reset();
  ASSERT_EQ(observer_.removing.size(), 2u);
  EXPECT_EQ(observer_.removing[1].id, id_b);
  EXPECT_TRUE(observer_.key_alive_when_removing[1]);
}

}  // namespace
}  // namespace regcache::cache