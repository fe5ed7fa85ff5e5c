// What a tenant holds, for RegCache::Query, List and Usage. Internal to cache/. Snapshots:
// holder counts race with hits and releases on other threads.
#ifndef REGCACHE_CACHE_INTERNAL_INTROSPECT_H_
#define REGCACHE_CACHE_INTERNAL_INTROSPECT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "cache/internal/tenant.h"
#include "cache/types.h"

namespace regcache::cache::internal {

absl::StatusOr<RegistrationInfo> QueryRecord(Tenant& t, Handle handle);
// RegCache::Revoked: the handle no longer names a published, unrevoked record of `t`.
bool HandleRevoked(const Tenant& t, Handle handle);
std::vector<RegistrationInfo> ListRecords(Tenant& t);
TenantUsage UsageOf(Tenant& t);

}  // namespace regcache::cache::internal
#endif  // REGCACHE_CACHE_INTERNAL_INTROSPECT_H_
