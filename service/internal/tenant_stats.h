// Per-tenant stats with a bounded number of labels: the sessions' usage summed by tenant (the
// uid of the process that opened the session), as gauges of component `tenant{tenant="<uid>"}`
// (on /metrics: regcache_tenant_sessions{tenant="1000"}, ...; docs/metrics.md).
//
// What is counted comes from the daemon's own session records (each read under the session's
// short lock), never from the cache's tenant locks, which a tenant's slow attach holds for
// seconds: a scrape must not wait for one tenant.
//
// Cardinality: at most `max_tenants` tenants get a label of their own — the largest by mapped
// bytes, then sessions (ties: the smaller uid) — and the rest are summed under tenant="other",
// so a host with many users cannot grow the series without bound. A tenant whose sessions all
// closed has no series. Internal to service/.
#ifndef REGCACHE_SERVICE_INTERNAL_TENANT_STATS_H_
#define REGCACHE_SERVICE_INTERNAL_TENANT_STATS_H_

#include <cstdint>
#include <vector>

#include "base/stats.h"

namespace regcache::service::internal {

// What one open session counts for its tenant.
struct TenantSession {
  uint32_t uid = 0;
  uint64_t mapped_bytes = 0;  // shareable memory the daemon maps for it
  uint64_t memories = 0;      // its memories and client regions
};

// The tenant samples of `sessions` (sessions, mapped_bytes, memories for each tenant), the
// labelled tenants in the order above, then "other" if any.
std::vector<base::stats::Sample> TenantSamples(const std::vector<TenantSession>& sessions,
                                               uint32_t max_tenants);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_TENANT_STATS_H_
