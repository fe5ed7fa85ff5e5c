// Asymmetric fences: a store-load fence split unevenly between a fast side, run millions of
// times a second, and a slow side, run rarely.
//
//   fast thread:  store X; LightFence(); load Y
//   slow thread:  store Y; HeavyFence(); load X
//
// Afterwards at least one of the two loads sees the other thread's store, as if both had run a
// sequentially consistent fence. Two modes (FenceMode), each user of the fences picking one
// when it is created:
//
//   symmetric: both sides run a real seq_cst fence (a locked instruction on x86, tens of
//     cycles on a line the thread owns).
//   membarrier (Linux 4.14+): LightFence only keeps the compiler from moving memory accesses
//     across it; HeavyFence makes every CPU that runs a thread of this process execute a full
//     barrier, through membarrier(2)'s private expedited command. This is the pattern of
//     folly's asymmetricLightBarrier / asymmetricHeavyBarrier.
//
// Which one, by default (ChooseFenceMode):
//   - the daemon's cache (the no-argument functions below): symmetric. The membarrier mode
//     makes its hit only ~8% faster (cache_bench, 2-core VM, 1k registrations: 31 vs 28
//     Mops/s), while each HeavyFence IPIs every CPU running one of the process's threads: 8 us
//     per invalidation instead of 2.3 with two busy threads, and an interruption of every other
//     thread of the daemon, which serves every tenant.
//   - the client's grant cache (client/internal/grant_cache.h): membarrier. Its hit is a few
//     loads and the fence was a third of it (shm_bench, 1k grants: 17.7 ns against 27.6); its
//     reaper runs on the application's own revocations and reclaims, and interrupts only the
//     application's own threads.
// REGCACHE_MEMBARRIER=1 in the environment makes every user take membarrier, =0 symmetric.
// Without kernel support (or where a seccomp filter refuses the call) everything is symmetric.
//
// The C++ memory model has no word for the membarrier mode, so the light side's accesses must
// all be atomics (they are, in cache/), and ThreadSanitizer, which does not see the IPI, is not
// asked to prove it: the protocols built on it have their own tests, run in both modes.
//
// Thread safety: all functions may be called from any thread.
#ifndef REGCACHE_BASE_ASYMMETRIC_FENCE_H_
#define REGCACHE_BASE_ASYMMETRIC_FENCE_H_

#include <atomic>
#include <cstdint>

namespace regcache::base {

enum class FenceMode : uint8_t { kSymmetric, kMembarrier };

namespace internal_fence {
// Set once, during static initialisation (before any thread can run a fence): the mode of the
// no-argument functions (the daemon's default, or REGCACHE_MEMBARRIER's).
extern FenceMode default_mode;
}  // namespace internal_fence

// The mode for a user of the fences whose own default is `preferred`: REGCACHE_MEMBARRIER
// overrides it, and membarrier is chosen only where it was registered at start-up.
FenceMode ChooseFenceMode(FenceMode preferred);

inline void LightFence(FenceMode mode) {
  if (mode == FenceMode::kMembarrier) [[likely]] {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// A plain fence, or in the membarrier mode microseconds: an IPI to each CPU running one of
// this process's threads.
void HeavyFence(FenceMode mode);

// The daemon's defaults (symmetric unless REGCACHE_MEMBARRIER=1).
inline void LightFence() { LightFence(internal_fence::default_mode); }
inline void HeavyFence() { HeavyFence(internal_fence::default_mode); }

// Whether the no-argument functions use the membarrier mode (else both sides fence).
bool AsymmetricFenceUsesMembarrier();

}  // namespace regcache::base
#endif  // REGCACHE_BASE_ASYMMETRIC_FENCE_H_
