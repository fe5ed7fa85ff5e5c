#include "cache/internal/key_budget.h"

#include "absl/strings/str_format.h"

namespace regcache::cache {

uint64_t KeyBudget::Take(uint64_t want) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t room = total_ - std::min(used, total_);
    const uint64_t n = std::min(want, room);
    if (n == 0) return 0;
    if (used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed)) return n;
  }
}

std::string KeyBudget::Describe(uint64_t held) const {
  return absl::StrFormat(
      "device key budget: %d of %d keys in use by %d tenants (fair share %d); this tenant holds %d",
      used(), total_, tenants(), FairShare(), held);
}

}  // namespace regcache::cache
