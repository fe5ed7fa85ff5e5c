// The servicer's thread and the service of needs (faults and prefetches alike): make the pages
// resident, then publish them unless a zap came in between (odp/servicer.h, the generation
// protocol). What to make resident and what to rewrite comes from fault_plan.h.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/mutex.h"
#include "odp/internal/fault_plan.h"
#include "odp/internal/populate.h"
#include "odp/internal/servicer_impl.h"

namespace regcache::odp::internal {
namespace {

// True while the device has fault events pending. With an event fd this is a zero-timeout
// poll: asking NextFaultEvent with a zero timeout when nothing is pending may still sleep in a
// timed wait (the sim's does: timer slack, tens of microseconds on every batch).
bool EventsPending(int fault_fd) {
  if (fault_fd < 0) return true;  // no fd: NextFaultEvent decides
  struct pollfd p = {fault_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ServicerImpl::Run() {
  const int fault_fd = path_ == FaultPath::kDaemon ? device_->FaultEventFd() : -1;
  while (!stop_.load()) {
    struct pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {fault_fd, POLLIN, 0}};
    const nfds_t n = fault_fd >= 0 ? 2 : 1;
    // Without an fd the fault stream is polled every millisecond.
    const int timeout_ms = path_ == FaultPath::kDaemon && fault_fd < 0 ? 1 : 100;
    if (::poll(fds, n, timeout_ms) > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t v;
      (void)!::read(wake_fd_.get(), &v, sizeof(v));
    }
    if (stop_.load()) break;
    if (path_ == FaultPath::kDaemon) ServeFaults();
    ServeQueuedPrefetches();
  }
}

// ---------------------------------------------------------------------------------------------
// Faults

void ServicerImpl::ServeFaults() {
  // Drain everything pending into one batch (bounded): concurrent faults on the same pages
  // then share one rewrite.
  const int fault_fd = device_->FaultEventFd();
  std::vector<PendingFault> batch;
  while (EventsPending(fault_fd)) {
    absl::StatusOr<hca::FaultEvent> ev = device_->NextFaultEvent(absl::ZeroDuration());
    if (!ev.ok()) break;
    stats_.faults.Inc();
    PendingFault f{*ev, NowNs()};
    if (batch.size() >= options_.max_pending_faults) {
      stats_.queue_overflow.Inc();
      Resume(f, false);
      continue;
    }
    batch.push_back(f);
  }
  if (batch.empty()) return;

  // Group by backing, keeping arrival order within a group.
  std::vector<hca::Key> order;
  absl::flat_hash_map<hca::Key, std::vector<size_t>> groups;
  for (size_t i = 0; i < batch.size(); ++i) {
    auto [it, inserted] = groups.try_emplace(batch[i].event.key);
    if (inserted) order.push_back(batch[i].event.key);
    it->second.push_back(i);
  }
  for (hca::Key key : order) ServeBackingFaults(key, batch, groups[key]);
}

void ServicerImpl::ServeBackingFaults(hca::Key key, absl::Span<const PendingFault> batch,
                                      absl::Span<const size_t> idx) {
  std::shared_ptr<BackingState> b = Find(key);
  if (b == nullptr || !b->device().on_demand) {
    stats_.unknown_key.Inc(idx.size());
    RC_LOG(DEBUG) << absl::StrFormat("fault on key 0x%08x: no on-demand backing", key);
    for (size_t i : idx) Resume(batch[i], false);
    return;
  }
  std::vector<Need> needs(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    const hca::FaultEvent& e = batch[idx[j]].event;
    needs[j].addr = e.address;
    needs[j].length = std::max<uint64_t>(e.length, 1);
    needs[j].write = e.write;
  }
  bool rewrote = false;
  ServiceNeeds(*b, absl::MakeSpan(needs), &rewrote);
  uint64_t ok = 0;
  for (const Need& n : needs) ok += n.result.ok() ? 1 : 0;
  if (ok > 0) stats_.coalesced.Inc(ok - (rewrote ? 1 : 0));
  for (size_t j = 0; j < idx.size(); ++j) {
    if (!needs[j].result.ok()) {
      RC_LOG(DEBUG) << absl::StrFormat("fault on key 0x%08x at 0x%x resumed with error: ", key,
                                       needs[j].addr)
                    << needs[j].result;
    }
    Resume(batch[idx[j]], needs[j].result.ok());
  }
}

void ServicerImpl::Resume(const PendingFault& f, bool ok) {
  // Counted before the call, so whoever the resume wakes already sees them.
  stats_.service_ns.Record(static_cast<uint64_t>(std::max<int64_t>(NowNs() - f.read_ns, 0)));
  (ok ? stats_.resumed_ok : stats_.resumed_error).Inc();
  absl::Status s = device_->ResumeFault(f.event.token, ok);
  if (!s.ok()) {
    // The access gave up (fault timeout) or the token is unknown: nothing left to resume.
    stats_.resume_failures.Inc();
    RC_LOG(DEBUG) << "resume of fault token " << f.event.token << ": " << s;
  }
}

// ---------------------------------------------------------------------------------------------
// Service: resident, then published, unless a zap came in between

void ServicerImpl::ServiceNeeds(BackingState& b, absl::Span<Need> needs, bool* rewrote) {
  *rewrote = false;
  const hca::Backing& dev = b.device();
  size_t pending = CheckNeeds(dev, b.writable, needs);
  const absl::Status removed =
      absl::FailedPreconditionError(absl::StrFormat("backing 0x%08x is being removed", dev.key));

  for (int attempt = 0; attempt < kMaxServiceAttempts && pending > 0; ++attempt) {
    uint64_t generation;
    {
      base::MutexLock lock(&b.mu);
      if (b.removed) return FinishPending(needs, removed);
      generation = b.generation;
      // Already present: raced a rewrite that just finished.
      pending -= FinishSatisfied(b.mtt, needs);
    }
    if (pending == 0) return;

    // Resident first, outside the lock: this is the slow part (page allocation, zeroing).
    pending -= MakeNeedsResident(dev, needs);
    if (pending == 0) return;
    if (options_.after_populate_for_test) options_.after_populate_for_test(dev.key);

    base::MutexLock lock(&b.mu);
    if (b.removed) return FinishPending(needs, removed);
    if (b.generation != generation) {
      // Zapped while we made pages resident: the memory may be on its way out. Start over.
      stats_.stale_services.Inc();
      continue;
    }
    const ServicePlan plan = PlanService(dev, b.mtt, needs, kMaxEntriesPerRewrite);
    absl::Status s;
    if (!plan.rewrites.empty()) {
      s = Rewrite(b, plan.rewrites);
      CommitService(plan, s.ok(), &b.mtt);
      if (s.ok()) {
        *rewrote = true;
        stats_.rewrites.Inc();
      }
    }
    return FinishPending(needs, s);  // OK for all of them, or the rewrite's error
  }
  if (pending > 0) {
    FinishPending(needs, absl::AbortedError(absl::StrFormat(
                             "backing 0x%08x: pages zapped %d times while being served", dev.key,
                             kMaxServiceAttempts)));
  }
}

size_t ServicerImpl::MakeNeedsResident(const hca::Backing& dev, absl::Span<Need> needs) {
  size_t failed = 0;
  for (Need& n : needs) {
    if (n.done) continue;
    const ByteRange bytes = ResidentBytes(dev, n);
    absl::Status s = MakeResident(bytes.addr, bytes.length, n.write,
                                  options_.populate == PopulateMethod::kMadvise);
    if (!s.ok()) {
      stats_.populate_errors.Inc();
      n.done = true;
      n.result = s;
      ++failed;
    }
  }
  return failed;
}

}  // namespace regcache::odp::internal