// Clients' own PDs and memory (docs/client_memory.md): the session's PD exported to its client,
// and regions the client registered in it attached as the session's memory. The daemon's
// ExportPd, AttachRegion, and the client-region half of DetachMemory and ListMemory. Internal to
// service/: callers use service/daemon.h.
#ifndef REGCACHE_SERVICE_INTERNAL_CLIENT_REGIONS_H_
#define REGCACHE_SERVICE_INTERNAL_CLIENT_REGIONS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "service/internal/session_table.h"
#include "service/types.h"

namespace regcache::service::internal {

// Daemon::ExportPd for a pinned session (on the session's device).
absl::StatusOr<hca::PdExport> ExportSessionPd(const DaemonConfig& config, Session& s);

// Daemon::AttachRegion for a pinned session.
absl::StatusOr<MemoryId> AttachClientRegion(const DaemonConfig& config, Session& s,
                                            const ClientRegion& region) ABSL_LOCKS_EXCLUDED(s.mu);

// DetachMemory of a client region: revokes the grants over it, invalidates every key over it
// and forgets the region. kNotFound when `memory` is not a client region of the session.
absl::Status DetachClientRegion(Session& s, MemoryId memory) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

// Appends the session's client regions to a ListMemory answer.
void ListClientRegions(const Session& s, std::vector<MemoryInfo>* out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_CLIENT_REGIONS_H_
