// The mlx5 backend on a real ConnectX (the `hw` tier, tests/hw): pooled keys made by DevX and
// mapped by UMR WQEs on the backend's own queues, then used by a real requester queue pair
// (the Peer) over the fabric loopback: data lands where the map says, invalidation and variant
// changes stop the old key, long lists go by pointer, a refused UMR completes with an error and
// the queue carries on, ODP backings prefetch. Built everywhere; run by the hw tier, which skips
// it (exit 77, saying why) where no ConnectX opens. REGCACHE_HW_DEVICE names the device spec
// (default "mlx5").
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hca/device.h"
#include "hca/mlx5/mlx5_device.h"

namespace regcache::hca::mlx5 {
namespace {

constexpr uint64_t kBytes = 4 << 20;
constexpr uint64_t kKeyBase = 0x7000'0000'0000;  // the pooled keys' own address space

std::string DeviceSpec() {
  const char* e = std::getenv("REGCACHE_HW_DEVICE");
  return e != nullptr && *e != '\0' ? e : "mlx5";
}

class Mlx5HwTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterBackend();
    auto d = OpenDevice(DeviceSpec());
    if (!d.ok()) GTEST_SKIP() << "no ConnectX here: " << d.status();
    dev_ = std::move(*d);
    auto pd = dev_->AllocPd();
    ASSERT_TRUE(pd.ok()) << pd.status();
    pd_ = *pd;
    mem_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    ASSERT_NE(mem_, MAP_FAILED);
    const AccessFlags all =
        dev_->capabilities().atomics ? kAllAccess : (kAllAccess & ~AccessFlags{kRemoteAtomic});
    auto b = dev_->RegisterBacking(pd_, Addr(0), kBytes, all, {});
    ASSERT_TRUE(b.ok()) << b.status();
    backing_ = *b;
    auto q = dev_->CreateQueue(pd_, QueueOptions{256});
    ASSERT_TRUE(q.ok()) << q.status();
    queue_ = std::move(*q);
    auto peer = dev_->CreatePeer(pd_);
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = std::move(*peer);
  }
  void TearDown() override {
    if (dev_ == nullptr) return;
    peer_.reset();
    queue_.reset();
    for (Key k : keys_) EXPECT_TRUE(dev_->DestroyKey(k).ok());
    EXPECT_TRUE(dev_->DestroyKey(backing_.key).ok());
    EXPECT_TRUE(dev_->DeallocPd(pd_).ok());
    munmap(mem_, kBytes);
  }

  uint64_t Addr(uint64_t offset) const { return reinterpret_cast<uint64_t>(mem_) + offset; }

  Key NewKey(uint32_t capacity) {
    auto k = dev_->CreateIndirectKeys(pd_, capacity, 1, {});
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return 0;
    keys_.push_back(k->front());
    return k->front();
  }

  // Posts one request, rings, waits; the request's completion status.
  absl::Status Run(const std::function<absl::Status(uint64_t)>& post) {
    const uint64_t id = next_id_++;
    if (absl::Status s = post(id); !s.ok()) return s;
    if (absl::Status s = queue_->Doorbell(); !s.ok()) return s;
    if (absl::Status s = queue_->Flush(absl::Seconds(10)); !s.ok()) return s;
    Completion c;
    if (queue_->Poll(absl::MakeSpan(&c, 1)) != 1) return absl::InternalError("no completion");
    EXPECT_EQ(c.request_id, id);
    return c.status;
  }

  // Maps `key` to `pieces` of the backing, one after the other from kKeyBase.
  absl::StatusOr<Key> Map(Key key, const std::vector<std::pair<uint64_t, uint64_t>>& pieces,
                          AccessFlags access, uint8_t variant, bool require_free = true) {
    std::vector<KlmEntry> klm;
    uint64_t total = 0;
    for (const auto& [offset, length] : pieces) {
      klm.push_back(KlmEntry{backing_.key, Addr(offset), length});
      total += length;
    }
    MapRequest r;
    r.key = key;
    r.new_variant = variant;
    r.klm = klm;
    r.access = access;
    r.start_addr = kKeyBase;
    r.length = total;
    r.require_free = require_free;
    absl::Status s = Run([&](uint64_t id) { return queue_->PostMap(id, r); });
    if (!s.ok()) return s;
    return MakeKey(KeyIndex(key), variant);
  }

  std::unique_ptr<Device> dev_;
  Pd pd_;
  uint8_t* mem_ = nullptr;
  Backing backing_;
  std::unique_ptr<Queue> queue_;
  std::unique_ptr<Peer> peer_;
  std::vector<Key> keys_;
  uint64_t next_id_ = 1;
};

TEST_F(Mlx5HwTest, CapabilitiesAreThoseOfAConnectX) {
  const Capabilities& c = dev_->capabilities();
  EXPECT_EQ(c.backend, "mlx5");
  EXPECT_TRUE(c.umr);
  EXPECT_GE(c.max_klm_entries, 4u);
  EXPECT_GE(c.max_inline_klm, 4u);
  EXPECT_GE(c.max_indirection, 1u);
  EXPECT_GT(c.max_keys, 0u);
}

TEST_F(Mlx5HwTest, MappedKeyCarriesRemoteWritesAndReadsToWhereTheMapSays) {
  const Key free_key = NewKey(16);
  // Three pieces out of order: key offset 0 is backing offset 64 KiB, and so on.
  auto key = Map(free_key, {{64 << 10, 4096}, {0, 8192}, {1 << 20, 4096}},
                 kLocalRead | kRemoteRead | kRemoteWrite, 1);
  ASSERT_TRUE(key.ok()) << key.status();
  const std::vector<uint8_t> data(6000, 0x5a);
  // Key offset 2000 .. 8000 crosses from the first piece into the second.
  ASSERT_TRUE(peer_->Write(*key, kKeyBase + 2000, data).ok());
  EXPECT_EQ(mem_[(64 << 10) + 2000], 0x5a);
  EXPECT_EQ(mem_[(64 << 10) + 4095], 0x5a);
  EXPECT_EQ(mem_[0], 0x5a);  // key offset 4096 = backing offset 0
  EXPECT_EQ(mem_[8000 - 4096 - 1], 0x5a);
  EXPECT_EQ(mem_[8000 - 4096], 0);
  std::memset(mem_ + (1 << 20), 0xc3, 4096);
  std::vector<uint8_t> back(4096);
  ASSERT_TRUE(peer_->Read(*key, kKeyBase + 12288, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0xc3));
  auto info = dev_->QueryKey(*key);
  if (info.ok()) {  // DevX-made keys only (mkey_api=mlx5dv cannot be queried)
    EXPECT_FALSE(info->free);
    EXPECT_EQ(info->key, *key);
    ASSERT_GE(info->klm.size(), 3u);
    EXPECT_EQ(info->klm[1].addr, Addr(0));
    EXPECT_EQ(info->klm[1].length, 8192u);
  }
}

TEST_F(Mlx5HwTest, InvalidateAndVariantStopTheOldKey) {
  const Key free_key = NewKey(4);
  auto key = Map(free_key, {{0, 65536}}, kLocalRead | kRemoteRead | kRemoteWrite, 1);
  ASSERT_TRUE(key.ok()) << key.status();
  const std::vector<uint8_t> data(64, 1);
  ASSERT_TRUE(peer_->Write(*key, kKeyBase, data).ok());
  ASSERT_TRUE(Run([&](uint64_t id) { return queue_->PostInvalidate(id, *key, {}); }).ok());
  absl::Status after = peer_->Write(*key, kKeyBase, data);
  ASSERT_FALSE(after.ok());
  ASSERT_TRUE(ErrorOf(after).has_value()) << after;
  EXPECT_EQ(ErrorOf(after)->syndrome, Syndrome::kRemoteAccess) << after;
  // The refused access moved the peer's RC queue pair to the error state, as on any NIC: a
  // remote node reconnects, so the test takes a fresh peer.
  auto fresh = dev_->CreatePeer(pd_);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  peer_ = std::move(*fresh);
  // Mapped again under the next variant: the new value works, the old one does not.
  auto again = Map(*key, {{0, 65536}}, kLocalRead | kRemoteRead | kRemoteWrite, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(peer_->Write(*again, kKeyBase, data).ok());
  EXPECT_FALSE(peer_->Write(*key, kKeyBase, data).ok());
}

TEST_F(Mlx5HwTest, LongListsGoByPointer) {
  const Capabilities& c = dev_->capabilities();
  if (!c.umr_pointer_translation) GTEST_SKIP() << "pointer-mode maps are off (pointer_umr=0)";
  const uint32_t n = c.max_inline_klm + 12;  // past what one WQE carries
  const Key free_key = NewKey(n);
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t page = (uint64_t{n} - 1 - i) % (kBytes / 4096);  // reversed pages
    pieces.emplace_back(page * 4096, 4096);
    std::memset(mem_ + page * 4096, static_cast<int>(i & 0xff), 4096);
  }
  auto key = Map(free_key, pieces, kLocalRead | kRemoteRead, 1);
  ASSERT_TRUE(key.ok()) << key.status();
  std::vector<uint8_t> all(size_t{n} * 4096);
  ASSERT_TRUE(peer_->Read(*key, kKeyBase, absl::MakeSpan(all)).ok());
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(all[size_t{i} * 4096], static_cast<uint8_t>(i)) << "entry " << i;
    ASSERT_EQ(all[size_t{i} * 4096 + 4095], static_cast<uint8_t>(i)) << "entry " << i;
  }
}

TEST_F(Mlx5HwTest, RefusedUmrCompletesWithAnErrorAndTheQueueCarriesOn) {
  const Key free_key = NewKey(4);
  auto key = Map(free_key, {{0, 4096}}, kLocalRead | kRemoteRead, 1);
  ASSERT_TRUE(key.ok()) << key.status();
  // The key is live: a map that requires it free is refused by the device.
  auto refused = Map(*key, {{0, 4096}}, kLocalRead | kRemoteRead, 2, /*require_free=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(ErrorOf(refused.status()).has_value()) << refused.status();
  // The queue pair was reset and reconnected: the next map works.
  auto next = Map(NewKey(4), {{4096, 4096}}, kLocalRead | kRemoteRead, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  std::vector<uint8_t> b(16);
  EXPECT_TRUE(peer_->Read(*next, kKeyBase, absl::MakeSpan(b)).ok());
}

TEST_F(Mlx5HwTest, AtomicsWhereTheDeviceLetsAUmrGrantThem) {
  const Capabilities& c = dev_->capabilities();
  if (!c.atomics || !c.umr_modify_atomic) GTEST_SKIP() << "no UMR-granted atomics here";
  auto key = Map(NewKey(4), {{0, 4096}}, kLocalRead | kRemoteRead | kRemoteAtomic, 1);
  ASSERT_TRUE(key.ok()) << key.status();
  std::memset(mem_, 0, 8);
  auto before = peer_->FetchAdd(*key, kKeyBase, 5);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, 0u);
  uint64_t now = 0;
  std::memcpy(&now, mem_, 8);
  EXPECT_EQ(now, 5u);
}

TEST_F(Mlx5HwTest, OnDemandBackingsPrefetchAndServeAccesses) {
  if (!dev_->capabilities().odp) GTEST_SKIP() << "no RC on-demand paging on this device";
  void* m = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  const uint64_t addr = reinterpret_cast<uint64_t>(m);
  BackingOptions o;
  o.on_demand = true;
  auto b = dev_->RegisterBacking(pd_, addr, 1 << 20, kLocalWrite | kRemoteRead | kRemoteWrite, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(dev_->Prefetch(b->key, addr, 1 << 16, /*write=*/true).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(dev_->Prefetch(backing_.key, Addr(0), 4096, false)));
  EXPECT_TRUE(absl::IsInvalidArgument(dev_->Prefetch(b->key, addr, 2 << 20, false)));
  // A key over the ODP backing: the kernel faults the pages in as the peer writes.
  const Key k = NewKey(4);
  MapRequest r;
  const KlmEntry e{b->key, addr + (512 << 10), 65536};
  r.key = k;
  r.new_variant = 1;
  r.klm = absl::MakeConstSpan(&e, 1);
  r.access = kLocalRead | kRemoteWrite | kRemoteRead;
  r.start_addr = kKeyBase;
  r.length = 65536;
  ASSERT_TRUE(Run([&](uint64_t id) { return queue_->PostMap(id, r); }).ok());
  const std::vector<uint8_t> data(65536, 0x77);
  ASSERT_TRUE(peer_->Write(MakeKey(KeyIndex(k), 1), kKeyBase, data).ok());
  EXPECT_EQ(static_cast<uint8_t*>(m)[(512 << 10) + 65535], 0x77);
  ASSERT_TRUE(Run([&](uint64_t id) { return queue_->PostInvalidate(id, k, {}); }).ok());
  EXPECT_TRUE(dev_->DestroyKey(b->key).ok());
  munmap(m, 1 << 20);
}

}  // namespace
}  // namespace regcache::hca::mlx5
