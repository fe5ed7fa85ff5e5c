#include "hca/mlx5/internal/prm_compat.h"

#include <infiniband/mlx5dv.h>

#include <array>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "umr/prm.h"
#include "umr/wqe_builder.h"

namespace regcache::hca::mlx5 {
namespace {

// ---- Segment sizes and member offsets --------------------------------------------------------
static_assert(sizeof(mlx5_wqe_ctrl_seg) == sizeof(umr::CtrlSegLayout));
static_assert(offsetof(mlx5_wqe_ctrl_seg, opmod_idx_opcode) ==
              offsetof(umr::CtrlSegLayout, opmod_idx_opcode));
static_assert(offsetof(mlx5_wqe_ctrl_seg, qpn_ds) == offsetof(umr::CtrlSegLayout, qpn_ds));
static_assert(offsetof(mlx5_wqe_ctrl_seg, signature) == offsetof(umr::CtrlSegLayout, signature));
static_assert(offsetof(mlx5_wqe_ctrl_seg, fm_ce_se) == offsetof(umr::CtrlSegLayout, fm_ce_se));
static_assert(offsetof(mlx5_wqe_ctrl_seg, imm) == offsetof(umr::CtrlSegLayout, imm));

static_assert(sizeof(mlx5_wqe_umr_ctrl_seg) == sizeof(umr::UmrCtrlSegLayout));
static_assert(offsetof(mlx5_wqe_umr_ctrl_seg, flags) == offsetof(umr::UmrCtrlSegLayout, flags));
static_assert(offsetof(mlx5_wqe_umr_ctrl_seg, klm_octowords) ==
              offsetof(umr::UmrCtrlSegLayout, klm_octowords));
static_assert(offsetof(mlx5_wqe_umr_ctrl_seg, translation_offset) ==
              offsetof(umr::UmrCtrlSegLayout, translation_offset_or_bsf));
static_assert(offsetof(mlx5_wqe_umr_ctrl_seg, bsf_octowords) ==
              offsetof(umr::UmrCtrlSegLayout, translation_offset_or_bsf));
static_assert(offsetof(mlx5_wqe_umr_ctrl_seg, mkey_mask) ==
              offsetof(umr::UmrCtrlSegLayout, mkey_mask));
// rdma-core has no name for bytes 16..19 (kernel xlt_offset_47_16): they sit in its rsvd1.
static_assert(offsetof(mlx5_wqe_umr_ctrl_seg, rsvd1) ==
              offsetof(umr::UmrCtrlSegLayout, translation_offset_47_16));

static_assert(sizeof(mlx5_wqe_mkey_context_seg) == sizeof(umr::MkeyContext));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, free) == 0);
static_assert(offsetof(mlx5_wqe_mkey_context_seg, access_flags) == 2);
static_assert(offsetof(mlx5_wqe_mkey_context_seg, sf) == 3);
static_assert(offsetof(mlx5_wqe_mkey_context_seg, qpn_mkey) ==
              offsetof(umr::MkeyContext, qpn_mkey));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, flags_pd) ==
              offsetof(umr::MkeyContext, flags_pd));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, start_addr) ==
              offsetof(umr::MkeyContext, start_addr));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, len) == offsetof(umr::MkeyContext, len));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, bsf_octword_size) ==
              offsetof(umr::MkeyContext, bsf_octword_size));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, translations_octword_size) ==
              offsetof(umr::MkeyContext, translations_octword_size));
static_assert(offsetof(mlx5_wqe_mkey_context_seg, log_page_size) ==
              offsetof(umr::MkeyContext, dw14) + 3);

static_assert(sizeof(mlx5_wqe_umr_klm_seg) == sizeof(umr::KlmEntryLayout));
static_assert(offsetof(mlx5_wqe_umr_klm_seg, byte_count) ==
              offsetof(umr::KlmEntryLayout, byte_count));
static_assert(offsetof(mlx5_wqe_umr_klm_seg, mkey) == offsetof(umr::KlmEntryLayout, mkey));
static_assert(offsetof(mlx5_wqe_umr_klm_seg, address) == offsetof(umr::KlmEntryLayout, address));
static_assert(sizeof(mlx5_wqe_data_seg) == sizeof(umr::DataSegLayout));
static_assert(offsetof(mlx5_wqe_data_seg, lkey) == offsetof(umr::DataSegLayout, lkey));
static_assert(offsetof(mlx5_wqe_data_seg, addr) == offsetof(umr::DataSegLayout, addr));

static_assert(sizeof(mlx5_wqe_umr_repeat_block_seg) == sizeof(umr::RepeatBlockHeaderLayout));
static_assert(offsetof(mlx5_wqe_umr_repeat_block_seg, op) ==
              offsetof(umr::RepeatBlockHeaderLayout, op));
static_assert(offsetof(mlx5_wqe_umr_repeat_block_seg, repeat_count) ==
              offsetof(umr::RepeatBlockHeaderLayout, repeat_count));
static_assert(offsetof(mlx5_wqe_umr_repeat_block_seg, num_ent) ==
              offsetof(umr::RepeatBlockHeaderLayout, num_ent));
static_assert(sizeof(mlx5_wqe_umr_repeat_ent_seg) == sizeof(umr::RepeatEntryLayout));
static_assert(offsetof(mlx5_wqe_umr_repeat_ent_seg, byte_count) ==
              offsetof(umr::RepeatEntryLayout, byte_count));
static_assert(offsetof(mlx5_wqe_umr_repeat_ent_seg, memkey) ==
              offsetof(umr::RepeatEntryLayout, memkey));
static_assert(offsetof(mlx5_wqe_umr_repeat_ent_seg, va) == offsetof(umr::RepeatEntryLayout, va));

static_assert(sizeof(mlx5_cqe64) == sizeof(umr::CqeLayout));
static_assert(offsetof(mlx5_cqe64, srqn_uidx) == offsetof(umr::CqeLayout, srqn_uidx));
static_assert(offsetof(mlx5_cqe64, imm_inval_pkey) == offsetof(umr::CqeLayout, imm_inval_pkey));
static_assert(offsetof(mlx5_cqe64, byte_cnt) == offsetof(umr::CqeLayout, byte_cnt));
static_assert(offsetof(mlx5_cqe64, timestamp) == offsetof(umr::CqeLayout, timestamp));
static_assert(offsetof(mlx5_cqe64, sop_drop_qpn) == offsetof(umr::CqeLayout, sop_drop_qpn));
static_assert(offsetof(mlx5_cqe64, wqe_counter) == offsetof(umr::CqeLayout, wqe_counter));
static_assert(offsetof(mlx5_cqe64, signature) == offsetof(umr::CqeLayout, signature));
static_assert(offsetof(mlx5_cqe64, op_own) == offsetof(umr::CqeLayout, op_own));
static_assert(sizeof(mlx5_err_cqe) == sizeof(umr::CqeLayout));
static_assert(offsetof(mlx5_err_cqe, vendor_err_synd) == umr::kCqeVendorErrSyndByte);
static_assert(offsetof(mlx5_err_cqe, syndrome) == umr::kCqeSyndromeByte);
static_assert(offsetof(mlx5_err_cqe, s_wqe_opcode_qpn) == offsetof(umr::CqeLayout, sop_drop_qpn));
static_assert(offsetof(mlx5_err_cqe, wqe_counter) == offsetof(umr::CqeLayout, wqe_counter));
static_assert(offsetof(mlx5_err_cqe, op_own) == offsetof(umr::CqeLayout, op_own));

// ---- Constants -------------------------------------------------------------------------------
static_assert(MLX5_SEND_WQE_BB == umr::kWqebb && MLX5_SEND_WQE_SHIFT == umr::kWqebbShift);
static_assert(MLX5_INLINE_SEG == umr::kInlineSegBit);
static_assert(MLX5_INVALID_LKEY == 0x100);
static_assert(MLX5_OPCODE_UMR == umr::kOpcodeUmr &&
              MLX5_OPCODE_SEND_INVAL == umr::kOpcodeSendInval &&
              MLX5_OPCODE_NOP == umr::kOpcodeNop && MLX5_OPCODE_SEND == umr::kOpcodeSend &&
              MLX5_OPCODE_RDMA_WRITE == umr::kOpcodeRdmaWrite &&
              MLX5_OPCODE_RDMA_READ == umr::kOpcodeRdmaRead);
static_assert(MLX5_WQE_CTRL_CQ_UPDATE == umr::kCeCqUpdate << umr::kCeShift);
static_assert(MLX5_WQE_CTRL_SOLICITED == umr::kSeSolicited);
// rdma-core's "FENCE" is the kernel's SMALL_AND_FENCE (docs/prm.md, Fence modes).
static_assert(MLX5_WQE_CTRL_FENCE == static_cast<int>(umr::FenceMode::kSmallAndFence)
                                         << umr::kFmShift);
static_assert(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE ==
              static_cast<int>(umr::FenceMode::kInitiatorSmall) << umr::kFmShift);
static_assert(MLX5_WQE_UMR_CTRL_FLAG_INLINE == umr::kUmrFlagInline);
// rdma-core's CHECK_FREE is value 1 ("must be free") of the 2-bit field (docs/prm.md, UMR WQE).
static_assert(MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE == static_cast<int>(umr::FreeCheck::kMustBeFree)
                                                       << umr::kUmrCheckFreeShift);
static_assert(MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET == umr::kUmrFlagTranslationOffset);
static_assert(MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN == umr::kUmrFlagCheckQpn);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN == umr::kMaskLen);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR == umr::kMaskStartAddr);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_SIG_ERR == umr::kMaskEnSigerr);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_BSF_ENABLE == umr::kMaskBsfEn);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY == umr::kMaskKey);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN == umr::kMaskQpn);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE == umr::kMaskLw);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ == umr::kMaskRr);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE == umr::kMaskRw);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC == umr::kMaskA);
static_assert(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE == umr::kMaskFree);
// mkc byte 0 / byte 2 constants are the dword-0 bits seen from their byte.
static_assert(MLX5_WQE_MKEY_CONTEXT_FREE == 1 << (umr::kMkcFreeBit - 24));
static_assert(MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC == 1 << (umr::kMkcABit - 8));
static_assert(MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE == 1 << (umr::kMkcRwBit - 8));
static_assert(MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ == 1 << (umr::kMkcRrBit - 8));
static_assert(MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE == 1 << (umr::kMkcLwBit - 8));
static_assert(MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ == 1 << (umr::kMkcLrBit - 8));
static_assert(MLX5_CQE_REQ == umr::kCqeOpReq && MLX5_CQE_RESP_SEND_INV == umr::kCqeOpRespSendInv &&
              MLX5_CQE_REQ_ERR == umr::kCqeOpReqErr && MLX5_CQE_RESP_ERR == umr::kCqeOpRespErr);
static_assert(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR == umr::kCqeSyndLocalLength &&
              MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR == umr::kCqeSyndLocalQpOp &&
              MLX5_CQE_SYNDROME_LOCAL_PROT_ERR == umr::kCqeSyndLocalProt &&
              MLX5_CQE_SYNDROME_WR_FLUSH_ERR == umr::kCqeSyndWrFlush &&
              MLX5_CQE_SYNDROME_MW_BIND_ERR == umr::kCqeSyndMwBind &&
              MLX5_CQE_SYNDROME_BAD_RESP_ERR == umr::kCqeSyndBadResp &&
              MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR == umr::kCqeSyndLocalAccess &&
              MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR == umr::kCqeSyndRemoteInvalReq &&
              MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR == umr::kCqeSyndRemoteAccess &&
              MLX5_CQE_SYNDROME_REMOTE_OP_ERR == umr::kCqeSyndRemoteOp);

}  // namespace

absl::Status CheckPrmCompat() {
  // A 4-KLM map, built by umr/ and by filling rdma-core's structs as its provider does.
  umr::WqeHeader h;
  h.wqe_index = 5;
  h.sqn = 0x1234;
  h.fence = umr::FenceMode::kInitiatorSmall;
  h.signaled = true;
  umr::MapKeyRequest r;
  r.key = 0x00abcd01;
  r.access = {true, true, true, true, false};
  r.start_addr = 0x10000;
  r.length = 4 * 4096;
  for (uint32_t i = 0; i < 4; ++i) r.klm.push_back({4096, 0x100 + i, 0x20000 + i * 4096ull});
  alignas(64) std::array<uint8_t, 256> ours{};
  auto size = umr::BuildMapKey(h, r, 4, absl::MakeSpan(ours));
  if (!size.ok()) return size.status();

  alignas(64) std::array<uint8_t, 256> theirs{};
  auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(theirs.data());
  mlx5dv_set_ctrl_seg(ctrl, h.wqe_index, MLX5_OPCODE_UMR, 0, h.sqn,
                      MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE, size->ds, 0,
                      htobe32(r.key));
  auto* umr_ctrl = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(ctrl + 1);
  umr_ctrl->flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
  umr_ctrl->klm_octowords = htobe16(4);
  umr_ctrl->mkey_mask = htobe64(
      MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
      MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
      umr::kMaskEnRinval | umr::kMaskLr | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
      MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
      MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC);
  auto* mkc = reinterpret_cast<mlx5_wqe_mkey_context_seg*>(umr_ctrl + 1);
  mkc->access_flags = 0x80 /* umr_en */ | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE |
                      MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
                      MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE |
                      MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ | umr::kAccessModeKlm;
  mkc->qpn_mkey = htobe32(0xffffff00 | (r.key & 0xff));
  mkc->start_addr = htobe64(r.start_addr);
  mkc->len = htobe64(r.length);
  auto* klm = reinterpret_cast<mlx5_wqe_data_seg*>(mkc + 1);
  for (const umr::KlmEntry& e : r.klm) mlx5dv_set_data_seg(klm++, e.byte_count, e.mkey, e.address);
  for (size_t i = 0; i < size->bytes(); ++i) {
    if (ours[i] != theirs[i]) {
      return absl::InternalError(absl::StrCat("umr/ map WQE differs from rdma-core at byte ", i,
                                              ": ", ours[i], " vs ", theirs[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace regcache::hca::mlx5