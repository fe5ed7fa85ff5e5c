// The daemon's side of a session's rings (protocol/shm_protocol.h): one worker thread per
// session that sweeps the session's channels, copies each request out, validates it
// (protocol/ring_codec.h), calls the daemon and posts the completion. Internal to service/.
//
// Fairness and bounded work: a sweep takes at most kBurstPerChannel requests of a channel
// before it moves on (but a run of register requests already on the ring is taken whole, up to
// the ring's depth: it is served as one batch, its misses mapped together), and only while
// that channel's completion ring has room; a session's flood only keeps its own
// worker busy. Idle: the worker spins for about kSpin after the last
// request it saw (it reads the clock only once every kIdleSweepsPerClock idle sweeps: a
// sweep of idle channels costs a few loads, clock_gettime in a VM can cost more), up to
// kAnnouncedSpin while a channel says its client is posting (ChannelControl::posting, a hint
// that bounds nothing but this spin), then sleeps on
// the doorbell futex (the Dekker handshake of the header), at most kSleepLimit at a time — the
// limit only bounds how long a client that rewrites the doorbell can hide a stop request.
//
// Trust: the worker keeps its own copies of req_tail and cpl_head per channel and reads each
// client index once per use; an index out of range marks the channel broken
// (ChannelControl::state = kChannelBroken) and it is never served again.
//
// Thread safety: Start and Stop from the daemon's session code, once each.
#ifndef REGCACHE_SERVICE_INTERNAL_RING_SERVER_H_
#define REGCACHE_SERVICE_INTERNAL_RING_SERVER_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/stats.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/servicer.h"
#include "protocol/ring_codec.h"
#include "service/internal/grant_table.h"
#include "service/internal/session_shm.h"
#include "service/types.h"

namespace regcache::service::internal {

namespace shm = ::regcache::protocol::shm;

#define REGCACHE_RING_STATS(COUNTER, GAUGE, HISTOGRAM)                                        \
  COUNTER(requests, "ring requests served")                                                   \
  COUNTER(register_runs, "runs of register requests served together (one alone counts)")      \
  COUNTER(bad_requests, "ring requests refused by validation (kInvalidArgument)")             \
  COUNTER(expired, "ring requests past their caller's deadline (no work, or released again)") \
  COUNTER(broken_channels, "ring channels marked broken (indices out of range)")              \
  COUNTER(sleeps, "times a ring worker went to sleep on its session's doorbell")              \
  COUNTER(wakeups, "times a ring worker woke from its doorbell")                              \
  GAUGE(workers, "ring worker threads running (one per session)")

// Hot: every worker bumps `requests` per request; per-thread slots keep that off shared lines.
RC_DEFINE_HOT_STATS(RingStats, REGCACHE_RING_STATS);

struct Session;  // service/internal/session_table.h

// A session's key calls, with the grant state slot of each grant: what the ring worker calls for
// its own session, and what the daemon's gRPC-facing methods call once they have found and
// pinned the session (service/internal/session_keys.h implements it). For the worker, `s` is
// open for as long as it runs (the daemon stops the worker before it closes the session), so
// these calls need neither a lookup nor a pin.
class KeyCalls {
 public:
  virtual ~KeyCalls() = default;
  // Register for each call, the misses mapped together (cache::RegCache::RegisterBatch); one
  // result per call, in order; calls fail alone.
  virtual std::vector<absl::StatusOr<SlottedGrant>> RegisterBatch(
      Session& s, absl::Span<const RegisterCall> calls) = 0;
  virtual absl::StatusOr<SlottedGrant> Register(Session& s, uint64_t va, uint64_t length,
                                                hca::AccessFlags access,
                                                std::optional<odp::PrefetchMode> prefetch) = 0;
  virtual absl::StatusOr<SlottedGrant> Window(Session& s, cache::Handle parent, uint64_t offset,
                                              uint64_t length, hca::AccessFlags access) = 0;
  virtual absl::StatusOr<SlottedGrant> Reregister(Session& s, cache::Handle handle, uint64_t va,
                                                  uint64_t length, hca::AccessFlags access) = 0;
  virtual absl::Status Release(Session& s, cache::Handle handle) = 0;
  virtual absl::Status Invalidate(Session& s, cache::Handle handle) = 0;
  virtual absl::Status Prefetch(Session& s, uint64_t va, uint64_t length, bool write,
                                std::optional<odp::PrefetchMode> mode) = 0;
  virtual absl::StatusOr<cache::RegistrationInfo> Query(Session& s, cache::Handle handle) = 0;
};

class RingServer {
 public:
  static constexpr absl::Duration kSpin = absl::Microseconds(50);
  static constexpr absl::Duration kAnnouncedSpin = absl::Milliseconds(2);
  static constexpr absl::Duration kSleepLimit = absl::Seconds(1);
  static constexpr uint32_t kIdleSweepsPerClock = 16;

  // Starts the worker of `session`, whose shm must be set. `session`, `backend` and `stats`
  // must outlive the server. Errors: pthread_create's.
  static absl::StatusOr<std::unique_ptr<RingServer>> Start(Session* session, KeyCalls* backend,
                                                           RingStats* stats);
  // Stop()s.
  ~RingServer();
  RingServer(const RingServer&) = delete;
  RingServer& operator=(const RingServer&) = delete;

  // Sets the stop flag, rings the doorbell and waits until the worker left its loop; the
  // request it was serving completes first, and it serves none after. Idempotent. The worker
  // thread itself is joined by the destructor.
  void Stop();

 private:
  // The worker's own view of a channel; never read from shared memory (but req_head points
  // into it: the sweep's first look).
  struct ChannelView {
    const std::atomic<uint32_t>* req_head = nullptr;
    uint32_t req_tail = 0;
    uint32_t cpl_head = 0;
    bool broken = false;
  };

  RingServer(Session* session, SessionShm* shm, KeyCalls* backend, RingStats* stats);
  static void* ThreadMain(void* self);
  void Loop();
  // Serves up to kBurstPerChannel requests of every channel once; returns how many.
  uint32_t Sweep();
  uint32_t ServeChannel(uint32_t index);
  // Whether some channel has a request it may take now.
  bool AnyWork();
  // Whether some channel's client says it is posting (a hint).
  bool Announced() const;
  // The doorbell handshake; returns after a wake-up, a stop or kSleepLimit: false when it
  // slept the whole limit without a ring (then the worker sleeps again without spinning:
  // 64 idle sessions cost 64 wake-ups a second and nothing more).
  bool Sleep();
  void Break(uint32_t index);
  // `text` (Serve, Answer) and texts[i] (ServeRegisters): where an answer's message goes when it
  // is too long for the completion (shm::CompletionFor); Complete puts it in the channel.
  shm::RingCompletion Serve(const shm::RingRequest& copy, std::string* text);
  // A request past its caller's deadline: counted, and answered kDeadlineExceeded with `why`.
  shm::RingCompletion Expired(const shm::DecodedRequest& d, absl::string_view why);
  // Serves consecutive register requests (copies) as one batch: out[i] answers copies[i].
  void ServeRegisters(absl::Span<const shm::RingRequest> copies, shm::RingCompletion* out,
                      std::string* texts);
  // Writes the completions out[0, n) to the channel, then publishes them with one cpl_head
  // store and tells a waiting client once; `unread`: completions the client had not read
  // before the first of them.
  void Complete(uint32_t index, const shm::RingCompletion* out, const std::string* texts,
                uint32_t n, uint32_t unread);
  shm::RingCompletion Answer(const shm::DecodedRequest& d, std::string* text);

  Session* const session_;
  const SessionId id_;
  SessionShm* const shm_;
  KeyCalls* const backend_;
  RingStats* const stats_;
  std::vector<ChannelView> view_;       // the worker's only
  uint32_t next_channel_ = 0;           // where the next sweep starts; the worker's only
  std::string texts_[shm::kRingDepth];  // long messages of a burst's answers; the worker's only
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> loop_done_{0};  // set by the worker after its loop (a futex word)
  std::atomic<bool> joined_{false};
  pthread_t thread_{};
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_RING_SERVER_H_
