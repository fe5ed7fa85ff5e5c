// The fault servicer's vocabulary: its options and the prefetch modes, in a header of their own
// so that odp/'s other headers need not include the servicer's facade (odp/servicer.h).
#ifndef REGCACHE_ODP_TYPES_H_
#define REGCACHE_ODP_TYPES_H_

#include <cstdint>
#include <functional>

#include "absl/time/time.h"
#include "hca/device.h"

namespace regcache::odp {

enum class FaultPath {
  kAuto,    // kDaemon if the device has a fault-event stream, else kKernel
  kDaemon,  // odp/ services faults with UMRs (sim)
  kKernel,  // the kernel services faults; prefetch -> Device::Prefetch (mlx5)
};

enum class PopulateMethod {
  kMadvise,  // MADV_POPULATE_READ/WRITE, falling back to kTouch on kernels before 5.14
  kTouch,    // SIGBUS-guarded per-page touch (tests force it to check the fallback)
};

struct ServicerOptions {
  FaultPath path = FaultPath::kAuto;
  PopulateMethod populate = PopulateMethod::kMadvise;
  // Faults taken into one batch; faults beyond it are resumed with error. Default 4096.
  uint32_t max_pending_faults = 4096;
  // Asynchronous prefetches waiting for the thread; beyond it Prefetch fails with
  // kResourceExhausted. Default 1024.
  uint32_t max_queued_prefetches = 1024;
  // Depth of each per-PD rewrite queue, in 64-byte WQE basic blocks (power of two, >= 32).
  // Default 256.
  uint32_t queue_depth = 256;
  // How long a rewrite may wait for its completion before it fails (and the queue is replaced).
  // Default 2 s.
  absl::Duration completion_timeout = absl::Seconds(2);
  // Start the thread in Create. false: faults stay pending until Start() (tests use it to
  // stage concurrent faults deterministically). Default true.
  bool start = true;
  // Test hook: runs after a service made its pages resident and before it publishes them
  // (outside every lock), with the backing's key. Lets a test zap or truncate in that window.
  std::function<void(hca::Key)> after_populate_for_test;
};

enum class PrefetchMode {
  kSync,   // the translations are present (or the error known) when Prefetch returns
  kAsync,  // queued to the servicer thread; Prefetch returns once it is queued
};

}  // namespace regcache::odp
#endif  // REGCACHE_ODP_TYPES_H_
