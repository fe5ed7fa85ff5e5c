// Configuration of the registration cache and of each tenant. Every field states its default.
#ifndef REGCACHE_CACHE_OPTIONS_H_
#define REGCACHE_CACHE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cache/types.h"
#include "hca/device.h"

namespace regcache::cache {

class BackingObserver;  // cache/backing_observer.h

// Capacity classes up to this many entries are refilled in the background (PoolOptions).
inline constexpr uint32_t kEagerClassMaxEntries = 64;

struct PoolOptions {
  // Capacity classes of pooled indirect keys, in KLM entries, ascending. A registration takes a
  // key of the smallest class that holds its layout. 4 entries fit inline in a 3-WQEBB UMR;
  // up to 52 travel inline in one map (Capabilities::max_inline_klm); a longer list travels by
  // pointer where the device can (Capabilities::umr_pointer_translation), up to
  // max_klm_entries. Classes above kEagerClassMaxEntries are made on demand, one key at a time,
  // and never refilled in the background, so an idle tenant reserves none of them. Classes a
  // device cannot hold are fitted to it (RegCache::FitClasses). Default: {4, 16, 48, 1024} —
  // 48 entries inline, and ranges over up to 1024 attachments (2 TiB) by pointer.
  std::vector<uint32_t> capacity_classes = {4, 16, 48, 1024};
  // Background refill keeps each class's free list between these (per tenant). Defaults 8 / 32.
  uint32_t low_watermark = 8;
  uint32_t high_watermark = 32;
  // Most keys one tenant may own per class (free + quarantined + live). Default 1 << 20.
  uint32_t max_keys_per_class = 1u << 20;
  // An index whose key was invalidated is not handed out again before BOTH hold: it spent
  // quarantine_time in quarantine, and quarantine_count keys entered quarantine after it. Until
  // then a stale rkey still held by a remote peer cannot alias a new registration on the same
  // index, even after the 8-bit variant wraps. Defaults: 10 ms, 16 keys.
  absl::Duration quarantine_time = absl::Milliseconds(10);
  uint32_t quarantine_count = 16;
  // A class is filled only once a registration used it, and gives its free keys back to the
  // device when none was taken for this long: an idle tenant holds no pooled keys. Default 5 s.
  absl::Duration idle_release = absl::Seconds(5);
};

struct EngineOptions {
  // Dedicated UMR queues per tenant; a thread posts on queue (thread slot % queues). Default 2.
  uint32_t queues_per_tenant = 2;
  // Ring depth in 64-byte WQE basic blocks (power of two). Default 256.
  uint32_t queue_depth = 256;
  // How long a request may wait for its UMR completion before it fails with
  // kDeadlineExceeded and its key goes to recovery. Default 2 s.
  absl::Duration completion_timeout = absl::Seconds(2);
};

struct CacheOptions {
  PoolOptions pool;
  EngineOptions engine;
  // Run a background thread that refills pools and releases quarantined keys. When false, the
  // owner calls RegCache::Maintain() (tests do, for determinism). Default true.
  bool background_maintenance = true;
  // Period of the background thread while there is work (a pool below its low watermark).
  // Default 2 ms.
  absl::Duration maintenance_period = absl::Milliseconds(2);
  // While a pass finds nothing to do, the period doubles up to this, so an idle daemon does not
  // wake 500 times a second; the first pass that finds work goes back to maintenance_period.
  // A pool emptied meanwhile refills on demand (a miss creates keys itself). Default 64 ms.
  absl::Duration idle_maintenance_period = absl::Milliseconds(64);
  // Told about every backing attached and, before its device registration goes away, removed
  // (cache/backing_observer.h); odp/'s fault servicer is the one. Not owned; must outlive the
  // cache. Default none.
  BackingObserver* backing_observer = nullptr;
  // Attach memory behind a gate (cache/internal/gates.h) where the device allows it (UMR, no
  // memory windows, max_indirection >= 3): one more key per attached memory and one more level
  // of translation per access, for a close that refuses all of a tenant's keys with one UMR per
  // attached memory instead of one per key. Default true.
  bool gate_backings = true;
  // Pooled keys every tenant together may hold: the device's key table (Capabilities::max_keys)
  // minus this share left to other users of the NIC (and to the backings' own keys). Each
  // tenant's fair share is the rest divided by the tenants open; a tenant may use more while
  // the device has room, and gives back what is over its share when another needs it
  // (docs/architecture.md, Device budget). Default: 1/16 of the table.
  uint32_t device_key_reserve_divisor = 16;
  // How long a tenant under its fair share must have waited for keys before the maintenance
  // thread revokes registrations that tenants over their share hold (their unheld and pooled
  // keys go first, at once). Well under the 1 s such a tenant waits at most. Default 100 ms.
  absl::Duration held_reclaim_after = absl::Milliseconds(100);
  // The translation entries (KLM entries of the NIC's translation memory) the pooled keys of
  // every tenant may hold together, before the same reserve: a pool key of capacity class C
  // holds C of them. 0: 64 per key of the device's table (on a ConnectX each is 16 bytes of
  // host memory the NIC owns, so the default bounds that memory to 1 KiB per key).
  uint64_t device_translation_entries = 0;
};

// Per-tenant limits. 0 means "no limit" for each.
struct TenantOptions {
  uint64_t max_keys = 0;          // live registrations + windows
  uint64_t max_backed_bytes = 0;  // bytes of backing memory attached (pinned or ODP)
  // Memories attached at once. Each costs the device keys outside the pooled keys' budget: its
  // registration and, on a UMR device, its gate; this keeps a tenant of many small memories
  // from filling the device's key table.
  uint64_t max_attached = 0;
  // Called with a registration's handle before the cache revokes it on its own account — a held
  // registration taken back because the tenant is over its fair share of the device's keys
  // while another tenant waits (CacheOptions::held_reclaim_after) — and again once it is
  // revoked, so that whoever publishes revocations (the daemon's grant table) marks it first
  // and misses no grant recorded meanwhile. On the maintenance thread, with no cache lock held;
  // never after CloseTenant returned. Default none.
  std::function<void(Handle)> reclaiming;
};

// What RegCache::Create refuses (kInvalidArgument, kUnimplemented, with the reason): capacity
// classes empty, not ascending, or beyond what one key or one map of the device holds;
// watermarks the wrong way round; a device that can neither UMR nor bind memory windows.
absl::Status ValidateCacheOptions(const CacheOptions& options, const hca::Capabilities& caps);

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_OPTIONS_H_
