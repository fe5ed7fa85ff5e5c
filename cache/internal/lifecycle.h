// Running a key's lifecycle (cache/lifecycle.h has its states): what happens to a registration
// after its references were stopped (cache/internal/holds.h, StopReference), and to a key whose
// UMR failed. Internal to cache/.
//
//   Retire   kDraining → kFencing → kInvalidating → kUnmapped → kQuarantined: windows first,
//            then one invalidate WQE with the fence bit, then (its completion seen) the backing
//            references and the quota slot go and the key enters the pool's quarantine.
//            RetireBatch runs many at once: one fence, the invalidations posted together, one
//            wait. RetireShut: the same for keys a shut gate already refuses.
//   Recover  kRecovery: a UMR on the key failed, so its device state is unknown. Invalidate
//            it again (as its old and its new variant); if that fails too, destroy it.
//
// Neither holds a lock across a UMR.
#ifndef REGCACHE_CACHE_INTERNAL_LIFECYCLE_H_
#define REGCACHE_CACHE_INTERNAL_LIFECYCLE_H_

#include <cstddef>

#include "absl/types/span.h"
#include "cache/internal/index.h"
#include "cache/internal/tenant.h"
#include "hca/device.h"

namespace regcache::cache::internal {

// Runs the lifecycle of `r`, whose references were stopped, to its end (quarantined, or
// destroyed in recovery), then hands the record back: to the slab now if it is unpublished,
// else at its last release. A window drops its hold on its parent.
void Retire(Tenant& t, Record* r);
// Retire for many records at once, as one batch per kRetireBatch of them: every record drained,
// then one invalidate each, posted together over the tenant's queues with one fence
// (UmrEngine::ExecuteSpread), one wait, then each finished as Retire does. Windows in `rs` go
// before the parents in it.
inline constexpr size_t kRetireBatch = 4096;
void RetireBatch(Tenant& t, absl::Span<Record* const> rs);
// RetireBatch for records whose keys the device refuses already, because the gates they reach
// memory through are shut (gates.h; a closing tenant): the same states and the same end, with
// no UMR per key. The keys enter quarantine still mapped behind the shut gates; the tenant is
// closing, so none is taken again before ReapTenant destroys them. Windows before parents, as
// for RetireBatch.
void RetireShut(Tenant& t, absl::Span<Record* const> rs);

// A key whose UMR failed or timed out: invalidates it again, trying the key value the record
// has and `previous_key` (how far the failed UMR got decides which the device knows), else
// destroys it. Returns with the key quarantined (kQuarantined) or destroyed (kDestroyed, and
// forgotten by the pool).
void Recover(Tenant& t, Record* r, hca::Key previous_key);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_LIFECYCLE_H_
