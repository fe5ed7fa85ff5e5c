// Tenant memory is the tenant's (docs/operations.md, "Whose memory is it"): before the daemon
// pins or prefetches memory a client mapped, the client faults the pages in itself, so the
// kernel charges them to the client's memory cgroup. The daemon then finds them resident and
// charges nothing to its own.
#ifndef REGCACHE_CLIENT_INTERNAL_POPULATE_H_
#define REGCACHE_CLIENT_INTERNAL_POPULATE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace regcache::api::internal {

// Faults the pages of [addr, addr + length) (a mapping of this process) in, writable with
// `write`, without changing their content: madvise MADV_POPULATE_WRITE / MADV_POPULATE_READ.
// OK without doing anything on a kernel without them (before Linux 5.14: the daemon's fault-in
// charges its own cgroup there). kResourceExhausted when the memory cannot be had (ENOMEM: this
// process's memory limit, or hugetlb pages); the errno's status otherwise (EFAULT: past the end
// of the file behind the mapping).
absl::Status PopulateHere(const void* addr, uint64_t length, bool write);

}  // namespace regcache::api::internal
#endif  // REGCACHE_CLIENT_INTERNAL_POPULATE_H_
