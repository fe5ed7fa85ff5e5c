#include "service/internal/shared_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/dmabuf.h"

namespace regcache::service {
namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

constexpr uint32_t kLogHugePage = 21;

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }
uint32_t Log2(uint64_t x) { return 63 - static_cast<uint32_t>(__builtin_clzll(x)); }

// Maps [offset, +length) of `fd` shared and read-write. A hugetlb file's mapping lands at an
// address aligned to its huge page `huge`, any other of 2 MiB or more at a 2 MiB aligned one (a
// larger area is reserved, the file mapped over its aligned part, the rest returned), so that
// its large pages line up with the file's (log_page_hint).
absl::StatusOr<uint8_t*> MapShared(int fd, uint64_t offset, uint64_t length, uint64_t huge) {
  const uint64_t align = huge != 0 ? huge : (length >= kHugePage ? kHugePage : 0);
  void* area = nullptr;
  uint64_t at = 0;
  if (align != 0) {
    area = ::mmap(nullptr, length + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                  -1, 0);
    if (area == MAP_FAILED) {
      return base::ErrnoToStatus(errno, absl::StrFormat("reserve %d bytes to map", length + align));
    }
    at = (reinterpret_cast<uint64_t>(area) + align - 1) & ~(align - 1);
  }
  void* p = ::mmap(reinterpret_cast<void*>(at), length, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (align != 0 ? MAP_FIXED : 0), fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    if (area != nullptr) ::munmap(area, length + align);
    return base::ErrnoToStatus(err, absl::StrFormat("mmap memory of %d bytes", length));
  }
  if (area != nullptr) {  // return the reserved area around the mapping
    const uint64_t lo = reinterpret_cast<uint64_t>(area), hi = lo + length + align;
    if (at > lo) ::munmap(area, at - lo);
    if (hi > at + length) ::munmap(reinterpret_cast<void*>(at + length), hi - (at + length));
  }
  return static_cast<uint8_t*>(p);
}

// The page hint of a mapping of a file that is not hugetlb (SharedMemory::log_page_hint).
uint32_t ShmemHint(const uint8_t* data, uint64_t offset, uint64_t length) {
  const bool aligned = (reinterpret_cast<uint64_t>(data) | offset | length) % kHugePage == 0;
  return aligned ? kLogHugePage : Log2(PageSize());
}

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
  base::UniqueFd closer(fd);
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    return base::ErrnoToStatus(errno, absl::StrFormat("ftruncate memfd to %d", length));
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return base::ErrnoToStatus(errno, "seal memfd");
  }
  ASSIGN_OR_RETURN(uint8_t * p, MapShared(fd, 0, length, hugetlb ? kHugePage : 0));
  const uint32_t hint = hugetlb ? kLogHugePage : ShmemHint(p, 0, length);
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(std::move(closer), p, length, hugetlb, hint));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Import(int fd, uint64_t offset,
                                                                   uint64_t length,
                                                                   bool unsealed_hugetlb) {
  base::UniqueFd closer(fd);
  if (fd < 0) return absl::InvalidArgumentError("no file descriptor");
  struct stat st;
  if (::fstat(fd, &st) != 0) return base::ErrnoToStatus(errno, "fstat client memory");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("client memory is not a regular file (memfd expected)");
  }
  // A hugetlb file (a memfd made with MFD_HUGETLB) maps in whole huge pages of st_blksize.
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return base::ErrnoToStatus(errno, "fstatfs client memory");
  const bool hugetlb = fs.f_type == HUGETLBFS_MAGIC && st.st_blksize > 0;
  const uint64_t page = hugetlb ? static_cast<uint64_t>(st.st_blksize) : PageSize();
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
  bool sealed = true;
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
      const int err = errno;
      if (!hugetlb || !unsealed_hugetlb) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "client memory cannot be sealed against shrinking (%s): pass a memfd created with "
            "MFD_ALLOW_SEALING%s",
            base::ErrnoName(err),
            hugetlb ? " (a file of a hugetlbfs mount, which cannot be sealed, is taken only on "
                      "a device that reaches memory through pinned pages, not on the sim)"
                    : ""));
      }
      sealed = false;
    }
  }
  // The size may have changed between fstat and the seal: check again now that it cannot shrink.
  if (::fstat(fd, &st) != 0) return base::ErrnoToStatus(errno, "fstat client memory");
  if (offset + length > static_cast<uint64_t>(st.st_size)) {
    return absl::InvalidArgumentError("client memory shrank below the requested range");
  }
  ASSIGN_OR_RETURN(uint8_t * p, MapShared(fd, offset, length, hugetlb ? page : 0));
  const uint32_t hint = hugetlb ? Log2(page) : ShmemHint(p, offset, length);
  auto m =
      std::unique_ptr<SharedMemory>(new SharedMemory(std::move(closer), p, length, hugetlb, hint));
  m->sealed_ = sealed;
  return m;
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::ImportDmabuf(int fd, uint64_t offset,
                                                                         uint64_t length) {
  base::UniqueFd owned(fd);
  RETURN_IF_ERROR(hca::CheckDmabufRange(fd, offset, length));
  auto m = std::unique_ptr<SharedMemory>(
      new SharedMemory(std::move(owned), nullptr, length, false, Log2(PageSize())));
  m->dmabuf_ = true;
  m->offset_ = offset;
  return m;
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::ImportClientFile(
    int fd, uint64_t offset, uint64_t length, const hca::Capabilities& device) {
  if (!hca::IsDmabuf(fd)) return Import(fd, offset, length, device.backend != "sim");
  if (!device.dmabuf) {
    ::close(fd);
    return absl::UnimplementedError(
        absl::StrFormat("the descriptor is a dma-buf, and %s:%s cannot register dma-bufs",
                        device.backend, device.device_name));
  }
  return ImportDmabuf(fd, offset, length);
}

SharedMemory::~SharedMemory() {
  if (data_ != nullptr && ::munmap(data_, length_) != 0) {
    RC_LOG(ERROR) << "munmap: " << base::ErrnoName(errno);
  }
}

absl::StatusOr<int> SharedMemory::DupFd() const {
  const int fd = ::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return base::ErrnoToStatus(errno, "dup memory fd");
  return fd;
}

}  // namespace regcache::service