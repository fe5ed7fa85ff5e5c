// What closed tenants left on the device. CloseTenant (internal/tenant.h) returns once none of a
// tenant's keys reaches memory; its pool keys (free or invalidated), UMR queues and PD are then
// destroyed here, a bounded step at a time, by the cache's maintenance thread. The device budget
// counts those keys until they are gone. Internal to cache/.
//
// Thread safety: every method may be called from any thread; steps run one at a time.
#ifndef REGCACHE_CACHE_INTERNAL_REAPER_H_
#define REGCACHE_CACHE_INTERNAL_REAPER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "base/mutex.h"
#include "cache/internal/tenant.h"
#include "cache/stats.h"

namespace regcache::cache::internal {

class Reaper {
 public:
  explicit Reaper(CacheStats* stats) : stats_(stats) {}
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // A tenant CloseTenant returned for.
  void Add(std::shared_ptr<Tenant> t);
  // Destroys up to `max_keys` keys of the oldest tenant waiting (and its queues and PD once its
  // keys are gone). True while any tenant waits.
  bool Step(size_t max_keys);
  void Finish() {
    while (Step(SIZE_MAX)) {
    }
  }

 private:
  CacheStats* const stats_;
  base::Mutex step_mu_;  // one step at a time: a step uses the pool outside the tenant's lock
  base::Mutex mu_ ABSL_ACQUIRED_AFTER(step_mu_);
  std::deque<std::shared_ptr<Tenant>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_REAPER_H_
