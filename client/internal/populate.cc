#include "client/internal/populate.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/errno_status.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14 (include/uapi/asm-generic/mman-common.h)
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace regcache::api::internal {

absl::Status PopulateHere(const void* addr, uint64_t length, bool write) {
  if (length == 0) return absl::OkStatus();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = reinterpret_cast<uint64_t>(addr) & ~(page - 1);
  const uint64_t end = reinterpret_cast<uint64_t>(addr) + length;
  const uint64_t bytes = (end - start + page - 1) & ~(page - 1);
  int rc;
  do {
    rc = madvise(reinterpret_cast<void*>(start), bytes,
                 write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return absl::OkStatus();
  const int err = errno;
  if (err == EINVAL) return absl::OkStatus();  // a kernel without MADV_POPULATE_*
  const std::string what = absl::StrFormat(
      "faulting in [%p, +0x%x) in this process before the daemon uses it", addr, length);
  if (err == ENOMEM) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": out of memory (this process's memory cgroup limit, or no huge pages left)"));
  }
  return base::ErrnoToStatus(err, what);
}

}  // namespace regcache::api::internal
