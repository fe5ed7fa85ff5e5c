// One tenant of the registration cache: its protection domain, its locks, its key pool and UMR
// queues, its attached memory and its registration index. Internal to cache/: callers use
// cache/reg_cache.h.
//
// What lives where in cache/:
//   reg_cache.cc          the facade: the tenant table, argument checks, the hit path
//   internal/tenant.*     this struct, and a tenant's memory (attach, detach) and its close
//   internal/holds.*      the hold protocol: hold, release, stop-reference, unpublish, recycle
//   internal/mapper.*     a new key for a miss or a window: reserve (evicting), map, publish
//   internal/lifecycle.*  a stopped key's way back to the pool: retire, recover
//   internal/introspect.* Query, List, Usage
//   internal/index.*      the records, the slab and the range index they live in
//
// Locks, in the order they are taken: the tenant mutex `mu` (the slow path: memory, pool,
// cover index, quota, lifecycle states), then `index_mu` (allocating, publishing, stopping and
// recycling records, changing the range index). Hits and releases take neither. No lock is
// held across a UMR.
#ifndef REGCACHE_CACHE_INTERNAL_TENANT_H_
#define REGCACHE_CACHE_INTERNAL_TENANT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "base/probe_table.h"
#include "cache/backing_set.h"
#include "cache/internal/index.h"
#include "cache/internal/key_budget.h"
#include "cache/internal/key_ledger.h"
#include "cache/internal/key_pool.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "cache/types.h"
#include "cache/umr_engine.h"
#include "hca/device.h"

namespace regcache::cache::internal {

// What every tenant of one cache shares: the device, the options, the counters.
struct CacheContext {
  hca::Device* device = nullptr;
  CacheOptions options;
  CacheStats* stats = nullptr;
  KeyLedger* ledger = nullptr;  // null on memory-window devices (key_ledger.h)
  KeyBudget* budget = nullptr;  // the device's pooled keys, shared by every tenant
};

// The cover index's order: by start address, then by record (std::less orders any pointers).
struct CoverOrder {
  bool operator()(const std::pair<uint64_t, Record*>& a,
                  const std::pair<uint64_t, Record*>& b) const {
    return a.first != b.first ? a.first < b.first : std::less<Record*>()(a.second, b.second);
  }
};
using CoverIndex = absl::btree_set<std::pair<uint64_t, Record*>, CoverOrder>;
// The first entry starting at `va` or above.
inline CoverIndex::const_iterator CoverFrom(const CoverIndex& cover, uint64_t va) {
  return cover.lower_bound({va, nullptr});
}

struct Tenant {
  const CacheContext* ctx = nullptr;
  TenantId id = 0;
  uint32_t slot = 0;  // in the cache's tenant table; the top 16 bits of every handle
  TenantOptions options;
  hca::Pd pd;
  std::unique_ptr<UmrEngine> engine;

  // Held by the maintenance thread across one refill of the pool (whose device work runs
  // without `mu`) and by CloseTenant before it takes the pool away.
  base::Mutex refill_mu;
  base::Mutex mu ABSL_ACQUIRED_AFTER(refill_mu);
  BackingSet backings ABSL_GUARDED_BY(mu);
  std::unique_ptr<KeyPool> pool ABSL_GUARDED_BY(mu);
  // Live registrations (not windows) by start address: the cover lookup of a hit that the
  // exact-range index misses, and the registrations over a backing being detached. Each entry
  // is {va, record}: taking one out is a lookup, however many registrations share the address.
  CoverIndex cover ABSL_GUARDED_BY(mu);
  CoverIndex closed_cover ABSL_GUARDED_BY(mu);  // the cover index at the close, until reaped
  uint64_t max_length ABSL_GUARDED_BY(mu) = 0;  // longest registration ever in `cover`
  uint64_t live ABSL_GUARDED_BY(mu) = 0;        // quota-counted keys: from reserved to unmapped
  BackingId next_backing ABSL_GUARDED_BY(mu) = 1;
  bool closing ABSL_GUARDED_BY(mu) = false;
  // A closed tenant's gates (gates.h), shut: destroyed by ReapTenant once the pool's keys that
  // name them are.
  std::vector<hca::Key> shut_gates ABSL_GUARDED_BY(mu);

  base::Mutex index_mu ABSL_ACQUIRED_AFTER(mu);
  Slab slab;               // At() and Hot() lock-free; Allocate() and Free() under index_mu
  base::ProbeTable index;  // Find() lock-free; Insert() and Erase() under index_mu
  HoldTables holds;        // each thread writes its own table; stops and unpublishes sum them
  uint32_t clock_hand ABSL_GUARDED_BY(index_mu) = 0;

  CacheStats& stats() const { return *ctx->stats; }
  hca::Device* device() const { return ctx->device; }
};

// The errors every path words the same way.
absl::Status NoSuchHandle(Handle handle);
absl::Status TooManyRecords();

// kInvalidArgument for handle 0, kPermissionDenied for a handle of another tenant.
absl::Status CheckHandleTenant(const Tenant& t, Handle handle);

// The record `handle` names, if it belongs to `t` and is published with that generation.
// Lock-free; the answer can be stale by the time the caller acts on it, so callers that change
// the record re-check the state word (CAS) or hold index_mu.
absl::StatusOr<Record*> Resolve(const Tenant& t, Handle handle);

// Attaches memory to the tenant: one device registration (RegCache::AddBacking).
absl::StatusOr<BackingId> AttachMemory(Tenant& t, const BackingSpec& spec);
// Retires every registration over the backing, then deregisters it (RegCache::RemoveBacking).
absl::Status DetachMemory(Tenant& t, BackingId backing);
// Retires every registration and window and deregisters the memory: when it returns, no key of
// the tenant reaches any memory. With gates (gates.h) it shuts them, one UMR per attached memory,
// and settles the keys without a UMR each; without, it invalidates every key. What stays on the
// device — the pool's keys (free, invalidated, or behind a shut gate), the gates, the UMR queues
// and the PD — is ReapTenant's.
// REQUIRES: the tenant is out of the cache's table (no new calls reach it).
absl::Status CloseTenant(Tenant& t);
// Destroys up to `max_keys` of a closed tenant's pool keys, and once none is left its gates,
// queues and PD. True when the tenant holds nothing on the device any more. The first failure goes
// to `first` (if it holds none yet).
bool ReapTenant(Tenant& t, size_t max_keys, absl::Status& first);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_TENANT_H_
