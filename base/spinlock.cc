#include "base/spinlock.h"

#include <sched.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace base {

void SpinLock::LockSlow() {
  for (int spins = 0;; ++spins) {
    if (!locked_.load(std::memory_order_relaxed) &&
        !locked_.exchange(true, std::memory_order_acquire)) {
      return;
    }
    if (spins < 128) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      ::sched_yield();
    }
  }
}

}  // namespace base
