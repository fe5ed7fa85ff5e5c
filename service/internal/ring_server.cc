#include "service/internal/ring_server.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "protocol/shm_futex.h"
#include "service/internal/key_hook.h"
#include "service/internal/session_table.h"

namespace regcache::service::internal {
namespace {

// The worker's stack: it runs the daemon's key calls (the cache, a UMR) and nothing recursive.
// Sanitizers need room for their shadow frames.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kStackBytes = 4u << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr size_t kStackBytes = 4u << 20;
#else
constexpr size_t kStackBytes = 256u << 10;
#endif
#else
constexpr size_t kStackBytes = 256u << 10;
#endif

// The wire's integers in the daemon's types (protocol/ring_codec.h decodes, this converts).
static_assert(shm::kKnownAccessBits == hca::kAllAccess);
static_assert(shm::kPrefetchSync == static_cast<uint32_t>(odp::PrefetchMode::kSync) + 1);
static_assert(shm::kPrefetchAsync == static_cast<uint32_t>(odp::PrefetchMode::kAsync) + 1);

static_assert(std::size(shm::kKeyStateNames) ==
              static_cast<size_t>(cache::KeyState::kDestroyed) + 1);

std::optional<odp::PrefetchMode> PrefetchOf(uint32_t wire) {
  if (wire == shm::kPrefetchNone) return std::nullopt;
  return static_cast<odp::PrefetchMode>(wire - 1);  // decoded: Sync or Async
}

int64_t NowNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Whether requests are past their deadlines, against one clock read for them all (a run of
// registers), made only if one has a deadline.
class RunClock {
 public:
  bool Past(const shm::DecodedRequest& d) {
    if (d.deadline_ns == 0) return false;
    if (now_ == 0) now_ = NowNs();
    return now_ >= static_cast<int64_t>(d.deadline_ns);
  }

 private:
  int64_t now_ = 0;
};

bool PastDeadline(const shm::DecodedRequest& d) { return RunClock().Past(d); }

// `text`: where a message too long for the completion goes (shm::CompletionFor).
shm::RingCompletion GrantCompletion(const shm::DecodedRequest& d,
                                    const absl::StatusOr<SlottedGrant>& g, std::string* text) {
  shm::RingCompletion c = shm::CompletionFor(d.seq, static_cast<uint16_t>(d.op), g.status(), text);
  if (!g.ok()) return c;
  c.handle = g->grant.handle;
  c.lkey = g->grant.lkey;
  c.rkey = g->grant.rkey;
  c.va = g->grant.va;
  c.length = g->grant.length;
  c.access = g->grant.access;
  c.flags = static_cast<uint16_t>((g->grant.hit ? shm::kFlagHit : 0) |
                                  (g->grant.same_key ? shm::kFlagSameKey : 0) |
                                  (g->revoked ? shm::kFlagRevoked : 0));
  c.slot = g->slot;
  c.slot_generation = g->generation;
  return c;
}

shm::RingCompletion QueryCompletion(const shm::DecodedRequest& d,
                                    const absl::StatusOr<cache::RegistrationInfo>& q,
                                    std::string* text) {
  shm::RingCompletion c = shm::CompletionFor(d.seq, static_cast<uint16_t>(d.op), q.status(), text);
  if (!q.ok()) return c;
  c.handle = q->handle;
  c.lkey = q->key;
  c.rkey = q->key;
  c.va = q->va;
  c.length = q->length;
  c.access = q->access;
  c.holders = q->holders;
  c.parent = q->parent;
  c.key_state = static_cast<uint32_t>(q->key_state);
  c.flags = static_cast<uint16_t>((q->revoked ? shm::kFlagRevoked : 0) |
                                  (q->is_window ? shm::kFlagWindow : 0));
  return c;
}

}  // namespace

RingServer::RingServer(Session* session, SessionShm* shm, KeyCalls* backend, RingStats* stats)
    : session_(session),
      id_(session->id),
      shm_(shm),
      backend_(backend),
      stats_(stats),
      view_(shm->channels()) {
  for (uint32_t i = 0; i < view_.size(); ++i)
    view_[i].req_head = &shm->channel(i)->control.req_head;
}

absl::StatusOr<std::unique_ptr<RingServer>> RingServer::Start(Session* session, KeyCalls* backend,
                                                              RingStats* stats) {
  std::unique_ptr<RingServer> s(new RingServer(session, session->shm.get(), backend, stats));
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, kStackBytes);
  const int err = ::pthread_create(&s->thread_, &attr, &RingServer::ThreadMain, s.get());
  ::pthread_attr_destroy(&attr);
  if (err != 0) {
    s->stop_.store(true);  // no worker: nothing for Stop to wait for
    s->joined_.store(true);
    return base::ErrnoToStatus(err, "start a ring worker");
  }
  const std::string name = absl::StrFormat("rc-ring-%d", session->id % 100000);
  ::pthread_setname_np(s->thread_, name.c_str());
  stats->workers.Add();
  return s;
}

RingServer::~RingServer() {
  Stop();
  if (joined_.exchange(true)) return;
  ::pthread_join(thread_, nullptr);
  stats_->workers.Sub();
}

void RingServer::Stop() {
  if (stop_.exchange(true, std::memory_order_seq_cst)) return;
  shm::ChannelFileHeader* h = shm_->channel_header();
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  shm::FutexWakeAll(&h->doorbell);
  // The loop's end, not the thread's: a thread's exit (its allocator caches handed back, its
  // stack) can take milliseconds, which a session's close need not wait for. The destructor
  // joins.
  while (loop_done_.load(std::memory_order_acquire) == 0) {
    shm::FutexWait(&loop_done_, 0, kSleepLimit);
  }
}

void* RingServer::ThreadMain(void* self) {
  auto* s = static_cast<RingServer*>(self);
  s->Loop();
  s->loop_done_.store(1, std::memory_order_release);
  shm::FutexWakeAll(&s->loop_done_);
  return nullptr;
}

void RingServer::Loop() {
  const int64_t spin_ns = absl::ToInt64Nanoseconds(kSpin);
  const int64_t announced_ns = absl::ToInt64Nanoseconds(kAnnouncedSpin);
  uint32_t idle_sweeps = 0;
  int64_t idle_since = 0;  // the first clock read of this idle spell; 0: not read yet
  bool quiet = false;      // the last sleep ended by its time limit: no spin before the next
  while (!stop_.load(std::memory_order_acquire)) {
    if (Sweep() > 0) {
      idle_sweeps = 0;
      idle_since = 0;
      quiet = false;
      continue;
    }
    // No clock while requests keep coming: it is read every kIdleSweepsPerClock idle sweeps.
    if (++idle_sweeps % kIdleSweepsPerClock != 0) {
      shm::CpuRelax();
      continue;
    }
    if (!quiet) {
      const int64_t now = NowNs();
      if (idle_since == 0) idle_since = now;
      if (now - idle_since < spin_ns) continue;
      if (now - idle_since < announced_ns && Announced()) continue;
    }
    quiet = !Sleep();
    idle_sweeps = 0;
    idle_since = 0;
  }
}

bool RingServer::Sleep() {
  shm::ChannelFileHeader* h = shm_->channel_header();
  const uint32_t bell = h->doorbell.load(std::memory_order_acquire);
  h->daemon_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (stop_.load(std::memory_order_seq_cst) || AnyWork()) {
    h->daemon_waiting.store(0, std::memory_order_relaxed);
    return true;
  }
  stats_->sleeps.Inc();
  shm::FutexWait(&h->doorbell, bell, kSleepLimit);
  h->daemon_waiting.store(0, std::memory_order_relaxed);
  stats_->wakeups.Inc();
  return h->doorbell.load(std::memory_order_acquire) != bell;
}

bool RingServer::AnyWork() {
  for (uint32_t i = 0; i < view_.size(); ++i) {
    const ChannelView& v = view_[i];
    if (v.broken) continue;
    const shm::ChannelControl& c = shm_->channel(i)->control;
    const uint32_t pending = c.req_head.load(std::memory_order_acquire) - v.req_tail;
    const uint32_t unread = v.cpl_head - c.cpl_tail.load(std::memory_order_acquire);
    // Out-of-range indices count as work: the sweep marks the channel broken.
    if (pending > shm::kRingDepth || unread > shm::kRingDepth) return true;
    if (pending != 0 && unread < shm::kRingDepth) return true;
  }
  return false;
}

bool RingServer::Announced() const {
  for (uint32_t i = 0; i < view_.size(); ++i) {
    if (!view_[i].broken &&
        shm_->channel(i)->control.posting.load(std::memory_order_relaxed) != 0) {
      return true;
    }
  }
  return false;
}

uint32_t RingServer::Sweep() {
  uint32_t served = 0;
  const uint32_t n = static_cast<uint32_t>(view_.size());
  // Round robin from next_channel_, wrapping by compare (no division per channel). A channel
  // whose req_head still equals our req_tail costs one load of a line that stays in this
  // core's cache until its client writes it; ServeChannel does the full checks.
  uint32_t i = next_channel_;
  for (uint32_t k = 0; k < n; ++k) {
    const ChannelView& v = view_[i];
    if (!v.broken && v.req_head->load(std::memory_order_relaxed) != v.req_tail) {
      served += ServeChannel(i);
    }
    if (++i == n) i = 0;
  }
  if (++next_channel_ == n) next_channel_ = 0;
  return served;
}

void RingServer::Break(uint32_t index) {
  view_[index].broken = true;
  shm::ChannelControl& c = shm_->channel(index)->control;
  c.state.store(shm::kChannelBroken, std::memory_order_seq_cst);
  shm::FutexWakeAll(&c.cpl_head);  // a client waiting there learns it now
  stats_->broken_channels.Inc();
  RC_LOG(WARNING) << "session " << id_ << ": ring channel " << index
                  << " broken (indices out of range); it is no longer served";
}

uint32_t RingServer::ServeChannel(uint32_t index) {
  ChannelView& v = view_[index];
  if (v.broken) return 0;
  shm::Channel* ch = shm_->channel(index);
  shm::ChannelControl& c = ch->control;
  uint32_t served = 0;
  shm::RingRequest copies[shm::kRingDepth];
  shm::RingCompletion answers[shm::kRingDepth];
  std::string* const texts = texts_;  // answers[i]'s message when too long for it
  while (served < shm::kBurstPerChannel) {
    const uint32_t pending = c.req_head.load(std::memory_order_acquire) - v.req_tail;
    uint32_t unread = v.cpl_head - c.cpl_tail.load(std::memory_order_acquire);
    if (pending > shm::kRingDepth || unread > shm::kRingDepth) {
      Break(index);
      return served;
    }
    if (pending == 0 || unread == shm::kRingDepth) break;
    // How many to take, by a look at the ops (a hint: the copies decide what is served): a
    // run of register requests whole, else up to the burst.
    const uint32_t room = std::min(pending, shm::kRingDepth - unread);
    constexpr uint16_t kRegister = static_cast<uint16_t>(shm::RingOp::kRegister);
    const auto op_at = [&](uint32_t k) {
      return ch->requests[(v.req_tail + k) % shm::kRingDepth].op;
    };
    uint32_t n = 1;
    if (op_at(0) == kRegister) {
      while (n < room && op_at(n) == kRegister) ++n;
    } else {
      n = std::min(room, shm::kBurstPerChannel - served);
    }
    // Copy out first; everything after looks at the copies only.
    for (uint32_t k = 0; k < n; ++k) {
      std::memcpy(&copies[k], &ch->requests[(v.req_tail + k) % shm::kRingDepth], sizeof(copies[k]));
    }
    v.req_tail += n;
    c.req_tail.store(v.req_tail, std::memory_order_release);
    for (uint32_t k = 0; k < n;) {
      // A run of register requests is served as one batch; any other request alone.
      uint32_t run = 1;
      while (k + run < n && copies[k].op == kRegister && copies[k + run].op == kRegister) {
        ++run;
      }
      if (copies[k].op == kRegister) stats_->register_runs.Inc();
      if (run > 1) {
        ServeRegisters(absl::MakeConstSpan(copies + k, run), answers, texts);
      } else {
        answers[0] = Serve(copies[k], &texts[0]);
      }
      Complete(index, answers, texts, run, unread);
      unread += run;
      k += run;
      served += run;
    }
  }
  return served;
}

void RingServer::Complete(uint32_t index, const shm::RingCompletion* out, const std::string* texts,
                          uint32_t n, uint32_t unread) {
  ChannelView& v = view_[index];
  shm::Channel* ch = shm_->channel(index);
  shm::ChannelControl& c = ch->control;
  for (uint32_t a = 0; a < n; ++a) {
    const shm::RingCompletion& one = out[a];
    if ((one.flags & shm::kFlagLongMessage) != 0) {  // before the completion is published
      char* slot = ch->messages[v.cpl_head % shm::kRingDepth];
      const size_t len = std::min(texts[a].size(), shm::kLongMessageBytes - 1);
      std::memcpy(slot, texts[a].data(), len);
      slot[len] = '\0';
    }
    // An OK answer of an op other than kQuery leaves the completion's second half unwritten
    // (protocol/shm_protocol.h): one cache line less to move.
    const bool whole = one.code != 0 || one.op == static_cast<uint16_t>(shm::RingOp::kQuery);
    std::memcpy(&ch->completions[v.cpl_head % shm::kRingDepth], &one,
                whole ? sizeof(one) : shm::kCompletionHeadBytes);
    ++v.cpl_head;
  }
  // A run's answers are ready together: one release store publishes them all, and a waiting
  // client is woken once, not once per answer.
  c.cpl_head.store(v.cpl_head, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (c.client_waiting.load(std::memory_order_relaxed) != 0) shm::FutexWakeAll(&c.cpl_head);
  // Own the next completion slot's first line before the next answer (the client read it a
  // ring ago). Only where the client has consumed that slot, by the cpl_tail read before.
  if (unread + n < shm::kRingDepth) ch->completions[v.cpl_head % shm::kRingDepth].seq = 0;
}

// The texts are short enough for a completion's message (kMessageBytes).
shm::RingCompletion RingServer::Expired(const shm::DecodedRequest& d, absl::string_view why) {
  stats_->expired.Inc();
  return shm::CompletionFor(  // short: no long message
      d.seq, static_cast<uint16_t>(d.op),
      base::WithReason(absl::DeadlineExceededError(why), base::reason::kDeadlineTooShort));
}

shm::RingCompletion RingServer::Serve(const shm::RingRequest& copy, std::string* text) {
  shm::DecodedRequest d;
  if (absl::Status s = shm::DecodeRequest(copy, d); !s.ok()) {
    stats_->bad_requests.Inc();
    return shm::CompletionFor(copy.seq, copy.op, s, text);
  }
  stats_->requests.Inc();
  // The caller's deadline, on the clock both sides share: a request past it does nothing, and
  // a grant made for one that passed it meanwhile is given back (the caller stopped waiting).
  if (PastDeadline(d)) return Expired(d, "the deadline passed before the work began");
  shm::RingCompletion out = Answer(d, text);
  if (out.code == 0 && out.handle != 0 && shm::OpGrants(d.op) && PastDeadline(d)) {
    (void)backend_->Release(*session_, out.handle);
    return Expired(d, "the deadline passed; the key made was released");
  }
  RC_KEY_TEST_HOOK(kAnswered);
  return out;
}

void RingServer::ServeRegisters(absl::Span<const shm::RingRequest> copies, shm::RingCompletion* out,
                                std::string* texts) {
  shm::DecodedRequest d[shm::kRingDepth];
  RegisterCall calls[shm::kRingDepth];
  uint32_t call_of[shm::kRingDepth];  // calls[j] answers copies[call_of[j]]
  RunClock before, after;  // the run's deadlines against one clock read each side of the work
  uint32_t n = 0;
  uint32_t decoded = 0;  // counted once for the run
  for (uint32_t i = 0; i < copies.size(); ++i) {
    if (absl::Status s = shm::DecodeRequest(copies[i], d[i]); !s.ok()) {
      stats_->bad_requests.Inc();
      out[i] = shm::CompletionFor(copies[i].seq, copies[i].op, s, &texts[i]);
      continue;
    }
    ++decoded;
    if (before.Past(d[i])) {
      out[i] = Expired(d[i], "the deadline passed before the work began");
      continue;
    }
    calls[n] = RegisterCall{d[i].va, d[i].length, d[i].access, PrefetchOf(d[i].prefetch)};
    call_of[n++] = i;
  }
  stats_->requests.Inc(decoded);
  if (n == 0) return;
  std::vector<absl::StatusOr<SlottedGrant>> made =
      backend_->RegisterBatch(*session_, absl::MakeConstSpan(calls, n));
  for (uint32_t j = 0; j < n; ++j) {
    const shm::DecodedRequest& r = d[call_of[j]];
    shm::RingCompletion& c = out[call_of[j]];
    c = GrantCompletion(r, made[j], &texts[call_of[j]]);
    if (c.code == 0 && c.handle != 0 && after.Past(r)) {
      (void)backend_->Release(*session_, c.handle);
      c = Expired(r, "the deadline passed; the key made was released");
    }
  }
  RC_KEY_TEST_HOOK(kAnswered);
}

shm::RingCompletion RingServer::Answer(const shm::DecodedRequest& d, std::string* text) {
  const uint16_t op = static_cast<uint16_t>(d.op);
  Session& s = *session_;
  switch (d.op) {
    case shm::RingOp::kRegister:
      return GrantCompletion(
          d, backend_->Register(s, d.va, d.length, d.access, PrefetchOf(d.prefetch)), text);
    case shm::RingOp::kWindow:
      return GrantCompletion(d, backend_->Window(s, d.handle, d.va, d.length, d.access), text);
    case shm::RingOp::kReregister:
      return GrantCompletion(d, backend_->Reregister(s, d.handle, d.va, d.length, d.access), text);
    case shm::RingOp::kRelease:
      return shm::CompletionFor(d.seq, op, backend_->Release(s, d.handle), text);
    case shm::RingOp::kInvalidate:
      return shm::CompletionFor(d.seq, op, backend_->Invalidate(s, d.handle), text);
    case shm::RingOp::kPrefetch:
      return shm::CompletionFor(
          d.seq, op, backend_->Prefetch(s, d.va, d.length, d.write, PrefetchOf(d.prefetch)), text);
    case shm::RingOp::kQuery:
      return QueryCompletion(d, backend_->Query(s, d.handle), text);
    case shm::RingOp::kNop:
      return shm::CompletionFor(d.seq, op, absl::OkStatus());
  }
  return shm::CompletionFor(d.seq, op, absl::InternalError("unhandled ring op"));
}

}  // namespace regcache::service::internal
