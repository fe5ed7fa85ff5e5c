// Per-tenant stats with a bounded number of labels: the sessions' usage summed by tenant (the
// uid of the process that opened the session), as gauges of component `tenant{tenant="<uid>"}`
// (on /metrics: regcache_tenant_sessions{tenant="1000"}, ...; docs/metrics.md).
//
// Cardinality: at most `max_tenants` tenants get a label of their own — the largest by backed
// bytes, then live registrations, then sessions (ties: the smaller uid) — and the rest are summed
// under tenant="other", so a host with many users cannot grow the series without bound. A tenant
// whose sessions all closed has no series. Internal to service/.
#ifndef REGCACHE_SERVICE_INTERNAL_TENANT_STATS_H_
#define REGCACHE_SERVICE_INTERNAL_TENANT_STATS_H_

#include <cstdint>
#include <vector>

#include "base/stats.h"
#include "service/daemon.h"

namespace regcache::service::internal {

// The tenant samples of `sessions` (sessions, live_registrations, revoked_held, backed_bytes,
// memories for each tenant), the labelled tenants in the order above, then "other" if any.
std::vector<base::stats::Sample> TenantSamples(const std::vector<SessionInfo>& sessions,
                                               uint32_t max_tenants);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_TENANT_STATS_H_
