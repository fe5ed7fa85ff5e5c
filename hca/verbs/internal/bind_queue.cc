#include "hca/verbs/internal/bind_queue.h"

#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

constexpr absl::Duration kRecoverWait = absl::Seconds(2);

}  // namespace

absl::StatusOr<std::unique_ptr<BindQueue>> BindQueue::Create(Context* c, Pd pd, uint32_t depth) {
  ASSIGN_OR_RETURN(ibv_pd * vpd, c->FindPd(pd));
  std::unique_ptr<BindQueue> q(new BindQueue(c, pd, depth));
  q->cq_ = ibv_create_cq(c->ctx(), static_cast<int>(depth), nullptr, nullptr, 0);
  if (q->cq_ == nullptr) return ErrnoStatus(errno, "ibv_create_cq for a bind queue");
  ASSIGN_OR_RETURN(q->qp_, CreateRcQp(vpd, q->cq_, depth));
  q->psn_ = RandomPsn();
  RETURN_IF_ERROR(q->Connect());
  return q;
}

BindQueue::~BindQueue() { DestroyQpAndCq(qp_, cq_, "destroying a bind queue"); }

absl::Status BindQueue::Connect() {
  return base::Annotate(ConnectToSelf(*c_, qp_, 0, psn_), "bind queue pair");
}

uint32_t BindQueue::FreeSlots() const {
  const size_t used = held_.size() + in_flight_.size();
  return used >= depth_ ? 0 : depth_ - static_cast<uint32_t>(used);
}

absl::Status BindQueue::Hold(uint64_t id, PostOptions options, const BindRequest& request) {
  if (FreeSlots() == 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("bind queue full (%d requests in flight)", depth_));
  }
  held_.push_back(Held{id, options.signaled, request});
  return absl::OkStatus();
}

absl::Status BindQueue::PostMap(uint64_t request_id, const MapRequest& r) {
  if (r.layout != Layout::kKlm) {
    return absl::InvalidArgumentError("memory windows map one KLM entry (no KSM, no MTT)");
  }
  if (r.klm.size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a memory window maps exactly one entry, not %d (Capabilities::max_klm_entries is 1)",
        r.klm.size()));
  }
  if (r.length64) return absl::InvalidArgumentError("a memory window cannot span 2^64 bytes");
  if (r.remote_invalidate) {
    return absl::UnimplementedError("type-1 memory windows cannot be invalidated remotely");
  }
  const KlmEntry& e = r.klm[0];
  if (e.length == 0 || e.length != r.length || e.addr != r.start_addr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a memory window's addresses are its backing's: the key [0x%x, +0x%x) must equal its "
        "entry [0x%x, +0x%x)",
        r.start_addr, r.length, e.addr, e.length));
  }
  BindRequest b;
  b.key = r.key;
  b.entry = e;
  b.new_variant = r.new_variant;
  b.access = r.access;
  b.require_free = r.require_free;
  return Hold(request_id, r.options, b);
}

absl::Status BindQueue::PostUpdate(uint64_t, const UpdateRequest&) {
  return absl::UnimplementedError("memory windows cannot be updated in place (no UMR)");
}

absl::Status BindQueue::PostInvalidate(uint64_t request_id, Key key, PostOptions options) {
  BindRequest b;
  b.invalidate = true;
  b.key = key;
  return Hold(request_id, options, b);
}

absl::Status BindQueue::PostRewriteTranslation(uint64_t, Key, uint32_t, absl::Span<const MttEntry>,
                                               PostOptions) {
  return absl::UnimplementedError("the verbs backend cannot rewrite translations (no UMR, no ODP)");
}

size_t BindQueue::posted_in_flight() const {
  size_t n = 0;
  for (const InFlight& f : in_flight_) n += f.posted ? 1 : 0;
  return n;
}

absl::Status BindQueue::Recover() {
  const absl::Time deadline = absl::Now() + kRecoverWait;
  while (posted_in_flight() > 0) {
    if (absl::Now() > deadline) {
      return absl::UnavailableError(
          absl::StrFormat("bind queue pair in error: %d flushed binds did not complete within %s",
                          posted_in_flight(), absl::FormatDuration(kRecoverWait)));
    }
    std::this_thread::yield();
    Pump();
  }
  RETURN_IF_ERROR(Connect());
  broken_ = false;
  c_->stats().queue_recoveries.Inc();
  return absl::OkStatus();
}

absl::Status BindQueue::Doorbell() {
  Pump();
  if (held_.empty()) return absl::OkStatus();
  if (broken_) RETURN_IF_ERROR(Recover());
  for (const Held& h : held_) {
    InFlight f;
    f.id = h.id;
    f.signaled = h.signaled;
    const uint64_t wr = next_wr_++;
    absl::StatusOr<ibv_mr*> cut = c_->PrepareCut(pd_, h.request);
    absl::StatusOr<BindPlan> plan =
        cut.ok() ? c_->PostBind(qp_, pd_, h.request, wr, *cut) : cut.status();
    if (!plan.ok() && cut.ok() && *cut != nullptr) c_->ReleaseCut(*cut);
    if (plan.ok() && plan->mw == nullptr) {
      f.refusal = absl::OkStatus();  // done without posting: completes in its turn
    } else if (plan.ok()) {
      f.posted = true;
      f.wr = wr;
      f.plan = *plan;
    } else {
      f.refusal = plan.status();
    }
    in_flight_.push_back(std::move(f));
  }
  held_.clear();
  return absl::OkStatus();
}

void BindQueue::Complete(uint64_t id, absl::Status status) {
  Completion c;
  c.request_id = id;
  if (!status.ok()) {
    if (auto info = ErrorOf(status)) {
      c.syndrome = info->syndrome;
      c.vendor_syndrome = info->vendor_syndrome;
    }
  }
  c.status = std::move(status);
  ready_.push_back(std::move(c));
}

void BindQueue::UndoInFlight() {
  for (auto it = in_flight_.rbegin(); it != in_flight_.rend(); ++it) {
    if (it->posted && !it->undone) {
      c_->UndoBind(it->plan);
      it->undone = true;
    }
  }
}

void BindQueue::Pump() {
  auto deliver_refusals = [this] {
    while (!in_flight_.empty() && !in_flight_.front().posted) {
      Complete(in_flight_.front().id, in_flight_.front().refusal);
      in_flight_.pop_front();
    }
  };
  ibv_wc wcs[16];
  for (;;) {
    deliver_refusals();
    const int n = ibv_poll_cq(cq_, static_cast<int>(std::size(wcs)), wcs);
    if (n < 0) {
      RC_LOG(ERROR) << "ibv_poll_cq on a bind queue failed: " << n;
      return;
    }
    for (int i = 0; i < n; ++i) {
      deliver_refusals();
      const ibv_wc& wc = wcs[i];
      if (in_flight_.empty() || in_flight_.front().wr != wc.wr_id) {
        RC_LOG(ERROR) << "bind queue: completion for unknown work request " << wc.wr_id;
        continue;
      }
      InFlight f = std::move(in_flight_.front());
      in_flight_.pop_front();
      if (wc.status == IBV_WC_SUCCESS) {
        c_->BindDone(f.plan);
        if (f.signaled) Complete(f.id, absl::OkStatus());
        continue;
      }
      if (!f.undone) {  // the first error: it and everything behind it did not happen
        UndoInFlight();
        c_->UndoBind(f.plan);
      }
      broken_ = true;
      Complete(f.id,
               StatusForWc(wc.status, absl::StrFormat("bind of window 0x%08x", f.plan.before.key)));
    }
    if (n < static_cast<int>(std::size(wcs))) break;
  }
  deliver_refusals();
}

size_t BindQueue::Poll(absl::Span<Completion> out) {
  Pump();
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) {
    out[n++] = std::move(ready_.front());
    ready_.pop_front();
  }
  return n;
}

absl::Status BindQueue::Flush(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    Pump();
    if (in_flight_.empty()) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("bind queue: %d requests still in flight after %s", in_flight_.size(),
                          absl::FormatDuration(timeout)));
    }
    std::this_thread::yield();
  }
}

}  // namespace regcache::hca::verbs
