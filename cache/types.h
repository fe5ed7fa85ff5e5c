// The cache's vocabulary: the values RegCache's calls take and return (cache/reg_cache.h), in
// a header of their own so that the cache's internals and its callers' own headers can name
// them without the facade.
#ifndef REGCACHE_CACHE_TYPES_H_
#define REGCACHE_CACHE_TYPES_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "cache/lifecycle.h"
#include "hca/device.h"

namespace regcache::cache {

using TenantId = uint32_t;
// A registration or window handle; 0 is never valid. Carries its tenant, so a handle given to
// the wrong tenant is recognised (kPermissionDenied).
using Handle = uint64_t;

struct KeyGrant {
  Handle handle = 0;
  hca::Key lkey = 0;
  hca::Key rkey = 0;    // equal to lkey on every backend of this project
  uint64_t va = 0;      // the registration's start (the caller's address); for a hit, the
  uint64_t length = 0;  // covering registration's range, which may be wider than asked
  hca::AccessFlags access = 0;
  bool hit = false;
  bool same_key = false;  // Reregister: the key and handle are the ones the caller traded in
};

// One register request of a batch (RegCache::RegisterBatch).
struct RegisterItem {
  uint64_t va = 0;
  uint64_t length = 0;
  hca::AccessFlags access = 0;
};

struct RegistrationInfo {
  Handle handle = 0;
  hca::Key key = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  hca::AccessFlags access = 0;
  uint32_t holders = 0;
  bool revoked = false;
  bool is_window = false;
  Handle parent = 0;     // windows
  uint32_t windows = 0;  // registrations: live windows on it
  uint32_t klm_entries = 0;
  uint32_t key_capacity = 0;  // KLM entries the key's class holds
  KeyState key_state = KeyState::kFree;
};

struct TenantUsage {
  hca::Pd pd;
  uint64_t live_registrations = 0;   // registrations + windows mapped and not revoked
  uint64_t revoked_held = 0;         // revoked, still held
  uint64_t cached_unreferenced = 0;  // live, no holders: evictable
  uint64_t backings = 0;
  uint64_t backed_bytes = 0;
  uint64_t pool_free = 0;
  uint64_t pool_quarantined = 0;
  uint64_t pool_outstanding = 0;  // keys handed out and not back in the pool
  uint64_t pool_total = 0;
};

struct BackingSpec {
  uint64_t va = 0;             // where the tenant sees the memory
  void* local_addr = nullptr;  // where this process has it mapped (== va in-process)
  uint64_t length = 0;
  hca::AccessFlags access = hca::kAllAccess;  // rights registrations over it may have
  bool on_demand = false;                     // ODP (needs Capabilities::odp)
  // The MTT page size of the backing's key (hca::BackingOptions::log_page_size): 2^n bytes.
  // Above 12 only when the memory at local_addr is physically contiguous and aligned in blocks
  // of that size (huge pages) and local_addr and length are multiples of it; REQUIRES: in the
  // device's Capabilities::page_size_mask. Ignored for `region`.
  uint32_t log_page_size = 12;
  // A region the tenant's process registered itself in the tenant's PD (Capabilities::
  // pd_export; docs/client_memory.md): the memory is not mapped here (local_addr unused), it is
  // imported (hca::Device::ImportBacking) rather than registered, and [va, +length) must lie
  // within [region->iova, +region->length) (the region's addresses are the tenant's). Nothing in
  // the cache reads or writes it; removing it only forgets it. REQUIRES: not on_demand.
  std::optional<hca::ImportedRegion> region;
  // A dma-buf (hca::Device::RegisterDmabufBacking): [dmabuf->offset, +length) of it, the
  // tenant's addresses [va, +length). Not mapped here (local_addr unused); the descriptor is
  // borrowed for the call. REQUIRES: not on_demand, not with `region`.
  std::optional<hca::DmabufRange> dmabuf;
};

// Validates a register request's rights: known bits only, local read implied, remote write or
// atomic only with local write. Returns the normalized rights (with kLocalRead).
absl::StatusOr<hca::AccessFlags> NormalizeAccess(hca::AccessFlags access);

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_TYPES_H_
