// Test fixtures shared by the cache's device-backed tests: a sim device, a cache over it and a
// tenant with real memory attached, plus a peer to access it the way a remote node would.
#ifndef REGCACHE_CACHE_TEST_UTIL_H_
#define REGCACHE_CACHE_TEST_UTIL_H_

#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "base/log.h"
#include "cache/reg_cache.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"

namespace regcache::cache::testing {

// Anonymous memory, page aligned, unmapped on destruction.
class Memory {
 public:
  explicit Memory(size_t length) : length_(length) {
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RC_CHECK(p != MAP_FAILED);
    addr_ = static_cast<uint8_t*>(p);
  }
  ~Memory() { ::munmap(addr_, length_); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  uint8_t* data() { return addr_; }
  uint64_t va() const { return reinterpret_cast<uint64_t>(addr_); }
  size_t size() const { return length_; }

 private:
  uint8_t* addr_ = nullptr;
  size_t length_ = 0;
};

// A sim device with one PD, for tests of the cache's pieces below RegCache. Use under
// ASSERT_NO_FATAL_FAILURE.
inline void OpenSimWithPd(const hca::sim::SimOptions& sim,
                          std::unique_ptr<hca::sim::SimDevice>* device, hca::Pd* pd) {
  auto dev = hca::sim::NewSimDevice(sim);
  ASSERT_TRUE(dev.ok()) << dev.status();
  *device = std::move(*dev);
  auto p = (*device)->AllocPd();
  ASSERT_TRUE(p.ok()) << p.status();
  *pd = *p;
}

inline CacheOptions TestCacheOptions() {
  CacheOptions o;
  o.background_maintenance = false;
  o.pool.low_watermark = 2;
  o.pool.high_watermark = 4;
  o.pool.quarantine_time = absl::ZeroDuration();
  o.pool.quarantine_count = 0;
  o.engine.queues_per_tenant = 2;
  o.engine.queue_depth = 64;
  return o;
}

class CacheTest : public ::testing::Test {
 protected:
  void Init(const CacheOptions& options = TestCacheOptions(),
            hca::sim::SimOptions sim = hca::sim::SimOptions()) {
    auto dev = hca::sim::NewSimDevice(sim);
    ASSERT_TRUE(dev.ok()) << dev.status();
    device_ = std::move(*dev);
    baseline_keys_ = device_->stats().live_keys.value();
    auto c = RegCache::Create(device_.get(), options);
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = std::move(*c);
    OpenTestTenant();
  }

  // Opens the test's tenant (`tenant_`) with `options`, and a peer in its PD.
  void OpenTestTenant(const TenantOptions& options = {}) {
    auto t = cache_->OpenTenant(options);
    ASSERT_TRUE(t.ok()) << t.status();
    tenant_ = *t;
    auto usage = cache_->Usage(tenant_);
    ASSERT_TRUE(usage.ok());
    auto peer = device_->CreatePeer(usage->pd);
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = std::move(*peer);
  }

  // Closes the test's tenant and opens another with `options` in its place.
  void ReplaceTenant(const TenantOptions& options = {}) {
    peer_.reset();
    ASSERT_TRUE(cache_->CloseTenant(tenant_).ok());
    OpenTestTenant(options);
  }

  void TearDown() override {
    if (cache_ == nullptr) return;
    peer_.reset();
    EXPECT_TRUE(cache_->CloseTenant(tenant_).ok());
    cache_.reset();
    // Every key the cache made is gone again.
    EXPECT_EQ(device_->stats().live_keys.value(), baseline_keys_);
  }

  // Attaches `mem` to the tenant at its own address.
  BackingId Attach(Memory& mem, hca::AccessFlags access = hca::kAllAccess) {
    BackingSpec spec;
    spec.va = mem.va();
    spec.local_addr = mem.data();
    spec.length = mem.size();
    spec.access = access;
    auto id = cache_->AddBacking(tenant_, spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }

  // A tenant of its own with `mem` attached.
  TenantId OpenWith(Memory& mem, const TenantOptions& options = {}) {
    auto t = cache_->OpenTenant(options);
    EXPECT_TRUE(t.ok()) << t.status();
    BackingSpec spec;
    spec.va = mem.va();
    spec.local_addr = mem.data();
    spec.length = mem.size();
    spec.access = hca::kAllAccess;
    EXPECT_TRUE(cache_->AddBacking(*t, spec).ok());
    return *t;
  }

  absl::Status PeerWrite(hca::Key rkey, uint64_t addr, absl::string_view text) {
    return peer_->Write(
        rkey, addr,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }

  TenantUsage UsageNow() {
    auto u = cache_->Usage(tenant_);
    EXPECT_TRUE(u.ok());
    return *u;
  }

  std::unique_ptr<hca::sim::SimDevice> device_;
  std::unique_ptr<RegCache> cache_;
  std::unique_ptr<hca::Peer> peer_;
  TenantId tenant_ = 0;
  int64_t baseline_keys_ = 0;
};

}  // namespace regcache::cache::testing
#endif  // REGCACHE_CACHE_TEST_UTIL_H_
