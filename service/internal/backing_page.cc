#include "service/internal/backing_page.h"

#include <algorithm>

namespace regcache::service::internal {

uint32_t ChooseLogPageSize(uint64_t addr, uint64_t length, uint32_t max_log,
                           uint64_t page_size_mask) {
  for (uint32_t n = std::min<uint32_t>(max_log, 63); n > kLogOsPage; --n) {
    if ((page_size_mask & (uint64_t{1} << n)) == 0) continue;
    const uint64_t page = uint64_t{1} << n;
    if (addr % page == 0 && length % page == 0) return n;
  }
  return kLogOsPage;
}

uint32_t BackingLogPageSize(const SharedMemory& mem, const hca::Capabilities& caps, bool on_demand,
                            uint32_t max_log) {
  if (on_demand) return kLogOsPage;
  return ChooseLogPageSize(reinterpret_cast<uint64_t>(mem.data()), mem.length(),
                           std::min(max_log, mem.log_page_hint()), caps.page_size_mask);
}

uint64_t TranslationBytes(uint64_t addr, uint64_t length, uint32_t log_page) {
  const uint64_t page = uint64_t{1} << log_page;
  const uint64_t entries = ((addr & (page - 1)) + length + page - 1) / page;
  return (entries + 7) / 8 * 8 * kTranslationEntryBytes;
}

}  // namespace regcache::service::internal
