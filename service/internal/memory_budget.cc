#include "service/internal/memory_budget.h"

#include "absl/strings/str_format.h"
#include "base/error_reason.h"

namespace regcache::service::internal {

absl::StatusOr<MemoryCharge> MemoryBudget::Charge(uint64_t length) {
  uint64_t now = charged_.load(std::memory_order_relaxed);
  do {
    if (limit_ != 0 && (length > limit_ || now > limit_ - length)) {
      return base::WithReason(
          absl::ResourceExhaustedError(absl::StrFormat(
              "daemon memory budget: %d bytes mapped for all sessions + %d > limit %d "
              "(--max_bytes_total)",
              now, length, limit_)),
          base::reason::kDaemonMemoryBudgetExhausted,
          {{"limit_bytes", std::to_string(limit_)},
           {"used_bytes", std::to_string(now)},
           {"requested_bytes", std::to_string(length)}});
    }
  } while (!charged_.compare_exchange_weak(now, now + length, std::memory_order_relaxed));
  return MemoryCharge(this, length);
}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& o) noexcept {
  if (this != &o) {
    Refund();
    budget_ = o.budget_;
    length_ = o.length_;
    o.budget_ = nullptr;
  }
  return *this;
}

void MemoryCharge::Refund() {
  if (budget_ != nullptr) budget_->charged_.fetch_sub(length_, std::memory_order_relaxed);
  budget_ = nullptr;
}

absl::StatusOr<MemoryCharge> AdmitMemory(const DaemonConfig& config, MemoryBudget& budget,
                                         uint64_t session_mapped, uint64_t length) {
  if (length == 0 || length > config.max_memory_length) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory length %d is outside (0, %d]", length, config.max_memory_length));
  }
  if (config.max_bytes_per_session != 0 && session_mapped + length > config.max_bytes_per_session) {
    return base::WithReason(absl::ResourceExhaustedError(absl::StrFormat(
                                "memory quota: %d bytes mapped + %d > limit %d", session_mapped,
                                length, config.max_bytes_per_session)),
                            base::reason::kMemoryQuotaExceeded,
                            {{"limit_bytes", std::to_string(config.max_bytes_per_session)},
                             {"used_bytes", std::to_string(session_mapped)},
                             {"requested_bytes", std::to_string(length)}});
  }
  return budget.Charge(length);
}

}  // namespace regcache::service::internal
