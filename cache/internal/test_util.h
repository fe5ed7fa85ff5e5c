// Test hooks at work: a one-shot Event and a Stall that holds a thread at a hook point of
// cache/internal/holds.h until the test lets it go (cache/holds_test.cc, cache/gates_test.cc).
#ifndef REGCACHE_CACHE_INTERNAL_TEST_UTIL_H_
#define REGCACHE_CACHE_INTERNAL_TEST_UTIL_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "cache/internal/holds.h"

namespace regcache::cache::testing {

using ::regcache::cache::internal::HookPoint;

// A one-shot event on std primitives: Debian's abseil is not built for ThreadSanitizer, which
// therefore cannot see Event's ordering.
class Event {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  void WaitForNotification() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return set_; });
  }
  bool WaitForNotificationWithTimeout(absl::Duration d) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(d), [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// Stalls one chosen thread the first time it reaches one hook point, until the test lets it go:
// forces the interleavings that chance would hit once in millions of runs.
class Stall {
 public:
  explicit Stall(HookPoint point) {
    point_ = point;
    any_.store(false);
    reached_ = std::make_unique<Event>();
    resume_ = std::make_unique<Event>();
#ifndef NDEBUG
    internal::test_hook.store(&Hook);
#endif
  }
  ~Stall() {
#ifndef NDEBUG
    internal::test_hook.store(nullptr);
#endif
    Resume();
  }
  // Called on the thread to stall, before it runs into the point.
  void Arm() { who_.store(std::this_thread::get_id()); }
  // Stalls whichever thread reaches the point first (one the test does not run: the reaper).
  void ArmAny() { any_.store(true); }
  bool WaitReached() { return reached_->WaitForNotificationWithTimeout(absl::Seconds(10)); }
  void Resume() { resume_->Notify(); }

  static bool Available() {
#ifndef NDEBUG
    return true;
#else
    return false;
#endif
  }

 private:
  static void Hook(HookPoint p) {
    if (p != point_) return;
    if (!any_.exchange(false)) {
      if (std::this_thread::get_id() != who_.load()) return;
      who_.store(std::thread::id());  // once
    }
    reached_->Notify();
    (void)resume_->WaitForNotificationWithTimeout(absl::Seconds(10));
  }
  // One Stall at a time (its threads are joined before the next is made).
  static inline HookPoint point_;
  static inline std::atomic<std::thread::id> who_;
  static inline std::atomic<bool> any_{false};
  static inline std::unique_ptr<Event> reached_;
  static inline std::unique_ptr<Event> resume_;
};

}  // namespace regcache::cache::testing
#endif  // REGCACHE_CACHE_INTERNAL_TEST_UTIL_H_
