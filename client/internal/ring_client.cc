#include "client/internal/ring_client.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/error_reason.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "protocol/reason_numbers.h"
#include "protocol/ring_codec.h"
#include "protocol/shm_futex.h"

namespace regcache::api::internal {

std::atomic<uint64_t> RingClient::next_id_{1};

namespace {

absl::StatusOr<uint64_t> FileBytes(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return base::ErrnoToStatus(errno, "fstat a session file");
  return static_cast<uint64_t>(st.st_size);
}

absl::Status Mismatch(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("fast path files: ", what));
}

// Why a call the daemon did not answer ends once the session is closing: the daemon's reason
// when it gave one (DRAINING), with the daemon's own words for it.
absl::Status ClosingStatus(const shm::StateHeader& st) {
  const absl::string_view reason =
      protocol::NumberedReason(st.close_reason.load(std::memory_order_relaxed));
  if (reason == base::reason::kDraining) {
    return base::WithReason(absl::UnavailableError("regcached is draining"), reason);
  }
  absl::Status s = absl::UnavailableError("the session is closing");
  return reason.empty() ? s : base::WithReason(std::move(s), reason);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RingClient>> RingClient::Create(int channel_fd, int state_fd,
                                                               uint64_t session_id,
                                                               uint32_t channels, uint32_t slots,
                                                               absl::Duration timeout) {
  const base::UniqueFd channel(channel_fd);  // closed on return: the mappings keep the files
  const base::UniqueFd state(state_fd);
  std::unique_ptr<RingClient> r(new RingClient());
  r->timeout_ = timeout;
  r->channels_ = channels;
  r->slots_ = slots;
  absl::StatusOr<uint64_t> cb = FileBytes(channel_fd);
  absl::StatusOr<uint64_t> sb = cb.ok() ? FileBytes(state_fd) : cb;
  void* c = MAP_FAILED;
  void* s = MAP_FAILED;
  int err = 0;
  if (sb.ok() && channels >= 1 && channels <= shm::kMaxChannels &&
      *cb >= shm::ChannelFileBytes(channels) && *sb >= shm::StateFileBytes(slots)) {
    c = ::mmap(nullptr, *cb, PROT_READ | PROT_WRITE, MAP_SHARED, channel_fd, 0);
    if (c == MAP_FAILED) err = errno;
    s = ::mmap(nullptr, *sb, PROT_READ, MAP_SHARED, state_fd, 0);
    if (s == MAP_FAILED && err == 0) err = errno;
  }
  if (c != MAP_FAILED) r->channel_map_ = static_cast<uint8_t*>(c), r->channel_bytes_ = *cb;
  if (s != MAP_FAILED) r->state_map_ = static_cast<uint8_t*>(s), r->state_bytes_ = *sb;
  if (!sb.ok()) return sb.status();
  if (err != 0) return base::ErrnoToStatus(err, "mmap the session's fast path files");
  if (c == MAP_FAILED || s == MAP_FAILED) {
    return Mismatch(absl::StrCat("sizes ", *cb, " and ", *sb, " do not hold ", channels,
                                 " channels and ", slots, " slots"));
  }
  RETURN_IF_ERROR(r->Validate(session_id, *cb, *sb));
  r->mine_ = std::make_unique<Channel[]>(channels);
  return r;
}

absl::Status RingClient::Validate(uint64_t session_id, uint64_t channel_bytes,
                                  uint64_t state_bytes) {
  // Copies of the header fields: read once each.
  shm::ChannelFileHeader h;
  std::memcpy(static_cast<void*>(&h), channel_map_, offsetof(shm::ChannelFileHeader, doorbell));
  if (h.magic != shm::kChannelFileMagic || h.version != shm::kShmVersion) {
    return Mismatch("channel file magic or version");
  }
  if (h.channels != channels_ || h.depth != shm::kRingDepth || h.session_id != session_id ||
      h.channel_stride != sizeof(shm::Channel) ||
      h.channel_offset < sizeof(shm::ChannelFileHeader) ||
      h.channel_offset % alignof(shm::Channel) != 0 ||
      h.channel_offset + uint64_t{channels_} * sizeof(shm::Channel) > channel_bytes) {
    return Mismatch("channel file geometry");
  }
  shm::StateHeader st;
  std::memcpy(static_cast<void*>(&st), state_map_, offsetof(shm::StateHeader, session_state));
  if (st.magic != shm::kStateFileMagic || st.version != shm::kShmVersion) {
    return Mismatch("state file magic or version");
  }
  if (st.slots != slots_ || st.event_capacity != shm::kEventCapacity ||
      st.session_id != session_id || st.event_offset < sizeof(shm::StateHeader) ||
      st.event_offset % alignof(shm::RevocationEvent) != 0 || st.slot_offset % 4 != 0 ||
      st.event_offset + uint64_t{shm::kEventCapacity} * sizeof(shm::RevocationEvent) >
          state_bytes ||
      st.slot_offset + uint64_t{slots_} * sizeof(uint32_t) > state_bytes) {
    return Mismatch("state file geometry");
  }
  header_ = reinterpret_cast<shm::ChannelFileHeader*>(channel_map_);
  rings_ = reinterpret_cast<shm::Channel*>(channel_map_ + h.channel_offset);
  state_ = reinterpret_cast<const shm::StateHeader*>(state_map_);
  slot_words_ = reinterpret_cast<const std::atomic<uint32_t>*>(state_map_ + st.slot_offset);
  events_ = reinterpret_cast<const shm::RevocationEvent*>(state_map_ + st.event_offset);
  return absl::OkStatus();
}

RingClient::~RingClient() {
  if (channel_map_ != nullptr) ::munmap(channel_map_, channel_bytes_);
  if (state_map_ != nullptr) ::munmap(state_map_, state_bytes_);
}

uint32_t RingClient::Claim() {
  struct Claimed {
    uint64_t owner = 0;
    uint32_t channel = 0;
  };
  thread_local Claimed claimed;
  if (claimed.owner != id_) {
    claimed.owner = id_;
    claimed.channel = next_claim_.fetch_add(1, std::memory_order_relaxed) % channels_;
  }
  return claimed.channel;
}

void RingClient::RingDoorbell() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->daemon_waiting.load(std::memory_order_relaxed) != 0) {
    header_->daemon_waiting.store(0, std::memory_order_relaxed);
    header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    shm::FutexWakeAll(&header_->doorbell);
  }
}

void RingClient::Announce() {
  rings_[Claim()].control.posting.store(1, std::memory_order_relaxed);
  RingDoorbell();
}

absl::Status RingClient::Next(uint32_t index, Channel& c, absl::Time& deadline, size_t waiting,
                              shm::RingCompletion* out) {
  shm::ChannelControl& ctl = rings_[index].control;
  // A fast answer costs no clock read: the clock is read once every kSpinsPerClock spins, and
  // the first read starts both the spin budgets and (if the call has none yet) the deadline.
  absl::Time spin_until = absl::InfinitePast();
  absl::Time served_until = absl::InfinitePast();
  uint32_t spins = 0;
  while (ctl.cpl_head.load(std::memory_order_acquire) == c.cpl_tail) {
    if (++spins % kSpinsPerClock != 0) {
      shm::CpuRelax();
      continue;
    }
    const absl::Time now = absl::Now();
    if (deadline == absl::InfinitePast()) deadline = now + timeout_;
    if (spin_until == absl::InfinitePast()) {
      spin_until = now + kSpin + kSpinPerRequest * static_cast<int64_t>(waiting);
      served_until = std::min(now + kServedSpin, deadline);
      continue;
    }
    // The worker took the awaited request (req_tail is past it) and works on it: its answer
    // is coming, however slow the machine; sleeping now would add a wake-up to it.
    const bool taken =
        static_cast<int32_t>(ctl.req_tail.load(std::memory_order_acquire) - c.cpl_tail) > 0;
    if (now < spin_until || (taken && now < served_until)) {
      // A slow answer: the worker may be waiting for this CPU (more spinning threads than
      // cores). Offer it; with nothing else to run this returns at once.
      ::sched_yield();
      continue;
    }
    const absl::Duration left = deadline - now;
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("regcached did not answer on the ring in time");
    }
    if (ctl.state.load(std::memory_order_acquire) == shm::kChannelBroken) {
      return absl::UnavailableError("the ring channel was marked broken by regcached");
    }
    const bool closing =
        state_->session_state.load(std::memory_order_acquire) == shm::kSessionClosing;
    ctl.client_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ctl.cpl_head.load(std::memory_order_relaxed) == c.cpl_tail) {
      if (closing) {
        ctl.client_waiting.store(0, std::memory_order_relaxed);
        return ClosingStatus(*state_);
      }
      shm::FutexWait(&ctl.cpl_head, c.cpl_tail, std::min(left, absl::Milliseconds(100)));
    }
    ctl.client_waiting.store(0, std::memory_order_relaxed);
  }
  // The first line always; the second only where the daemon wrote it (protocol/shm_protocol.h).
  const shm::RingCompletion& slot = rings_[index].completions[c.cpl_tail % shm::kRingDepth];
  shm::RingCompletion& got = *out;
  std::memcpy(&got, &slot, shm::kCompletionHeadBytes);
  char* rest = reinterpret_cast<char*>(&got) + shm::kCompletionHeadBytes;
  constexpr size_t kRestBytes = sizeof(got) - shm::kCompletionHeadBytes;
  if (got.code != 0 || got.op == static_cast<uint16_t>(shm::RingOp::kQuery)) {
    std::memcpy(rest, reinterpret_cast<const char*>(&slot) + shm::kCompletionHeadBytes, kRestBytes);
    if (got.code != 0) got.parent = 0;  // an error's: the token of its long message (StatusOf)
    if (got.code != 0 && (got.flags & shm::kFlagLongMessage) != 0) {
      // Read before cpl_tail moves past it: the daemon may reuse the slot after that.
      const char* m = rings_[index].messages[c.cpl_tail % shm::kRingDepth];
      got.parent = KeepText(std::string(m, strnlen(m, shm::kLongMessageBytes)));
    }
  } else {
    std::memset(rest, 0, kRestBytes);
  }
  ++c.cpl_tail;  // published with the channel's next post (Run)
  return absl::OkStatus();
}

uint64_t RingClient::KeepText(std::string text) {
  base::MutexLock lock(&texts_mu_);
  const uint64_t token = next_text_++;
  texts_.emplace_back(token, std::move(text));
  if (texts_.size() > kKeptTexts) texts_.pop_front();
  return token;
}

absl::Status RingClient::StatusOf(const shm::RingCompletion& c) {
  if (c.code == 0 || (c.flags & shm::kFlagLongMessage) == 0 || c.parent == 0) {
    return shm::StatusFromCompletion(c);
  }
  std::string text;
  {
    base::MutexLock lock(&texts_mu_);
    for (auto it = texts_.begin(); it != texts_.end(); ++it) {
      if (it->first == c.parent) {
        text = std::move(it->second);
        texts_.erase(it);
        break;
      }
    }
  }
  return shm::StatusFromCompletion(c, text);
}

absl::Status RingClient::Run(uint32_t index, const shm::RingRequest* requests, size_t n,
                             shm::RingCompletion* out) {
  Channel& c = mine_[index];
  shm::Channel& ring = rings_[index];
  absl::Time deadline = absl::InfinitePast();  // set by Next at its first clock read
  base::MutexLock lock(&c.mu);
  const uint64_t first = c.next_seq;
  // The coarse clock lags the precise one by at most a tick, so this is never later than the
  // deadline the caller itself keeps (which starts later still, at Next's first clock read).
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const uint64_t deadline_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 +
                               static_cast<uint64_t>(ts.tv_nsec) +
                               static_cast<uint64_t>(absl::ToInt64Nanoseconds(timeout_));
  size_t posted = 0, done = 0;
  while (done < n) {
    size_t now = 0;
    // Room for a post: at least half the ring, or all that is left. A long batch then reaches
    // the worker in runs of half a ring (each one batch of misses there), not one request per
    // answer read.
    const uint32_t room = shm::kRingDepth - (c.req_head - c.cpl_tail);
    if (posted < n && room >= std::min<size_t>(n - posted, shm::kRingDepth / 2)) {
      // Completions consumed since the last post: the daemon must see the room this post uses.
      ring.control.cpl_tail.store(c.cpl_tail, std::memory_order_release);
      for (; posted < n && c.req_head - c.cpl_tail < shm::kRingDepth; ++posted, ++now) {
        shm::RingRequest r = requests[posted];
        r.seq = c.next_seq++;
        r.deadline_ns = deadline_ns;
        std::memcpy(&ring.requests[c.req_head % shm::kRingDepth], &r, sizeof(r));
        ++c.req_head;
      }
    }
    if (now > 0) {
      // Published together: the daemon takes them as one batch (a run of registers is one).
      ring.control.req_head.store(c.req_head, std::memory_order_release);
      ring.control.posting.store(0, std::memory_order_relaxed);  // after req_head: no gap
      RingDoorbell();
      // Own the next request slot's line while the daemon works (it read that line a ring
      // ago): the next post then writes to this core's cache instead of waiting for it. The
      // slot is ours: its last request was answered (the room check), and the daemon reads it
      // only after req_head covers it.
      if (c.req_head - c.cpl_tail < shm::kRingDepth) {
        ring.requests[c.req_head % shm::kRingDepth].seq = 0;
      }
    }
    // Requests of this call still unanswered: the more, the longer the answer can take.
    const size_t waiting = posted > done ? posted - done - 1 : 0;
    // Read straight into its place; an orphan's answer is overwritten by the next one.
    shm::RingCompletion& got = out[done];
    RETURN_IF_ERROR(Next(index, c, deadline, waiting, &got));
    if (got.seq < first) {  // the answer to a call whose deadline passed
      if (got.code == 0 && got.handle != 0 && shm::OpGrants(static_cast<shm::RingOp>(got.op))) {
        c.orphans.push_back(got.handle);  // nobody will release it otherwise
        c.has_orphans.store(true, std::memory_order_relaxed);
      }
      continue;
    }
    if (got.seq != first + done) {
      return absl::InternalError(
          absl::StrCat("ring completion ", got.seq, " out of order: want ", first + done));
    }
    ++done;
  }
  return absl::OkStatus();
}

void RingClient::ReleaseOrphans(uint32_t index) {
  Channel& c = mine_[index];
  std::vector<shm::RingRequest> releases;
  {
    base::MutexLock lock(&c.mu);
    for (uint64_t handle : c.orphans) {
      shm::RingRequest r{};
      r.op = static_cast<uint16_t>(shm::RingOp::kRelease);
      r.handle = handle;
      releases.push_back(r);
    }
    c.orphans.clear();
    c.has_orphans.store(false, std::memory_order_relaxed);
  }
  std::vector<shm::RingCompletion> answers(releases.size());
  // A Release that times out in turn is not retried: the session's end releases what is left.
  (void)Run(index, releases.data(), releases.size(), answers.data());
}

absl::Status RingClient::RunThenRelease(uint32_t index, const shm::RingRequest* requests, size_t n,
                                        shm::RingCompletion* out) {
  const absl::Status s = Run(index, requests, n, out);
  if (mine_[index].has_orphans.load(std::memory_order_relaxed)) [[unlikely]] {
    ReleaseOrphans(index);
  }
  return s;
}

absl::StatusOr<shm::RingCompletion> RingClient::Call(const shm::RingRequest& request) {
  shm::RingCompletion out;
  RETURN_IF_ERROR(RunThenRelease(Claim(), &request, 1, &out));
  return out;
}

absl::StatusOr<std::vector<shm::RingCompletion>> RingClient::CallBatch(
    absl::Span<const shm::RingRequest> requests) {
  std::vector<shm::RingCompletion> out(requests.size());
  if (requests.empty()) return out;
  RETURN_IF_ERROR(RunThenRelease(Claim(), requests.data(), requests.size(), out.data()));
  return out;
}

}  // namespace regcache::api::internal
