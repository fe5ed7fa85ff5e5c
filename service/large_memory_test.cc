// Large memory: the translation page a backing gets (service/internal/backing_page.h), keys over
// large pages translating to the right bytes, the daemon's translation memory per GiB, and the
// daemon-wide memory budget (service/internal/memory_budget.h).
#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "service/daemon.h"
#include "service/internal/backing_page.h"
#include "service/internal/memory_budget.h"
#include "service/internal/shared_memory.h"

using ::regcache::base::StatusIs;

namespace regcache::service {
namespace {

using internal::BackingLogPageSize;
using internal::ChooseLogPageSize;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kAllSizes = ((uint64_t{1} << 32) - 1) & ~((uint64_t{1} << 12) - 1);  // 12..31
constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

TEST(ChooseLogPageSizeTest, LargestPageDividingAddressAndLength) {
  EXPECT_EQ(ChooseLogPageSize(4 * kMiB, 4 * kMiB, 30, kAllSizes), 22u);  // 4 MiB divides both
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB, 4 * kMiB, 30, kAllSizes), 21u);
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB, 6 * kMiB, 30, kAllSizes), 21u);
  EXPECT_EQ(ChooseLogPageSize(kGiB, 3 * kGiB, 30, kAllSizes), 30u);
  EXPECT_EQ(ChooseLogPageSize(kGiB, 3 * kGiB, 21, kAllSizes), 21u);  // the configured cap
}

TEST(ChooseLogPageSizeTest, UnalignedRangesKeepSmallPages) {
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB + 4096, 4 * kMiB, 30, kAllSizes), 12u);  // address
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB, 2 * kMiB + 4096, 30, kAllSizes), 12u);  // length
  EXPECT_EQ(ChooseLogPageSize(64 * 1024, 64 * 1024, 30, kAllSizes), 16u);
}

TEST(ChooseLogPageSizeTest, OnlySizesTheDeviceSupports) {
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB, 4 * kMiB, 30, uint64_t{1} << 12), 12u);  // mlx5, verbs
  const uint64_t mask = (uint64_t{1} << 12) | (uint64_t{1} << 16);
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB, 4 * kMiB, 30, mask), 16u);
  EXPECT_EQ(ChooseLogPageSize(2 * kMiB, 4 * kMiB, 30, 0), 12u);  // 4 KiB always
}

TEST(BackingLogPageSizeTest, FromTheMappingsLayout) {
  hca::Capabilities caps;
  caps.page_size_mask = kAllSizes;
  auto aligned = SharedMemory::Create(4 * kMiB, /*hugetlb=*/false, "large-test");
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  EXPECT_EQ(reinterpret_cast<uint64_t>((*aligned)->data()) % (2 * kMiB), 0u);
  EXPECT_EQ((*aligned)->log_page_hint(), 21u);
  EXPECT_EQ(BackingLogPageSize(**aligned, caps, false, 30), 21u);  // shmem: 2 MiB at most
  EXPECT_EQ(BackingLogPageSize(**aligned, caps, true, 30), 12u);   // on demand: OS pages
  EXPECT_EQ(BackingLogPageSize(**aligned, caps, false, 12), 12u);  // configured off
  caps.page_size_mask = uint64_t{1} << 12;
  EXPECT_EQ(BackingLogPageSize(**aligned, caps, false, 30), 12u);

  auto odd = SharedMemory::Create(2 * kMiB + 4096, false, "large-test");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ((*odd)->log_page_hint(), 12u);
}

TEST(BackingLogPageSizeTest, ImportedFilesAtAlignedAndUnalignedOffsets) {
  const int fd = ::memfd_create("large-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 8 * kMiB), 0);
  auto at2m = SharedMemory::Import(::dup(fd), 2 * kMiB, 4 * kMiB);
  ASSERT_TRUE(at2m.ok()) << at2m.status();
  EXPECT_EQ((*at2m)->log_page_hint(), 21u);
  auto at4k = SharedMemory::Import(::dup(fd), 4096, 4 * kMiB);
  ASSERT_TRUE(at4k.ok()) << at4k.status();
  EXPECT_EQ((*at4k)->log_page_hint(), 12u);  // file pages and mapping do not line up
  ::close(fd);
}

TEST(BackingLogPageSizeTest, HugetlbMemoryUsesItsHugePage) {
  auto huge = SharedMemory::Create(2 * kMiB, /*hugetlb=*/true, "large-test");
  if (!huge.ok()) GTEST_SKIP() << "no huge pages reserved here: " << huge.status();
  hca::Capabilities caps;
  caps.page_size_mask = kAllSizes;
  EXPECT_TRUE((*huge)->hugetlb());
  EXPECT_EQ(BackingLogPageSize(**huge, caps, false, 30), 21u);
}

// The daemon's translation memory for a backing is proportional to its translation pages: the
// sim's key table holds exactly TranslationBytes, which is 2 MiB per GiB with 4 KiB pages and
// 4 KiB per GiB with 2 MiB pages (the bound docs/architecture.md states). The memory is never
// touched: a sparse 1 GiB memfd.
TEST(TranslationMemoryTest, BoundedPerAttachedGiB) {
  auto dev = hca::sim::NewSimDevice({});
  ASSERT_TRUE(dev.ok());
  auto pd = (*dev)->AllocPd();
  ASSERT_TRUE(pd.ok());
  auto mem = SharedMemory::Create(kGiB, false, "large-test");
  ASSERT_TRUE(mem.ok()) << mem.status();
  const uint64_t addr = reinterpret_cast<uint64_t>((*mem)->data());
  for (uint32_t log : {12u, 21u}) {
    hca::BackingOptions o;
    o.log_page_size = log;
    auto b = (*dev)->RegisterBacking(*pd, addr, kGiB, kRw, o);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->log_page_size, log);
    auto info = (*dev)->QueryKey(b->key);
    ASSERT_TRUE(info.ok());
    const uint64_t bytes = uint64_t{info->capacity_entries} * internal::kTranslationEntryBytes;
    EXPECT_EQ(bytes, internal::TranslationBytes(addr, kGiB, log));
    EXPECT_LE(bytes, log == 12 ? 2 * kMiB : 4096u) << "per GiB, 2^" << log << " pages";
    ASSERT_TRUE((*dev)->DestroyKey(b->key).ok());
  }
}

class LargeMemoryDaemonTest : public ::testing::Test {
 protected:
  void Start(DaemonConfig config) {
    hca::sim::RegisterBackend();
    config.cache.background_maintenance = false;
    auto d = Daemon::Create(config, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  SessionId Open() {
    auto g = daemon_->OpenSession(PeerCredentials{::getpid(), 0, 0});
    EXPECT_TRUE(g.ok()) << g.status();
    ::close(g->channel_fd);
    ::close(g->state_fd);
    return g->id;
  }
  // Allocated in the daemon, mapped "client-side" at an address of the kernel's choice (not
  // 2 MiB aligned in general: the client's addresses do not decide the device's pages).
  uint8_t* AllocateAndAttach(SessionId s, uint64_t length, MemoryId* id) {
    auto m = daemon_->AllocateMemory(s, length, false);
    EXPECT_TRUE(m.ok()) << m.status();
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    ::close(m->fd);
    EXPECT_NE(p, MAP_FAILED);
    EXPECT_TRUE(daemon_->AttachMemory(s, m->id, reinterpret_cast<uint64_t>(p), false).ok());
    *id = m->id;
    return static_cast<uint8_t*>(p);
  }
  uint32_t PageOf(SessionId s, MemoryId id) {
    auto list = daemon_->ListMemory(s);
    EXPECT_TRUE(list.ok());
    for (const MemoryInfo& m : *list) {
      if (m.id == id) return m.log_page_size;
    }
    ADD_FAILURE() << "no memory " << id;
    return 0;
  }
  // Writes `n` patterned bytes at `va` through a key over them, checks they landed in the
  // client's mapping at `client`, and reads them back through the key.
  void WriteThroughKey(SessionId s, uint64_t va, uint8_t* client, uint64_t n, uint8_t seed) {
    auto g = daemon_->Register(s, va, n, kRw);
    ASSERT_TRUE(g.ok()) << g.status();
    std::vector<uint8_t> data(n);
    for (uint64_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
    ASSERT_TRUE(daemon_->sim_peer()->PeerWrite(s, g->rkey, va, data).ok());
    EXPECT_EQ(std::memcmp(client, data.data(), n), 0);
    auto back = daemon_->sim_peer()->PeerRead(s, g->rkey, va, n);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, data);
    ASSERT_TRUE(daemon_->Release(s, g->handle).ok());
  }
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(LargeMemoryDaemonTest, AlignedMemoryGetsLargePagesAndTranslatesExactly) {
  Start(DaemonConfig{});
  const SessionId s = Open();
  MemoryId big = 0, odd = 0;
  uint8_t* b = AllocateAndAttach(s, 6 * kMiB, &big);
  uint8_t* o = AllocateAndAttach(s, 2 * kMiB + 4096, &odd);
  EXPECT_EQ(PageOf(s, big), 21u);
  EXPECT_EQ(PageOf(s, odd), 12u);
  const uint64_t vb = reinterpret_cast<uint64_t>(b), vo = reinterpret_cast<uint64_t>(o);
  // Across the first and second 2 MiB boundaries of the daemon's mapping, and at the very end.
  WriteThroughKey(s, vb + 2 * kMiB - 100, b + 2 * kMiB - 100, 300, 1);
  WriteThroughKey(s, vb + 4 * kMiB - 4096, b + 4 * kMiB - 4096, 3 * 4096, 2);
  WriteThroughKey(s, vb + 6 * kMiB - 64, b + 6 * kMiB - 64, 64, 3);
  WriteThroughKey(s, vb + 123457, b + 123457, 5000, 4);
  WriteThroughKey(s, vo + 2 * kMiB - 50, o + 2 * kMiB - 50, 4096 + 50, 5);
  // A key over both attachments' ends would span two backings: each stays its own.
  ::munmap(b, 6 * kMiB);
  ::munmap(o, 2 * kMiB + 4096);
}

TEST_F(LargeMemoryDaemonTest, FourKiBPagesWhenConfigured) {
  DaemonConfig config;
  config.max_backing_page_log = 12;
  Start(config);
  const SessionId s = Open();
  MemoryId id = 0;
  uint8_t* p = AllocateAndAttach(s, 4 * kMiB, &id);
  EXPECT_EQ(PageOf(s, id), 12u);
  WriteThroughKey(s, reinterpret_cast<uint64_t>(p) + 2 * kMiB - 8, p + 2 * kMiB - 8, 16, 9);
  ::munmap(p, 4 * kMiB);
}

TEST_F(LargeMemoryDaemonTest, DaemonWideBudgetAcrossSessions) {
  DaemonConfig config;
  config.max_bytes_total = 1 * kMiB;
  config.max_bytes_per_session = 1 * kMiB;
  Start(config);
  const SessionId a = Open(), b = Open();
  auto ma = daemon_->AllocateMemory(a, 768 * 1024, false);
  ASSERT_TRUE(ma.ok()) << ma.status();
  ::close(ma->fd);
  auto mb = daemon_->AllocateMemory(b, 512 * 1024, false);
  ASSERT_THAT(mb, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(mb.status().message().find("max_bytes_total"), std::string::npos) << mb.status();
  // A refused import loses nothing and closes the fd it was given.
  const int fd = ::memfd_create("large-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(fd, 512 * 1024), 0);
  EXPECT_EQ(daemon_->ImportMemory(b, ::dup(fd), 0, 512 * 1024).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Unmapping the first session's memory (detach, or closing the session) gives it back.
  ASSERT_TRUE(daemon_->DetachMemory(a, ma->id).ok());
  auto again = daemon_->ImportMemory(b, ::dup(fd), 0, 512 * 1024);
  ASSERT_TRUE(again.ok()) << again.status();
  auto more = daemon_->AllocateMemory(a, 512 * 1024, false);
  ASSERT_TRUE(more.ok()) << more.status();
  ::close(more->fd);
  ASSERT_TRUE(daemon_->CloseSession(a).ok());
  auto after = daemon_->AllocateMemory(b, 512 * 1024, false);
  ASSERT_TRUE(after.ok()) << after.status();
  ::close(after->fd);
  ::close(fd);
}

TEST(MemoryBudgetTest, ChargesRefundWhenDestroyed) {
  internal::MemoryBudget budget(100);
  {
    auto a = budget.Charge(60);
    ASSERT_TRUE(a.ok());
    EXPECT_THAT(budget.Charge(41), StatusIs(absl::StatusCode::kResourceExhausted));
    auto b = budget.Charge(40);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(budget.charged(), 100u);
    internal::MemoryCharge moved = std::move(*b);
    EXPECT_EQ(budget.charged(), 100u);
  }
  EXPECT_EQ(budget.charged(), 0u);
  EXPECT_THAT(budget.Charge(~uint64_t{0}), StatusIs(absl::StatusCode::kResourceExhausted));
  internal::MemoryBudget unlimited(0);
  EXPECT_TRUE(unlimited.Charge(~uint64_t{0}).ok());
}

}  // namespace
}  // namespace regcache::service
