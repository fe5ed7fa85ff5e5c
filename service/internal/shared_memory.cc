#include "service/internal/shared_memory.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"

namespace regcache::service {
namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

// Closes `fd` on every return path unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(uint64_t length, bool hugetlb,
                                                                   absl::string_view name) {
  const uint64_t page = hugetlb ? kHugePage : PageSize();
  if (length == 0 || length % page != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory length %d is not a positive multiple of the %s page size %d",
                        length, hugetlb ? "huge" : "", page));
  }
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (hugetlb) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
  const std::string n(name);
  const int fd = ::memfd_create(n.c_str(), flags);
  if (fd < 0) return base::ErrnoToStatus(errno, absl::StrFormat("memfd_create %s", n));
  FdCloser closer(fd);
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    return base::ErrnoToStatus(errno, absl::StrFormat("ftruncate memfd to %d", length));
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return base::ErrnoToStatus(errno, "seal memfd");
  }
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return base::ErrnoToStatus(errno, absl::StrFormat("mmap memfd of %d bytes", length));
  }
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(closer.release(), static_cast<uint8_t*>(p), length, hugetlb));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Import(int fd, uint64_t offset,
                                                                   uint64_t length) {
  FdCloser closer(fd);
  if (fd < 0) return absl::InvalidArgumentError("no file descriptor");
  struct stat st;
  if (::fstat(fd, &st) != 0) return base::ErrnoToStatus(errno, "fstat client memory");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("client memory is not a regular file (memfd expected)");
  }
  const uint64_t page = PageSize();
  if (length == 0 || length % page != 0 || offset % page != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "client memory range +0x%x/0x%x is empty or not page aligned", offset, length));
  }
  if (offset + length < offset || offset + length > static_cast<uint64_t>(st.st_size)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("client memory range [0x%x, +0x%x) is outside the file of %d bytes", offset,
                        length, st.st_size));
  }
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "client memory cannot be sealed against shrinking (%s): pass a memfd created with "
          "MFD_ALLOW_SEALING",
          base::ErrnoName(errno)));
    }
  }
  // The size may have changed between fstat and the seal: check again now that it cannot shrink.
  if (::fstat(fd, &st) != 0) return base::ErrnoToStatus(errno, "fstat client memory");
  if (offset + length > static_cast<uint64_t>(st.st_size)) {
    return absl::InvalidArgumentError("client memory shrank below the requested range");
  }
  void* p =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    return base::ErrnoToStatus(errno, absl::StrFormat("mmap client memory of %d bytes", length));
  }
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(closer.release(), static_cast<uint8_t*>(p), length, false));
}

SharedMemory::~SharedMemory() {
  if (::munmap(data_, length_) != 0) RC_LOG(ERROR) << "munmap: " << base::ErrnoName(errno);
  ::close(fd_);
}

absl::StatusOr<int> SharedMemory::DupFd() const {
  const int fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return base::ErrnoToStatus(errno, "dup memory fd");
  return fd;
}

}  // namespace regcache::service