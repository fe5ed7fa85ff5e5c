// A file of a hugetlbfs mount attached by descriptor (docs/client_memory.md), against the real
// regcached. Such a file cannot be sealed against shrinking, so the daemon takes it only on a
// device that reaches memory through the pages its registration pinned: there a peer's write
// through a key lands in the client's huge pages, and the key stops once invalidated. On the sim,
// which plays the device with the daemon's own loads and stores, it is refused, saying why.
//
// The device is REGCACHE_TEST_DEVICE's (sim by default). Needs a hugetlbfs mount with two free
// huge pages (REGCACHE_TEST_HUGETLBFS names the mount, else the first in /proc/mounts); skips
// saying why where there is none. The vm tier mounts one in its guest (tests/vm/
// hugetlbfs_in_guest.sh).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "tests/e2e/rdma_peer_process.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;
using regcache::testing::Regcached;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite;

// The hugetlbfs mount to use, or "" with `why`.
std::string HugetlbfsMount(std::string* why) {
  if (const char* dir = std::getenv("REGCACHE_TEST_HUGETLBFS"); dir != nullptr && *dir != 0) {
    return dir;
  }
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string source, dir, type;
    fields >> source >> dir >> type;
    if (type == "hugetlbfs" && access(dir.c_str(), W_OK) == 0) return dir;
  }
  *why = "no writable hugetlbfs mount here (set REGCACHE_TEST_HUGETLBFS)";
  return "";
}

// A file of `pages` huge pages in the mount, unlinked (its descriptor keeps it).
struct HugeFile {
  int fd = -1;
  uint64_t page = 0;
  std::string skip;

  explicit HugeFile(int pages) {
    const std::string dir = HugetlbfsMount(&skip);
    if (dir.empty()) return;
    const std::string path = absl::StrCat(dir, "/regcache-test-", getpid());
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      skip = absl::StrCat("cannot create a file in ", dir, ": ", std::strerror(errno));
      return;
    }
    unlink(path.c_str());
    struct stat st {};
    fstat(fd, &st);
    page = static_cast<uint64_t>(st.st_blksize);
    // ftruncate reserves nothing; a mapping touched beyond the free pages would SIGBUS, so ask
    // for the pages first.
    if (ftruncate(fd, static_cast<off_t>(pages * page)) != 0 ||
        fallocate(fd, 0, 0, static_cast<off_t>(pages * page)) != 0) {
      skip = absl::StrCat("no ", pages, " free huge pages of ", page >> 10, " KiB in ", dir, ": ",
                          std::strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  ~HugeFile() {
    if (fd >= 0) close(fd);
  }
};

class HugetlbfsE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::make_unique<HugeFile>(2);
    if (!file_->skip.empty()) GTEST_SKIP() << file_->skip;
    daemon_ = std::make_unique<Regcached>();
    rc::ClientOptions options;
    options.call_timeout = regcache::testing::TestCallTimeout();
    auto c = rc::Client::Connect(daemon_->dir(), options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    sim_ = regcache::testing::TestDevice().rfind("sim", 0) == 0;
  }

  std::unique_ptr<HugeFile> file_;
  std::unique_ptr<Regcached> daemon_;
  std::unique_ptr<rc::Client> client_;
  bool sim_ = true;
};

TEST_F(HugetlbfsE2e, AHugetlbfsFileIsAttachedWhereTheDeviceReachesPinnedPages) {
  const uint64_t page = file_->page;
  absl::StatusOr<rc::Memory> m = client_->AttachFd(file_->fd, 0, 2 * page);
  if (sim_) {
    ASSERT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
    EXPECT_TRUE(absl::StrContains(m.status().message(), "hugetlbfs")) << m.status();
    // The session goes on: a sealable memfd of huge pages is the sim's way.
    EXPECT_TRUE(client_->AllocateMemory(1 << 20).ok());
    return;
  }
  ASSERT_TRUE(m.ok()) << m.status();
  auto* bytes = static_cast<uint8_t*>(m->data);
  // A key across the two huge pages, reached by a remote node in its own process.
  auto k = client_->Register(bytes + page - 8192, 16384, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  regcache::testing::RdmaPeer peer;
  auto ep = client_->CreateEndpoint(peer.address());
  ASSERT_TRUE(ep.ok()) << ep.status();
  ASSERT_EQ(peer.Connect(ep->local), "ok");
  const std::string text = "across two huge pages";
  EXPECT_EQ(peer.Write(k->rkey, bytes + page - 10, text), "ok");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(bytes) + page - 10, text.size()), text);
  ASSERT_TRUE(client_->Invalidate(k->handle).ok());
  const std::string late = peer.Write(k->rkey, bytes + page - 10, "x");
  EXPECT_TRUE(absl::StartsWith(late, "err PERMISSION_DENIED")) << late;
  ASSERT_TRUE(client_->DetachMemory(*m).ok());
}

TEST_F(HugetlbfsE2e, ARangeNotInWholeHugePagesOrBeyondTheFileIsRefused) {
  const uint64_t page = file_->page;
  EXPECT_EQ(client_->AttachFd(file_->fd, 4096, page).status().code(),
            absl::StatusCode::kInvalidArgument);  // not at a huge page boundary
  EXPECT_EQ(client_->AttachFd(file_->fd, 0, page + 4096).status().code(),
            absl::StatusCode::kInvalidArgument);  // not whole huge pages
  EXPECT_EQ(client_->AttachFd(file_->fd, page, 2 * page).status().code(),
            absl::StatusCode::kInvalidArgument);  // beyond the file
  // Nothing was taken: the right range is attached once (on the sim, refused as before).
  absl::StatusOr<rc::Memory> whole = client_->AttachFd(file_->fd, 0, 2 * page);
  if (sim_) {
    EXPECT_EQ(whole.status().code(), absl::StatusCode::kFailedPrecondition) << whole.status();
    return;
  }
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(client_->Register(whole->data, 2 * page, kRw).ok());
  EXPECT_TRUE(client_->DetachMemory(*whole).ok());
}

}  // namespace
