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
//            (PostRewriteTranslation, translation offset) on its own queue in the backing's PD;
//            waits for the completion; resumes every fault it served — or resumes with error.
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
// per-PD queue, which executes in order, so when Zap returns the zapped entries are absent and
// no service started before it can make them present again.
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
// for one UMR round trip per run of present blocks.
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

namespace odp {

enum class FaultPath {
  kAuto,    // kDaemon if the device has a fault-event stream, else kKernel
  kDaemon,  // odp/ services faults with UMRs (sim)
  kKernel,  // the kernel services faults; prefetch -> Device::Prefetch (mlx5)
};

enum class PopulateMethod {
  kMadvise,  // MADV_POPULATE_READ/WRITE, falling back to kTouch on kernels before 5.14
  kTouch,    // SIGBUS-guarded per-page touch (tests force it to check the fallback)
};

struct ServicerOptions {
  FaultPath path = FaultPath::kAuto;
  PopulateMethod populate = PopulateMethod::kMadvise;
  // Faults taken into one batch; faults beyond it are resumed with error. Default 4096.
  uint32_t max_pending_faults = 4096;
  // Asynchronous prefetches waiting for the thread; beyond it Prefetch fails with
  // kResourceExhausted. Default 1024.
  uint32_t max_queued_prefetches = 1024;
  // Depth of each per-PD rewrite queue, in 64-byte WQE basic blocks (power of two, >= 32).
  // Default 256.
  uint32_t queue_depth = 256;
  // How long a rewrite may wait for its completion before it fails (and the queue is replaced).
  // Default 2 s.
  absl::Duration completion_timeout = absl::Seconds(2);
  // Start the thread in Create. false: faults stay pending until Start() (tests use it to
  // stage concurrent faults deterministically). Default true.
  bool start = true;
  // Test hook: runs after a service made its pages resident and before it publishes them
  // (outside every lock), with the backing's key. Lets a test zap or truncate in that window.
  std::function<void(hca::Key)> after_populate_for_test;
};

enum class PrefetchMode {
  kSync,   // the translations are present (or the error known) when Prefetch returns
  kAsync,  // queued to the servicer thread; Prefetch returns once it is queued
};

class Servicer : public cache::BackingObserver {
 public:
  // A servicer for `device`. Registers its stats with `registry` (if given) as "odp".
  // Errors: kUnimplemented when the device has no ODP (Capabilities::odp false) — on-demand
  // backings cannot exist there; kInvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<Servicer>> Create(
      hca::Device* device, const ServicerOptions& options = {},
      base::stats::Registry* registry = nullptr);
  ~Servicer() override = default;

  // Starts the thread (ServicerOptions::start = false). Idempotent.
  virtual void Start() = 0;
  // The path in effect (kAuto resolved).
  virtual FaultPath path() const = 0;

  // cache::BackingObserver. Added: starts tracking the backing (on-demand ones are served).
  // Removing: zaps every present entry of an on-demand backing and waits, then forgets it;
  // faults on its key are resumed with error from then on. Failures are logged and counted
  // (zap_errors): the cache destroys the key next, which fences the device off anyway.
  void OnBackingAdded(const cache::BackingEvent& event) override = 0;
  void OnBackingRemoving(const cache::BackingEvent& event) override = 0;

  // Makes [addr, addr + length) of the backing `key` (daemon addresses) present: read-only, or
  // writable too when `write`. Synchronous or queued (see PrefetchMode). A pinned backing needs
  // nothing (OK). Errors: kNotFound (no tracked backing `key`); kInvalidArgument (range not
  // inside the backing); kPermissionDenied (`write` on a backing without write rights);
  // kResourceExhausted (async queue full); kSync only: the populate error (memory that cannot
  // be made resident) or the UMR's device error.
  virtual absl::Status Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write,
                                PrefetchMode mode) = 0;
  // The same for a tenant's range [va, va + length) in the tenant's addresses, over every
  // backing of the tenant it spans. kOutOfRange when some of it is not attached memory.
  virtual absl::Status PrefetchTenantRange(cache::TenantId tenant, uint64_t va,
                                           uint64_t length, bool write, PrefetchMode mode) = 0;
  // Waits until every asynchronous prefetch queued before the call has been served (kDeadline-
  // Exceeded after `timeout`).
  virtual absl::Status WaitForPrefetches(absl::Duration timeout) = 0;

  // Clears the entries holding [addr, addr + length) of backing `key` (daemon addresses) and
  // waits for the UMR's completion: from then on an access there faults again. Call it before
  // unmapping or shrinking part of a backing's memory (RemoveBacking does it for the whole).
  // OK on kKernel and for pinned backings (nothing to do). Errors: kNotFound (no tracked
  // backing `key`), kInvalidArgument (range not inside it), the UMR's device error.
  virtual absl::Status Zap(hca::Key key, uint64_t addr, uint64_t length) = 0;

  virtual const OdpStats& stats() const = 0;
};

}  // namespace odp

#endif  // REGCACHE_ODP_SERVICER_H_
