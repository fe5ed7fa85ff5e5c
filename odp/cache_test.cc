// odp/ under the registration cache: on-demand memory attached to a tenant, keys from the cache,
// a peer writing through them; the servicer observes the cache (CacheOptions::backing_observer).
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "cache/reg_cache.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"
#include "odp/register.h"
#include "odp/servicer.h"

namespace regcache::odp {
namespace {

using ::regcache::cache::testing::Memory;

constexpr uint64_t kPage = 4096;
constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

class OdpCacheTest : public ::testing::TestWithParam<hca::sim::ExecutionMode> {
 protected:
  void SetUp() override {
    hca::sim::SimOptions so;
    so.mode = GetParam();
    device_ = hca::sim::NewSimDevice(so).value();
    servicer_ = Servicer::Create(device_.get()).value();
    cache::CacheOptions co = ::regcache::cache::testing::TestCacheOptions();
    co.backing_observer = servicer_.get();
    cache_ = cache::RegCache::Create(device_.get(), co).value();
    tenant_ = cache_->OpenTenant({}).value();
    peer_ = device_->CreatePeer(cache_->Usage(tenant_)->pd).value();
  }
  void TearDown() override {
    peer_.reset();
    EXPECT_TRUE(cache_->CloseTenant(tenant_).ok());  // also: no odp/ queue left in its PD
    cache_.reset();
    EXPECT_EQ(servicer_->stats().tracked_backings.value(), 0);
    servicer_.reset();
  }

  cache::BackingId AttachOdp(uint64_t va, void* local, uint64_t length) {
    cache::BackingSpec spec;
    spec.va = va;
    spec.local_addr = local;
    spec.length = length;
    spec.on_demand = true;
    auto id = cache_->AddBacking(tenant_, spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }
  absl::Status PeerWrite(hca::Key rkey, uint64_t addr, absl::string_view text) {
    return peer_->Write(
        rkey, addr,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }

  std::unique_ptr<hca::sim::SimDevice> device_;
  std::unique_ptr<Servicer> servicer_;
  std::unique_ptr<cache::RegCache> cache_;
  cache::TenantId tenant_ = 0;
  std::unique_ptr<hca::Peer> peer_;
};

TEST_P(OdpCacheTest, FaultsThroughAnIndirectKeyAreServed) {
  Memory mem(64 * kPage);
  AttachOdp(mem.va(), mem.data(), mem.size());
  EXPECT_EQ(servicer_->stats().tracked_backings.value(), 1);
  auto g = cache_->Register(tenant_, mem.va() + kPage, 16 * kPage, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va() + 5 * kPage + 1, "through a KLM key").ok());
  EXPECT_EQ(std::memcmp(mem.data() + 5 * kPage + 1, "through a KLM key", 17), 0);
  EXPECT_EQ(device_->stats().page_faults.value(), 1u);
  EXPECT_EQ(servicer_->stats().resumed_ok.value(), 1u);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

TEST_P(OdpCacheTest, RegisterWithPrefetchMeansNoFaults) {
  Memory mem(64 * kPage);
  AttachOdp(mem.va(), mem.data(), mem.size());
  auto g = RegisterWithPrefetch(cache_.get(), servicer_.get(), tenant_, mem.va(), 32 * kPage, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va(), std::string(32 * kPage, 'w')).ok());
  EXPECT_EQ(device_->stats().page_faults.value(), 0u);
  // Asynchronous: present once the thread ran it.
  RegisterOptions ro;
  ro.mode = PrefetchMode::kAsync;
  auto h = RegisterWithPrefetch(cache_.get(), servicer_.get(), tenant_, mem.va() + 32 * kPage,
                                32 * kPage, kRw, ro);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(servicer_->WaitForPrefetches(absl::Seconds(5)).ok());
  ASSERT_TRUE(PeerWrite(h->rkey, mem.va() + 32 * kPage, std::string(32 * kPage, 'a')).ok());
  EXPECT_EQ(device_->stats().page_faults.value(), 0u);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
  EXPECT_TRUE(cache_->Release(tenant_, h->handle).ok());
}

TEST_P(OdpCacheTest, PrefetchTenantRangeSpansBackingsAndRefusesHoles) {
  Memory mem(32 * kPage);
  // Two adjacent backings over one mapping, the second pinned.
  AttachOdp(mem.va(), mem.data(), 16 * kPage);
  cache::BackingSpec pinned;
  pinned.va = mem.va() + 16 * kPage;
  pinned.local_addr = mem.data() + 16 * kPage;
  pinned.length = 16 * kPage;
  ASSERT_TRUE(cache_->AddBacking(tenant_, pinned).ok());
  EXPECT_TRUE(servicer_
                  ->PrefetchTenantRange(tenant_, mem.va() + 8 * kPage, 16 * kPage, true,
                                        PrefetchMode::kSync)
                  .ok());
  EXPECT_EQ(servicer_->stats().prefetches.value(), 1u);  // the pinned part needs nothing
  EXPECT_EQ(servicer_
                ->PrefetchTenantRange(tenant_, mem.va() + 24 * kPage, 16 * kPage, true,
                                      PrefetchMode::kSync)
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(servicer_->PrefetchTenantRange(tenant_ + 1, mem.va(), kPage, true, PrefetchMode::kSync)
                .code(),
            absl::StatusCode::kOutOfRange);
  auto g = cache_->Register(tenant_, mem.va() + 8 * kPage, 16 * kPage, kRw);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va() + 8 * kPage, std::string(16 * kPage, 's')).ok());
  EXPECT_EQ(device_->stats().page_faults.value(), 0u);
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
}

TEST_P(OdpCacheTest, RemoveBackingZapsBeforeDeregistering) {
  Memory mem(16 * kPage);
  const cache::BackingId id = AttachOdp(mem.va(), mem.data(), mem.size());
  auto g = cache_->Register(tenant_, mem.va(), 16 * kPage, kRw);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(PeerWrite(g->rkey, mem.va(), std::string(3 * kPage, 'z')).ok());
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
  ASSERT_TRUE(cache_->RemoveBacking(tenant_, id).ok());
  EXPECT_EQ(servicer_->stats().zaps.value(), 1u);
  EXPECT_EQ(servicer_->stats().zapped_entries.value(), 3u);
  EXPECT_EQ(servicer_->stats().tracked_backings.value(), 0);
  // The memory may go now; attaching it again starts cold.
  AttachOdp(mem.va(), mem.data(), mem.size());
  auto h = cache_->Register(tenant_, mem.va(), 16 * kPage, kRw);
  ASSERT_TRUE(h.ok());
  const uint64_t faults = device_->stats().page_faults.value();
  ASSERT_TRUE(PeerWrite(h->rkey, mem.va(), "cold again").ok());
  EXPECT_EQ(device_->stats().page_faults.value(), faults + 1);
  EXPECT_TRUE(cache_->Release(tenant_, h->handle).ok());
  // CloseTenant (TearDown) removes this one, zapping it too.
}

// The scenario: a memfd of 2 pages mapped over 4, attached on demand, registered; a
// peer write to page 3 cannot be served and fails with vendor syndrome 0x93; we live on.
TEST_P(OdpCacheTest, TruncatedMemfdPeerWriteFailsWithOdpSyndrome) {
  const int fd = memfd_create("odp-truncated", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 2 * kPage), 0);
  void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  const uint64_t va = reinterpret_cast<uint64_t>(p);
  const cache::BackingId id = AttachOdp(va, p, 4 * kPage);
  auto g = cache_->Register(tenant_, va, 4 * kPage, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::Status s = PeerWrite(g->rkey, va + 3 * kPage, "past the end of the file");
  ASSERT_FALSE(s.ok());
  ASSERT_TRUE(hca::ErrorOf(s).has_value()) << s;
  EXPECT_EQ(hca::ErrorOf(s)->vendor_syndrome, hca::kVendorSyndromeOdpFault);
  EXPECT_EQ(servicer_->stats().populate_errors.value(), 1u);
  EXPECT_EQ(servicer_->stats().resumed_error.value(), 1u);
  // Fine afterwards: the file's pages work, through the same key.
  ASSERT_TRUE(PeerWrite(g->rkey, va + kPage, "inside the file").ok());
  char buf[15];
  ASSERT_EQ(pread(fd, buf, sizeof(buf), kPage), 15);
  EXPECT_EQ(std::memcmp(buf, "inside the file", 15), 0);
  // A synchronous prefetch over the hole reports it and hands back nothing.
  auto h = RegisterWithPrefetch(cache_.get(), servicer_.get(), tenant_, va, 4 * kPage, kRw);
  EXPECT_FALSE(h.ok());
  EXPECT_TRUE(cache_->Release(tenant_, g->handle).ok());
  ASSERT_TRUE(cache_->RemoveBacking(tenant_, id).ok());
  munmap(p, 4 * kPage);
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(Modes, OdpCacheTest,
                         ::testing::Values(hca::sim::ExecutionMode::kInline,
                                           hca::sim::ExecutionMode::kThread),
                         [](const ::testing::TestParamInfo<hca::sim::ExecutionMode>& i) {
                           return i.param == hca::sim::ExecutionMode::kInline ? "Inline" : "Thread";
                         });

}  // namespace
}  // namespace regcache::odp