#include "hca/verbs/internal/bind_queue.h"

#include <algorithm>
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
  // One work request (and completion) more than the depth: room for a marker (CoverTail) when
  // the requests fill the queue. At most one is in flight beyond the depth: FreeSlots counts
  // markers among the entries in flight.
  q->cq_ = ibv_create_cq(c->ctx(), static_cast<int>(depth + 1), nullptr, nullptr, 0);
  if (q->cq_ == nullptr) return ErrnoStatus(errno, "ibv_create_cq for a bind queue");
  ASSIGN_OR_RETURN(q->qp_, CreateRcQp(vpd, q->cq_, depth + 1));
  q->psn_ = RandomPsn();
  RETURN_IF_ERROR(q->Connect());
  constexpr size_t kMarkerBytes = 64;
  q->marker_buf_ = std::make_unique<char[]>(kMarkerBytes);
  const int access = IBV_ACCESS_MW_BIND;  // an int: ibv_reg_mr's macro masks it with another enum
  q->marker_mr_ = ibv_reg_mr(vpd, q->marker_buf_.get(), kMarkerBytes, access);
  if (q->marker_mr_ == nullptr) return ErrnoStatus(errno, "ibv_reg_mr of a bind queue's marker");
  q->marker_mw_ = ibv_alloc_mw(vpd, IBV_MW_TYPE_1);
  if (q->marker_mw_ == nullptr) return ErrnoStatus(errno, "ibv_alloc_mw of a bind queue's marker");
  return q;
}

BindQueue::~BindQueue() {
  DestroyQpAndCq(qp_, cq_, "destroying a bind queue");
  if (marker_mw_ != nullptr) {
    if (int err = ibv_dealloc_mw(marker_mw_); err != 0) {
      RC_LOG(ERROR) << ErrnoStatus(err, "ibv_dealloc_mw of a bind queue's marker");
    }
  }
  if (marker_mr_ != nullptr) {
    if (int err = ibv_dereg_mr(marker_mr_); err != 0) {
      RC_LOG(ERROR) << ErrnoStatus(err, "ibv_dereg_mr of a bind queue's marker");
    }
  }
}

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
  // One list for the batch where the provider takes lists. With cut backings each map first
  // registers a region of its own against the table as the binds before it left it, so those
  // go one by one.
  const bool lists = c_->bind_lists() && !c_->cut_backings();
  // Each request's entry first, in order; a list's plans are then made in them in place (a
  // plan is a bind and two window records: not copied through a StatusOr and a vector).
  for (const Held& h : held_) {
    InFlight& f = in_flight_.emplace_back();
    f.id = h.id;
    f.signaled = h.signaled;
  }
  InFlight* entries = &*(in_flight_.end() - static_cast<std::ptrdiff_t>(held_.size()));
  if (lists) {
    // Only the list's last bind is posted signalled: the list is sent whole before any of it
    // runs, so a completion earlier in it would arrive no sooner than the last one's, and on
    // rxe each signalled bind also schedules the kernel's completer. The last one's completion
    // covers the rest, and retiring them reports each completion the cache asked for. If the
    // last request is refused or needs no bind, CoverTail's marker covers the list.
    std::vector<Context::BindItem> items;
    items.reserve(held_.size());
    for (size_t i = 0; i < held_.size(); ++i) {
      items.push_back({&held_[i].request, next_wr_++, /*signaled=*/i + 1 == held_.size(),
                       &entries[i].plan, &entries[i].refusal});
    }
    c_->PostBindList(qp_, pd_, items);
    for (size_t i = 0; i < held_.size(); ++i) {
      InFlight& f = entries[i];
      // Planned without a window to bind (plan.mw null): done without posting, OK in its turn.
      if (f.refusal.ok() && f.plan.mw != nullptr) {
        f.posted = true;
        f.wr = items[i].wr_id;
        f.wr_signaled = items[i].signaled;
      }
    }
  } else {
    for (size_t i = 0; i < held_.size(); ++i) {
      const Held& h = held_[i];
      InFlight& f = entries[i];
      const uint64_t wr = next_wr_++;
      absl::StatusOr<ibv_mr*> cut = c_->PrepareCut(pd_, h.request);
      absl::StatusOr<BindPlan> single =
          cut.ok() ? c_->PostBind(qp_, pd_, h.request, wr, *cut, h.signaled) : cut.status();
      if (!single.ok() && cut.ok() && *cut != nullptr) c_->ReleaseCut(*cut);
      if (!single.ok()) {
        f.refusal = std::move(single).status();
      } else if (single->mw != nullptr) {
        f.posted = true;
        f.wr = wr;
        f.wr_signaled = h.signaled;
        f.plan = *std::move(single);
      }  // else done without posting: completes, OK, in its turn
    }
  }
  held_.clear();
  return CoverTail(/*always=*/false);
}

absl::Status BindQueue::CoverTail(bool always) {
  // The newest posted bind; none: only refusals, which reach the front by themselves.
  auto newest = std::find_if(in_flight_.rbegin(), in_flight_.rend(),
                             [](const InFlight& f) { return f.posted; });
  if (newest == in_flight_.rend() || newest->wr_signaled || newest->marker || newest->undone) {
    return absl::OkStatus();
  }
  const bool behind = newest != in_flight_.rbegin();  // a request not posted is behind it
  if (!always && !behind) return absl::OkStatus();
  ibv_mw_bind b{};
  b.wr_id = next_wr_++;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info.mr = marker_mr_;  // zero length: no range, no rights
  if (int err = ibv_bind_mw(qp_, marker_mw_, &b); err != 0) {
    return ErrnoStatus(err, "ibv_bind_mw of a bind queue's marker");
  }
  InFlight f;
  f.posted = true;
  f.marker = true;
  f.wr = b.wr_id;
  in_flight_.push_back(std::move(f));
  c_->stats().bind_markers.Inc();
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
      if (!it->marker) c_->UndoBind(it->plan);
      it->undone = true;
    }
  }
}

void BindQueue::RetireCovered() {
  // Retired in place, then dropped: an entry (a status and a plan) is not moved out for this.
  const InFlight& g = in_flight_.front();
  if (g.marker) {
    // The queue's own bind: nothing to report.
  } else if (!g.posted) {
    Complete(g.id, g.refusal);
  } else if (g.undone) {
    // Behind a failed bind, and its flush was not reported (a provider should report it).
    Complete(g.id,
             absl::AbortedError(absl::StrFormat(
                 "bind of window 0x%08x flushed after an earlier bind failed", g.plan.before.key)));
  } else {
    c_->BindDone(g.plan);
    if (g.signaled) Complete(g.id, absl::OkStatus());
  }
  in_flight_.pop_front();
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
    if (n > 0) c_->stats().bind_completions.Inc(static_cast<uint64_t>(n));
    for (int i = 0; i < n; ++i) {
      deliver_refusals();
      const ibv_wc& wc = wcs[i];
      auto match = std::find_if(in_flight_.begin(), in_flight_.end(),
                                [&](const InFlight& f) { return f.posted && f.wr == wc.wr_id; });
      if (match == in_flight_.end()) {
        RC_LOG(ERROR) << "bind queue: completion for unknown work request " << wc.wr_id;
        continue;
      }
      // In order: everything posted before this work request has completed.
      for (auto covered = match - in_flight_.begin(); covered > 0; --covered) RetireCovered();
      InFlight f = std::move(in_flight_.front());
      in_flight_.pop_front();
      if (wc.status == IBV_WC_SUCCESS) {
        if (f.marker) continue;
        c_->BindDone(f.plan);
        if (f.signaled) Complete(f.id, absl::OkStatus());
        continue;
      }
      if (!f.undone) {  // the first error: it and everything behind it did not happen
        UndoInFlight();
        if (!f.marker) c_->UndoBind(f.plan);
      }
      broken_ = true;
      if (f.marker) continue;
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
  Pump();
  if (!broken_) RETURN_IF_ERROR(CoverTail(/*always=*/true));
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
