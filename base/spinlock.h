// SpinLock: a test-and-test-and-set lock for critical sections of a few dozen instructions on
// hot paths (the registration index shards), where a pthread rwlock's lock + unlock pair costs
// more than the work it protects. Annotated like base::Mutex, so -Wthread-safety checks its
// users; built on acquire/release atomics, so ThreadSanitizer understands it.
//
// Waiters spin with a CPU pause for a short while, then yield the CPU: on a machine with fewer
// cores than runnable threads the holder may be preempted, and burning its core would only
// delay it. Do not hold a SpinLock across anything that blocks or allocates much.
//
// Thread safety: this is the primitive.
#ifndef REGCACHE_BASE_SPINLOCK_H_
#define REGCACHE_BASE_SPINLOCK_H_

#include <atomic>

#include "absl/base/thread_annotations.h"

namespace base {

class ABSL_LOCKABLE SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  void LockSlow();
  std::atomic<bool> locked_{false};
};

class ABSL_SCOPED_LOCKABLE SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~SpinLockHolder() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock* const mu_;
};

}  // namespace base

#endif  // REGCACHE_BASE_SPINLOCK_H_
