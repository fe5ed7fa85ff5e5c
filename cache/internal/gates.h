// Gates: one indirect key per attached memory, between the tenant's registrations and the
// memory's own registration, so that all of the tenant's keys can be refused at once.
//
// On a UMR device every pooled key is an indirect (KLM) key, and the device translates an access
// through each key its entries name, checking that key again (variant, free, PD, rights) at
// every level. A gate is a KLM key in the tenant's PD whose entries cover the backing's
// registration one to one: same addresses, same rights. Layouts name the gate instead of the
// registration, so every key of the tenant reaches memory through one of its gates.
//
// Invalidating a gate (one UMR, free = 1) then refuses every access through every key over that
// memory, windows included: the device stops at the free gate. A tenant's close does that for
// its few gates, not for its tens of thousands of keys; those keys are never used again (the
// tenant's pool goes to the reaper) and are destroyed afterwards, gates last, so no live key
// ever names a destroyed index. docs/architecture.md, "Gates", has the picture.
//
// Used where the device has UMR, no memory windows (a window's bind names a registration, not
// a key), and room for one more level of indirection: window -> registration -> gate -> memory
// needs max_indirection >= 3. CacheOptions::gate_backings turns them off.
//
// Thread safety: as the tenant's; the callers hold what each function says.
#ifndef REGCACHE_CACHE_INTERNAL_GATES_H_
#define REGCACHE_CACHE_INTERNAL_GATES_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cache/backing_set.h"
#include "cache/internal/tenant.h"
#include "hca/device.h"

namespace regcache::cache::internal {

// The indirection a gate needs: a window over a registration over a gate over the memory.
inline constexpr uint32_t kGatedIndirection = 3;

// Whether the tenant's memory is attached behind gates (fixed for the tenant's life).
bool UsesGates(const Tenant& t);

// Creates and maps the gate of `b` (b.device is registered): an indirect key translating
// [b.device_addr, +b.length) onto b.device.key with b.access. Fails with the device's error; a
// gate that failed to map is destroyed again.
absl::StatusOr<hca::Key> OpenGate(Tenant& t, const BackingRecord& b);

// Destroys a gate no live key names any more (the ledger remembers its variant).
absl::Status DestroyGate(Tenant& t, hca::Key gate);

// Invalidates every gate in `gates` (each fenced, all posted before one wait). OK only if the
// device completed all of them: from then on no key over that memory reaches it.
absl::Status ShutGates(Tenant& t, absl::Span<const hca::Key> gates);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_GATES_H_
