// Prefetch: the service of a range instead of a fault, synchronous or queued to the servicer's
// thread; on the kernel path, Device::Prefetch.
#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "odp/internal/fault_plan.h"
#include "odp/internal/servicer_impl.h"

namespace regcache::odp::internal {

absl::Status ServicerImpl::RunPrefetch(BackingState& b, uint64_t addr, uint64_t length,
                                       bool write) {
  stats_.prefetches.Inc();
  absl::Status s;
  if (path_ == FaultPath::kKernel) {
    s = device_->Prefetch(b.device().key, addr, length, write);
  } else {
    Need n;
    n.addr = addr;
    n.length = length;
    n.write = write;
    bool rewrote = false;
    ServiceNeeds(b, absl::MakeSpan(&n, 1), &rewrote);
    s = n.result;
  }
  if (!s.ok()) stats_.prefetch_errors.Inc();
  return s;
}

absl::Status ServicerImpl::Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write,
                                    PrefetchMode mode) {
  ASSIGN_OR_RETURN(std::shared_ptr<BackingState> b, FindRange(key, addr, length, "prefetch"));
  const hca::Backing& dev = b->device();
  if (write && !b->writable) {
    return absl::PermissionDeniedError(
        absl::StrFormat("prefetch for write of backing 0x%08x, which is not writable", key));
  }
  if (!dev.on_demand || length == 0) return absl::OkStatus();
  if (mode == PrefetchMode::kSync) return RunPrefetch(*b, addr, length, write);
  {
    base::MutexLock lock(&prefetch_mu_);
    if (prefetch_queue_.size() >= options_.max_queued_prefetches) {
      stats_.prefetch_queue_overflow.Inc();
      return absl::ResourceExhaustedError(
          absl::StrFormat("%u asynchronous prefetches already queued", prefetch_queue_.size()));
    }
    prefetch_queue_.push_back(AsyncPrefetch{std::move(b), addr, length, write});
    stats_.queued_prefetches.Add();
  }
  Wake();
  return absl::OkStatus();
}

absl::Status ServicerImpl::PrefetchTenantRange(cache::TenantId tenant, uint64_t va, uint64_t length,
                                               bool write, PrefetchMode mode) {
  if (length == 0) return absl::OkStatus();
  if (va + length < va) return absl::InvalidArgumentError("prefetch range wraps");
  struct Piece {
    hca::Key key;
    uint64_t addr;
    uint64_t length;
  };
  std::vector<Piece> pieces;
  {
    base::MutexLock lock(&mu_);
    auto t = by_tenant_.find(tenant);
    uint64_t at = va;
    const uint64_t end = va + length;
    if (t != by_tenant_.end()) {
      auto it = t->second.upper_bound(at);
      if (it != t->second.begin()) --it;
      for (; it != t->second.end() && at < end; ++it) {
        const BackingState& b = *it->second;
        const uint64_t b_end = b.event.va + b.device().length;
        if (b.event.va > at) break;  // a hole
        if (b_end <= at) continue;
        const uint64_t n = std::min(end, b_end) - at;
        pieces.push_back(Piece{b.device().key, b.device().addr + (at - b.event.va), n});
        at += n;
      }
    }
    if (at < end) {
      return absl::OutOfRangeError(
          absl::StrFormat("tenant %u: 0x%x is not in attached memory (prefetch [0x%x, +%u))",
                          tenant, at, va, length));
    }
  }
  for (const Piece& p : pieces) RETURN_IF_ERROR(Prefetch(p.key, p.addr, p.length, write, mode));
  return absl::OkStatus();
}

void ServicerImpl::ServeQueuedPrefetches() {
  std::deque<AsyncPrefetch> work;
  {
    base::MutexLock lock(&prefetch_mu_);
    if (prefetch_queue_.empty()) return;
    work.swap(prefetch_queue_);
    prefetch_in_progress_ = work.size();
    stats_.queued_prefetches.Sub(static_cast<int64_t>(work.size()));
  }
  for (AsyncPrefetch& p : work) {
    absl::Status s = RunPrefetch(*p.backing, p.addr, p.length, p.write);
    if (!s.ok()) {
      RC_LOG(DEBUG) << absl::StrFormat("async prefetch of key 0x%08x [0x%x, +%u): ",
                                       p.backing->device().key, p.addr, p.length)
                    << s;
    }
  }
  base::MutexLock lock(&prefetch_mu_);
  prefetch_in_progress_ = 0;
  prefetch_cv_.SignalAll();
}

absl::Status ServicerImpl::WaitForPrefetches(absl::Duration timeout) {
  base::MutexLock lock(&prefetch_mu_);
  const bool idle = prefetch_cv_.WaitFor(&prefetch_mu_, timeout, [this] {
    prefetch_mu_.AssertHeld();  // WaitFor calls the predicate with the mutex held
    return prefetch_queue_.empty() && prefetch_in_progress_ == 0;
  });
  if (!idle) return absl::DeadlineExceededError("asynchronous prefetches still pending");
  return absl::OkStatus();
}

}  // namespace regcache::odp::internal