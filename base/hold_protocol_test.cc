// The hold protocol (base/hold_protocol.h, docs/hold-protocol.md) on its own, under stress:
// holders take and drop holds in their own HoldWords while a reaper forgets the object again
// and again. An object is never reaped while someone holds it, every forgotten incarnation is
// reaped exactly once (by the reaper or by its last release), and no hold is lost. The cache
// and the client run the same steps over their own records (cache/holds_test.cc,
// client/grant_cache_test.cc).
#include "base/hold_protocol.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(HoldWordTest, FieldsRoundTripAtTheirLimits) {
  const uint64_t w = HoldWord::Make(HoldWord::kMaxTag, HoldWord::kMaxCount);
  EXPECT_EQ(HoldWord::Tag(w), HoldWord::kMaxTag);
  EXPECT_EQ(HoldWord::Count(w), HoldWord::kMaxCount);
  EXPECT_EQ(HoldWord::Count(HoldWord::Make(7, 0)), 0u);
  EXPECT_EQ(HoldWord::Tag(HoldWord::Make(7, 3) + 1), 7u);  // a count step never touches the tag
}

TEST(HoldWordTest, AWordCountsOnlyForItsOwnTag) {
  const uint64_t w = HoldWord::Make(41, 5);
  EXPECT_EQ(HoldWord::HoldsOf(w, 41), 5u);
  EXPECT_EQ(HoldWord::HoldsOf(w, 42), 0u);  // a stale word counts for nobody
}

// One object run by the protocol. State word: (incarnation << 2) | flags.
class Object {
 public:
  static constexpr uint64_t kForgotten = 1;  // the reaper's mark: no new holders
  static constexpr int kThreads = 3;

  static uint32_t Inc(uint64_t s) { return static_cast<uint32_t>(s >> 2); }

  // The holder's steps; true when it holds incarnation *inc.
  bool Hold(int me, uint32_t* inc) {
    const uint64_t s = state_.load(std::memory_order_acquire);
    if ((s & kForgotten) != 0) return false;
    *inc = Inc(s);
    const uint64_t w = words_[me].load(std::memory_order_relaxed);
    words_[me].store(HoldWord::HoldsOf(w, *inc) > 0 ? w + 1 : HoldWord::Make(*inc, 1),
                     std::memory_order_relaxed);
    HolderFence();
    if (state_.load(std::memory_order_acquire) == s) return true;
    Release(me, *inc);  // undo: the reaper may have counted it, so as a release
    return false;
  }

  void Release(int me, uint32_t inc) {
    words_[me].store(words_[me].load(std::memory_order_relaxed) - 1, std::memory_order_release);
    HolderFence();
    const uint64_t s = state_.load(std::memory_order_acquire);
    if (Inc(s) == inc && (s & kForgotten) != 0) Settle(inc);
  }

  // The reaper: forgets the current incarnation; reaps it now when nobody holds it.
  void Forget() {
    absl::MutexLock l(&mu_);
    const uint64_t s = state_.fetch_or(kForgotten, std::memory_order_acq_rel);
    if ((s & kForgotten) != 0) return;
    ++forgotten_;
    ReaperFence();
    if (Holders(Inc(s)) == 0) ReapLocked(Inc(s));
  }

  // Whether incarnation `inc` has been reaped.
  bool Reaped(uint32_t inc) const { return reaped_upto_.load(std::memory_order_acquire) > inc; }

  uint64_t forgotten() {
    absl::MutexLock l(&mu_);
    return forgotten_;
  }
  uint64_t reaps() {
    absl::MutexLock l(&mu_);
    return reaps_;
  }
  uint32_t incarnation() const { return Inc(state_.load(std::memory_order_acquire)); }

 private:
  // A release that saw the mark: under the lock, after any reaper in progress; the sum after
  // the fence tells whether this was the last hold.
  void Settle(uint32_t inc) {
    absl::MutexLock l(&mu_);
    const uint64_t s = state_.load(std::memory_order_acquire);
    if (Inc(s) != inc || (s & kForgotten) == 0) return;  // reaped already
    ReaperFence();
    if (Holders(inc) == 0) ReapLocked(inc);
  }
  int64_t Holders(uint32_t inc) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t n = 0;
    for (const auto& w : words_) n += HoldWord::HoldsOf(w.load(std::memory_order_acquire), inc);
    return n;
  }
  void ReapLocked(uint32_t inc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++reaps_;
    reaped_upto_.store(inc + 1, std::memory_order_release);
    state_.store(uint64_t{inc + 1} << 2, std::memory_order_release);  // the next incarnation
  }

  std::atomic<uint64_t> state_{0};
  std::atomic<uint64_t> words_[kThreads] = {};
  std::atomic<uint32_t> reaped_upto_{0};
  absl::Mutex mu_;
  uint64_t forgotten_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reaps_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(HoldProtocolStressTest, NoObjectIsReapedWhileHeldAndEveryForgottenOneIsReapedOnce) {
  Object obj;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> held_while_reaped{0};
  std::atomic<uint64_t> holds{0};
  std::vector<std::thread> holders;
  for (int me = 0; me < Object::kThreads; ++me) {
    holders.emplace_back([&, me] {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        uint32_t inc = 0;
        if (!obj.Hold(me, &inc)) continue;
        ++n;
        // Held: the reaper must not have reaped this incarnation, now or until the release.
        for (int spin = 0; spin < static_cast<int>(n % 16); ++spin) {
          if (obj.Reaped(inc)) held_while_reaped.fetch_add(1);
        }
        if (obj.Reaped(inc)) held_while_reaped.fetch_add(1);
        obj.Release(me, inc);
      }
      holds.fetch_add(n);
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  while (std::chrono::steady_clock::now() < deadline) {
    obj.Forget();
    std::this_thread::yield();
  }
  stop.store(true);
  for (auto& t : holders) t.join();

  EXPECT_EQ(held_while_reaped.load(), 0u);
  EXPECT_GT(holds.load(), 0u);
  // Nobody holds anything now: the last forgotten incarnation was reaped by its last release
  // (or by the reaper), so every forget was followed by exactly one reap.
  EXPECT_EQ(obj.reaps(), obj.forgotten());
  EXPECT_EQ(obj.incarnation(), obj.forgotten());
  EXPECT_GT(obj.forgotten(), 10u) << "the reaper hardly ran: the test proved little";
}

}  // namespace
}  // namespace regcache::base
