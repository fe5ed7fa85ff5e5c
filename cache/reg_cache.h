// RegCache — the registration cache: tenants, backing memory, registrations, windows.
//
// The heart of regcache, usable in-process (an application may embed it) and by the daemon.
// A tenant (one per client session) has its own protection domain, quotas, backing memory,
// key pool and UMR queues. It attaches backing memory once (one device registration, pinned);
// then Register(va, length, access) hands out {lkey, rkey, handle} for any range of that
// memory in microseconds:
//
//   hit   a live registration of the same tenant that covers the range with at least the
//         requested rights: its holder count goes up, nothing touches the device;
//   miss  the KLM layout of the range over the backings (one entry per backing piece), a free
//         key of the smallest class that holds it, one UMR mapping it at start_addr = va; the
//         key is returned only after the UMR completed.
//
// Windows are sub-ranges of a live registration with their own rkey and narrower rights: a key
// whose single KLM entry points at the parent's key.
//
// Lifecycle (cache/lifecycle.h): Invalidate() runs stop-reference → fence → invalidate →
// unmap → quarantine → free; nothing is unmapped or reused before the device confirmed the
// invalidation.
//
// What holders see after an invalidation: Invalidate does not wait for holders; it REVOKES. From
// the moment Invalidate returns, every access through the key fails (remote access error for
// rkey users, local protection error for lkey users). The handle stays valid for Release() and
// Query() (state kRevoked) until its last holder releases it; Register never returns it again.
// A second Invalidate of it fails with kFailedPrecondition.
//
// Release(): a holder is done. A registration whose last holder released stays mapped and
// cached until it is hit again, invalidated, or evicted under pool or quota pressure. Eviction
// is CLOCK over the tenant's registrations: the first one found unheld and not hit since the
// hand last passed it. A window whose last holder released is invalidated (windows are not cached).
//
// Errors (all leave every counter balanced):
//   kInvalidArgument     zero length, va + length overflow, unknown access bits, remote write or
//                        atomic without local write, a window outside or wider than its parent,
//                        a window with rights its parent lacks, a layout larger than any key;
//   kOutOfRange          the range is not covered by the tenant's attached memory;
//   kNotFound            unknown tenant, handle or backing;
//   kPermissionDenied    a handle of another tenant; attached memory lacking the rights asked;
//   kFailedPrecondition  invalidate of a revoked handle; a window on a revoked parent;
//   kResourceExhausted   pool exhausted, or a tenant quota exceeded (after evicting what could
//                        be evicted);
//   device errors        a failed UMR (the hca::DeviceError status); the key goes to recovery.
//
// Thread safety: all methods may be called concurrently from any threads. A hit and a release
// take no lock and, when the same thread does both, write no shared cache line: the hit probes
// the tenant's range index without a lock and counts its hold in the calling thread's own hold
// table; the release gives it back there (cache/internal/index.h has the protocol). A handle
// may be released from any thread; a release from another thread than the hit's, and hits
// while such releases are outstanding, use one compare-and-swap on the registration's state
// word instead. A hit and a release each run one store-load fence on the thread's own line;
// with REGCACHE_MEMBARRIER=1 those fences move to the rare side, one membarrier(2) per
// stop-reference (base/asymmetric_fence.h says when that pays).
// CloseTenant must not race with other calls on the same tenant (the daemon closes a session
// after its last request).
//
// Double release: a release with no holder left is refused (kFailedPrecondition). As with any
// reference count, a handle released twice while another holder exists cannot be told apart
// from a release by that holder.
//
// Handles: a handle names one publication of a registration; once that registration is gone
// the handle resolves to nothing (kNotFound), even after its record is reused, until the same
// record has been reused 2^24 more times.
#ifndef REGCACHE_CACHE_REG_CACHE_H_
#define REGCACHE_CACHE_REG_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/stats.h"
#include "cache/backing_set.h"
#include "cache/lifecycle.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "hca/device.h"

namespace cache {

using TenantId = uint32_t;
// A registration or window handle; 0 is never valid. Carries its tenant, so a handle given to
// the wrong tenant is recognised (kPermissionDenied).
using Handle = uint64_t;

struct KeyGrant {
  Handle handle = 0;
  hca::Key lkey = 0;
  hca::Key rkey = 0;   // equal to lkey on every backend of this project
  uint64_t va = 0;     // the registration's start (the caller's address); for a hit, the
  uint64_t length = 0; // covering registration's range, which may be wider than asked
  hca::AccessFlags access = 0;
  bool hit = false;
};

struct RegistrationInfo {
  Handle handle = 0;
  hca::Key key = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  hca::AccessFlags access = 0;
  uint32_t holders = 0;
  bool revoked = false;
  bool is_window = false;
  Handle parent = 0;           // windows
  uint32_t windows = 0;        // registrations: live windows on it
  uint32_t klm_entries = 0;
  uint32_t key_capacity = 0;   // KLM entries the key's class holds
  KeyState key_state = KeyState::kFree;
};

struct TenantUsage {
  hca::Pd pd;
  uint64_t live_registrations = 0;  // registrations + windows mapped and not revoked
  uint64_t revoked_held = 0;        // revoked, still held
  uint64_t cached_unreferenced = 0; // live, no holders: evictable
  uint64_t backings = 0;
  uint64_t backed_bytes = 0;
  uint64_t pool_free = 0;
  uint64_t pool_quarantined = 0;
  uint64_t pool_outstanding = 0;    // keys handed out and not back in the pool
  uint64_t pool_total = 0;
};

struct BackingSpec {
  uint64_t va = 0;              // where the tenant sees the memory
  void* local_addr = nullptr;   // where this process has it mapped (== va in-process)
  uint64_t length = 0;
  hca::AccessFlags access = hca::kAllAccess;  // rights registrations over it may have
  bool on_demand = false;       // ODP (needs Capabilities::odp)
};

class RegCache {
 public:
  // `device` must outlive the cache. Registers its stats with `registry` (if given) as "cache".
  static absl::StatusOr<std::unique_ptr<RegCache>> Create(
      hca::Device* device, const CacheOptions& options,
      base::stats::Registry* registry = nullptr);
  virtual ~RegCache() = default;

  // A new tenant with its own PD, pool and queues. kResourceExhausted past 65535 tenants.
  virtual absl::StatusOr<TenantId> OpenTenant(const TenantOptions& options) = 0;
  // Runs every key of the tenant through the lifecycle, deregisters its memory, destroys its
  // pool, queues and PD. Holders' handles become invalid.
  virtual absl::Status CloseTenant(TenantId tenant) = 0;

  // Attaches memory (one device registration). kInvalidArgument for zero length, overflow,
  // null local_addr; kAlreadyExists for overlap; kResourceExhausted past max_backed_bytes.
  virtual absl::StatusOr<BackingId> AddBacking(TenantId tenant, const BackingSpec& spec) = 0;
  // Invalidates every registration and window that uses the backing, then deregisters it.
  virtual absl::Status RemoveBacking(TenantId tenant, BackingId backing) = 0;

  virtual absl::StatusOr<KeyGrant> Register(TenantId tenant, uint64_t va, uint64_t length,
                                            hca::AccessFlags access) = 0;
  // A window [parent.va + offset, +length) with `access` ⊆ the parent's rights.
  virtual absl::StatusOr<KeyGrant> CreateWindow(TenantId tenant, Handle parent, uint64_t offset,
                                                uint64_t length, hca::AccessFlags access) = 0;
  virtual absl::Status Release(TenantId tenant, Handle handle) = 0;
  virtual absl::Status Invalidate(TenantId tenant, Handle handle) = 0;
  virtual absl::StatusOr<RegistrationInfo> Query(TenantId tenant, Handle handle) = 0;
  virtual absl::StatusOr<TenantUsage> Usage(TenantId tenant) = 0;
  // Every registration and window of the tenant that has a handle (live, cached or revoked and
  // still held), in no particular order.
  virtual absl::StatusOr<std::vector<RegistrationInfo>> List(TenantId tenant) = 0;

  // One maintenance pass: quarantine releases and pool refills for every tenant. The background
  // thread (CacheOptions::background_maintenance) calls it periodically.
  virtual void Maintain() = 0;

  virtual const CacheStats& stats() const = 0;
  virtual hca::Device* device() const = 0;
};

// Validates a register request's rights: known bits only, local read implied, remote write or
// atomic only with local write. Returns the normalized rights (with kLocalRead).
absl::StatusOr<hca::AccessFlags> NormalizeAccess(hca::AccessFlags access);

}  // namespace cache

#endif  // REGCACHE_CACHE_REG_CACHE_H_
