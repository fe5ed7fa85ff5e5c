#include "service/internal/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::service {
namespace {

TEST(SharedMemoryTest, CreatedMemoryIsSealedAndSharedThroughItsFd) {
  auto mem = SharedMemory::Create(1 << 16, /*hugetlb=*/false, "test");
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto fd = (*mem)->DupFd();
  ASSERT_TRUE(fd.ok());
  // The client's view: its own mapping of the same file.
  void* client = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  ASSERT_NE(client, MAP_FAILED);
  std::memcpy(client, "shared", 6);
  EXPECT_EQ(std::memcmp((*mem)->data(), "shared", 6), 0);
  // Neither side can shrink or grow it any more.
  EXPECT_NE(::ftruncate(*fd, 4096), 0);
  EXPECT_NE(::ftruncate(*fd, 1 << 20), 0);
  EXPECT_TRUE(::fcntl(*fd, F_GET_SEALS) & F_SEAL_SHRINK);
  ::munmap(client, 1 << 16);
  ::close(*fd);
}

TEST(SharedMemoryTest, BadLengthsAreRefused) {
  EXPECT_EQ(SharedMemory::Create(0, false, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Create(100, false, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryTest, ImportSealsASealableMemfd) {
  const int fd = ::memfd_create("client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 8192), 0);
  const int keep = ::dup(fd);
  auto mem = SharedMemory::Import(fd, 4096, 4096);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ((*mem)->length(), 4096u);
  EXPECT_NE(::ftruncate(keep, 0), 0) << "the client can no longer shrink it";
  ::close(keep);
}

TEST(SharedMemoryTest, ImportRefusesWhatCouldShrinkOrDoesNotFit) {
  // A memfd without MFD_ALLOW_SEALING cannot be protected against shrinking.
  int fd = ::memfd_create("unsealable", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(fd, 8192), 0);
  EXPECT_EQ(SharedMemory::Import(fd, 0, 8192).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Ranges outside the file, unaligned, empty.
  fd = ::memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(fd, 8192), 0);
  EXPECT_EQ(SharedMemory::Import(::dup(fd), 4096, 8192).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Import(::dup(fd), 100, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Import(::dup(fd), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Import(::dup(fd), ~uint64_t{0} & ~uint64_t{4095}, 8192).status().code(),
            absl::StatusCode::kInvalidArgument);
  ::close(fd);
  // Not a regular file.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_EQ(SharedMemory::Import(p[0], 0, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  ::close(p[1]);
  EXPECT_THAT(SharedMemory::Import(-1, 0, 4096), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace regcache::service