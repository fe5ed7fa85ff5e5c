// dma-bufs attached by descriptor (docs/client_memory.md) against the real regcached: a dma-buf
// made as a GPU driver would export one (udmabuf over a memfd, or the dma-heap's system heap),
// attached with keys speaking addresses of the client's choosing, reached by a peer through
// them, revoked, refused where it must be, released when the session ends. The buffer is never
// mapped by the client library; the test maps the memfd behind a udmabuf to see the bytes land.
//
// The device is REGCACHE_TEST_DEVICE's (sim by default; the vm tier runs it with verbs, whose
// provider may refuse dma-bufs: then every attach must say so, and on the emulated ConnectX,
// where a remote node in its own process, regcache_rdma_peer, writes through the key). Skips where
// this kernel cannot make a dma-buf (no /dev/udmabuf: Debian 12's 6.1 kernel has none; the 6.12 one
// builds it in).
#include <fcntl.h>
#include <linux/dma-heap.h>
#include <linux/udmabuf.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "regcache/sim_peer.h"
#include "tests/e2e/rdma_peer_process.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;
using regcache::testing::Regcached;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite;

// A dma-buf over a sealed memfd, as udmabuf exports it; the memfd mapped here to look at the bytes.
struct Udmabuf {
  int memfd = -1;
  int fd = -1;  // the dma-buf
  uint8_t* view = nullptr;
  size_t size = 0;
  std::string skip;  // why none could be made

  explicit Udmabuf(size_t bytes) : size(bytes) {
    const int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
    if (dev < 0) {
      skip = "no /dev/udmabuf in this kernel: nothing here can export a dma-buf";
      return;
    }
    memfd = memfd_create("regcache-dmabuf-test", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (memfd < 0 || ftruncate(memfd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
      skip = absl::StrCat("memfd: ", std::strerror(errno));
      close(dev);
      return;
    }
    udmabuf_create c{};
    c.memfd = static_cast<uint32_t>(memfd);
    c.flags = UDMABUF_FLAGS_CLOEXEC;
    c.offset = 0;
    c.size = bytes;
    fd = ioctl(dev, UDMABUF_CREATE, &c);
    const int err = errno;
    close(dev);
    if (fd < 0) {
      skip = absl::StrCat("UDMABUF_CREATE of ", bytes, " bytes: ", std::strerror(err));
      return;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (p != MAP_FAILED) view = static_cast<uint8_t*>(p);
  }
  ~Udmabuf() {
    if (view != nullptr) munmap(view, size);
    if (fd >= 0) close(fd);
    if (memfd >= 0) close(memfd);
  }
};

class DmabufE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    buf_ = std::make_unique<Udmabuf>(kBytes);
    if (!buf_->skip.empty()) GTEST_SKIP() << buf_->skip;
    ASSERT_NE(buf_->view, nullptr);
    daemon_ = std::make_unique<Regcached>();
    rc::ClientOptions options;
    options.call_timeout = regcache::testing::TestCallTimeout();
    auto c = rc::Client::Connect(daemon_->dir(), options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    sim_ = regcache::testing::TestDevice().rfind("sim", 0) == 0;
  }
  // Attaches the whole dma-buf at `va`; on a device that cannot register dma-bufs, checks the
  // refusal says so and returns nullopt.
  std::optional<rc::Memory> Attach(uint64_t va) {
    auto m = client_->AttachDmabuf(buf_->fd, 0, kBytes, reinterpret_cast<void*>(va));
    if (!m.ok() && !sim_ && absl::IsUnimplemented(m.status())) {
      std::printf("the device refuses dma-bufs: %s\n", std::string(m.status().message()).c_str());
      EXPECT_TRUE(absl::StrContains(m.status().message(), "dma-buf")) << m.status();
      return std::nullopt;
    }
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return std::nullopt;
    return *m;
  }

  // How many dma-bufs the daemon has open (its descriptors that name one).
  int DmabufsHeld() const {
    const std::string dir = absl::StrCat("/proc/", daemon_->pid(), "/fd");
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::error_code ec;
      const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
      if (!ec && absl::StrContains(target, "dmabuf")) ++n;
    }
    return n;
  }

  static constexpr size_t kBytes = 1 << 20;
  // Addresses of the client's choosing, where nothing is mapped (a GPU buffer's device pointer).
  static constexpr uint64_t kVa = 0x7a0000000000;
  std::unique_ptr<Udmabuf> buf_;
  std::unique_ptr<Regcached> daemon_;
  std::unique_ptr<rc::Client> client_;
  bool sim_ = true;
};

TEST_F(DmabufE2e, APeersWriteThroughAKeyLandsInTheExportersMemoryUntilRevoked) {
  auto m = Attach(kVa);
  if (!m.has_value()) return;
  EXPECT_EQ(reinterpret_cast<uint64_t>(m->data), kVa);
  auto k = client_->Register(reinterpret_cast<void*>(kVa + 8192), 65536, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  if (!sim_) {  // a remote node in its own process, through a target endpoint
    regcache::testing::RdmaPeer peer;
    auto ep = client_->CreateEndpoint(peer.address());
    ASSERT_TRUE(ep.ok()) << ep.status();
    ASSERT_EQ(peer.Connect(ep->local), "ok");
    EXPECT_EQ(peer.Write(k->rkey, reinterpret_cast<void*>(kVa + 8192 + 100), "into the dma-buf"),
              "ok");
    EXPECT_EQ(std::string(reinterpret_cast<char*>(buf_->view) + 8192 + 100, 16),
              "into the dma-buf");
    ASSERT_TRUE(client_->Invalidate(k->handle).ok());
    const std::string late = peer.Write(k->rkey, reinterpret_cast<void*>(kVa + 8192 + 100), "x");
    EXPECT_TRUE(absl::StartsWith(late, "err PERMISSION_DENIED")) << late;
    return;
  }
  ASSERT_TRUE(rc::SimPeerWrite(*client_, k->rkey, kVa + 8192 + 100, "into the dma-buf").ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf_->view) + 8192 + 100, 16), "into the dma-buf");
  std::memcpy(buf_->view + 8192 + 4000, "exported", 8);
  auto read = rc::SimPeerRead(*client_, k->rkey, kVa + 8192 + 4000, 8);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "exported");
  ASSERT_TRUE(client_->Invalidate(k->handle).ok());
  EXPECT_FALSE(rc::SimPeerWrite(*client_, k->rkey, kVa + 8192 + 100, "late").ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf_->view) + 8192 + 100, 4), "into");
  (void)client_->Release(k->handle);
  ASSERT_TRUE(client_->DetachMemory(*m).ok());
}

// A key over a memfd attachment and the dma-buf attached right after it: one key, two kinds.
TEST_F(DmabufE2e, AKeySpansAMemfdAndADmabuf) {
  const int memfd = memfd_create("regcache-dmabuf-neighbour", MFD_ALLOW_SEALING | MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, kBytes), 0);
  auto host = client_->AttachFd(memfd, 0, kBytes);
  close(memfd);
  ASSERT_TRUE(host.ok()) << host.status();
  const uint64_t end = reinterpret_cast<uint64_t>(host->data) + kBytes;
  auto m = Attach(end);
  if (!m.has_value()) return;
  auto k = client_->Register(reinterpret_cast<void*>(end - 4096), 8192, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  if (!sim_) return;
  const std::string across(16, 'x');
  ASSERT_TRUE(rc::SimPeerWrite(*client_, k->rkey, end - 8, across).ok());
  EXPECT_EQ(std::string(static_cast<char*>(host->data) + kBytes - 8, 8), "xxxxxxxx");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf_->view), 8), "xxxxxxxx");
}

TEST_F(DmabufE2e, EveryRefusalSaysWhyAndChangesNothing) {
  // Not a dma-buf: a memfd offered as one.
  const int memfd = memfd_create("regcache-not-a-dmabuf", MFD_ALLOW_SEALING | MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, 4096), 0);
  auto not_one = client_->AttachDmabuf(memfd, 0, 4096, reinterpret_cast<void*>(kVa));
  close(memfd);
  EXPECT_TRUE(absl::IsInvalidArgument(not_one.status())) << not_one.status();
  EXPECT_TRUE(absl::StrContains(not_one.status().message(), "not a dma-buf")) << not_one.status();
  // Outside the buffer, empty, no address.
  auto outside = client_->AttachDmabuf(buf_->fd, 4096, kBytes, reinterpret_cast<void*>(kVa));
  EXPECT_TRUE(absl::IsInvalidArgument(outside.status())) << outside.status();
  EXPECT_TRUE(absl::StrContains(outside.status().message(), "outside")) << outside.status();
  auto empty = client_->AttachDmabuf(buf_->fd, 0, 0, reinterpret_cast<void*>(kVa));
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();
  auto no_va = client_->AttachDmabuf(buf_->fd, 0, kBytes, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(no_va.status())) << no_va.status();
  // Over memory already attached: the second attach of the same addresses is refused.
  auto m = Attach(kVa);
  if (!m.has_value()) return;
  auto twice = client_->AttachDmabuf(buf_->fd, 0, kBytes, reinterpret_cast<void*>(kVa));
  EXPECT_TRUE(absl::IsAlreadyExists(twice.status())) << twice.status();
  EXPECT_EQ(DmabufsHeld(), 1) << "a refusal left a reference to the buffer behind";
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->Get("daemon", "memory_mapped_bytes").value_or(-1), static_cast<int64_t>(kBytes));
}

// A dma-buf of more than 4 GiB from the dma-heap's system heap (as a GPU-less exporter makes
// one): a key across the 4 GiB offset maps and translates it, and a peer's write there lands
// in the buffer (the sum of lengths and the offsets past 2^32 are where a peer implementation
// overflowed). Needs /dev/dma_heap/system and the memory: the vm tier gives its guest 6 GiB.
TEST_F(DmabufE2e, ADmabufOfMoreThanFourGibTranslatesPastTheFourGibOffset) {
  const int heap = open("/dev/dma_heap/system", O_RDONLY | O_CLOEXEC);
  if (heap < 0) GTEST_SKIP() << "no /dev/dma_heap/system: no heap to export a 4 GiB dma-buf";
  constexpr uint64_t kBig = (uint64_t{4} << 30) + (uint64_t{2} << 20);
  dma_heap_allocation_data a{};
  a.len = kBig;
  a.fd_flags = O_RDWR | O_CLOEXEC;
  const int rc = ioctl(heap, DMA_HEAP_IOCTL_ALLOC, &a);
  const int err = errno;
  close(heap);
  if (rc != 0) GTEST_SKIP() << "the system heap has no " << kBig << " bytes: " << strerror(err);
  const int big = static_cast<int>(a.fd);
  auto m = client_->AttachDmabuf(big, 0, kBig, reinterpret_cast<void*>(kVa));
  if (!m.ok() && !sim_ && absl::IsUnimplemented(m.status())) {
    close(big);
    return;  // the device refuses dma-bufs (checked above)
  }
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t at = kVa + (uint64_t{4} << 30);
  auto k = client_->Register(reinterpret_cast<void*>(at - 4096), 8192, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  const std::string across = "past four GiB!!!";
  if (sim_) {
    ASSERT_TRUE(rc::SimPeerWrite(*client_, k->rkey, at - 8, across).ok());
  } else {
    regcache::testing::RdmaPeer peer;
    auto ep = client_->CreateEndpoint(peer.address());
    ASSERT_TRUE(ep.ok()) << ep.status();
    ASSERT_EQ(peer.Connect(ep->local), "ok");
    ASSERT_EQ(peer.Write(k->rkey, reinterpret_cast<void*>(at - 8), across), "ok");
  }
  void* view = mmap(nullptr, 8192, PROT_READ, MAP_SHARED, big, (uint64_t{4} << 30) - 4096);
  ASSERT_NE(view, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(std::string(static_cast<char*>(view) + 4096 - 8, 16), across);
  munmap(view, 8192);
  ASSERT_TRUE(client_->DetachMemory(*m).ok());
  close(big);
}

// The session's end revokes its keys and lets go of the buffer: nothing is left registered.
TEST_F(DmabufE2e, TheSessionsEndReleasesTheBuffer) {
  auto m = Attach(kVa);
  if (!m.has_value()) return;
  auto k = client_->Register(reinterpret_cast<void*>(kVa), 4096, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  client_.reset();
  auto admin = rc::Client::Connect(daemon_->dir());
  ASSERT_TRUE(admin.ok()) << admin.status();
  absl::StatusOr<int64_t> live = -1;
  for (int i = 0; i < 200; ++i) {
    auto stats = (*admin)->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    live = stats->Get("cache", "live_registrations");
    if (live.ok() && *live == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(live.value_or(-1), 0);
  EXPECT_EQ(DmabufsHeld(), 0) << "the daemon still holds the buffer";
}

}  // namespace
