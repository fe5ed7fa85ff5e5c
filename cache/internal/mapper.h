// A new key for a miss or a window: the one path both take. Internal to cache/.
//
//   1. plan     the caller works out the layout (a miss: the range over the tenant's memory;
//               a window: one entry over its parent's key) and the smallest key class for it;
//   2. reserve  a quota slot and a pooled key of that class, evicting the tenant's unheld
//               registrations (CLOCK) while the quota or the pool is exhausted;
//   3. bind     under the tenant mutex: a record for the key (kMapping), the memory it uses
//               counted (a miss lays the range out again: memory may have been detached
//               meanwhile), or the window listed on its parent;
//   4. map      one UMR writes the key's translation and rights, and a new variant;
//   5. publish  the record gets its handle, and a miss enters the range and cover indexes.
// A step that fails undoes the ones before it; a failed UMR sends the key to recovery.
#ifndef REGCACHE_CACHE_INTERNAL_MAPPER_H_
#define REGCACHE_CACHE_INTERNAL_MAPPER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "cache/internal/index.h"
#include "cache/internal/tenant.h"
#include "cache/types.h"
#include "hca/device.h"

namespace regcache::cache::internal {

// A batch's misses take the tenant's mutexes once per run of this many, not once per miss
// (MapRegistrations, and RegisterBatch's covering lookups).
inline constexpr size_t kLockRun = base::kBatchLockRun;

// RegCache::Register's miss: maps a new registration of [va, +length) with `access`
// (normalized). Errors as RegCache::Register.
// OK when the tenant's device can map a key with `access`; kFailedPrecondition naming the
// device's limit otherwise (a UMR device reporting umr_modify_atomic_disabled cannot grant
// remote atomics by a map: its pooled keys are created without them).
absl::Status DeviceCanGrant(const Tenant& t, hca::AccessFlags access);

absl::StatusOr<KeyGrant> MapRegistration(Tenant& t, uint64_t va, uint64_t length,
                                         hca::AccessFlags access);

// RegCache::RegisterBatch's misses: maps a registration for each of `items` (access
// normalized), all their UMRs posted before one wait; out[i] gets item i's grant or error.
// REQUIRES: out.size() == items.size().
void MapRegistrations(Tenant& t, absl::Span<const RegisterItem> items,
                      absl::Span<absl::StatusOr<KeyGrant>> out);

// RegCache::CreateWindow after the tenant lookup: maps a window [parent.va + offset, +length)
// with `access` (not yet normalized) on the registration `parent` names. Errors as
// RegCache::CreateWindow.
absl::StatusOr<KeyGrant> MapWindow(Tenant& t, Handle parent, uint64_t offset, uint64_t length,
                                   hca::AccessFlags access);

// CLOCK over the tenant's records: the first unheld registration not hit since the hand last
// passed it, with its references stopped (ready to Retire). nullptr if none.
Record* PickVictim(Tenant& t);
// A live registration (not a window) of `t` to revoke although it may be held, chosen by the
// same CLOCK hand (recently hit ones get a second chance), with its handle in `*handle`; not
// stopped yet. nullptr when there is none.
Record* PickHeldVictim(Tenant& t, Handle* handle);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_MAPPER_H_
