// odp::Servicer: creation, the tracking of backings, zaps, and the MTT writes — the one place
// odp/ posts UMRs, through a cache::UmrEngine per PD. The thread and the fault service are in
// internal/fault_service.cc, prefetch in internal/prefetch.cc (internal/servicer_impl.h).
#include "odp/servicer.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "odp/internal/fault_plan.h"
#include "odp/internal/mtt_range.h"
#include "odp/internal/servicer_impl.h"

namespace regcache::odp {
namespace internal {
namespace {

bool Writable(hca::AccessFlags a) {
  return (a & (hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteAtomic)) != 0;
}

}  // namespace

ServicerImpl::ServicerImpl(hca::Device* device, const ServicerOptions& options, FaultPath path,
                           int wake_fd, base::stats::Registry* registry)
    : device_(device), options_(options), path_(path), wake_fd_(wake_fd) {
  if (registry != nullptr) registration_ = base::stats::Registration(*registry, "odp", &stats_);
}

ServicerImpl::~ServicerImpl() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
}

void ServicerImpl::Start() {
  base::MutexLock lock(&start_mu_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

std::shared_ptr<BackingState> ServicerImpl::Find(hca::Key key) {
  base::MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second;
}

void ServicerImpl::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

// ---------------------------------------------------------------------------------------------
// Tracking

void ServicerImpl::OnBackingAdded(const cache::BackingEvent& event) {
  auto b = std::make_shared<BackingState>();
  b->event = event;
  b->writable = Writable(event.access);
  const bool odp = event.device.on_demand;
  if (odp) {
    base::MutexLock lock(&b->mu);
    b->mtt.entries.assign(TableEntries(event.device), kAbsent);
  }
  base::MutexLock lock(&mu_);
  by_key_[event.device.key] = b;
  if (event.tenant != 0) by_tenant_[event.tenant][event.va] = b;
  if (odp) {
    std::unique_ptr<PdEngine>& pe = pd_engines_[event.device.pd.pdn];
    if (pe == nullptr) {
      pe = std::make_unique<PdEngine>();
      pe->pd = event.device.pd;
    }
    pe->backings++;
    b->pd_engine = pe.get();
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
      const EntryRange all{0, TableEntries(b->device())};
      absl::Status s = ZapLocked(*b, all);
      if (!s.ok()) {
        RC_LOG(WARNING) << absl::StrFormat("zap of backing 0x%08x before removal failed: ",
                                           b->device().key)
                        << s;
      }
    }
  }
  std::unique_ptr<PdEngine> retired;  // destroyed after the registry lock is released
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
      auto pe = pd_engines_.find(b->device().pd.pdn);
      if (pe != pd_engines_.end() && --pe->second->backings == 0) {
        retired = std::move(pe->second);
        pd_engines_.erase(pe);
      }
      stats_.tracked_backings.Sub();
    }
  }
  if (retired != nullptr) {
    base::MutexLock lock(&retired->mu);
    retired->engine.reset();
  }
}

// ---------------------------------------------------------------------------------------------
// Zap

absl::StatusOr<std::shared_ptr<BackingState>> ServicerImpl::FindRange(hca::Key key, uint64_t addr,
                                                                      uint64_t length,
                                                                      const char* what) {
  std::shared_ptr<BackingState> b = Find(key);
  if (b == nullptr) {
    return absl::NotFoundError(absl::StrFormat("no tracked backing with key 0x%08x", key));
  }
  const hca::Backing& dev = b->device();
  if (addr < dev.addr || addr + length < addr || addr + length > dev.addr + dev.length) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s [0x%x, +%u) outside backing 0x%08x [0x%x, +%u)", what, addr, length,
                        key, dev.addr, dev.length));
  }
  return b;
}

absl::Status ServicerImpl::Zap(hca::Key key, uint64_t addr, uint64_t length) {
  ASSIGN_OR_RETURN(std::shared_ptr<BackingState> b, FindRange(key, addr, length, "zap"));
  const hca::Backing& dev = b->device();
  if (!dev.on_demand || path_ == FaultPath::kKernel || length == 0) return absl::OkStatus();
  base::MutexLock lock(&b->mu);
  if (b->removed) {
    return absl::NotFoundError(absl::StrFormat("backing 0x%08x is being removed", key));
  }
  return ZapLocked(*b, EntriesCovering(dev, addr, length));
}

absl::Status ServicerImpl::ZapLocked(BackingState& b, EntryRange range) {
  stats_.zaps.Inc();
  ++b.generation;  // services that made pages resident before now must not publish them
  const ZapPlan plan = PlanZap(b.device(), b.mtt, range, kMaxEntriesPerRewrite);
  if (plan.rewrites.empty()) return absl::OkStatus();
  absl::Status s = Rewrite(b, plan.rewrites);
  CommitZap(plan, s.ok(), &b.mtt);
  if (!s.ok()) {
    stats_.zap_errors.Inc();
    return s;
  }
  stats_.zapped_entries.Inc(plan.present);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// MTT writes

absl::StatusOr<cache::UmrEngine*> ServicerImpl::EngineFor(PdEngine& pe) {
  if (pe.engine == nullptr) {
    cache::EngineOptions eo;
    eo.queues_per_tenant = 1;  // one queue: the PD's rewrites execute in posting order
    eo.queue_depth = options_.queue_depth;
    eo.completion_timeout = options_.completion_timeout;
    absl::StatusOr<std::unique_ptr<cache::UmrEngine>> created =
        cache::UmrEngine::Create(device_, pe.pd, eo, &umr_stats_);
    if (!created.ok()) return base::Annotate(created.status(), "creating odp's rewrite queue");
    pe.engine = std::move(*created);
  }
  return pe.engine.get();
}

absl::Status ServicerImpl::Rewrite(BackingState& b, absl::Span<const MttRewrite> rewrites) {
  PdEngine& pe = *b.pd_engine;
  base::MutexLock lock(&pe.mu);
  absl::StatusOr<cache::UmrEngine*> engine = EngineFor(pe);
  if (!engine.ok()) {
    stats_.rewrite_errors.Inc();
    return engine.status();
  }
  // Every WQE signalled: a batch larger than the ring frees its space as completions arrive.
  std::vector<cache::UmrOp> ops;
  std::vector<cache::UmrOp*> batch;
  ops.reserve(rewrites.size());
  batch.reserve(rewrites.size());
  for (const MttRewrite& r : rewrites) {
    ops.push_back(cache::UmrOp::RewriteTranslation(b.device().key, r.first, r.entries,
                                                   /*signaled=*/true));
    batch.push_back(&ops.back());
  }
  (*engine)->Execute(batch);
  absl::Status first_error;
  for (const cache::UmrOp& op : ops) {
    if (op.posted) stats_.rewrite_wqes.Inc();
    if (first_error.ok()) first_error = op.result;
  }
  if (!first_error.ok()) stats_.rewrite_errors.Inc();
  return first_error;
}

}  // namespace internal

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
  constexpr uint32_t kMinDepth = 2 * internal::kMaxWqebbsPerRewrite;
  if (depth < kMinDepth || (depth & (depth - 1)) != 0 ||
      (caps.max_queue_depth != 0 && depth > caps.max_queue_depth)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("queue_depth %u: must be a power of two in [%u, %u]", depth, kMinDepth,
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
  auto s = std::make_unique<internal::ServicerImpl>(device, options, path, wake_fd, registry);
  if (options.start) s->Start();
  return std::unique_ptr<Servicer>(std::move(s));
}

}  // namespace regcache::odp