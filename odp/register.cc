#include "odp/register.h"

#include "base/status_macros.h"
#include "odp/servicer.h"

namespace regcache::odp {

absl::StatusOr<cache::KeyGrant> RegisterWithPrefetch(cache::RegCache* cache, Servicer* servicer,
                                                     cache::TenantId tenant, uint64_t va,
                                                     uint64_t length, hca::AccessFlags access,
                                                     const RegisterOptions& options) {
  ASSIGN_OR_RETURN(cache::KeyGrant grant, cache->Register(tenant, va, length, access));
  if (!options.prefetch) return grant;
  const bool write = (access & (hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteAtomic)) != 0;
  absl::Status s = servicer->PrefetchTenantRange(tenant, va, length, write, options.mode);
  if (!s.ok()) {
    (void)cache->Release(tenant, grant.handle);
    return base::Annotate(s, "prefetch after register");
  }
  return grant;
}

}  // namespace regcache::odp