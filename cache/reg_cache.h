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
// Every error leaves every counter balanced and loses nothing: a failed call changes no
// registration, key or quota. Each method below lists its own error codes; a device error is
// the hca::DeviceError status of the failed UMR (the key goes to recovery, never back to use).
//
// Thread safety: every method may be called concurrently from any threads, except that
// CloseTenant must not race with other calls on the same tenant (the daemon closes a session
// after its last request). A hit and a release take no lock and, when one thread does both,
// write no shared cache line (the hold protocol: cache/internal/holds.h). A handle may be
// released from any thread.
//
// Handles: a handle names one publication of a registration; once that registration is gone
// the handle resolves to nothing (kNotFound), even after its record is reused, until the same
// record has been reused 2^24 more times.
#ifndef REGCACHE_CACHE_REG_CACHE_H_
#define REGCACHE_CACHE_REG_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/stats.h"
#include "cache/backing_set.h"
#include "cache/lifecycle.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "cache/types.h"
#include "hca/device.h"

namespace regcache::cache {

class RegCache {
 public:
  // A cache over `device`, which must outlive it. Registers its counters with `registry` (if
  // given) under "cache". Starts the maintenance thread if options.background_maintenance.
  // Errors: kInvalidArgument (no device; capacity classes empty, not ascending, above the
  // device's max_klm_entries or above what one map carries inline; high watermark below low),
  // kUnimplemented (the device can neither UMR nor bind memory windows).
  // `classes` with those `caps` cannot hold (above max_klm_entries or what one map carries
  // inline) replaced by the largest the device holds, so that a configuration made for one
  // device opens on another: {4, 16, 48} becomes {1} on a memory-window device.
  static std::vector<uint32_t> FitClasses(std::vector<uint32_t> classes,
                                          const hca::Capabilities& caps);

  static absl::StatusOr<std::unique_ptr<RegCache>> Create(
      hca::Device* device, const CacheOptions& options, base::stats::Registry* registry = nullptr);
  // Stops the maintenance thread, then closes every open tenant (CloseTenant).
  virtual ~RegCache() = default;

  // --- Tenants ---------------------------------------------------------------------------------

  // A new tenant with its own PD, key pool and UMR queues, and the limits in `options`.
  // Errors: kResourceExhausted (65535 tenants open), or the device's error allocating the PD
  // or creating the queues (nothing is left allocated).
  virtual absl::StatusOr<TenantId> OpenTenant(const TenantOptions& options) = 0;

  // Runs every registration and window of the tenant through the lifecycle (holders are
  // revoked: their keys stop working at once), deregisters its memory, destroys its pool,
  // queues and PD. Every handle of the tenant becomes invalid; the id is never valid again.
  // REQUIRES: no other call on this tenant is running or will start.
  // Errors: kNotFound (no open tenant `tenant`); the first device error met while destroying
  // (the tenant is closed all the same).
  virtual absl::Status CloseTenant(TenantId tenant) = 0;

  // --- Memory ----------------------------------------------------------------------------------

  // Attaches memory the tenant's registrations may cover: one device registration (pinned, or
  // on demand with spec.on_demand), with at most spec.access rights.
  // Errors: kNotFound (tenant), kInvalidArgument (length 0, a range that wraps, no local
  // address, invalid access bits as NormalizeAccess), kAlreadyExists (overlaps attached
  // memory), kResourceExhausted (max_backed_bytes), the device's error (kUnimplemented for
  // on_demand without ODP; kResourceExhausted when its key table is full).
  virtual absl::StatusOr<BackingId> AddBacking(TenantId tenant, const BackingSpec& spec) = 0;

  // Invalidates every registration and window that uses the memory (holders are revoked),
  // then deregisters it. Registers over it fail from the first moment of the call.
  // Errors: kNotFound (tenant, or no such memory), kUnavailable (registrations over it were
  // still being mapped after several attempts: call again), the device's error deregistering.
  virtual absl::Status RemoveBacking(TenantId tenant, BackingId backing) = 0;

  // --- Keys ------------------------------------------------------------------------------------

  // A key for [va, +length) with at least `access` (local read is always added), and one
  // hold on it. A hit returns a live registration of the tenant that covers the range with at
  // least those rights (KeyGrant::va/length are then its range, possibly wider); a miss lays
  // the range out over the attached memory, takes a pooled key of the smallest class that holds
  // the layout (evicting unheld registrations under pool or quota pressure) and maps it with
  // one UMR; the key is returned only after the device completed it.
  // Errors: kNotFound (tenant), kInvalidArgument (length 0, a range that wraps, access bits as
  // NormalizeAccess, a layout of more KLM entries than the largest key class), kOutOfRange
  // (part of the range is not attached), kPermissionDenied (attached memory lacks the rights),
  // kResourceExhausted (key quota or pool exhausted after eviction; 2^24 records),
  // kAborted (the memory changed while the key was reserved: retry), a device error.
  virtual absl::StatusOr<KeyGrant> Register(TenantId tenant, uint64_t va, uint64_t length,
                                            hca::AccessFlags access) = 0;

  // Register for each item, the misses mapped together: every miss is laid out, reserved and
  // bound first, then their UMRs go to the device at once (spread over the tenant's queues, one
  // doorbell per chunk and queue, one wait for all), then each is published. So a batch of n
  // misses pays about one UMR round trip, not n. No key is returned before the device completed
  // the UMR that made it. Items fail alone, with Register's errors, leaving nothing behind;
  // items that repeat an earlier miss of the batch hit the key it made. The result has one entry
  // per item, in order.
  virtual std::vector<absl::StatusOr<KeyGrant>> RegisterBatch(
      TenantId tenant, absl::Span<const RegisterItem> items) = 0;

  // A window [parent.va + offset, +length): a key of its own over part of the registration
  // `parent`, with `access` ⊆ the parent's rights, and one hold on it. The window holds its
  // parent until it is retired; it is retired at its last release (windows are not cached) or
  // when its parent is invalidated.
  // Errors: kNotFound (tenant, or no registration `parent`), kInvalidArgument (handle 0, length
  // 0, access bits, a window as the parent, outside the parent, rights the parent lacks),
  // kNotFound (a handle of another tenant), kFailedPrecondition (the parent was
  // invalidated), kResourceExhausted (as Register), a device error.
  virtual absl::StatusOr<KeyGrant> CreateWindow(TenantId tenant, Handle parent, uint64_t offset,
                                                uint64_t length, hca::AccessFlags access) = 0;

  // The kernel's rereg_mr: trades the caller's hold on `handle` for a hold on a key for
  // [va, +length) with at least `access` (local read added). Which key depends on who else
  // could notice a change (docs/architecture.md, "Re-registering"):
  //   unchanged  same range and rights: nothing happens (same_key).
  //   in place   the caller is the registration's only holder, it is not a window and has no
  //              windows, the change only adds (the new range contains the old one, the new
  //              rights contain the old ones), and its key's class holds the new layout: ONE
  //              UMR rewrites the key's translation, range and rights. Same key value (rkey),
  //              same handle (same_key); a peer using the rkey reaches the new range at once.
  //   narrowed   the caller is the only holder (not a window, no windows) and the change takes
  //              something away (fewer rights, or a range that no longer contains the old one):
  //              the old registration goes through the lifecycle first (as Invalidate: its key
  //              refuses every access from then on), then the new range is registered (a new
  //              key, or a hit) and the hold on the revoked handle released.
  //   replaced   anyone else holds it (more holders, or windows on it), it is a window, or its
  //              key's class cannot hold the grown layout: it is never changed under them. The
  //              new range is registered (a hit or a miss; a hit may be this same registration,
  //              then same_key), then the caller's hold on the old one is released.
  // A hit racing an in-place rewrite either holds the registration before it (which makes the
  // caller not its only holder: replaced) or after it (a registration covering what it asked).
  // Errors, and what the caller holds after each (a failed call loses nothing it can keep):
  //   kNotFound (tenant, or no such handle), kInvalidArgument (handle 0, length 0, a range
  //   that wraps, access bits), kNotFound (another tenant's handle),
  //   kFailedPrecondition (`handle` was invalidated or is being re-registered by another
  //   call, or has no holder left): nothing changed; the caller's hold is as it was.
  //   Register's errors for the new range, found before anything changed (kOutOfRange,
  //   kPermissionDenied, kInvalidArgument, kFailedPrecondition for memory being detached, and
  //   in the replaced path also kResourceExhausted, kAborted and device errors): the caller
  //   still holds `handle`, unchanged.
  //   Narrowed, mapping the new range failed (kResourceExhausted, kAborted, a device error):
  //   the old registration was already invalidated; the caller still holds `handle`, revoked
  //   (Query says so), and releases it as any revoked handle.
  //   In place, the UMR failed (a device error): the key went to recovery and the registration
  //   is revoked; the caller still holds the revoked `handle` and releases it.
  //
  // `revoking` is called with `handle` just before the call revokes it (narrowed, or an in-place
  // rewrite that failed), before any access through its key is refused, and never otherwise: a
  // caller that publishes revocations (the daemon's grant table) learns it from the one place
  // that decides. It runs on the calling thread with no lock of the cache held.
  virtual absl::StatusOr<KeyGrant> Reregister(TenantId tenant, Handle handle, uint64_t va,
                                              uint64_t length, hca::AccessFlags access,
                                              absl::FunctionRef<void(Handle)> revoking) = 0;
  absl::StatusOr<KeyGrant> Reregister(TenantId tenant, Handle handle, uint64_t va, uint64_t length,
                                      hca::AccessFlags access) {
    return Reregister(tenant, handle, va, length, access, [](Handle) {});
  }

  // Gives back one hold. A registration whose last holder released stays mapped and cached;
  // a revoked one's handle goes; a window is retired. As with any reference count, a handle
  // released twice while another holder exists cannot be told apart from a release by that
  // holder; a release with no holder left at all is refused.
  // Errors: kNotFound (tenant, or no such handle), kInvalidArgument (handle 0),
  // kNotFound (another tenant's handle), kFailedPrecondition (no holder left).
  virtual absl::Status Release(TenantId tenant, Handle handle) = 0;

  // Runs the registration (or window; a registration's windows first) through the lifecycle
  // without waiting for its holders: when this returns the device refuses the key, and its
  // handle stays valid for Release and Query (revoked) until the last holder releases.
  // Errors: kNotFound, kInvalidArgument, kPermissionDenied (as Release), kFailedPrecondition
  // (already invalidated). A device error in the lifecycle is not returned: the key goes to
  // recovery, which invalidates or destroys it before this returns.
  virtual absl::Status Invalidate(TenantId tenant, Handle handle) = 0;

  // Whether the key of `handle`, which the caller holds, no longer works: its registration was
  // revoked (invalidated, detached, or its parent invalidated) or is gone. Lock-free, one load;
  // an unknown tenant or handle answers true. A caller that publishes grants (the daemon's grant
  // table) asks it after recording a grant, so that a revocation which had no record to mark
  // yet is not missed (docs/fast_path.md, "The revocation invariant").
  virtual bool Revoked(TenantId tenant, Handle handle) const = 0;

  // --- Introspection (snapshots: holder counts race with hits and releases) --------------------

  // Errors: kNotFound, kInvalidArgument, kPermissionDenied (as Release).
  virtual absl::StatusOr<RegistrationInfo> Query(TenantId tenant, Handle handle) = 0;
  // Errors: kNotFound (tenant).
  virtual absl::StatusOr<TenantUsage> Usage(TenantId tenant) = 0;
  // Every registration and window of the tenant that has a handle (live, cached, or revoked
  // and still held), in no particular order. Errors: kNotFound (tenant).
  virtual absl::StatusOr<std::vector<RegistrationInfo>> List(TenantId tenant) = 0;

  // --- Maintenance -----------------------------------------------------------------------------

  // One pass over every tenant: quarantined keys whose quarantine is over go back to the free
  // lists, and pools below their low watermark are refilled. The background thread calls it
  // every maintenance_period; without it, the owner does. Device errors are logged.
  virtual void Maintain() = 0;

  virtual const CacheStats& stats() const = 0;
  virtual hca::Device* device() const = 0;
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_REG_CACHE_H_
