// Daemon::AttachMemory, with the slow part off the session's lock. Registering a large memory
// with the device takes long (seconds for tens of GiB in 4 KiB pages); holding the session's
// mutex meanwhile would make every other call of that session wait, the control socket's fd
// imports included — and the control socket's one thread serves every tenant. So the memory is
// marked as being attached under the lock, registered without it, and committed under it
// again; DetachMemory refuses a memory in between (kFailedPrecondition). Internal to service/.
#ifndef REGCACHE_SERVICE_INTERNAL_ATTACH_MEMORY_H_
#define REGCACHE_SERVICE_INTERNAL_ATTACH_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "service/internal/session_table.h"
#include "service/types.h"

namespace regcache::service::internal {

// Daemon::AttachMemory for a pinned session (its contract).
absl::Status AttachSessionMemory(const DaemonConfig& config, Session& s, MemoryId memory,
                                 uint64_t client_va, bool on_demand) ABSL_LOCKS_EXCLUDED(s.mu);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_ATTACH_MEMORY_H_
