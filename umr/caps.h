// QUERY_HCA_CAP (docs/prm.md, HCA capabilities): the capability fields the project needs, with a
// decoder (for the mlx5 backend, which will read the firmware's answer through DevX) and an encoder
// (so a device model or a test can answer in PRM bytes; the sim does not issue QUERY_HCA_CAP today,
// it fills hca::Capabilities directly). Offsets are PRM bit offsets inside the 4 KiB capability
// union, which starts at byte 16 of the command output.
//
// Thread safety: pure functions.
#ifndef REGCACHE_UMR_CAPS_H_
#define REGCACHE_UMR_CAPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/mailbox.h"

namespace regcache::umr {

// General device capabilities (cap_type 0), the mkey / UMR subset.
struct HcaCaps {
  bool relaxed_ordering_write_umr = false;
  bool relaxed_ordering_read_umr = false;
  bool relaxed_ordering_write = false;
  bool relaxed_ordering_read_pci_enabled = false;
  uint8_t log_max_mkey = 0;  // 6 bits
  bool terminate_scatter_list_mkey = false;
  bool repeated_mkey = false;
  bool dump_fill_mkey = false;
  uint8_t max_indirection = 0;        // 8 bits: mkey indirection depth
  bool fixed_buffer_size = false;     // KSM supported
  uint8_t log_max_mrw_sz = 0;         // 7 bits
  uint8_t log_max_bsf_list_size = 0;  // 6 bits
  bool umr_extended_translation_offset = false;
  bool null_mkey = false;
  uint8_t log_max_klm_list_size = 0;  // 6 bits: max KLM entries per key = 2^value
  bool repeated_block_disabled = false;
  bool umr_modify_entity_size_disabled = false;
  bool umr_modify_atomic_disabled = false;
  bool umr_indirect_mkey_disabled = false;
  uint8_t umr_fence = 0;  // 2 bits: 0 strong, 1 small, 2 none
  bool atomic = false;
  bool pg = false;  // ODP page faults
  bool umr_ptr_rlky = false;
  bool mkey_by_name = false;
  uint16_t max_wqe_sz_sq = 0;  // bytes
  bool relaxed_ordering_read = false;
  bool ats = false;
  bool crypto = false;
  friend bool operator==(const HcaCaps&, const HcaCaps&) = default;
};

// What a device lets a UMR change, from QUERY_HCA_CAP (docs/prm.md, HCA capabilities): a device
// reporting umr_modify_atomic_disabled refuses a UMR whose mkey_mask selects A (bit 21), one
// reporting umr_modify_entity_size_disabled one that selects PAGE_SIZE (bit 1).
struct UmrModifyCaps {
  bool atomic = true;       // !umr_modify_atomic_disabled
  bool entity_size = true;  // !umr_modify_entity_size_disabled
  friend bool operator==(const UmrModifyCaps&, const UmrModifyCaps&) = default;
};

// The UMR limits of a device whose general capabilities are `caps`.
inline UmrModifyCaps UmrModifyCapsOf(const HcaCaps& caps) {
  return UmrModifyCaps{!caps.umr_modify_atomic_disabled, !caps.umr_modify_entity_size_disabled};
}

// Per-transport ODP capability dword.
struct OdpTransportCaps {
  bool send = false;
  bool receive = false;
  bool write = false;
  bool read = false;
  bool atomic = false;
  bool srq_receive = false;
  friend bool operator==(const OdpTransportCaps&, const OdpTransportCaps&) = default;
};
// ODP capabilities (cap_type 2).
struct OdpCaps {
  bool sig = false;
  OdpTransportCaps rc, uc, ud, xrc, dc;
  friend bool operator==(const OdpCaps&, const OdpCaps&) = default;
};

// QUERY_HCA_CAP input: op_mod = cap_type << 1 | current.
struct QueryHcaCapIn {
  uint16_t cap_type = kCapTypeGeneral;  // 15 bits
  bool current = true;                  // else maximum
  bool other_function = false;
  uint16_t function_id = 0;
  friend bool operator==(const QueryHcaCapIn&, const QueryHcaCapIn&) = default;
};
absl::StatusOr<Mailbox16> EncodeQueryHcaCapIn(const QueryHcaCapIn& in);
absl::StatusOr<QueryHcaCapIn> DecodeQueryHcaCapIn(absl::Span<const uint8_t> in);

// Outputs of kQueryHcaCapOutBytes. Encoders fail (kOutOfRange) for a value wider than its field.
absl::StatusOr<std::vector<uint8_t>> EncodeQueryHcaCapOut(const CmdStatus& s, const HcaCaps& c);
absl::StatusOr<std::vector<uint8_t>> EncodeQueryOdpCapOut(const CmdStatus& s, const OdpCaps& c);
// Fail (kInvalidArgument) for an output shorter than kQueryHcaCapOutBytes.
absl::StatusOr<HcaCaps> DecodeHcaCaps(absl::Span<const uint8_t> out);
absl::StatusOr<OdpCaps> DecodeOdpCaps(absl::Span<const uint8_t> out);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_CAPS_H_
