// BackingObserver — what a layer above the cache (odp/) learns about backing memory.
//
// Purpose: dependency inversion. The cache owns the device registration of every backing, but
// on-demand (ODP) backings need a fault servicer that knows them, and before their registration
// goes away their MTT entries must be zapped. The cache cannot include odp/ (layering), so it
// calls this interface, declared here and implemented above it; CacheOptions::backing_observer
// installs it.
//
// Calls, for every backing (pinned or on demand; the observer decides what it cares about):
//   OnBackingAdded     after the device registration exists and the backing is attached, before
//                      AddBacking returns its id;
//   OnBackingRemoving  before the device registration is destroyed (RemoveBacking, CloseTenant),
//                      after every registration that used it has been invalidated. When it
//                      returns, the observer must no longer use the backing's key: the cache
//                      destroys it next, and the memory may be unmapped right after.
//
// Thread safety: both calls run with the tenant's slow-path lock held, possibly concurrently for
// different tenants. The observer must not call back into the RegCache from them.
// Ownership: the observer is not owned by the cache and must outlive it.
#ifndef REGCACHE_CACHE_BACKING_OBSERVER_H_
#define REGCACHE_CACHE_BACKING_OBSERVER_H_

#include <cstdint>

#include "cache/backing_set.h"
#include "hca/device.h"

namespace regcache::cache {

using TenantId = uint32_t;  // as in reg_cache.h

struct BackingEvent {
  TenantId tenant = 0;  // 0: not a cache tenant (a standalone user of the observer)
  BackingId id = 0;
  uint64_t va = 0;              // where the tenant sees the memory
  hca::Backing device;          // key, PD, the daemon's address (device.addr), geometry, on_demand
  hca::AccessFlags access = 0;  // rights registrations over it may have
};

class BackingObserver {
 public:
  virtual ~BackingObserver() = default;
  virtual void OnBackingAdded(const BackingEvent& event) = 0;
  virtual void OnBackingRemoving(const BackingEvent& event) = 0;
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_BACKING_OBSERVER_H_
