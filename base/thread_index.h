// ThreadIndex: a small dense number for the calling thread, for per-thread arrays that other
// threads scan (cache/'s per-thread holds). Unique among live threads; an exiting thread's
// number goes back to a pool and the lowest free one is handed out next, so the numbers in use
// stay below the peak count of live threads and a scan up to ThreadIndexLimit() stays short.
//
// A number handed to a new thread carries whatever the old owner left in per-thread state
// indexed by it; the pool's mutex orders the old owner's last writes before the new owner's
// first. Users must therefore keep such state meaningful across owners (cache/ does: it holds
// counts, not pointers to the thread).
//
// Thread safety: all functions may be called from any thread.
#ifndef REGCACHE_BASE_THREAD_INDEX_H_
#define REGCACHE_BASE_THREAD_INDEX_H_

#include <atomic>
#include <cstdint>

namespace regcache::base {

inline constexpr uint32_t kMaxThreadIndices = 1024;
// No number: kMaxThreadIndices threads hold one, or the thread is exiting.
inline constexpr uint32_t kNoThreadIndex = UINT32_MAX;

namespace internal_thread_index {
inline constexpr uint32_t kUnassigned = UINT32_MAX - 1;
// kUnassigned until the first call. constinit: read directly, without a TLS wrapper call.
extern constinit thread_local uint32_t tls_index;
uint32_t Assign();
}  // namespace internal_thread_index

// The calling thread's number, below kMaxThreadIndices, or kNoThreadIndex. One thread-local
// load after the first call.
inline uint32_t ThreadIndex() {
  const uint32_t i = internal_thread_index::tls_index;
  if (i < kMaxThreadIndices) [[likely]]
    return i;
  return i == internal_thread_index::kUnassigned ? internal_thread_index::Assign() : kNoThreadIndex;
}

// One past the highest number ever handed out (never decreases). A thread that got its number
// before a call sees the number below the value returned; for threads that get one
// concurrently, pair with a fence as the user's protocol requires.
uint32_t ThreadIndexLimit();

// Numbers now held by live threads (for tests and diagnostics).
uint32_t ThreadIndicesInUse();

}  // namespace regcache::base
#endif  // REGCACHE_BASE_THREAD_INDEX_H_
