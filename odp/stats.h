// odp/'s stats, declared once (base/stats.h). Registered as component "odp" by the servicer.
// Every degraded path bumps one; tests assert on them.
#ifndef REGCACHE_ODP_STATS_H_
#define REGCACHE_ODP_STATS_H_

#include "base/stats.h"

namespace regcache::odp {

#define REGCACHE_ODP_STATS(COUNTER, GAUGE, HISTOGRAM)                                          \
  COUNTER(faults, "page-fault events read from the device")                                    \
  COUNTER(coalesced, "faults resumed without a rewrite of their own (same pages, or present)") \
  COUNTER(rewrites, "UMR batches that made pages present (faults and prefetches)")             \
  COUNTER(rewrite_wqes, "MTT rewrite WQEs posted (faults, prefetches and zaps)")               \
  COUNTER(rewrite_errors, "MTT rewrites that failed to post, complete or arrive in time")      \
  COUNTER(resumed_ok, "faults resumed with success (counted as the resume is issued)")         \
  COUNTER(resumed_error, "faults resumed with error (counted as the resume is issued)")        \
  COUNTER(resume_failures, "resumes the device refused (the access gave up meanwhile)")        \
  COUNTER(queue_overflow, "faults resumed with error because too many were pending")           \
  COUNTER(unknown_key, "faults on a key that is no tracked on-demand backing")                 \
  COUNTER(populate_errors, "ranges whose pages could not be made resident")                    \
  COUNTER(stale_services, "services that found their pages zapped meanwhile and redid them")   \
  COUNTER(prefetches, "prefetch requests served (sync and async)")                             \
  COUNTER(prefetch_errors, "prefetch requests that failed")                                    \
  COUNTER(prefetch_queue_overflow, "async prefetches refused: the queue was full")             \
  COUNTER(zaps, "zap requests (explicit, and before a backing is removed)")                    \
  COUNTER(zapped_entries, "MTT entries cleared by zaps")                                       \
  COUNTER(zap_errors, "zaps whose UMR failed")                                                 \
  GAUGE(tracked_backings, "on-demand backings known to the servicer")                          \
  GAUGE(queued_prefetches, "async prefetches waiting for the servicer thread")                 \
  HISTOGRAM(service_ns, "fault service time: event read to resume")
RC_DEFINE_STATS(OdpStats, REGCACHE_ODP_STATS);

}  // namespace regcache::odp
#endif  // REGCACHE_ODP_STATS_H_
