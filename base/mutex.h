// Mutex, reader/writer locking and condition variables for the whole project.
//
// Why not absl::Mutex: Debian 12 ships abseil as a prebuilt, uninstrumented shared library, so
// ThreadSanitizer cannot see absl::Mutex's synchronization and reports every access it guards
// as a race (checked: two threads incrementing a counter under absl::MutexLock are flagged).
// base::Mutex keeps absl's thread-safety annotations (clang -Wthread-safety checks them) on top
// of std::shared_mutex, which TSAN intercepts. Use it, with ABSL_GUARDED_BY and friends, for
// every lock in the project.
//
// Contention: a waiter first spins a short, bounded while (kSpins tries with a CPU pause in
// between) and only then sleeps in the kernel. The project's critical sections are sub-
// microsecond to a few microseconds, while a futex sleep and wake-up costs several
// microseconds (far more in a VM), so two threads taking turns on one lock spent most of their
// time switching (cache_bench's 2-thread miss ran at a third of one thread's rate).
//
// Thread safety: these are the synchronization primitives themselves.
#ifndef REGCACHE_BASE_MUTEX_H_
#define REGCACHE_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace regcache::base {

// A batch that takes a lock for many items takes it once per run of this many, not once per
// item: the batch pays per run, and no hold is long for the lock's other users (the cache's
// tenant mutexes, a session's grant table, the client's grant cache).
inline constexpr size_t kBatchLockRun = 64;

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (!mu_.try_lock()) LockSlow();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() {
    if (!mu_.try_lock_shared()) ReaderLockSlow();
  }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }
  // Documents (for the analysis) that the caller holds the lock; checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  void AssertReaderHeld() const ABSL_ASSERT_SHARED_LOCK() {}

  // BasicLockable spelling, for std::condition_variable_any. Prefer the methods above.
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { Lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  static constexpr int kSpins = 64;
  void LockSlow() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void ReaderLockSlow() ABSL_SHARED_LOCK_FUNCTION();

  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Condition variable used with an exclusively held base::Mutex. Waits may wake spuriously:
// always wait in a loop on the predicate (or use the predicate overloads).
class CondVar {
 public:
  // REQUIRES: *mu held exclusively. Returns with *mu held.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { cv_.wait(*mu); }
  // Returns true if the timeout expired, false if woken (or spuriously) — absl::CondVar's
  // convention, so code written against absl reads the same.
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return cv_.wait_for(*mu, absl::ToChronoNanoseconds(timeout)) == std::cv_status::timeout;
  }
  // Waits until pred() or the timeout; returns pred().
  template <typename Pred>
  bool WaitFor(Mutex* mu, absl::Duration timeout, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return cv_.wait_for(*mu, absl::ToChronoNanoseconds(timeout), std::move(pred));
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace regcache::base
#endif  // REGCACHE_BASE_MUTEX_H_
