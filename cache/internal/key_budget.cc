#include "cache/internal/key_budget.h"

#include "absl/strings/str_format.h"

namespace regcache::cache {

uint64_t KeyBudget::Take(uint64_t want, uint32_t capacity) {
  // Entries first (the scarcer for large classes), then keys; either refusal undoes the other.
  uint64_t entries = used_entries_.load(std::memory_order_relaxed);
  uint64_t n = 0;
  for (;;) {
    const uint64_t room = total_entries_ - std::min(entries, total_entries_);
    n = std::min<uint64_t>(want, capacity == 0 ? want : room / capacity);
    if (n == 0) return 0;
    if (used_entries_.compare_exchange_weak(entries, entries + n * capacity,
                                            std::memory_order_relaxed)) {
      break;
    }
  }
  uint64_t used = used_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t room = total_ - std::min(used, total_);
    const uint64_t k = std::min(n, room);
    if (k == 0 || used_.compare_exchange_weak(used, used + k, std::memory_order_relaxed)) {
      if (k < n) used_entries_.fetch_sub((n - k) * capacity, std::memory_order_relaxed);
      return k;
    }
  }
}

void KeyBudget::Give(uint64_t n, uint32_t capacity) {
  used_.fetch_sub(n, std::memory_order_relaxed);
  used_entries_.fetch_sub(n * capacity, std::memory_order_relaxed);
}

std::string KeyBudget::Describe(uint64_t held_keys, uint64_t held_entries) const {
  return absl::StrFormat(
      "device key budget: %d of %d keys and %d of %d translation entries in use by %d tenants "
      "(fair share %d keys, %d entries); this tenant holds %d keys with %d entries",
      used(), total_, used_entries(), total_entries_, tenants(), FairShare(), FairEntryShare(),
      held_keys, held_entries);
}

}  // namespace regcache::cache
