// The servicer's implementation (odp/servicer.h describes what it does), in three files:
//   odp/servicer.cc               creation, tracking of backings, zaps and the MTT writes (the
//                                 one place odp/ posts UMRs: through a cache::UmrEngine per PD);
//   odp/internal/fault_service.cc the thread: fault events, and the service of needs (make
//                                 resident, then publish unless a zap came in between);
//   odp/internal/prefetch.cc      prefetch, synchronous and queued to the thread.
// What to make resident and which MTT ranges to rewrite is decided by the pure planner,
// odp/internal/fault_plan.h; this class carries the plans out.
//
// Locks, in order: BackingState::mu, then PdEngine::mu. ServicerImpl::mu_ (the registry of
// backings) and prefetch_mu_ are taken alone.
#ifndef REGCACHE_ODP_INTERNAL_SERVICER_IMPL_H_
#define REGCACHE_ODP_INTERNAL_SERVICER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "base/stats.h"
#include "base/unique_fd.h"
#include "cache/stats.h"
#include "cache/umr_engine.h"
#include "hca/device.h"
#include "odp/internal/fault_plan.h"
#include "odp/internal/mtt_range.h"
#include "odp/servicer.h"
#include "odp/stats.h"
#include "umr/prm.h"
#include "umr/wqe_builder.h"

namespace regcache::odp::internal {

// One rewrite WQE carries at most this many entries inline (a whole number of blocks), and
// takes at most this many WQEBBs of ring.
inline constexpr uint32_t kMaxEntriesPerRewrite =
    static_cast<uint32_t>(umr::kMaxInlineMtts) / kEntriesPerBlock * kEntriesPerBlock;
inline constexpr uint32_t kMaxWqebbsPerRewrite = umr::kMaxWqebbsPerWqe;

// A service that keeps finding its pages zapped under it gives up after this many tries.
inline constexpr int kMaxServiceAttempts = 4;

// The UMR engine odp/ rewrites MTTs through, one per PD (a queue may only modify keys of its
// own PD), with one queue: requests execute in posting order. Created on first use; destroyed
// when the last on-demand backing of the PD is removed, so the cache's DeallocPd finds no queue
// of ours left.
struct PdEngine {
  hca::Pd pd;
  uint32_t backings = 0;  // on-demand backings tracked in this PD; guarded by ServicerImpl::mu_
  base::Mutex mu;         // one rewrite batch of the PD at a time
  std::unique_ptr<cache::UmrEngine> engine ABSL_GUARDED_BY(mu);
};

struct BackingState {
  cache::BackingEvent event;
  bool writable = false;
  PdEngine* pd_engine = nullptr;  // on-demand: valid while !removed (our count keeps it alive)

  // Every MTT write of this backing is posted and awaited under mu, so services and zaps of one
  // backing are serialized on the device too.
  base::Mutex mu;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // bumped by every zap
  bool removed ABSL_GUARDED_BY(mu) = false;
  MttState mtt ABSL_GUARDED_BY(mu);  // on-demand backings only

  const hca::Backing& device() const { return event.device; }
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

int64_t NowNs();

class ServicerImpl final : public Servicer {
 public:
  ServicerImpl(hca::Device* device, const ServicerOptions& options, FaultPath path, int wake_fd,
               base::stats::Registry* registry);
  ~ServicerImpl() override;

  void Start() override;
  FaultPath path() const override { return path_; }

  void OnBackingAdded(const cache::BackingEvent& event) override;
  void OnBackingRemoving(const cache::BackingEvent& event) override;
  absl::Status Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write,
                        PrefetchMode mode) override;
  absl::Status PrefetchTenantRange(cache::TenantId tenant, uint64_t va, uint64_t length, bool write,
                                   PrefetchMode mode) override;
  absl::Status WaitForPrefetches(absl::Duration timeout) override;
  absl::Status Zap(hca::Key key, uint64_t addr, uint64_t length) override;
  const OdpStats& stats() const override { return stats_; }

 private:
  std::shared_ptr<BackingState> Find(hca::Key key);
  // The tracked backing `key` if [addr, +length) lies inside it: kNotFound (untracked),
  // kInvalidArgument (outside; the message names `what` the caller was asked to do).
  absl::StatusOr<std::shared_ptr<BackingState>> FindRange(hca::Key key, uint64_t addr,
                                                          uint64_t length, const char* what);
  void Wake();

  // The thread (fault_service.cc): faults (daemon path) and queued prefetches.
  void Run();
  void ServeFaults();
  // Serves the faults batch[idx...] of backing `key`, all in one service.
  void ServeBackingFaults(hca::Key key, absl::Span<const PendingFault> batch,
                          absl::Span<const size_t> idx);
  void Resume(const PendingFault& f, bool ok);

  // Makes every need not yet done present (see the header's generation protocol) and sets its
  // result. *rewrote: one UMR batch was executed for them.
  void ServiceNeeds(BackingState& b, absl::Span<Need> needs, bool* rewrote);
  // Makes the pages of every pending need resident; fails (done) the needs whose pages cannot
  // be. Returns how many it failed.
  size_t MakeNeedsResident(const hca::Backing& dev, absl::Span<Need> needs);

  // Prefetch (prefetch.cc).
  absl::Status RunPrefetch(BackingState& b, uint64_t addr, uint64_t length, bool write);
  void ServeQueuedPrefetches();

  // Clears the entries of `range` that are present; bumps the generation.
  absl::Status ZapLocked(BackingState& b, EntryRange range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Posts the rewrites through the backing's PD engine and waits for every completion.
  absl::Status Rewrite(BackingState& b, absl::Span<const MttRewrite> rewrites)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // The PD's engine, created on first use.
  absl::StatusOr<cache::UmrEngine*> EngineFor(PdEngine& pe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pe.mu);

  hca::Device* const device_;
  const ServicerOptions options_;
  const FaultPath path_;
  const base::UniqueFd wake_fd_;
  OdpStats stats_;
  base::stats::Registration registration_;
  // The engines' own counters (not registered: odp/'s are rewrites, rewrite_wqes, ...).
  cache::CacheStats umr_stats_;

  base::Mutex mu_;  // the registry of backings and PD engines
  absl::flat_hash_map<hca::Key, std::shared_ptr<BackingState>> by_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<cache::TenantId, absl::btree_map<uint64_t, std::shared_ptr<BackingState>>>
      by_tenant_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::unique_ptr<PdEngine>> pd_engines_ ABSL_GUARDED_BY(mu_);

  base::Mutex prefetch_mu_;
  base::CondVar prefetch_cv_;
  std::deque<AsyncPrefetch> prefetch_queue_ ABSL_GUARDED_BY(prefetch_mu_);
  size_t prefetch_in_progress_ ABSL_GUARDED_BY(prefetch_mu_) = 0;

  base::Mutex start_mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace regcache::odp::internal
#endif  // REGCACHE_ODP_INTERNAL_SERVICER_IMPL_H_
