// hca/verbs — any RDMA device through plain libibverbs (docs/verbs.md).
//
// What it maps the device boundary (hca/device.h) onto:
//   backings      ibv_reg_mr_iova2 of the daemon's mapping, with IBV_ACCESS_MW_BIND and local
//                 write, and no remote rights of their own: only windows bound on them reach the
//                 memory remotely. BackingOptions::iova makes the MR speak the tenant's
//                 addresses, since a window's addresses are its MR's;
//   pooled keys   type-1 memory windows (ibv_alloc_mw). A map is ibv_bind_mw of the window on
//                 its backing's MR, posted on a dedicated RC queue pair connected to itself;
//                 an invalidate is a zero-length bind. Type-1 windows are PD-scoped: their rkey
//                 works through every queue pair of the PD, the target endpoints included;
//   windows       windows bound on the MR under the parent window, inside the parent's range;
//                 the cache invalidates them before their parent;
//   endpoints     RC queue pairs in the tenant's PD, connected to a remote node's queue pair.
// Capabilities say it plainly: no UMR, no KSM, no ODP, no remote invalidation, one KLM entry
// per key, 4 KiB pages, keys are rkeys only (a window cannot be an lkey).
//
// Variants: every bind gives the window the next rkey variant (ibv_inc_rkey), an invalidate
// included (Capabilities::memory_windows in hca/device.h). A map naming any other variant fails
// with MW_BIND, as do maps of keys in the wrong state, before anything is posted.
//
// Errors: a bind the device refuses completes with the work completion's status mapped to a
// syndrome (wc_status.h); the queue pair then is in the error state, flushes what
// followed (WR_FLUSH, kAborted) and is reset and reconnected before the next doorbell.
//
// Thread safety: as hca::Device.
#ifndef REGCACHE_HCA_VERBS_VERBS_DEVICE_H_
#define REGCACHE_HCA_VERBS_VERBS_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "hca/backend.h"
#include "hca/device.h"
#include "hca/verbs/verbs_options.h"

namespace regcache::hca::verbs {

// Opens the device. kUnavailable (with the reason and the devices seen) when there is no such
// device, its port is not active, or it has no type-1 memory windows.
absl::StatusOr<std::unique_ptr<Device>> NewVerbsDevice(const VerbsOptions& options,
                                                       const OpenOptions& open = {});

// Registers the "verbs" backend with hca::OpenDevice. Idempotent.
void RegisterBackend();

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_VERBS_DEVICE_H_
