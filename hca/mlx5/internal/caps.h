// What a ConnectX can do, from what it reports: QUERY_HCA_CAP's general and ODP capabilities
// (umr/caps.h decodes the PRM bytes) and the verbs limits (ibv_query_device_ex), mapped into the
// device boundary's Capabilities (docs/mlx5.md, Capabilities). Pure, so that golden outboxes test
// it without a device.
//
// Thread safety: pure functions.
#ifndef REGCACHE_HCA_MLX5_INTERNAL_CAPS_H_
#define REGCACHE_HCA_MLX5_INTERNAL_CAPS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "hca/device.h"
#include "umr/caps.h"
#include "umr/segments.h"

namespace regcache::hca::mlx5 {

// What the verbs layer reports next to the PRM capabilities.
struct VerbsLimits {
  uint32_t max_qp_wr = 0;          // ibv_device_attr::max_qp_wr
  bool odp_rc_read_write = false;  // IBV_ODP_SUPPORT with RC READ and WRITE (odp_caps)
};

// Backend choices that change what is reported.
struct CapsPolicy {
  uint32_t max_queue_depth = 4096;  // cap on a UMR queue's depth in WQEBBs
  bool pointer_umr = true;          // maps longer than one WQE go by pointer (staging buffer)
};

// The fence a UMR must carry on this device (umr_fence: 0 strong ordering, 1 initiator small,
// 2 none). Unknown values are treated as strong ordering, the safe end.
umr::FenceMode UmrFence(uint8_t umr_fence);

// KLM entries one inline UMR carries on a device whose send WQEs may be `max_wqe_sz_sq` bytes
// (control 16 + UMR control 48 + mkey context 64 bytes, then 16 per entry, in blocks of 4), never
// more than the builder's limit. 0 when not even 4 fit.
uint32_t MaxInlineKlm(uint16_t max_wqe_sz_sq);

// The Capabilities of device `name`. kUnavailable (with the reason) for a device this backend
// cannot make keys on: UMR of indirect keys disabled (umr_indirect_mkey_disabled), no KLM list
// (log_max_klm_list_size 0), no indirection, or a send WQE too small for one inline map.
absl::StatusOr<Capabilities> CapabilitiesFrom(const std::string& name, const umr::HcaCaps& hca,
                                              const VerbsLimits& verbs, const CapsPolicy& policy);

}  // namespace regcache::hca::mlx5
#endif  // REGCACHE_HCA_MLX5_INTERNAL_CAPS_H_
