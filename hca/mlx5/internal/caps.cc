#include "hca/mlx5/internal/caps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "umr/wqe_builder.h"

namespace regcache::hca::mlx5 {

umr::FenceMode UmrFence(uint8_t umr_fence) {
  switch (umr_fence) {
    case 1:
      return umr::FenceMode::kInitiatorSmall;
    case 2:
      return umr::FenceMode::kNone;
    default:
      return umr::FenceMode::kStrongOrdering;
  }
}

uint32_t MaxInlineKlm(uint16_t max_wqe_sz_sq) {
  constexpr uint32_t kHeadBytes = umr::kUmrHeadDs * umr::kOctoword;  // 128
  if (max_wqe_sz_sq < kHeadBytes) return 0;
  const uint32_t fit = (max_wqe_sz_sq - kHeadBytes) / 16 / 4 * 4;
  return std::min<uint32_t>(fit, umr::kMaxInlineKlms);
}

absl::StatusOr<Capabilities> CapabilitiesFrom(const std::string& name, const umr::HcaCaps& hca,
                                              const VerbsLimits& verbs, const CapsPolicy& policy) {
  const std::string who = absl::StrCat("mlx5: ", name);
  if (hca.umr_indirect_mkey_disabled) {
    return absl::UnavailableError(absl::StrCat(
        who, " does not let a UMR load KLM translations (umr_indirect_mkey_disabled)"));
  }
  if (hca.log_max_klm_list_size == 0 || hca.max_indirection == 0) {
    return absl::UnavailableError(
        absl::StrCat(who, " reports no indirect keys (log_max_klm_list_size ",
                     hca.log_max_klm_list_size, ", max_indirection ", hca.max_indirection, ")"));
  }
  const uint32_t inline_klm = MaxInlineKlm(hca.max_wqe_sz_sq);
  if (inline_klm == 0) {
    return absl::UnavailableError(absl::StrCat(who, ": send WQEs of ", hca.max_wqe_sz_sq,
                                               " bytes cannot carry a UMR with its list"));
  }
  Capabilities c;
  c.backend = "mlx5";
  c.device_name = name;
  // A key's list is bounded by the device; a pointer-mode list also by the 16-bit count
  // mlx5dv_create_mkey takes and the queue's staging buffer (65536 entries), whichever is less.
  const uint64_t device_max = uint64_t{1} << std::min<uint8_t>(hca.log_max_klm_list_size, 31);
  c.max_klm_entries = static_cast<uint32_t>(std::min<uint64_t>(device_max, 65532));
  c.max_inline_klm = std::min(inline_klm, c.max_klm_entries);
  c.umr_pointer_translation = policy.pointer_umr && c.max_klm_entries > c.max_inline_klm;
  if (!c.umr_pointer_translation) c.max_klm_entries = c.max_inline_klm;
  c.max_indirection = hca.max_indirection;
  c.page_size_mask = uint64_t{1} << 12;  // backings are ibv_reg_mr's: 4 KiB as far as we say
  c.max_key_length =
      hca.log_max_mrw_sz >= 64 ? 0 : (uint64_t{1} << std::min<uint8_t>(hca.log_max_mrw_sz, 63));
  c.max_queue_depth = std::min(policy.max_queue_depth,
                               verbs.max_qp_wr == 0 ? policy.max_queue_depth : verbs.max_qp_wr);
  c.max_keys = hca.log_max_mkey >= 32 ? UINT32_MAX : (uint32_t{1} << hca.log_max_mkey);
  c.umr = true;
  c.memory_windows = false;
  c.ksm = hca.fixed_buffer_size;
  c.odp = verbs.odp_rc_read_write;
  c.atomics = hca.atomic;
  c.remote_invalidate = true;
  c.translation_offset = false;  // MTT translations are the kernel's (ibv_reg_mr), not ours
  c.peer = true;
  c.endpoints = true;
  const umr::UmrModifyCaps modify = umr::UmrModifyCapsOf(hca);
  c.umr_modify_atomic = modify.atomic && hca.atomic;
  c.umr_modify_entity_size = modify.entity_size;
  return c;
}

}  // namespace regcache::hca::mlx5
