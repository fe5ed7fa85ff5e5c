// The verbs backend's vocabulary: its options (a "verbs:..." device spec) and stats, in a header
// of their own so that the backend's parts (hca/verbs/context.h) need not include the device's
// facade (hca/verbs/verbs_device.h).
#ifndef REGCACHE_HCA_VERBS_VERBS_OPTIONS_H_
#define REGCACHE_HCA_VERBS_VERBS_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "hca/backend.h"

namespace regcache::hca::verbs {

#define HCA_VERBS_STATS(COUNTER, GAUGE, HISTOGRAM)                                  \
  COUNTER(binds_posted, "window binds posted (maps and invalidates)")               \
  COUNTER(bind_lists_posted, "lists of window binds posted by one ibv_post_send")   \
  COUNTER(bind_errors, "binds completed with an error or refused before posting")   \
  COUNTER(queue_recoveries, "bind queue pairs reset after an error")                \
  COUNTER(bind_markers, "signalled marker binds posted to cover unsignalled ones")  \
  COUNTER(bind_completions, "work completions of binds polled (one covers a list)") \
  COUNTER(backings_registered, "ibv_reg_mr calls that succeeded")                   \
  COUNTER(registered_bytes, "bytes registered by ibv_reg_mr")                       \
  COUNTER(windows_allocated, "ibv_alloc_mw calls that succeeded")                   \
  COUNTER(endpoints_connected, "target endpoints connected")                        \
  COUNTER(cuts_registered, "regions cut at a key's edges (strict key bounds)")      \
  COUNTER(cut_bytes, "bytes registered in regions cut at a key's edges")            \
  COUNTER(cut_release_errors, "cut regions the device refused to deregister")       \
  GAUGE(live_windows, "memory windows allocated")                                   \
  GAUGE(live_backings, "memory regions registered")                                 \
  GAUGE(live_cuts, "regions cut at a key's edges, registered now")                  \
  GAUGE(bind_lists, "1 when binds are posted as lists (the self-test at open allowed it)")
RC_DEFINE_STATS(VerbsStats, HCA_VERBS_STATS);

struct VerbsOptions {
  std::string device_name;  // the ibv device ("rxe0"); empty: the first one with an active port
  uint8_t port = 1;         // spec "port="
  int gid_index = 0;        // spec "gid_index=": RoCE GID table entry used for connections
  uint32_t max_queue_depth = 4096;  // spec "max_queue_depth=": bind queue pair size cap
  // spec "bind_lists=0": one ibv_bind_mw per bind even where the self-test at open found that
  // the provider takes a list of binds in one ibv_post_send (docs/verbs.md). verbs only.
  bool bind_lists = true;
};

// Applies `key`=`value` if it is one of the verbs context's own parameters (port, gid_index,
// max_queue_depth), which every backend built on hca/verbs' Context takes. Returns whether it
// was one; kInvalidArgument, naming `backend`, for a bad value.
absl::StatusOr<bool> ApplyContextParam(absl::string_view backend, const std::string& key,
                                       const std::string& value, VerbsOptions* o);

// Parses a "verbs[:name,port=N,gid_index=N,max_queue_depth=N,bind_lists=0|1]" spec.
// kInvalidArgument for unknown keys or bad numbers.
absl::StatusOr<VerbsOptions> VerbsOptionsFromSpec(const BackendSpec& spec);

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_VERBS_OPTIONS_H_
