#include "service/internal/client_regions.h"

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "service/internal/device_set.h"

namespace regcache::service::internal {
namespace {

// Why the daemon does not export PDs, or OK.
absl::Status ExportAllowed(const DaemonConfig& config, const hca::Device& device) {
  const hca::Capabilities& caps = device.capabilities();
  if (!caps.pd_export) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s:%s cannot export PDs to clients (its provider has no ibv_import_pd/ibv_import_mr; "
        "see docs/client_memory.md)",
        caps.backend, caps.device_name));
  }
  if (!config.allow_pd_export) {
    return absl::PermissionDeniedError(
        "PD export is off in this regcached (--allow_pd_export): the exported command fd "
        "reaches every verbs object of the device context it belongs to");
  }
  return absl::OkStatus();
}

// Why `s` cannot hand its PD to its client, or OK: it must live in a context of its own.
absl::Status ExportableSession(const DaemonConfig& config, const Session& s) {
  RETURN_IF_ERROR(ExportAllowed(config, *s.device->device));
  if (s.own_device == nullptr) {
    return absl::FailedPreconditionError(
        "this session shares the daemon's device context, which is never exported: open the "
        "session with a device context of its own (ClientOptions::own_device_context) to "
        "import its PD");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<hca::PdExport> ExportSessionPd(const DaemonConfig& config, Session& s) {
  cache::RegCache& cache = *s.device->cache;
  hca::Device& device = *s.device->device;
  ASSIGN_OR_RETURN(cache::TenantUsage u, cache.Usage(s.tenant));
  // Without pd_export the device's own kUnimplemented says why (e.g. the provider's EOPNOTSUPP).
  if (device.capabilities().pd_export) RETURN_IF_ERROR(ExportableSession(config, s));
  ASSIGN_OR_RETURN(hca::PdExport e, device.ExportPd(u.pd));
  RC_LOG(INFO) << "session " << s.id << ": PD exported (handle " << e.pd_handle << ")";
  return e;
}

absl::StatusOr<MemoryId> AttachClientRegion(const DaemonConfig& config, Session& s,
                                            const ClientRegion& region) {
  cache::RegCache& cache = *s.device->cache;
  RETURN_IF_ERROR(ExportableSession(config, s));
  if (region.length == 0) return absl::InvalidArgumentError("attached range of length 0");
  if (region.region_length == 0) return absl::InvalidArgumentError("memory region of length 0");
  if (region.region_addr + region.region_length < region.region_addr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory region [0x%x, +0x%x) wraps around the address space",
                        region.region_addr, region.region_length));
  }
  cache::BackingSpec spec;
  spec.va = region.va;
  spec.length = region.length;
  spec.access = region.access;
  spec.region =
      hca::ImportedRegion{region.handle, region.region_addr, region.region_length, region.access};
  base::MutexLock lock(&s.mu);
  for (const auto& [id, r] : s.regions) {
    if (r.handle == region.handle) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "memory region %d is already attached (memory %d): attach it once", region.handle, id));
    }
  }
  ASSIGN_OR_RETURN(cache::BackingId backing, cache.AddBacking(s.tenant, spec));
  ClientRegionRecord r{s.next_memory++, region.handle, region.va, region.length, backing};
  s.regions.emplace(r.id, r);
  return r.id;
}

absl::Status DetachClientRegion(Session& s, MemoryId memory) {
  cache::RegCache& cache = *s.device->cache;
  auto it = s.regions.find(memory);
  if (it == s.regions.end()) {
    return absl::NotFoundError(absl::StrFormat("no memory %d in this session", memory));
  }
  // As for the daemon's memory: the state words first, then every key over it invalidated; then
  // the device forgets the region (the client deregisters it).
  RETURN_IF_ERROR(s.grants->RevokeRangeAround(it->second.va, it->second.length, [&] {
    return cache.RemoveBacking(s.tenant, it->second.backing);
  }));
  s.regions.erase(it);
  return absl::OkStatus();
}

void ListClientRegions(const Session& s, std::vector<MemoryInfo>* out) {
  for (const auto& [id, r] : s.regions) {
    MemoryInfo m;
    m.id = id;
    m.length = r.length;
    m.client_va = r.va;
    m.attached = true;
    m.client_region = true;
    out->push_back(m);
  }
}

}  // namespace regcache::service::internal
