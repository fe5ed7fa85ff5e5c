// Asymmetric fences: a store-load fence split unevenly between a fast side, run millions of
// times a second, and a slow side, run rarely.
//
//   fast thread:  store X; LightFence(); load Y
//   slow thread:  store Y; HeavyFence(); load X
//
// Afterwards at least one of the two loads sees the other thread's store, as if both had run a
// sequentially consistent fence. Two modes, chosen once at start-up:
//
//   symmetric (the default): both sides run a real seq_cst fence (a locked instruction on
//     x86, tens of cycles on a line the thread owns).
//   membarrier (REGCACHE_MEMBARRIER=1 in the environment, on Linux 4.14+): LightFence only
//     keeps the compiler from moving memory accesses across it; HeavyFence makes every CPU
//     that runs a thread of this process execute a full barrier, through membarrier(2)'s
//     private expedited command. This is the pattern of folly's asymmetricLightBarrier /
//     asymmetricHeavyBarrier.
//
// Why symmetric is the default (cache_bench, 2-core VM): the membarrier mode makes a cache hit
// only ~8% faster (1k registrations: 31 vs 28 Mops/s), while each HeavyFence IPIs every CPU
// running one of the process's threads, which cost 8 us per invalidation instead of 2.3 with
// two busy threads, and interrupts every other thread of the daemon (latency jitter).
//
// The C++ memory model has no word for the membarrier mode, so the light side's accesses must
// all be atomics (they are, in cache/), and ThreadSanitizer, which does not see the IPI, is not
// asked to prove it: the protocols built on it have their own tests, run in both modes.
//
// Thread safety: all functions may be called from any thread.
#ifndef REGCACHE_BASE_ASYMMETRIC_FENCE_H_
#define REGCACHE_BASE_ASYMMETRIC_FENCE_H_

#include <atomic>

namespace regcache::base {

namespace internal_fence {
// Set once, during static initialisation (before any thread can run a fence), when membarrier
// was registered for this process.
extern bool membarrier_ready;
}  // namespace internal_fence

inline void LightFence() {
  if (internal_fence::membarrier_ready) [[likely]] {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// A plain fence, or in the membarrier mode microseconds: an IPI to each CPU running one of
// this process's threads.
void HeavyFence();

// Whether the membarrier mode is on (else both sides fence).
bool AsymmetricFenceUsesMembarrier();

}  // namespace regcache::base
#endif  // REGCACHE_BASE_ASYMMETRIC_FENCE_H_
