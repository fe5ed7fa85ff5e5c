#include "odp/servicer.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "odp/internal/mtt_range.h"
#include "odp/internal/populate.h"
#include "umr/prm.h"
#include "umr/wqe_builder.h"

namespace odp {
namespace {

using internal::EntryRange;
using internal::kEntriesPerBlock;

// Per-entry state odp/ keeps for an on-demand backing; it is the only writer of these MTTs on
// the daemon path, so this mirrors the device's table.
constexpr uint8_t kAbsent = 0;
constexpr uint8_t kRead = 1;
constexpr uint8_t kReadWrite = 3;

// One rewrite WQE carries at most this many entries inline (a whole number of blocks), and
// takes at most this many WQEBBs of ring.
constexpr uint32_t kMaxEntriesPerWqe =
    static_cast<uint32_t>(umr::kMaxInlineMtts) / kEntriesPerBlock * kEntriesPerBlock;
constexpr uint32_t kMaxWqebbsPerWqe = umr::kMaxWqebbsPerWqe;

// A service that keeps finding its pages zapped under it gives up after this many tries.
constexpr int kMaxServiceAttempts = 4;

bool Writable(hca::AccessFlags a) {
  return (a & (hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteAtomic)) != 0;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The queue odp/ rewrites MTTs on, one per PD (a queue may only modify keys of its own PD).
// Created on first use; destroyed when the last on-demand backing of the PD is removed, so the
// cache's DeallocPd finds no queue of ours left.
struct PdQueue {
  hca::Pd pd;
  uint32_t backings = 0;  // on-demand backings tracked in this PD; guarded by ServicerImpl::mu_
  base::Mutex mu;         // one poster/poller at a time (hca::Queue is not synchronized)
  std::unique_ptr<hca::Queue> queue ABSL_GUARDED_BY(mu);
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
};

struct BackingState {
  cache::BackingEvent event;
  bool writable = false;
  PdQueue* pd_queue = nullptr;  // on-demand: valid while !removed (our count keeps it alive)

  // Lock order: BackingState::mu, then PdQueue::mu. Every MTT write of this backing is posted
  // and awaited under mu, so services and zaps of one backing are serialized on the device too.
  base::Mutex mu;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // bumped by every zap
  bool removed ABSL_GUARDED_BY(mu) = false;
  std::vector<uint8_t> entries ABSL_GUARDED_BY(mu);  // kAbsent/kRead/kReadWrite, whole blocks
  // A rewrite failed part-way: the device's entries may differ from `entries`. From then on
  // nothing is taken as present without a rewrite, and zaps clear whole ranges.
  bool uncertain ABSL_GUARDED_BY(mu) = false;

  const hca::Backing& device() const { return event.device; }
};

// What one fault or prefetch needs from a backing, and how it ended.
struct Need {
  uint64_t addr = 0;
  uint64_t length = 0;
  bool write = false;
  EntryRange range;
  bool done = false;
  absl::Status result;
};

// Entries [first, first + entries.size()) to write; whole blocks.
struct Chunk {
  uint32_t first = 0;
  std::vector<hca::MttEntry> entries;
};

struct AsyncPrefetch {
  std::shared_ptr<BackingState> backing;
  uint64_t addr = 0;
  uint64_t length = 0;
  bool write = false;
};

struct PendingFault {
  hca::FaultEvent event;
  int64_t read_ns = 0;
};

class ServicerImpl final : public Servicer {
 public:
  ServicerImpl(hca::Device* device, const ServicerOptions& options, FaultPath path, int wake_fd,
               base::stats::Registry* registry)
      : device_(device), options_(options), path_(path), wake_fd_(wake_fd) {
    if (registry != nullptr) registration_ = base::stats::Registration(*registry, "odp", &stats_);
  }

  ~ServicerImpl() override {
    stop_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
    ::close(wake_fd_);
  }

  void Start() override {
    base::MutexLock lock(&start_mu_);
    if (thread_.joinable()) return;
    thread_ = std::thread([this] { Run(); });
  }
  FaultPath path() const override { return path_; }

  void OnBackingAdded(const cache::BackingEvent& event) override;
  void OnBackingRemoving(const cache::BackingEvent& event) override;
  absl::Status Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write,
                        PrefetchMode mode) override;
  absl::Status PrefetchTenantRange(cache::TenantId tenant, uint64_t va, uint64_t length,
                                   bool write, PrefetchMode mode) override;
  absl::Status WaitForPrefetches(absl::Duration timeout) override;
  absl::Status Zap(hca::Key key, uint64_t addr, uint64_t length) override;
  const OdpStats& stats() const override { return stats_; }

 private:
  std::shared_ptr<BackingState> Find(hca::Key key) {
    base::MutexLock lock(&mu_);
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : it->second;
  }
  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // The thread: faults (daemon path) and queued prefetches.
  void Run();
  void ServeFaults();
  void ServeQueuedPrefetches();
  void Resume(const PendingFault& f, bool ok);

  // Makes every need not yet done present (see the header's generation protocol) and sets its
  // result. *rewrote: one UMR batch was executed for them.
  void ServiceNeeds(BackingState& b, absl::Span<Need> needs, bool* rewrote);
  absl::Status RunPrefetch(BackingState& b, uint64_t addr, uint64_t length, bool write);
  // Clears the entries of `range` that are present; bumps the generation.
  absl::Status ZapLocked(BackingState& b, EntryRange range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Posts the chunks on the backing's PD queue and waits for every completion.
  absl::Status Rewrite(BackingState& b, absl::Span<const Chunk> chunks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  absl::Status Complete(PdQueue& q, uint32_t* outstanding) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q.mu);
  static hca::MttEntry EntryFor(const BackingState& b, uint32_t i, uint8_t state) {
    if (state == kAbsent) return hca::MttEntry{};
    return hca::MttEntry{internal::EntryDmaAddr(b.device(), i), true, state == kReadWrite};
  }

  hca::Device* const device_;
  const ServicerOptions options_;
  const FaultPath path_;
  const int wake_fd_;
  OdpStats stats_;
  base::stats::Registration registration_;

  base::Mutex mu_;  // the registry of backings and PD queues
  absl::flat_hash_map<hca::Key, std::shared_ptr<BackingState>> by_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<cache::TenantId, absl::btree_map<uint64_t, std::shared_ptr<BackingState>>>
      by_tenant_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::unique_ptr<PdQueue>> pd_queues_ ABSL_GUARDED_BY(mu_);

  base::Mutex prefetch_mu_;
  base::CondVar prefetch_cv_;
  std::deque<AsyncPrefetch> prefetch_queue_ ABSL_GUARDED_BY(prefetch_mu_);
  size_t prefetch_in_progress_ ABSL_GUARDED_BY(prefetch_mu_) = 0;

  base::Mutex start_mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Tracking

void ServicerImpl::OnBackingAdded(const cache::BackingEvent& event) {
  auto b = std::make_shared<BackingState>();
  b->event = event;
  b->writable = Writable(event.access);
  const bool odp = event.device.on_demand;
  if (odp) {
    base::MutexLock lock(&b->mu);
    b->entries.assign(internal::TableEntries(event.device), kAbsent);
  }
  base::MutexLock lock(&mu_);
  by_key_[event.device.key] = b;
  if (event.tenant != 0) by_tenant_[event.tenant][event.va] = b;
  if (odp) {
    std::unique_ptr<PdQueue>& q = pd_queues_[event.device.pd.pdn];
    if (q == nullptr) {
      q = std::make_unique<PdQueue>();
      q->pd = event.device.pd;
    }
    q->backings++;
    b->pd_queue = q.get();
    stats_.tracked_backings.Add();
  }
}

void ServicerImpl::OnBackingRemoving(const cache::BackingEvent& event) {
  std::shared_ptr<BackingState> b = Find(event.device.key);
  if (b == nullptr) return;
  const bool odp = b->device().on_demand;
  {
    base::MutexLock lock(&b->mu);
    b->removed = true;  // services from now on fail; faults on the key resume with error
    if (odp && path_ == FaultPath::kDaemon) {
      const EntryRange all{0, internal::TableEntries(b->device())};
      absl::Status s = ZapLocked(*b, all);
      if (!s.ok()) {
        RC_LOG(WARNING) << absl::StrFormat("zap of backing 0x%08x before removal failed: ",
                                           b->device().key)
                        << s;
      }
    }
  }
  std::unique_ptr<PdQueue> retired;  // destroyed after the registry lock is released
  {
    base::MutexLock lock(&mu_);
    auto it = by_key_.find(event.device.key);
    if (it != by_key_.end() && it->second == b) by_key_.erase(it);
    auto t = by_tenant_.find(b->event.tenant);
    if (t != by_tenant_.end()) {
      auto v = t->second.find(b->event.va);
      if (v != t->second.end() && v->second == b) t->second.erase(v);
      if (t->second.empty()) by_tenant_.erase(t);
    }
    if (odp) {
      auto q = pd_queues_.find(b->device().pd.pdn);
      if (q != pd_queues_.end() && --q->second->backings == 0) {
        retired = std::move(q->second);
        pd_queues_.erase(q);
      }
      stats_.tracked_backings.Sub();
    }
  }
  if (retired != nullptr) {
    base::MutexLock lock(&retired->mu);
    retired->queue.reset();
  }
}

// ---------------------------------------------------------------------------------------------
// The thread

void ServicerImpl::Run() {
  const int fault_fd = path_ == FaultPath::kDaemon ? device_->FaultEventFd() : -1;
  while (!stop_.load()) {
    struct pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {fault_fd, POLLIN, 0}};
    const nfds_t n = fault_fd >= 0 ? 2 : 1;
    // Without an fd the fault stream is polled every millisecond.
    const int timeout_ms = path_ == FaultPath::kDaemon && fault_fd < 0 ? 1 : 100;
    if (::poll(fds, n, timeout_ms) > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof(v));
    }
    if (stop_.load()) break;
    if (path_ == FaultPath::kDaemon) ServeFaults();
    ServeQueuedPrefetches();
  }
}

// True while the device has fault events pending. With an event fd this is a zero-timeout
// poll: asking NextFaultEvent with a zero timeout when nothing is pending may still sleep in a
// timed wait (the sim's does: timer slack, tens of microseconds on every batch).
bool EventsPending(int fault_fd) {
  if (fault_fd < 0) return true;  // no fd: NextFaultEvent decides
  struct pollfd p = {fault_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

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
  for (hca::Key key : order) {
    const std::vector<size_t>& idx = groups[key];
    std::shared_ptr<BackingState> b = Find(key);
    if (b == nullptr || !b->device().on_demand) {
      stats_.unknown_key.Inc(idx.size());
      RC_LOG(DEBUG) << absl::StrFormat("fault on key 0x%08x: no on-demand backing", key);
      for (size_t i : idx) Resume(batch[i], false);
      continue;
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

void ServicerImpl::ServeQueuedPrefetches() {
  std::deque<AsyncPrefetch> work;
  {
    base::MutexLock lock(&prefetch_mu_);
    if (prefetch_queue_.empty()) return;
    work.swap(prefetch_queue_);
    prefetch_in_progress_ = work.size();
    stats_.queued_prefetches.Sub(static_cast<int64_t>(work.size()));
  }
  for (AsyncPrefetch& p : work) {
    absl::Status s = RunPrefetch(*p.backing, p.addr, p.length, p.write);
    if (!s.ok()) {
      RC_LOG(DEBUG) << absl::StrFormat("async prefetch of key 0x%08x [0x%x, +%u): ",
                                       p.backing->device().key, p.addr, p.length)
                    << s;
    }
  }
  base::MutexLock lock(&prefetch_mu_);
  prefetch_in_progress_ = 0;
  prefetch_cv_.SignalAll();
}

// ---------------------------------------------------------------------------------------------
// Service: resident, then published, unless a zap came in between

void ServicerImpl::ServiceNeeds(BackingState& b, absl::Span<Need> needs, bool* rewrote) {
  *rewrote = false;
  const hca::Backing& dev = b.device();
  size_t pending = 0;
  for (Need& n : needs) {
    n.done = false;
    n.range = internal::EntriesCovering(dev, n.addr, n.length);
    if (n.range.empty() || n.addr < dev.addr || n.addr + n.length > dev.addr + dev.length) {
      n.done = true;
      n.result = absl::InvalidArgumentError(absl::StrFormat(
          "[0x%x, +%u) is outside backing 0x%08x [0x%x, +%u)", n.addr, n.length, dev.key,
          dev.addr, dev.length));
    } else if (n.write && !b.writable) {
      n.done = true;
      n.result = absl::PermissionDeniedError(
          absl::StrFormat("backing 0x%08x is not writable", dev.key));
    } else {
      ++pending;
    }
  }
  auto fail_pending = [&](const absl::Status& s) {
    for (Need& n : needs) {
      if (!n.done) {
        n.done = true;
        n.result = s;
      }
    }
  };
  auto satisfied = [&](const Need& n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
    if (b.uncertain) return false;
    const uint8_t want = n.write ? kReadWrite : kRead;
    for (uint32_t i = n.range.first; i < n.range.end; ++i) {
      if ((b.entries[i] & want) != want) return false;
    }
    return true;
  };
  const absl::Status removed = absl::FailedPreconditionError(
      absl::StrFormat("backing 0x%08x is being removed", dev.key));

  for (int attempt = 0; attempt < kMaxServiceAttempts && pending > 0; ++attempt) {
    uint64_t generation;
    {
      base::MutexLock lock(&b.mu);
      if (b.removed) return fail_pending(removed);
      generation = b.generation;
      for (Need& n : needs) {
        if (!n.done && satisfied(n)) {  // already present: raced a rewrite that just finished
          n.done = true;
          n.result = absl::OkStatus();
          --pending;
        }
      }
    }
    if (pending == 0) return;

    // Resident first, outside the lock: this is the slow part (page allocation, zeroing).
    for (Need& n : needs) {
      if (n.done) continue;
      uint64_t lo, lo_len, hi, hi_len;
      internal::EntryBytes(dev, n.range.first, &lo, &lo_len);
      internal::EntryBytes(dev, n.range.end - 1, &hi, &hi_len);
      absl::Status s = internal::MakeResident(lo, hi + hi_len - lo, n.write,
                                              options_.populate == PopulateMethod::kMadvise);
      if (!s.ok()) {
        stats_.populate_errors.Inc();
        n.done = true;
        n.result = s;
        --pending;
      }
    }
    if (pending == 0) return;
    if (options_.after_populate_for_test) options_.after_populate_for_test(dev.key);

    base::MutexLock lock(&b.mu);
    if (b.removed) return fail_pending(removed);
    if (b.generation != generation) {
      // Zapped while we made pages resident: the memory may be on its way out. Start over.
      stats_.stale_services.Inc();
      continue;
    }
    // Runs of whole blocks touched by the pending needs, merged where they meet.
    std::vector<EntryRange> runs;
    for (const Need& n : needs) {
      if (!n.done) runs.push_back(internal::AlignToBlocks(dev, n.range));
    }
    std::sort(runs.begin(), runs.end(),
              [](const EntryRange& x, const EntryRange& y) { return x.first < y.first; });
    std::vector<EntryRange> merged;
    for (const EntryRange& r : runs) {
      if (!merged.empty() && r.first <= merged.back().end) {
        merged.back().end = std::max(merged.back().end, r.end);
      } else {
        merged.push_back(r);
      }
    }
    // The new state of those runs: what is there, plus what the needs add.
    std::vector<std::vector<uint8_t>> next(merged.size());
    for (size_t k = 0; k < merged.size(); ++k) {
      next[k].assign(b.entries.begin() + merged[k].first, b.entries.begin() + merged[k].end);
    }
    for (const Need& n : needs) {
      if (n.done) continue;
      size_t k = 0;
      while (merged[k].end <= n.range.first) ++k;
      for (uint32_t i = n.range.first; i < n.range.end; ++i) {
        next[k][i - merged[k].first] |= n.write ? kReadWrite : kRead;
      }
    }
    std::vector<Chunk> chunks;
    for (size_t k = 0; k < merged.size(); ++k) {
      if (!b.uncertain &&
          std::equal(next[k].begin(), next[k].end(), b.entries.begin() + merged[k].first)) {
        continue;
      }
      Chunk c;
      c.first = merged[k].first;
      c.entries.reserve(next[k].size());
      for (uint32_t i = 0; i < next[k].size(); ++i) {
        c.entries.push_back(EntryFor(b, c.first + i, next[k][i]));
      }
      chunks.push_back(std::move(c));
    }
    absl::Status s;
    if (!chunks.empty()) {
      s = Rewrite(b, chunks);
      if (s.ok()) {
        *rewrote = true;
        stats_.rewrites.Inc();
        for (size_t k = 0; k < merged.size(); ++k) {
          std::copy(next[k].begin(), next[k].end(), b.entries.begin() + merged[k].first);
        }
      } else {
        // Some WQEs may have executed: count the new entries as present so a zap clears them.
        b.uncertain = true;
        for (size_t k = 0; k < merged.size(); ++k) {
          for (size_t i = 0; i < next[k].size(); ++i) b.entries[merged[k].first + i] |= next[k][i];
        }
      }
    }
    return fail_pending(s);  // OK for all of them, or the rewrite's error
  }
  if (pending > 0) {
    fail_pending(absl::AbortedError(absl::StrFormat(
        "backing 0x%08x: pages zapped %d times while being served", dev.key,
        kMaxServiceAttempts)));
  }
}

absl::Status ServicerImpl::Rewrite(BackingState& b, absl::Span<const Chunk> chunks) {
  PdQueue& q = *b.pd_queue;
  base::MutexLock lock(&q.mu);
  if (q.queue == nullptr) {
    hca::QueueOptions qo;
    qo.depth = options_.queue_depth;
    absl::StatusOr<std::unique_ptr<hca::Queue>> created = device_->CreateQueue(q.pd, qo);
    if (!created.ok()) {
      stats_.rewrite_errors.Inc();
      return base::Annotate(created.status(), "creating odp's rewrite queue");
    }
    q.queue = std::move(*created);
  }
  uint32_t outstanding = 0;
  absl::Status first_error;
  for (const Chunk& c : chunks) {
    for (size_t off = 0; off < c.entries.size() && first_error.ok(); off += kMaxEntriesPerWqe) {
      const size_t n = std::min<size_t>(kMaxEntriesPerWqe, c.entries.size() - off);
      if (q.queue->FreeSlots() < kMaxWqebbsPerWqe) {
        absl::Status s = Complete(q, &outstanding);
        if (!s.ok()) first_error = s;
        if (!first_error.ok()) break;
      }
      hca::PostOptions po;
      po.signaled = true;
      absl::Status s = q.queue->PostRewriteTranslation(
          q.next_id++, b.device().key, static_cast<uint32_t>(c.first + off),
          absl::MakeConstSpan(c.entries).subspan(off, n), po);
      if (!s.ok()) {
        first_error = s;
        break;
      }
      ++outstanding;
      stats_.rewrite_wqes.Inc();
    }
    if (!first_error.ok()) break;
  }
  absl::Status s = Complete(q, &outstanding);
  if (first_error.ok()) first_error = s;
  if (!first_error.ok()) stats_.rewrite_errors.Inc();
  return first_error;
}

absl::Status ServicerImpl::Complete(PdQueue& q, uint32_t* outstanding) {
  if (*outstanding == 0 || q.queue == nullptr) return absl::OkStatus();
  absl::Status first = q.queue->Doorbell();
  absl::Status flushed = first.ok() ? q.queue->Flush(options_.completion_timeout) : first;
  hca::Completion c[16];
  while (*outstanding > 0) {
    const size_t n = q.queue->Poll(absl::MakeSpan(c));
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) {
      --*outstanding;
      if (!c[i].status.ok() && first.ok()) first = c[i].status;
    }
  }
  if (*outstanding > 0) {
    // Lost or late completions: the queue's state is unknown. Replace it (next use creates one).
    q.queue.reset();
    *outstanding = 0;
    if (first.ok()) {
      first = flushed.ok() ? absl::InternalError("rewrite completions missing") : flushed;
    }
  }
  return first;
}

// ---------------------------------------------------------------------------------------------
// Zap

absl::Status ServicerImpl::ZapLocked(BackingState& b, EntryRange range) {
  stats_.zaps.Inc();
  ++b.generation;  // services that made pages resident before now must not publish them
  const EntryRange blocks = internal::AlignToBlocks(b.device(), range);
  std::vector<Chunk> chunks;
  uint64_t zapped = 0;
  for (uint32_t blk = blocks.first; blk < blocks.end; blk += kEntriesPerBlock) {
    bool any = false;
    for (uint32_t i = std::max(blk, range.first); i < std::min(blk + kEntriesPerBlock, range.end);
         ++i) {
      if (b.entries[i] != kAbsent) {
        any = true;
        ++zapped;
      }
    }
    any = any || b.uncertain;
    if (!any) continue;
    if (chunks.empty() || chunks.back().first + chunks.back().entries.size() != blk) {
      chunks.push_back(Chunk{blk, {}});
    }
    for (uint32_t i = blk; i < blk + kEntriesPerBlock; ++i) {
      const bool in = i >= range.first && i < range.end;
      chunks.back().entries.push_back(in ? hca::MttEntry{} : EntryFor(b, i, b.entries[i]));
    }
  }
  if (chunks.empty()) return absl::OkStatus();
  absl::Status s = Rewrite(b, chunks);
  if (!s.ok()) {
    stats_.zap_errors.Inc();
    b.uncertain = true;  // some blocks may be cleared already; the state keeps them present
    return s;
  }
  std::fill(b.entries.begin() + range.first, b.entries.begin() + range.end, kAbsent);
  stats_.zapped_entries.Inc(zapped);
  return absl::OkStatus();
}

absl::Status ServicerImpl::Zap(hca::Key key, uint64_t addr, uint64_t length) {
  std::shared_ptr<BackingState> b = Find(key);
  if (b == nullptr) {
    return absl::NotFoundError(absl::StrFormat("no tracked backing with key 0x%08x", key));
  }
  const hca::Backing& dev = b->device();
  if (addr < dev.addr || addr + length < addr || addr + length > dev.addr + dev.length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "zap [0x%x, +%u) outside backing 0x%08x [0x%x, +%u)", addr, length, key, dev.addr,
        dev.length));
  }
  if (!dev.on_demand || path_ == FaultPath::kKernel || length == 0) return absl::OkStatus();
  base::MutexLock lock(&b->mu);
  if (b->removed) {
    return absl::NotFoundError(absl::StrFormat("backing 0x%08x is being removed", key));
  }
  return ZapLocked(*b, internal::EntriesCovering(dev, addr, length));
}

// ---------------------------------------------------------------------------------------------
// Prefetch

absl::Status ServicerImpl::RunPrefetch(BackingState& b, uint64_t addr, uint64_t length,
                                       bool write) {
  stats_.prefetches.Inc();
  absl::Status s;
  if (path_ == FaultPath::kKernel) {
    s = device_->Prefetch(b.device().key, addr, length, write);
  } else {
    Need n;
    n.addr = addr;
    n.length = length;
    n.write = write;
    bool rewrote = false;
    ServiceNeeds(b, absl::MakeSpan(&n, 1), &rewrote);
    s = n.result;
  }
  if (!s.ok()) stats_.prefetch_errors.Inc();
  return s;
}

absl::Status ServicerImpl::Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write,
                                    PrefetchMode mode) {
  std::shared_ptr<BackingState> b = Find(key);
  if (b == nullptr) {
    return absl::NotFoundError(absl::StrFormat("no tracked backing with key 0x%08x", key));
  }
  const hca::Backing& dev = b->device();
  if (addr < dev.addr || addr + length < addr || addr + length > dev.addr + dev.length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefetch [0x%x, +%u) outside backing 0x%08x [0x%x, +%u)", addr, length, key, dev.addr,
        dev.length));
  }
  if (write && !b->writable) {
    return absl::PermissionDeniedError(
        absl::StrFormat("prefetch for write of backing 0x%08x, which is not writable", key));
  }
  if (!dev.on_demand || length == 0) return absl::OkStatus();
  if (mode == PrefetchMode::kSync) return RunPrefetch(*b, addr, length, write);
  {
    base::MutexLock lock(&prefetch_mu_);
    if (prefetch_queue_.size() >= options_.max_queued_prefetches) {
      stats_.prefetch_queue_overflow.Inc();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%u asynchronous prefetches already queued", prefetch_queue_.size()));
    }
    prefetch_queue_.push_back(AsyncPrefetch{std::move(b), addr, length, write});
    stats_.queued_prefetches.Add();
  }
  Wake();
  return absl::OkStatus();
}

absl::Status ServicerImpl::PrefetchTenantRange(cache::TenantId tenant, uint64_t va,
                                               uint64_t length, bool write, PrefetchMode mode) {
  if (length == 0) return absl::OkStatus();
  if (va + length < va) return absl::InvalidArgumentError("prefetch range wraps");
  struct Piece {
    hca::Key key;
    uint64_t addr;
    uint64_t length;
  };
  std::vector<Piece> pieces;
  {
    base::MutexLock lock(&mu_);
    auto t = by_tenant_.find(tenant);
    uint64_t at = va;
    const uint64_t end = va + length;
    if (t != by_tenant_.end()) {
      auto it = t->second.upper_bound(at);
      if (it != t->second.begin()) --it;
      for (; it != t->second.end() && at < end; ++it) {
        const BackingState& b = *it->second;
        const uint64_t b_end = b.event.va + b.device().length;
        if (b.event.va > at) break;  // a hole
        if (b_end <= at) continue;
        const uint64_t n = std::min(end, b_end) - at;
        pieces.push_back(Piece{b.device().key, b.device().addr + (at - b.event.va), n});
        at += n;
      }
    }
    if (at < end) {
      return absl::OutOfRangeError(absl::StrFormat(
          "tenant %u: 0x%x is not in attached memory (prefetch [0x%x, +%u))", tenant, at, va,
          length));
    }
  }
  for (const Piece& p : pieces) RETURN_IF_ERROR(Prefetch(p.key, p.addr, p.length, write, mode));
  return absl::OkStatus();
}

absl::Status ServicerImpl::WaitForPrefetches(absl::Duration timeout) {
  base::MutexLock lock(&prefetch_mu_);
  const bool idle = prefetch_cv_.WaitFor(&prefetch_mu_, timeout,
                                         [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                           return prefetch_queue_.empty() &&
                                                  prefetch_in_progress_ == 0;
                                         });
  if (!idle) return absl::DeadlineExceededError("asynchronous prefetches still pending");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Servicer>> Servicer::Create(hca::Device* device,
                                                           const ServicerOptions& options,
                                                           base::stats::Registry* registry) {
  const hca::Capabilities& caps = device->capabilities();
  if (!caps.odp) {
    return absl::UnimplementedError(absl::StrFormat(
        "device %s (backend %s) has no ODP: on-demand backings, fault service and prefetch are "
        "unavailable; attach pinned memory instead",
        caps.device_name, caps.backend));
  }
  const uint32_t depth = options.queue_depth;
  if (depth < 2 * kMaxWqebbsPerWqe || (depth & (depth - 1)) != 0 ||
      (caps.max_queue_depth != 0 && depth > caps.max_queue_depth)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "queue_depth %u: must be a power of two in [%u, %u]", depth, 2 * kMaxWqebbsPerWqe,
        caps.max_queue_depth));
  }
  if (options.max_pending_faults == 0) {
    return absl::InvalidArgumentError("max_pending_faults must be > 0");
  }
  FaultPath path = options.path;
  if (path == FaultPath::kAuto) {
    // A backend whose kernel services faults (mlx5 ODP MRs) reports no fault-event stream.
    path = device->FaultEventFd() >= 0 ? FaultPath::kDaemon : FaultPath::kKernel;
  }
  if (path == FaultPath::kDaemon && !caps.translation_offset) {
    return absl::UnimplementedError(absl::StrFormat(
        "device %s cannot rewrite MTT ranges (no translation offset): odp/ cannot service faults",
        caps.device_name));
  }
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) return base::ErrnoToStatus(errno, "eventfd for the odp servicer");
  auto s = std::make_unique<ServicerImpl>(device, options, path, wake_fd, registry);
  if (options.start) s->Start();
  return std::unique_ptr<Servicer>(std::move(s));
}

}  // namespace odp
