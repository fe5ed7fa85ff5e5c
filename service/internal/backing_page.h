// The translation page of a backing: the largest page the memory and the device allow.
//
// The device translates a backing through an MTT of one entry per page. With 4 KiB pages a
// 64 GiB attachment is 16 Mi entries (128 MiB in the sim's key table, and more while the
// registration is built); with 2 MiB pages it is 32 Ki entries (256 KiB). So the daemon asks for
// the largest page that (a) the device supports (Capabilities::page_size_mask), (b) the daemon's
// mapping allows — a hugetlb file's huge page, or 2 MiB for an ordinary memfd whose mapping and
// file offset are 2 MiB aligned (shmem can back it with transparent huge pages) — and (c) divides
// both the mapping's address and its length. The page is a hint to the device (see
// hca::BackingOptions::log_page_size): backends that register through ibv_reg_mr advertise
// 4 KiB only and let the kernel choose.
//
// Daemon memory per attached GiB (docs/architecture.md, "Large memory"): the sim's key table
// holds 8 bytes per translation page, i.e. 2 MiB per GiB with 4 KiB pages and 4 KiB per GiB with
// 2 MiB pages; building the registration briefly needs about 5 times that. The daemon's own
// records of an attachment are a few hundred bytes whatever its size.
#ifndef REGCACHE_SERVICE_INTERNAL_BACKING_PAGE_H_
#define REGCACHE_SERVICE_INTERNAL_BACKING_PAGE_H_

#include <cstdint>

#include "hca/device.h"
#include "service/internal/shared_memory.h"

namespace regcache::service::internal {

inline constexpr uint32_t kLogOsPage = 12;
inline constexpr uint32_t kLog2MiB = 21;
// Bytes of one translation entry in the sim's key table (and a ConnectX's MTT entry).
inline constexpr uint64_t kTranslationEntryBytes = 8;

// The largest n with bit n of `page_size_mask`, kLogOsPage <= n <= max_log, and `addr` and
// `length` multiples of 2^n; kLogOsPage when there is none (every backend takes 4 KiB pages).
uint32_t ChooseLogPageSize(uint64_t addr, uint64_t length, uint32_t max_log,
                           uint64_t page_size_mask);

// The page for attaching `mem` (the daemon's mapping) to a device with `caps`: the largest that
// ChooseLogPageSize allows under mem.log_page_hint() and `max_log` (DaemonConfig::
// max_backing_page_log). On-demand attachments keep 4 KiB pages: the fault servicer makes
// present one OS page at a time.
uint32_t BackingLogPageSize(const SharedMemory& mem, const hca::Capabilities& caps, bool on_demand,
                            uint32_t max_log);

// Bytes of translation entries the sim's key table holds for a backing of `length` bytes at
// `addr` with 2^log_page pages (entries rounded up to the 8-entry blocks a UMR writes).
uint64_t TranslationBytes(uint64_t addr, uint64_t length, uint32_t log_page);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_BACKING_PAGE_H_
