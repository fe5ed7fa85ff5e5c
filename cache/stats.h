// The cache's stats, declared once (base/stats.h). Registered as component "cache" by
// RegCache. Tests assert on them; every degraded path bumps one.
#ifndef REGCACHE_CACHE_STATS_H_
#define REGCACHE_CACHE_STATS_H_

#include "base/stats.h"

namespace regcache::cache {

#define REGCACHE_CACHE_STATS(COUNTER, GAUGE, HISTOGRAM)                                          \
  COUNTER(register_hits, "register requests served by a live registration")                      \
  COUNTER(register_misses, "register requests that mapped a new key")                            \
  COUNTER(register_errors, "register requests refused or failed")                                \
  COUNTER(windows_created, "windows created")                                                    \
  COUNTER(reregisters_in_place, "re-registrations that rewrote the key in place (same rkey)")    \
  COUNTER(reregisters_replaced, "re-registrations that moved the hold to another key")           \
  COUNTER(releases, "handle releases")                                                           \
  COUNTER(releases_after_revoke, "releases of a handle that had been revoked")                   \
  COUNTER(invalidations, "registrations and windows invalidated (explicit or cascaded)")         \
  COUNTER(revoked_by_gates,                                                                      \
          "registrations and windows of closed tenants refused at once by their memory's gates") \
  COUNTER(revoked_with_holders, "invalidations that revoked a key still held")                   \
  COUNTER(evictions, "unreferenced registrations evicted under pool or quota pressure")          \
  COUNTER(held_reclaimed, "held registrations revoked: their tenant was over its fair share")    \
  COUNTER(keys_created, "pooled keys created on the device")                                     \
  COUNTER(keys_destroyed, "pooled keys destroyed on the device")                                 \
  COUNTER(keys_taken, "pooled keys handed to a registration or window")                          \
  COUNTER(keys_quarantined, "keys that entered quarantine after invalidation")                   \
  COUNTER(keys_released_from_quarantine, "keys returned to the free lists")                      \
  COUNTER(keys_recovered, "keys that failed a UMR and were invalidated again")                   \
  COUNTER(keys_destroyed_in_recovery, "keys destroyed because recovery failed")                  \
  COUNTER(pool_exhausted, "takes that found no key and could not make one")                      \
  COUNTER(quota_refusals, "requests refused by a tenant quota")                                  \
  COUNTER(umr_posted, "UMR requests posted")                                                     \
  COUNTER(umr_batches, "doorbells rung by the UMR engine")                                       \
  COUNTER(umr_failed, "UMR requests that completed with an error")                               \
  COUNTER(umr_timeouts, "UMR requests whose completion did not arrive in time")                  \
  COUNTER(reap_errors,                                                                           \
          "closed tenants whose leftovers (pool keys, queues, PD) the device refused")           \
  GAUGE(live_registrations, "registrations and windows live (mapped, not yet revoked)")          \
  GAUGE(keys_in_use, "pooled keys not in the free lists (mapping, live, draining, quarantined)") \
  GAUGE(keys_free, "pooled keys in the free lists")                                              \
  GAUGE(keys_quarantined_now, "keys currently in quarantine")                                    \
  GAUGE(backed_bytes, "bytes of backing memory attached, all tenants")                           \
  GAUGE(gates, "gate keys: one per attached memory on UMR devices (docs/architecture.md)")       \
  GAUGE(tenants, "open tenants")                                                                 \
  GAUGE(tenants_reaping, "closed tenants whose pool keys, queues and PD are being destroyed")    \
  HISTOGRAM(umr_latency_ns, "UMR batch post-to-completion latency")                              \
  HISTOGRAM(miss_latency_ns, "register miss latency (layout, key, UMR, insert)")

RC_DEFINE_HOT_STATS(CacheStats, REGCACHE_CACHE_STATS);

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_STATS_H_
