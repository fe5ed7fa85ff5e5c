// Test-only: a raw fast-path "client" that maps a session's two files itself and speaks the
// ring protocol of protocol/shm_protocol.h directly (no client library), so that service tests
// can also misbehave the way a broken or hostile client would.
#ifndef REGCACHE_SERVICE_TEST_UTIL_H_
#define REGCACHE_SERVICE_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "gtest/gtest.h"
#include "hca/device.h"
#include "protocol/shm_protocol.h"
#include "service/daemon.h"
#include "service/internal/key_hook.h"

namespace regcache::service::testing {

class RawRing {
 public:
  // Maps the channel file read-write and the state file read-only; closes both fds.
  // nullptr (and a gtest failure) when a mapping fails.
  static std::unique_ptr<RawRing> Map(int channel_fd, int state_fd);
  ~RawRing();

  shm::ChannelFileHeader* header() const { return header_; }
  shm::Channel* channel(uint32_t i) const { return channels_ + i; }
  const shm::StateHeader* state() const { return state_; }
  uint32_t channels() const { return header_->channels; }
  uint32_t SlotWord(uint32_t slot) const { return slots_[slot].load(std::memory_order_acquire); }
  const shm::RevocationEvent& Event(uint64_t index) const {
    return events_[index % shm::kEventCapacity];
  }

  // Writes `r` at req_head of channel `ch`, publishes it and rings the doorbell per the
  // protocol. Does not check for room.
  void Post(uint32_t ch, const shm::RingRequest& r);
  // Writes every request of `rs` (with fresh seqs, returned) and publishes them with one store of
  // req_head, then rings. Does not check for room.
  std::vector<uint64_t> PostMany(uint32_t ch, std::vector<shm::RingRequest> rs);
  // Publishes req_head + 1 without writing an entry first (a truncated message), then rings.
  void PostHeadOnly(uint32_t ch);
  void RingDoorbell();
  // The next completion of channel `ch`, waiting up to `timeout` (spin, then futex).
  std::optional<shm::RingCompletion> Next(uint32_t ch, absl::Duration timeout);
  // Post + Next, with a fresh seq. A completion with code kDeadlineExceeded on timeout.
  shm::RingCompletion Call(uint32_t ch, shm::RingRequest r,
                           absl::Duration timeout = absl::Seconds(10));

 private:
  RawRing() = default;
  uint8_t* channel_map_ = nullptr;
  uint64_t channel_bytes_ = 0;
  uint8_t* state_map_ = nullptr;
  uint64_t state_bytes_ = 0;
  shm::ChannelFileHeader* header_ = nullptr;
  shm::Channel* channels_ = nullptr;
  const shm::StateHeader* state_ = nullptr;
  const std::atomic<uint32_t>* slots_ = nullptr;
  const shm::RevocationEvent* events_ = nullptr;
  std::atomic<uint64_t> next_seq_{1};
};

// Request builders.
shm::RingRequest RegisterReq(uint64_t va, uint64_t length, uint32_t access);
shm::RingRequest WindowReq(uint64_t parent, uint64_t offset, uint64_t length, uint32_t access);
shm::RingRequest HandleReq(shm::RingOp op, uint64_t handle);
shm::RingRequest NopReq();

inline constexpr uint32_t kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;
inline constexpr uint64_t kPage = 4096;
inline uint32_t Code(absl::StatusCode c) { return static_cast<uint32_t>(c); }

// A daemon on the sim device and sessions with their rings mapped by RawRing.
class RingFixture : public ::testing::Test {
 public:
  struct Sess {
    SessionId id = 0;
    std::unique_ptr<RawRing> ring;
    MemoryId memory = 0;
    uint8_t* mem = nullptr;
    uint64_t length = 0;
    uint64_t va(uint64_t offset) const { return reinterpret_cast<uint64_t>(mem) + offset; }
  };

 protected:
  void SetUp() override { Start(Config()); }

  static DaemonConfig Config() {
    DaemonConfig config;
    config.cache.background_maintenance = false;
    config.cache.pool.low_watermark = 2;
    config.cache.pool.high_watermark = 8;
    config.ring_channels = 8;
    config.grant_slots = 1024;
    return config;
  }

  // A fresh daemon with `config` (sessions of the previous one closed).
  void Start(const DaemonConfig& config);
  void TearDown() override;
  // A session with its rings mapped and `length` bytes of attached memory.
  Sess& Open(uint64_t length = 64 * kPage);
  int64_t Stat(absl::string_view component, absl::string_view name);

  base::stats::Registry registry_;
  std::unique_ptr<Daemon> daemon_;
  std::vector<std::unique_ptr<Sess>> sessions_;
};

#ifndef NDEBUG
// Test hook (service/internal/key_hook.h): stalls the daemon at a point of a key call to force
// an interleaving. Only where the hook is compiled in (no NDEBUG).
// Stalls the first key call that reaches `point` until Resume() (or 10 s); one at a time.
class KeyStall {
 public:
  explicit KeyStall(internal::KeyHookPoint point) : point_(point) {
    current_.store(this);
    internal::key_test_hook.store(&Hook);
  }
  ~KeyStall() {
    internal::key_test_hook.store(nullptr);
    if (!resume_.HasBeenNotified()) resume_.Notify();
    current_.store(nullptr);
  }
  KeyStall(const KeyStall&) = delete;
  KeyStall& operator=(const KeyStall&) = delete;
  // Waits (10 s at most) until a call reached the point.
  bool Reached() { return reached_.WaitForNotificationWithTimeout(absl::Seconds(10)); }
  void Resume() { resume_.Notify(); }

 private:
  static void Hook(internal::KeyHookPoint point) {
    KeyStall* s = current_.load();
    if (s == nullptr || point != s->point_ || !s->armed_.exchange(false)) return;
    s->reached_.Notify();
    s->resume_.WaitForNotificationWithTimeout(absl::Seconds(10));
  }
  static inline std::atomic<KeyStall*> current_{nullptr};
  const internal::KeyHookPoint point_;
  std::atomic<bool> armed_{true};
  absl::Notification reached_, resume_;
};

#endif  // NDEBUG

}  // namespace regcache::service::testing
#endif  // REGCACHE_SERVICE_TEST_UTIL_H_
