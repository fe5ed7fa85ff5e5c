#include "base/mutex.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace regcache::base {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

void Mutex::LockSlow() {
  for (int i = 0; i < kSpins; ++i) {
    CpuRelax();
    if (mu_.try_lock()) return;
  }
  mu_.lock();
}

void Mutex::ReaderLockSlow() {
  for (int i = 0; i < kSpins; ++i) {
    CpuRelax();
    if (mu_.try_lock_shared()) return;
  }
  mu_.lock_shared();
}

}  // namespace regcache::base