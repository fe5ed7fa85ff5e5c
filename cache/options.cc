#include "cache/options.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "cache/reg_cache.h"

namespace regcache::cache {

absl::Status ValidateCacheOptions(const CacheOptions& options, const hca::Capabilities& caps) {
  if (options.pool.capacity_classes.empty()) {
    return absl::InvalidArgumentError("no key capacity classes");
  }
  for (size_t i = 0; i < options.pool.capacity_classes.size(); ++i) {
    const uint32_t c = options.pool.capacity_classes[i];
    if (c == 0 || (i > 0 && c <= options.pool.capacity_classes[i - 1])) {
      return absl::InvalidArgumentError("capacity classes must be positive and ascending");
    }
    if (c > caps.max_klm_entries) {
      return absl::InvalidArgumentError(
          absl::StrFormat("capacity class %d exceeds the device's %d KLM entries per key", c,
                          caps.max_klm_entries));
    }
    if (!caps.umr_pointer_translation && caps.max_inline_klm != 0 && c > caps.max_inline_klm) {
      return absl::InvalidArgumentError(
          absl::StrFormat("capacity class %d exceeds the %d KLM entries one map carries inline", c,
                          caps.max_inline_klm));
    }
  }
  if (options.pool.high_watermark < options.pool.low_watermark) {
    return absl::InvalidArgumentError("pool high watermark below low watermark");
  }
  if (!caps.umr && !caps.memory_windows) {
    return absl::UnimplementedError(
        absl::StrFormat("device %s can neither UMR nor bind memory windows", caps.backend));
  }
  return absl::OkStatus();
}

std::vector<uint32_t> RegCache::FitClasses(std::vector<uint32_t> classes,
                                           const hca::Capabilities& caps) {
  uint32_t limit = caps.max_klm_entries;
  if (caps.max_inline_klm != 0 && !caps.umr_pointer_translation) {
    limit = std::min(limit, caps.max_inline_klm);
  }
  std::vector<uint32_t> fit;
  for (uint32_t c : classes) {
    const uint32_t f = std::min(c, limit);
    if (fit.empty() || f > fit.back()) fit.push_back(f);
  }
  return fit;
}

}  // namespace regcache::cache
