// MonotonicNow: the current point on CLOCK_MONOTONIC, as an absl::Time, for durations,
// deadlines and timestamps that are only compared with each other (quarantine entry times, the
// UMR engine's deadlines, latency histograms). Unlike absl::Now() it never steps when the wall
// clock is set (a forward step would cut a key's quarantine short), and it costs a vDSO
// clock_gettime (~20 ns here) instead of absl::Now()'s ~90.
//
// The value is not a calendar time: never print it or compare it with absl::Now().
//
// Thread safety: may be called from any thread.
#ifndef REGCACHE_BASE_CLOCK_H_
#define REGCACHE_BASE_CLOCK_H_

#include <time.h>

#include "absl/time/time.h"

namespace regcache::base {

inline absl::Time MonotonicNow() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::TimeFromTimespec(ts);
}

}  // namespace regcache::base
#endif  // REGCACHE_BASE_CLOCK_H_
