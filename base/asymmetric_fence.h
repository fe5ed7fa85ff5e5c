// Asymmetric fences: a store-load fence split unevenly between a fast side, run millions of
// times a second, and a slow side, run rarely.
//
//   fast thread:  store X; LightFence(); load Y
//   slow thread:  store Y; HeavyFence(); load X
//
// Afterwards at least one of the two loads sees the other thread's store, as if both had run a
// sequentially consistent fence. LightFence costs nothing at run time (it only keeps the
// compiler from moving memory accesses across it); HeavyFence makes every CPU that runs a
// thread of this process execute a full barrier, through membarrier(2)'s private expedited
// command (Linux 4.14+). Where the kernel refuses that command, or REGCACHE_NO_MEMBARRIER is set
// in the environment at start-up, both sides fall back to a real seq_cst fence.
//
// The pattern is the one folly's asymmetricLightBarrier / asymmetricHeavyBarrier and the
// kernel's own sys_membarrier users follow. The C++ memory model has no word for it, so the
// light side's accesses must all be atomics (they are, in cache/), and ThreadSanitizer, which
// does not see the IPI, is not asked to prove it: the protocols built on it have their own
// stress tests, run in both modes.
//
// Thread safety: all functions may be called from any thread.
#ifndef REGCACHE_BASE_ASYMMETRIC_FENCE_H_
#define REGCACHE_BASE_ASYMMETRIC_FENCE_H_

#include <atomic>

namespace base {

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

// Microseconds (an IPI to each CPU running one of this process's threads) when membarrier is
// in use; a plain fence otherwise.
void HeavyFence();

// Whether HeavyFence uses membarrier (else both sides fence).
bool AsymmetricFenceUsesMembarrier();

}  // namespace base

#endif  // REGCACHE_BASE_ASYMMETRIC_FENCE_H_
