// The daemon's own counters (sessions, memory), registered under "daemon".
#ifndef REGCACHE_SERVICE_INTERNAL_DAEMON_STATS_H_
#define REGCACHE_SERVICE_INTERNAL_DAEMON_STATS_H_

#include "base/stats.h"

namespace regcache::service::internal {

#define REGCACHE_DAEMON_STATS(COUNTER, GAUGE, HISTOGRAM)                       \
  COUNTER(sessions_opened, "sessions opened")                                  \
  COUNTER(sessions_refused, "sessions refused (allow-list, draining, limit)")  \
  COUNTER(sessions_closed, "sessions closed (disconnect, death or drain)")     \
  COUNTER(auth_failures, "calls with a missing or unknown session token")      \
  COUNTER(memory_allocated, "memfd arenas created for clients")                \
  COUNTER(memory_imported, "client memory files imported")                     \
  COUNTER(memory_refused, "memory requests refused")                           \
  GAUGE(sessions_open, "sessions open now")                                    \
  GAUGE(memory_mapped_bytes, "bytes of shareable memory mapped by the daemon") \
  HISTOGRAM(session_close_ns, "time to run a closing session's keys through the lifecycle")

RC_DEFINE_STATS(DaemonStats, REGCACHE_DAEMON_STATS);

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_DAEMON_STATS_H_
