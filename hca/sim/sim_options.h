// The software HCA's vocabulary: its options (a "sim:..." device spec), execution modes and
// stats, in a header of their own so that the sim's internals need not include the device's
// facade (hca/sim/sim_device.h).
#ifndef REGCACHE_HCA_SIM_SIM_OPTIONS_H_
#define REGCACHE_HCA_SIM_SIM_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "hca/backend.h"

namespace regcache::hca::sim {

#define HCA_SIM_STATS(COUNTER, GAUGE, HISTOGRAM)                              \
  COUNTER(translations, "accesses translated successfully")                   \
  COUNTER(translation_errors, "accesses refused by a key check")              \
  COUNTER(moved_bytes, "bytes moved by the peer data path")                   \
  COUNTER(peer_reads, "peer RDMA READs")                                      \
  COUNTER(peer_writes, "peer RDMA WRITEs")                                    \
  COUNTER(peer_atomics, "peer atomics")                                       \
  COUNTER(local_accesses, "local SGE accesses by lkey")                       \
  COUNTER(remote_invalidations, "keys invalidated by SEND with invalidate")   \
  COUNTER(remote_invalidations_refused, "SEND with invalidate refused")       \
  COUNTER(wqes_executed, "WQEs executed")                                     \
  COUNTER(umrs_executed, "UMR WQEs executed successfully")                    \
  COUNTER(umrs_failed, "WQEs completed with an error")                        \
  COUNTER(local_invalidations, "local invalidate UMRs executed")              \
  COUNTER(cqes_written, "CQEs written")                                       \
  COUNTER(doorbells, "doorbells rung")                                        \
  COUNTER(commands, "firmware commands executed")                             \
  COUNTER(command_errors, "firmware commands failed")                         \
  COUNTER(page_faults, "ODP page-fault events raised")                        \
  COUNTER(faults_resumed_ok, "faults resumed with success")                   \
  COUNTER(faults_resumed_error, "faults resumed with error")                  \
  COUNTER(fault_timeouts, "parked accesses that timed out")                   \
  COUNTER(prefetches, "prefetch calls")                                       \
  GAUGE(backings_delayed, "RegisterBacking calls in their backing_delay now") \
  COUNTER(injected_failures, "failures injected by test hooks")               \
  COUNTER(endpoint_refusals, "remote-node accesses an endpoint refused")      \
  GAUGE(live_keys, "keys in the key table")                                   \
  GAUGE(live_endpoints, "target endpoints (responder QPs) alive")             \
  GAUGE(parked_accesses, "accesses waiting for a fault resume")
RC_DEFINE_STATS(SimStats, HCA_SIM_STATS);

enum class ExecutionMode { kInline, kThread };

// The kind of a memory access the device translates (hca/sim/sim_core.h).
enum class AccessKind : uint8_t {
  kLocalRead,
  kLocalWrite,
  kRemoteRead,
  kRemoteWrite,
  kRemoteAtomic
};

inline bool IsRemote(AccessKind k) { return k >= AccessKind::kRemoteRead; }
inline bool IsWrite(AccessKind k) {
  return k == AccessKind::kLocalWrite || k == AccessKind::kRemoteWrite ||
         k == AccessKind::kRemoteAtomic;
}

// A contiguous piece of host memory an access touches ("DMA address" = this process's virtual
// address).
struct Segment {
  uint64_t addr = 0;
  uint64_t len = 0;
};
using Segments = absl::InlinedVector<Segment, 4>;

struct SimOptions {
  ExecutionMode mode = ExecutionMode::kInline;      // spec "mode=inline|thread"
  uint32_t max_keys = 1u << 16;                     // key table size; spec "max_keys="
  uint32_t max_indirection = 4;                     // KLM/KSM hops; spec "max_indirection="
  uint32_t log_max_klm_list_size = 16;              // max KLM entries = 2^n; spec "log_max_klm="
  uint32_t max_queue_depth = 1u << 15;              // WQEBBs
  absl::Duration fault_timeout = absl::Seconds(5);  // parked access gives up; "fault_timeout_ms="
  std::string device_name = "sim0";
  // The two QUERY_HCA_CAP bits that forbid a UMR to change A / PAGE_SIZE: the sim then fails
  // such a UMR with LOCAL_QP_OP, as a device that reports them refuses it. Spec
  // "umr_modify_atomic_disabled=1", "umr_modify_entity_size_disabled=1".
  bool umr_modify_atomic_disabled = false;
  bool umr_modify_entity_size_disabled = false;
  // Every UMR completion becomes visible this long after its WQE executed: a slow device, for
  // tests of what happens while a key is being made. Spec "completion_delay_ms=".
  absl::Duration completion_delay = absl::ZeroDuration();
  // Every RegisterBacking takes at least this long, as pinning and registering a large region
  // does on hardware: a slow attach, for tests of what must not wait on one. Spec
  // "backing_delay_ms=".
  absl::Duration backing_delay = absl::ZeroDuration();
};

// Parses the parameters of a "sim:..." spec (those named above). kInvalidArgument for unknown
// keys, bad numbers, a positional device name is taken as device_name.
absl::StatusOr<SimOptions> SimOptionsFromSpec(const BackendSpec& spec);

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_SIM_OPTIONS_H_
