// Futex wait and wake on the 32-bit words of the fast path's shared files
// (protocol/shm_protocol.h). Shared futexes (not FUTEX_PRIVATE): the words live in a file that
// two processes map, and the kernel keys a shared futex by the file and offset.
//
// Thread safety: system calls; any thread.
#ifndef REGCACHE_PROTOCOL_SHM_FUTEX_H_
#define REGCACHE_PROTOCOL_SHM_FUTEX_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "absl/time/time.h"

namespace regcache::protocol::shm {

// Sleeps while *word == expected, at most `timeout` (absl::InfiniteDuration(): no limit).
// Returns on a wake-up, a changed word, a signal or the timeout: callers re-check their
// condition.
inline void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
                      absl::Duration timeout) {
  timespec ts;
  timespec* tsp = nullptr;
  if (timeout != absl::InfiniteDuration()) {
    if (timeout < absl::ZeroDuration()) timeout = absl::ZeroDuration();
    ts = absl::ToTimespec(timeout);
    tsp = &ts;
  }
  (void)::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, tsp,
                  nullptr, 0);
}

// Wakes every waiter on `word`.
inline void FutexWakeAll(const std::atomic<uint32_t>* word) {
  (void)::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
                  nullptr, 0);
}

// A pause instruction for spin loops.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace regcache::protocol::shm
#endif  // REGCACHE_PROTOCOL_SHM_FUTEX_H_
