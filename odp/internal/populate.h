// Making the daemon's pages resident before their MTT entries are published.
//
// On the sim the "DMA address" of a page is the daemon's own virtual address, and the simulated
// NIC moves bytes with plain loads and stores; on hardware the kernel would pin/map the page. So
// before a fault is resumed the page must be present in this process with the right intent:
//   read   the page is mapped (for private memory that may be the shared zero page);
//   write  the page is mapped writable (copy-on-write broken, shmem page allocated), without
//          changing its content — other writers may be writing it concurrently.
// Memory that cannot be made resident — a MAP_SHARED memfd truncated below the mapping, an
// unmapped range, PROT_NONE — must produce an error, never a SIGBUS/SIGSEGV in the daemon.
//
// How:
//   madvise   madvise(MADV_POPULATE_READ / MADV_POPULATE_WRITE) (Linux 5.14+). The kernel
//             faults the pages in and reports failures as errno (EFAULT for a truncated shmem
//             page, ENOMEM for an unmapped hole, EHWPOISON/EIO …) instead of raising a signal.
//             Falls back to the touch when the kernel does not know the advice (EINVAL).
//   touch     touch one byte per page: a volatile read, or a compare-and-swap of the byte with
//             itself (a locked write of the same value: content unchanged even with concurrent
//             writers; an "add 0" could be compiled into a fenced load that never write-faults).
//             The touch runs under a SIGBUS/SIGSEGV guard: a process-wide handler (installed
//             once, chaining to the previous one) siglongjmps back only when the faulting thread
//             is inside a guarded touch; any other fault goes to the previous handler.
//
// Thread safety: MakeResident may be called from any thread concurrently.
#ifndef REGCACHE_ODP_INTERNAL_POPULATE_H_
#define REGCACHE_ODP_INTERNAL_POPULATE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace regcache::odp::internal {

// Makes [addr, addr + length) of this process resident, writable when `write`, with MADV_POPULATE
// when `use_madvise` and the kernel has it, else with the guarded touch. `addr` need not be page
// aligned (the range is widened to whole pages).
// Errors: kInvalidArgument for a range that wraps; otherwise the errno of the populate as a
// status (kFailedPrecondition/kResourceExhausted/… via ErrnoToStatus), or kUnavailable
// naming the signal when a guarded touch faulted. Nothing is left half-done that matters: pages
// made resident before the failure simply stay resident.
absl::Status MakeResident(uint64_t addr, uint64_t length, bool write, bool use_madvise);

// Whether this kernel supports MADV_POPULATE_READ/WRITE (probed once).
bool KernelHasPopulate();

}  // namespace regcache::odp::internal
#endif  // REGCACHE_ODP_INTERNAL_POPULATE_H_
