#include "hca/dmabuf.h"

#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"

namespace regcache::hca {

bool IsDmabuf(int fd) {
  struct statfs fs;
  return fd >= 0 && ::fstatfs(fd, &fs) == 0 && fs.f_type == DMA_BUF_MAGIC;
}

absl::StatusOr<uint64_t> DmabufSize(int fd) {
  if (!IsDmabuf(fd)) return absl::InvalidArgumentError("the descriptor is not a dma-buf");
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return base::ErrnoToStatus(errno, "lseek to a dma-buf's end");
  (void)::lseek(fd, 0, SEEK_SET);
  return static_cast<uint64_t>(end);
}

absl::Status CheckDmabufRange(int fd, uint64_t offset, uint64_t length) {
  absl::StatusOr<uint64_t> size = DmabufSize(fd);
  if (!size.ok()) return size.status();
  if (length == 0) return absl::InvalidArgumentError("dma-buf range of length 0");
  if (offset + length < offset || offset + length > *size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dma-buf range [0x%x, +0x%x) is outside the buffer of 0x%x bytes", offset, length, *size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DmabufMapping>> DmabufMapping::Map(int fd, uint64_t offset,
                                                                  uint64_t length) {
  if (absl::Status s = CheckDmabufRange(fd, offset, length); !s.ok()) return s;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (offset % page != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dma-buf offset 0x%x is not page aligned: it cannot be mapped", offset));
  }
  void* p =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return base::ErrnoToStatus(errno, "mmap of a dma-buf");
  return std::unique_ptr<DmabufMapping>(new DmabufMapping(static_cast<uint8_t*>(p), length));
}

DmabufMapping::~DmabufMapping() {
  if (::munmap(data_, length_) != 0) {
    RC_LOG(ERROR) << "munmap of a dma-buf: " << base::ErrnoName(errno);
  }
}

}  // namespace regcache::hca
