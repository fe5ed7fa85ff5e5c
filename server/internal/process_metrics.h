// The standard process metrics of /metrics (process_cpu_seconds_total,
// process_resident_memory_bytes, process_open_fds, ...; docs/metrics.md), read from /proc/self
// on each scrape, as Prometheus's own client libraries export them on Linux.
#ifndef REGCACHE_SERVER_INTERNAL_PROCESS_METRICS_H_
#define REGCACHE_SERVER_INTERNAL_PROCESS_METRICS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/internal/prometheus_text.h"

namespace regcache::server::internal {

struct ProcessStats {
  double cpu_seconds = 0;         // user + system time
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;  // the soft RLIMIT_NOFILE
};

// This process's stats. kInternal (naming the file) when /proc cannot be read or parsed.
absl::StatusOr<ProcessStats> ReadProcessStats();

// Adds the process_* families of `stats` to `text`.
void AddProcessMetrics(const ProcessStats& stats, PrometheusText* text);

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_PROCESS_METRICS_H_
