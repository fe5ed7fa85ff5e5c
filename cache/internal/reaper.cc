#include "cache/internal/reaper.h"

#include <utility>

#include "base/log.h"

namespace regcache::cache::internal {

void Reaper::Add(std::shared_ptr<Tenant> t) {
  stats_->tenants_reaping.Add();
  base::MutexLock lock(&mu_);
  waiting_.push_back(std::move(t));
}

bool Reaper::Step(size_t max_keys) {
  base::MutexLock step(&step_mu_);
  std::shared_ptr<Tenant> t;
  {
    base::MutexLock lock(&mu_);
    if (waiting_.empty()) return false;
    t = waiting_.front();
  }
  absl::Status first;
  const bool gone = ReapTenant(*t, max_keys, first);
  if (!first.ok()) {
    stats_->reap_errors.Inc();
    RC_LOG(WARNING) << "closed tenant " << t->id << ": " << first;
  }
  base::MutexLock lock(&mu_);
  if (gone) {
    waiting_.pop_front();
    stats_->tenants_reaping.Sub();
  }
  return !waiting_.empty();
}

}  // namespace regcache::cache::internal
