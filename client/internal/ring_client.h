// The client's side of the fast path (protocol/shm_protocol.h): maps a session's channel file
// read-write and its state file read-only from the Welcome's descriptors, and runs calls over
// the rings. Internal to client/.
//
// Channels: a thread claims one on its first call through this client (round robin) and
// keeps it; with more threads than channels, threads share a channel. Each channel has a
// client-side mutex, held for one call or batch, so a channel's ring has one producer and one
// consumer at a time and its completions come back in the order of its requests.
//
// Posting: a call posts as many requests as the ring has room for; a longer one goes on
// posting as answers free room, half a ring at a time (or what is left), so that the worker
// takes its requests in runs it can serve as batches. Announce() before a batch's own work
// (its lookups, building the requests) tells the worker that requests are coming, waking it
// if it sleeps: it is awake when they land.
//
// Waiting: after posting, a caller spins on cpl_head for kSpin, and kSpinPerRequest longer for
// each request of its own still on the ring (a batch of misses takes about that much longer to
// answer, and a sleeping caller pays a futex wake-up on top); and while the worker has taken
// the awaited request (req_tail past it), up to kServedSpin: its answer is being made, and on a
// slow machine a batch outlasts any budget counted per request. Then the caller sleeps on
// cpl_head (futex) per the header's handshake, until the call's deadline: kDeadlineExceeded
// then. Past the first kSpinsPerClock spins it yields the CPU at every clock read (the
// daemon's worker may be waiting for it when there are more busy threads than cores). The
// clock is read only after kSpinsPerClock spins, so the deadline counts from then (a few
// microseconds after posting; a call's time waiting for its channel's lock does not count).
// Each request carries its deadline (RingRequest::deadline_ns, from the coarse monotonic clock
// when posted, so never later than the caller's own): the daemon does nothing for a request
// past it and gives back a grant it made for one that passed it meanwhile. A completion that
// still comes after the caller gave up is discarded by the channel's next call, which
// recognises it by sequence number, and a grant in it is released (the next call on the
// channel posts the Releases).
//
// Trust: the client checks what it maps (magic, version, geometry against the Welcome and the
// files' sizes) before it touches a ring.
//
// Thread safety: Call and CallBatch may be called from any threads concurrently. The state
// file accessors return pointers into a read-only mapping that lives as long as this object.
#ifndef REGCACHE_CLIENT_INTERNAL_RING_CLIENT_H_
#define REGCACHE_CLIENT_INTERNAL_RING_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "protocol/shm_protocol.h"

namespace regcache::api::internal {

namespace shm = ::regcache::protocol::shm;

class RingClient {
 public:
  static constexpr absl::Duration kSpin = absl::Microseconds(20);
  static constexpr absl::Duration kSpinPerRequest = absl::Microseconds(3);
  static constexpr absl::Duration kServedSpin = absl::Milliseconds(4);
  // Spins between clock reads while waiting (a pause each): an answer that comes within the
  // first kSpinsPerClock spins costs no clock read at all.
  static constexpr uint32_t kSpinsPerClock = 64;

  // Maps the files of session `session_id` whose Welcome announced `channels` and `slots`.
  // Takes both descriptors (closed on return, whatever happens). `timeout` is every call's
  // deadline. kInvalidArgument when a header or a file size does not match the Welcome;
  // errno-based errors from fstat / mmap.
  static absl::StatusOr<std::unique_ptr<RingClient>> Create(int channel_fd, int state_fd,
                                                            uint64_t session_id, uint32_t channels,
                                                            uint32_t slots, absl::Duration timeout);
  ~RingClient();
  RingClient(const RingClient&) = delete;
  RingClient& operator=(const RingClient&) = delete;

  // Posts `request` (its seq is replaced by the channel's own) on the calling thread's channel
  // and waits for its completion. Errors are the transport's only (a completion with an error
  // code is returned as is): kDeadlineExceeded; kUnavailable when the channel was marked broken
  // or the session is closing and no answer came; kInternal for a completion out of order.
  absl::StatusOr<shm::RingCompletion> Call(const shm::RingRequest& request);
  // A hint that the calling thread will post a call soon (its channel's `posting`; the
  // doorbell rung if the worker sleeps). The next post on the channel clears it.
  void Announce();
  // Posts as many requests as the ring has room for, rings the doorbell once, collects their
  // completions, and goes on until every request is answered; completions in request order.
  // Errors as Call (the completions collected so far are then lost).
  absl::StatusOr<std::vector<shm::RingCompletion>> CallBatch(
      absl::Span<const shm::RingRequest> requests);

  // The status a completion of this client carries, with its whole message: one too long for
  // the completion came in the channel's message slot, kept here (by a token in the copy's
  // `parent`, which error completions do not use) until this takes it.
  absl::Status StatusOf(const shm::RingCompletion& c);

  uint32_t channels() const { return channels_; }
  // The state file (read-only): the header, `slots()` grant state words, the event ring.
  const shm::StateHeader* state() const { return state_; }
  const std::atomic<uint32_t>* slot_words() const { return slot_words_; }
  uint32_t slots() const { return slots_; }
  const shm::RevocationEvent* events() const { return events_; }

 private:
  struct Channel {
    base::Mutex mu;
    uint32_t req_head ABSL_GUARDED_BY(mu) = 0;  // our own copies of the indices we write
    uint32_t cpl_tail ABSL_GUARDED_BY(mu) = 0;
    uint64_t next_seq ABSL_GUARDED_BY(mu) = 1;
    // Handles granted by answers that came after their caller gave up: released by the
    // channel's next call (ReleaseOrphans).
    std::vector<uint64_t> orphans ABSL_GUARDED_BY(mu);
    std::atomic<bool> has_orphans{false};
  };

  RingClient() = default;
  // Checks the mapped headers, then sets the pointers into the files.
  absl::Status Validate(uint64_t session_id, uint64_t channel_bytes, uint64_t state_bytes);
  uint32_t Claim();
  // Runs `n` requests on channel `index`, answers into `out`.
  absl::Status Run(uint32_t index, const shm::RingRequest* requests, size_t n,
                   shm::RingCompletion* out);
  // Releases the channel's orphaned grants (one batch of Releases; their answers ignored).
  void ReleaseOrphans(uint32_t index);
  // Run, then ReleaseOrphans if that left any (Call and CallBatch).
  absl::Status RunThenRelease(uint32_t index, const shm::RingRequest* requests, size_t n,
                              shm::RingCompletion* out);
  // The next completion of the channel, by `deadline`; InfinitePast: not set yet (then the
  // first clock read sets it to now + timeout_). Spins for kSpin, and kSpinPerRequest for each
  // of `waiting` (the call's other requests still unanswered), before it sleeps; the budget is
  // worked out only at that first clock read (an answer already there costs no arithmetic).
  // The completion goes into *out (no copy through a StatusOr: an answer is 128 bytes).
  absl::Status Next(uint32_t index, Channel& c, absl::Time& deadline, size_t waiting,
                    shm::RingCompletion* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  void RingDoorbell();
  // Keeps `text` for StatusOf; returns its token. The oldest are dropped past kKeptTexts (an
  // answer nobody reads: a call that gave up).
  uint64_t KeepText(std::string text);
  static constexpr size_t kKeptTexts = 256;

  base::Mutex texts_mu_;
  uint64_t next_text_ ABSL_GUARDED_BY(texts_mu_) = 1;
  std::deque<std::pair<uint64_t, std::string>> texts_ ABSL_GUARDED_BY(texts_mu_);
  const uint64_t id_ = next_id_.fetch_add(1);  // tells this client apart in thread-locals
  static std::atomic<uint64_t> next_id_;
  absl::Duration timeout_;
  uint32_t channels_ = 0;
  uint32_t slots_ = 0;
  uint8_t* channel_map_ = nullptr;
  uint64_t channel_bytes_ = 0;
  uint8_t* state_map_ = nullptr;
  uint64_t state_bytes_ = 0;
  shm::ChannelFileHeader* header_ = nullptr;
  shm::Channel* rings_ = nullptr;
  const shm::StateHeader* state_ = nullptr;
  const std::atomic<uint32_t>* slot_words_ = nullptr;
  const shm::RevocationEvent* events_ = nullptr;
  std::unique_ptr<Channel[]> mine_;
  std::atomic<uint32_t> next_claim_{0};
};

}  // namespace regcache::api::internal
#endif  // REGCACHE_CLIENT_INTERNAL_RING_CLIENT_H_
