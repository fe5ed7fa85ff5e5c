// odp::Servicer — on-demand paging for backing memory: fault servicing, prefetch, zap.
//
// An on-demand (ODP) backing is registered with every MTT entry absent; a page becomes visible
// to the NIC when it is first touched (a page fault) or prefetched, and must become invisible
// again (zapped) before the daemon unmaps or shrinks the memory. Who does the work depends on
// the device — the split this class hides:
//
//   kDaemon  (hca/sim: the device reports fault events, FaultEventFd() >= 0)
//            odp/ is the fault servicer. One thread per device reads fault events and, per
//            batch: finds the tracked backing that owns the faulting key; computes the entries
//            covering [address, address+length) and widens them to 8-entry blocks; makes the
//            daemon-side pages resident with the access's intent (read, or write without
//            changing content: madvise MADV_POPULATE_READ/WRITE, a SIGBUS-guarded touch where
//            the kernel lacks it; internal/populate.h); rewrites those blocks with one UMR
//            batch (PostRewriteTranslation, translation offset) through its own
//            cache::UmrEngine in the backing's PD; waits for the completions; resumes every
//            fault it served — or resumes with error. Which pages and which blocks is decided
//            by a pure planner (internal/fault_plan.h); docs/architecture.md, ODP.
//            Prefetch is the same service run for a range instead of a fault. Zap rewrites the
//            entries absent and waits. odp/ is the only writer of an ODP backing's MTT here.
//   kKernel  (hca/mlx5: ODP MRs, ibv_reg_mr with IBV_ACCESS_ON_DEMAND; no fault events reach
//            userspace, FaultEventFd() == -1) the kernel services faults and zaps on munmap
//            (its MMU notifier). The servicer has no faults to read; Prefetch maps to
//            Device::Prefetch (the backend's ibv_advise_mr, with IBV_ADVISE_MR_FLAG_FLUSH when
//            synchronous); Zap has nothing to do and returns OK.
//
// Coalescing: the thread drains every pending event before serving; faults of one backing in
// one batch are served together (one UMR batch for all of them: overlapping faults lead to ONE
// rewrite and every token is resumed after it), and a fault whose pages are already present
// with the rights it needs (it raced a rewrite that just completed) is resumed at once.
// Bounded: at most max_pending_faults are taken per batch; the excess is resumed with error
// (queue_overflow) — the access fails with vendor syndrome 0x93 instead of the daemon growing.
//
// Zap versus a concurrent service of the same pages: each backing has a generation, bumped by
// every zap under the backing's lock. A service records it before making pages resident and
// publishes (posts its UMR) only if it is unchanged, under the same lock; otherwise it starts
// over (the memory may be gone: the new attempt then fails cleanly). Both post on the same
// per-PD engine, whose one queue executes in order, so when Zap returns the zapped entries are
// absent and no service started before it can make them present again.
//
// Which backings: the servicer implements cache::BackingObserver, so a RegCache built with
// CacheOptions::backing_observer = servicer tells it about every backing (only on-demand ones
// are served; pinned ones are remembered so tenant ranges can be walked) and lets it zap before
// the registration goes away. Users without a cache call OnBackingAdded/OnBackingRemoving
// themselves (tenant 0). A fault on a key the servicer does not know is resumed with error.
//
// Errors never stop the thread: a fault outside any backing, pages that cannot be made
// resident (a truncated memfd: MADV_POPULATE reports EFAULT, the touch fallback catches the
// SIGBUS), a failed UMR, a resume the device refuses (the access gave up) — each resumes with
// error (or is counted) and the thread reads the next event.
//
// Thread safety: every method may be called from any thread. OnBackingRemoving and Zap block
// for the round trip of one UMR batch (more when the batch is larger than the ring).
// Ownership: the device must outlive the servicer; the servicer must outlive any RegCache it
// observes (destroy the cache first). Destroying the servicer stops its thread; faults still
// pending in the device are left to the device's fault timeout.
#ifndef REGCACHE_ODP_SERVICER_H_
#define REGCACHE_ODP_SERVICER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "cache/backing_observer.h"
#include "hca/device.h"
#include "odp/stats.h"
#include "odp/types.h"

namespace regcache::odp {

class Servicer : public cache::BackingObserver {
 public:
  // A servicer for `device`, its path resolved (kAuto: kDaemon when the device reports fault
  // events), its thread started unless options.start is false. Registers its stats with
  // `registry` (if given) as "odp". Creates no device queue yet: each PD's comes with its first
  // rewrite.
  // REQUIRES: `device` (and `registry`) outlive the servicer.
  // Errors: kUnimplemented when the device has no ODP (Capabilities::odp false) — on-demand
  // backings cannot exist there — or, on kDaemon, cannot rewrite part of an MTT
  // (Capabilities::translation_offset false); kInvalidArgument for bad options (queue_depth not
  // a power of two in [32, max_queue_depth], max_pending_faults 0); the errno of eventfd.
  static absl::StatusOr<std::unique_ptr<Servicer>> Create(
      hca::Device* device, const ServicerOptions& options = {},
      base::stats::Registry* registry = nullptr);
  ~Servicer() override = default;

  // Starts the thread (ServicerOptions::start = false); faults and queued prefetches wait until
  // then. Idempotent. Never fails.
  virtual void Start() = 0;
  // The path in effect (kAuto resolved). Never fails.
  virtual FaultPath path() const = 0;

  // cache::BackingObserver: starts tracking the backing. On-demand backings are served (their
  // entries taken as all absent, as RegisterBacking leaves them); pinned ones are remembered
  // so PrefetchTenantRange can walk the tenant's ranges. Tenant 0: tracked by key only.
  // REQUIRES: event.device is a live backing of the device, not tracked yet. Never fails.
  void OnBackingAdded(const cache::BackingEvent& event) override = 0;
  // cache::BackingObserver: on kDaemon, zaps every present entry of an on-demand backing and
  // waits for the UMR, then forgets the backing; faults on its key are resumed with error and
  // Prefetch/Zap answer kNotFound from then on. Blocks for the zap's round trip. The PD's
  // rewrite queue goes with its last on-demand backing. An untracked key is ignored.
  // Failures are logged and counted (zap_errors), not returned: the cache destroys the key
  // next, which fences the device off anyway. Call it before destroying the backing's key (a
  // zap of a destroyed key fails).
  void OnBackingRemoving(const cache::BackingEvent& event) override = 0;

  // Makes [addr, addr + length) of the backing `key` (daemon addresses) present: read-only, or
  // writable too when `write`. kSync: the entries are present (or the error known) on return;
  // kAsync: queued to the thread (see WaitForPrefetches). A pinned backing, or length 0, needs
  // nothing (OK). On kKernel, Device::Prefetch does the work.
  // Errors: kNotFound (no tracked backing `key`); kInvalidArgument (range not inside the
  // backing); kPermissionDenied (`write` on a backing without write rights);
  // kResourceExhausted (kAsync: max_queued_prefetches already queued). kSync only: the
  // populate's error (memory that cannot be made resident: kFailedPrecondition,
  // kResourceExhausted, kUnavailable, ... from internal/populate.h); kFailedPrecondition (the
  // backing is being removed); kAborted (its pages were zapped under every attempt); the
  // rewrite's error: the UMR's device error, kDeadlineExceeded (no completion within
  // completion_timeout), or the PD queue's own (creating or posting to it); on kKernel,
  // Device::Prefetch's error.
  virtual absl::Status Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write,
                                PrefetchMode mode) = 0;
  // Prefetch for a tenant's range [va, va + length) in the tenant's addresses, over every
  // backing of the tenant it spans (in address order; it stops at the first error, earlier
  // pieces staying prefetched). length 0: OK.
  // Errors: kInvalidArgument (the range wraps); kOutOfRange (some of it is not attached memory
  // of the tenant; nothing prefetched); Prefetch's errors.
  virtual absl::Status PrefetchTenantRange(cache::TenantId tenant, uint64_t va, uint64_t length,
                                           bool write, PrefetchMode mode) = 0;
  // Waits until every asynchronous prefetch queued before the call has been served (their
  // errors are counted in prefetch_errors and logged, not returned).
  // Errors: kDeadlineExceeded when some are still queued or running after `timeout` (also when
  // the thread was never started).
  virtual absl::Status WaitForPrefetches(absl::Duration timeout) = 0;

  // Clears the entries holding [addr, addr + length) of backing `key` (daemon addresses) and
  // waits for the UMR's completion: from then on an access there faults again, and no service
  // that made pages resident before the call publishes them. Call it before unmapping or
  // shrinking part of a backing's memory (OnBackingRemoving does it for the whole). Blocks for
  // one UMR round trip (none when nothing in the range is present). OK on kKernel, for pinned
  // backings and for length 0 (nothing to do).
  // Errors: kNotFound (no tracked backing `key`, or it is being removed); kInvalidArgument
  // (range not inside it); the rewrite's error as for Prefetch (then the entries may be partly
  // cleared: zap again).
  virtual absl::Status Zap(hca::Key key, uint64_t addr, uint64_t length) = 0;

  // The servicer's counters (odp/stats.h); valid as long as the servicer. Never fails.
  virtual const OdpStats& stats() const = 0;
};

}  // namespace regcache::odp
#endif  // REGCACHE_ODP_SERVICER_H_
