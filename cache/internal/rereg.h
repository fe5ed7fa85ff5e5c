// Re-registering a registration (RegCache::Reregister, the kernel's rereg_mr). Internal to
// cache/. RegCache::Reregister (cache/reg_cache.h) states the contract; this is how:
//
//   1. check   the handle names a live registration of the tenant that someone holds, and the
//              new range and rights are well formed;
//   2. plan    under the tenant mutex: the new range's layout (its errors are Register's, and
//              nothing has changed yet); a registration with windows, or a window, is replaced;
//   3. mark    MarkSole (cache/internal/holds.h): no new holders, and the holders counted after
//              the fence. One (the caller): in place or narrowed. More: replaced;
//   4. in place one UMR maps the same key value (require_free off) with the new layout, range
//              and rights; then the record is re-indexed under its new range and revived with a
//              new rewrite epoch. A failed UMR revokes it and sends it through the lifecycle;
//   5. narrow  the marked record is revoked and retired (invalidate with the fence), then the
//              new range is registered and the revoked hold released;
//   6. replace the new range is registered, then the caller's hold on the old one released.
#ifndef REGCACHE_CACHE_INTERNAL_REREG_H_
#define REGCACHE_CACHE_INTERNAL_REREG_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "cache/internal/tenant.h"
#include "cache/types.h"
#include "hca/device.h"

namespace regcache::cache::internal {

// RegCache::Register of the new range (hit or miss), for the paths that need a new key.
using RegisterNew = absl::FunctionRef<absl::StatusOr<KeyGrant>()>;

// RegCache::Reregister after the tenant lookup. `access` not yet normalized. Errors (and what
// the caller holds after each), and when `revoking` is called, as RegCache::Reregister.
absl::StatusOr<KeyGrant> Reregister(Tenant& t, Handle handle, uint64_t va, uint64_t length,
                                    hca::AccessFlags access, RegisterNew register_new,
                                    absl::FunctionRef<void(Handle)> revoking);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_REREG_H_
