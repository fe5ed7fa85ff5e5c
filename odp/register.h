// Register with prefetch: a cache registration whose on-demand pages are made present up front.
//
// The cache cannot depend on odp/, so prefetch-on-register lives here: Register through the
// cache, then prefetch the registered range through the servicer — for write when the rights
// asked include any write. Without prefetch every first touch of a page by the NIC is a page
// fault served in tens to hundreds of microseconds (the published figure for an ODP minor fault
// on ConnectX is about 220 µs per 4 KiB page; docs/architecture.md, ODP); a prefetch
// makes the whole range present in one pass.
//
// Thread safety: as RegCache::Register and Servicer::Prefetch (any thread).
#ifndef REGCACHE_ODP_REGISTER_H_
#define REGCACHE_ODP_REGISTER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/types.h"

namespace regcache::odp {

class Servicer;  // odp/servicer.h

struct RegisterOptions {
  bool prefetch = true;  // false: a plain Register
  PrefetchMode mode = PrefetchMode::kSync;
};

// cache->Register(tenant, va, length, access), then servicer->PrefetchTenantRange over the
// requested [va, va + length) (not a hit's wider range). Pinned parts need nothing.
// Errors: Register's errors (nothing to undo); with kSync, a prefetch error (memory that cannot
// be made resident, a failed UMR): the grant is released again (the registration stays cached,
// unreferenced) and the error returned. With kAsync, only a refused enqueue
// (kResourceExhausted) fails, likewise releasing the grant.
// REQUIRES: `servicer` observes `cache` (CacheOptions::backing_observer).
absl::StatusOr<cache::KeyGrant> RegisterWithPrefetch(cache::RegCache* cache, Servicer* servicer,
                                                     cache::TenantId tenant, uint64_t va,
                                                     uint64_t length, hca::AccessFlags access,
                                                     const RegisterOptions& options = {});

}  // namespace regcache::odp
#endif  // REGCACHE_ODP_REGISTER_H_
