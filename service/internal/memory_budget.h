// The daemon-wide budget of mapped memory (DaemonConfig::max_bytes_total) and the admission of a
// new mapping against it and against the session's quota.
//
// Every mapping (AllocateMemory, ImportMemory) is charged to the budget before it is made and
// holds its charge (MemoryCharge) for as long as it lives: destroying the mapping's record
// refunds it, whichever path (detach, session close, a failed call) destroys it. Charges are
// atomic, so sessions admitting at once never pass the budget together.
//
// Thread safety: MemoryBudget is safe for concurrent use; a MemoryCharge belongs to one owner.
#ifndef REGCACHE_SERVICE_INTERNAL_MEMORY_BUDGET_H_
#define REGCACHE_SERVICE_INTERNAL_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "service/types.h"

namespace regcache::service::internal {

class MemoryCharge;

class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit) : limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Charges `length` bytes: kResourceExhausted naming the numbers when the bytes charged would
  // pass the limit (0: no limit).
  absl::StatusOr<MemoryCharge> Charge(uint64_t length);
  uint64_t charged() const { return charged_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  friend class MemoryCharge;
  const uint64_t limit_;
  std::atomic<uint64_t> charged_{0};
};

// `length` bytes charged to a budget until destroyed (or moved from). Empty when default-made.
class MemoryCharge {
 public:
  MemoryCharge() = default;
  MemoryCharge(MemoryCharge&& o) noexcept : budget_(o.budget_), length_(o.length_) {
    o.budget_ = nullptr;
  }
  MemoryCharge& operator=(MemoryCharge&& o) noexcept;
  ~MemoryCharge() { Refund(); }

 private:
  friend class MemoryBudget;
  MemoryCharge(MemoryBudget* budget, uint64_t length) : budget_(budget), length_(length) {}
  void Refund();
  MemoryBudget* budget_ = nullptr;
  uint64_t length_ = 0;
};

// Admits a new mapping of `length` bytes for a session that has `session_mapped` bytes mapped:
// kInvalidArgument when length is 0 or above config.max_memory_length; kResourceExhausted when
// it would pass config.max_bytes_per_session or the daemon-wide budget (naming which).
absl::StatusOr<MemoryCharge> AdmitMemory(const DaemonConfig& config, MemoryBudget& budget,
                                         uint64_t session_mapped, uint64_t length);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_MEMORY_BUDGET_H_
