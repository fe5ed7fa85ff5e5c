// umr/ holds all the PRM codecs of the project: the WQEs (wqe_builder.h, wqe_decoder.h,
// segments.h, sq.h), the command mailboxes (mailbox.h), the CQEs (cqe.h), the EQEs and page-fault
// resume (odp_event.h) and the capabilities (caps.h), with the key encoding in mkey.h. It is pure
// code: no device, no ibverbs, no allocation on the posting path. Everything that crosses to a
// ConnectX HCA, or to the software HCA that stands in for one, is encoded and decoded here.
//
// This header: the PRM layouts, the byte-exact structures exchanged with the HCA on the
// memory-key path (mkey context, translation entries, WQE segments, command mailboxes, EQE, CQE).
//
// Every layout here is a plain, trivially copyable struct whose members sit at the PRM byte
// offsets; multi-byte fields are base::be16/be32/be64, so a missing byte swap does not compile.
// Sub-dword fields are reached with GetBits/SetBits using the PRM bit numbering (bit 31 = MSB of a
// dword); the `k...Bit`/`k...Hi/Lo` constants below name those positions. Sizes and offsets are
// static_asserted against the PRM offsets in docs/prm.md (sections cited per struct).
// Nothing here validates values: the builders (segments.h, wqe_builder.h, mailbox.h ...) do.
//
// Thread safety: constants and types only.
#ifndef REGCACHE_UMR_PRM_H_
#define REGCACHE_UMR_PRM_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/endian.h"

namespace regcache::umr {

using base::be16;
using base::be32;
using base::be64;

// ---------------------------------------------------------------------------------------------
// Units (docs/prm.md, UMR WQE; WQEBBs and the send queue).
inline constexpr size_t kOctoword = 16;  // one DS unit, one KLM/KSM entry, two MTTs
inline constexpr size_t kWqebb = 64;     // send WQE basic block
inline constexpr unsigned kWqebbShift = 6;
inline constexpr unsigned kMaxDs = 63;            // 6-bit DS field
inline constexpr size_t kTranslationAlign = 64;   // inline / offset granularity of translations
inline constexpr unsigned kMaxWqebbsPerWqe = 16;  // ceil(63/4)

// ---------------------------------------------------------------------------------------------
// Send opcodes (docs/prm.md, UMR WQE; Invalidation).
inline constexpr uint8_t kOpcodeNop = 0x00;
inline constexpr uint8_t kOpcodeSendInval = 0x01;
inline constexpr uint8_t kOpcodeRdmaWrite = 0x08;
inline constexpr uint8_t kOpcodeRdmaWriteImm = 0x09;
inline constexpr uint8_t kOpcodeSend = 0x0a;
inline constexpr uint8_t kOpcodeSendImm = 0x0b;
inline constexpr uint8_t kOpcodeRdmaRead = 0x10;
inline constexpr uint8_t kOpcodeAtomicCs = 0x11;
inline constexpr uint8_t kOpcodeAtomicFa = 0x12;
inline constexpr uint8_t kOpcodeUmr = 0x25;

// fm_ce_se byte of the control segment (docs/prm.md, UMR WQE; Fence modes).
inline constexpr uint8_t kFmShift = 5;     // [7:5] fence mode
inline constexpr uint8_t kCeShift = 2;     // [3:2] completion mode
inline constexpr uint8_t kCeCqUpdate = 2;  // signalled: CQE on success
inline constexpr uint8_t kCeCqUpdateAndEqe = 3;
inline constexpr uint8_t kSeSolicited = 1 << 1;

// UMR control segment flags byte (docs/prm.md, UMR WQE).
inline constexpr uint8_t kUmrFlagInline = 1 << 7;
inline constexpr unsigned kUmrCheckFreeShift = 5;  // bits 6:5, 2-bit value
inline constexpr uint8_t kUmrCheckFreeMask = 3 << 5;
inline constexpr uint8_t kUmrFlagTranslationOffset = 1 << 4;
inline constexpr uint8_t kUmrFlagCheckQpn = 1 << 3;

// mkey_mask bits (docs/prm.md, UMR WQE): bit n is 1<<n of the BE64 mask.
inline constexpr uint64_t kMaskLen = 1ull << 0;
inline constexpr uint64_t kMaskPageSize = 1ull << 1;
inline constexpr uint64_t kMaskStartAddr = 1ull << 6;
inline constexpr uint64_t kMaskPd = 1ull << 7;
inline constexpr uint64_t kMaskEnRinval = 1ull << 8;
inline constexpr uint64_t kMaskEnSigerr = 1ull << 9;
inline constexpr uint64_t kMaskBsfEn = 1ull << 12;
inline constexpr uint64_t kMaskKey = 1ull << 13;
inline constexpr uint64_t kMaskQpn = 1ull << 14;
// Bit 16 selects access_mode in PRM-derived descriptions of the UMR (docs/prm.md, UMR WQE); absent
// from the kernel and rdma-core lists. The builders never set it; the decoder accepts it.
inline constexpr uint64_t kMaskAccessMode = 1ull << 16;
inline constexpr uint64_t kMaskLr = 1ull << 17;
inline constexpr uint64_t kMaskLw = 1ull << 18;
inline constexpr uint64_t kMaskRr = 1ull << 19;
inline constexpr uint64_t kMaskRw = 1ull << 20;
inline constexpr uint64_t kMaskA = 1ull << 21;
inline constexpr uint64_t kMaskSmallFence = 1ull << 23;
inline constexpr uint64_t kMaskRelaxedOrderingWrite = 1ull << 25;
inline constexpr uint64_t kMaskFree = 1ull << 29;
inline constexpr uint64_t kMaskRelaxedOrderingRead = 1ull << 47;
inline constexpr uint64_t kMaskAccess = kMaskLr | kMaskLw | kMaskRr | kMaskRw | kMaskA;
// Every mask bit this project knows; the decoder rejects others.
inline constexpr uint64_t kMaskKnown =
    kMaskLen | kMaskPageSize | kMaskStartAddr | kMaskPd | kMaskEnRinval | kMaskEnSigerr |
    kMaskBsfEn | kMaskKey | kMaskQpn | kMaskAccessMode | kMaskAccess | kMaskSmallFence |
    kMaskRelaxedOrderingWrite | kMaskFree | kMaskRelaxedOrderingRead;

// Inline data segment marker (docs/prm.md, UMR WQE).
inline constexpr uint32_t kInlineSegBit = 0x80000000u;

// Access modes (docs/prm.md, Access modes): 5-bit value split into access_mode_4_2 :
// access_mode_1_0.
inline constexpr uint8_t kAccessModePa = 0x0;
inline constexpr uint8_t kAccessModeMtt = 0x1;
inline constexpr uint8_t kAccessModeKlm = 0x2;
inline constexpr uint8_t kAccessModeKsm = 0x3;
inline constexpr uint8_t kAccessModeSwIcm = 0x4;
inline constexpr uint8_t kAccessModeMemic = 0x5;
inline constexpr uint8_t kAccessModeCrossing = 0x6;

// Unbound QP number in mkc.qpn (docs/prm.md, Mkey context (MKC)).
inline constexpr uint32_t kQpnUnbound = 0xffffff;

// Page / entity sizes of MTT and KSM keys: log_entity_size 12..31 (4 KiB .. 2 GiB).
inline constexpr unsigned kMinLogEntitySize = 12;
inline constexpr unsigned kMaxLogEntitySize = 31;

// ---------------------------------------------------------------------------------------------
// Mkey context (docs/prm.md, Mkey context (MKC)), 64 B. Bit positions are within the named dword.
struct MkeyContext {
  be32
      dw0;  // 0: free, access_mode_4_2, RO-write, small fence, umr_en, a/rw/rr/lw/lr, am_1_0, ma_tm
  be32 qpn_mkey;                   // 4: qpn[31:8], mkey_7_0[7:0]
  be32 reserved2;                  // 8
  be32 flags_pd;                   // 12: length64, bsf_en, sync_umr, sigerr, en_rinval, pd[23:0]
  be64 start_addr;                 // 16
  be64 len;                        // 24
  be32 bsf_octword_size;           // 32
  be32 reserved3[3];               // 36..47
  be32 dw12;                       // 48: crossing_target_vhca_id[31:16] (newer kernels)
  be32 translations_octword_size;  // 52
  be32 dw14;                       // 56: relaxed_ordering_read[6], log_entity_size[4:0]
  be32 dw15;                       // 60: crypto_en[28:27] (rdma-core v44)
};
// dw0
inline constexpr unsigned kMkcFreeBit = 30;
inline constexpr unsigned kMkcAm42Hi = 28, kMkcAm42Lo = 26;
inline constexpr unsigned kMkcRelaxedOrderingWriteBit = 18;
inline constexpr unsigned kMkcSmallFenceBit = 16;
inline constexpr unsigned kMkcUmrEnBit = 15;
inline constexpr unsigned kMkcABit = 14;
inline constexpr unsigned kMkcRwBit = 13;
inline constexpr unsigned kMkcRrBit = 12;
inline constexpr unsigned kMkcLwBit = 11;
inline constexpr unsigned kMkcLrBit = 10;
inline constexpr unsigned kMkcAm10Hi = 9, kMkcAm10Lo = 8;
inline constexpr unsigned kMkcMaTranslationHi = 5, kMkcMaTranslationLo = 4;
// qpn_mkey
inline constexpr unsigned kMkcQpnHi = 31, kMkcQpnLo = 8;
inline constexpr unsigned kMkcMkey70Hi = 7, kMkcMkey70Lo = 0;
// flags_pd
inline constexpr unsigned kMkcLength64Bit = 31;
inline constexpr unsigned kMkcBsfEnBit = 30;
inline constexpr unsigned kMkcSyncUmrBit = 29;
inline constexpr unsigned kMkcSigerrBit = 26;
inline constexpr unsigned kMkcEnRinvalBit = 24;
inline constexpr unsigned kMkcPdHi = 23, kMkcPdLo = 0;
// dw12, dw14, dw15
inline constexpr unsigned kMkcCrossingVhcaHi = 31, kMkcCrossingVhcaLo = 16;
inline constexpr unsigned kMkcRelaxedOrderingReadBit = 6;
inline constexpr unsigned kMkcLogEntitySizeHi = 4, kMkcLogEntitySizeLo = 0;
inline constexpr unsigned kMkcCryptoEnHi = 28, kMkcCryptoEnLo = 27;

static_assert(sizeof(MkeyContext) == 64);
static_assert(offsetof(MkeyContext, qpn_mkey) == 4);
static_assert(offsetof(MkeyContext, flags_pd) == 12);
static_assert(offsetof(MkeyContext, start_addr) == 16);
static_assert(offsetof(MkeyContext, len) == 24);
static_assert(offsetof(MkeyContext, bsf_octword_size) == 32);
static_assert(offsetof(MkeyContext, dw12) == 48);
static_assert(offsetof(MkeyContext, translations_octword_size) == 52);
static_assert(offsetof(MkeyContext, dw14) == 56);
static_assert(offsetof(MkeyContext, dw15) == 60);

// ---------------------------------------------------------------------------------------------
// Translation entries (docs/prm.md, Translation entries).
struct MttEntryLayout {  // 8 B: address[63:8] | wr_en[1] | rd_en[0]
  be64 ptag_flags;
};
inline constexpr uint64_t kMttRead = 1u << 0;
inline constexpr uint64_t kMttWrite = 1u << 1;
inline constexpr uint64_t kMttAddrMask = ~uint64_t{0xff};
static_assert(sizeof(MttEntryLayout) == 8);

struct KlmEntryLayout {  // 16 B, same bytes as a data segment
  be32 byte_count;
  be32 mkey;
  be64 address;
};
static_assert(sizeof(KlmEntryLayout) == 16 && offsetof(KlmEntryLayout, mkey) == 4 &&
              offsetof(KlmEntryLayout, address) == 8);
// Largest byte_count of one KLM entry: 2 GiB (docs/prm.md, Translation entries).
inline constexpr uint32_t kMaxKlmByteCount = 0x80000000u;

struct KsmEntryLayout {  // 16 B, no byte count
  be32 reserved;
  be32 key;
  be64 va;
};
static_assert(sizeof(KsmEntryLayout) == 16 && offsetof(KsmEntryLayout, key) == 4 &&
              offsetof(KsmEntryLayout, va) == 8);

// Repeated ("interleaved") block (docs/prm.md, Translation entries).
struct RepeatBlockHeaderLayout {
  be32 byte_count;  // per repetition
  be32 op;          // kRepeatBlockOp
  be32 repeat_count;
  be16 reserved;
  be16 num_ent;
};
inline constexpr uint32_t kRepeatBlockOp = 0x400;
struct RepeatEntryLayout {
  be16 stride;
  be16 byte_count;
  be32 memkey;
  be64 va;
};
static_assert(sizeof(RepeatBlockHeaderLayout) == 16 &&
              offsetof(RepeatBlockHeaderLayout, repeat_count) == 8 &&
              offsetof(RepeatBlockHeaderLayout, num_ent) == 14);
static_assert(sizeof(RepeatEntryLayout) == 16 && offsetof(RepeatEntryLayout, byte_count) == 2 &&
              offsetof(RepeatEntryLayout, memkey) == 4 && offsetof(RepeatEntryLayout, va) == 8);

// ---------------------------------------------------------------------------------------------
// WQE segments (docs/prm.md, UMR WQE).
struct CtrlSegLayout {    // 16 B
  be32 opmod_idx_opcode;  // [31:24] opmod, [23:8] wqe index, [7:0] opcode
  be32 qpn_ds;            // [31:8] qpn, [5:0] ds
  uint8_t signature;
  uint8_t reserved[2];  // rdma-core: dci_stream_channel_id
  uint8_t fm_ce_se;
  be32 imm;  // UMR target key / key to invalidate
};
static_assert(sizeof(CtrlSegLayout) == 16 && offsetof(CtrlSegLayout, qpn_ds) == 4 &&
              offsetof(CtrlSegLayout, signature) == 8 && offsetof(CtrlSegLayout, fm_ce_se) == 11 &&
              offsetof(CtrlSegLayout, imm) == 12);

struct UmrCtrlSegLayout {  // 48 B
  uint8_t flags;
  uint8_t reserved0[3];
  be16 klm_octowords;
  be16
      translation_offset_or_bsf;  // offset[15:0] with kUmrFlagTranslationOffset, else bsf octowords
  be64 mkey_mask;
  be32 translation_offset_47_16;  // kernel xlt_offset_47_16
  uint8_t reserved1[28];
};
static_assert(sizeof(UmrCtrlSegLayout) == 48 && offsetof(UmrCtrlSegLayout, klm_octowords) == 4 &&
              offsetof(UmrCtrlSegLayout, translation_offset_or_bsf) == 6 &&
              offsetof(UmrCtrlSegLayout, mkey_mask) == 8 &&
              offsetof(UmrCtrlSegLayout, translation_offset_47_16) == 16);

struct DataSegLayout {  // 16 B
  be32 byte_count;
  be32 lkey;
  be64 addr;
};
static_assert(sizeof(DataSegLayout) == 16);

// ---------------------------------------------------------------------------------------------
// Command mailboxes (docs/prm.md, Command mailboxes). Common: in DW0 opcode[31:16] uid[15:0], DW1
// op_mod[15:0]; out DW0 status[31:24], DW1 syndrome.
inline constexpr uint16_t kCmdQueryHcaCap = 0x100;
inline constexpr uint16_t kCmdCreateMkey = 0x200;
inline constexpr uint16_t kCmdQueryMkey = 0x201;
inline constexpr uint16_t kCmdDestroyMkey = 0x202;
inline constexpr uint16_t kCmdQuerySpecialContexts = 0x203;
inline constexpr uint16_t kCmdPageFaultResume = 0x204;
// Output status byte (rdma-core MLX5_CMD_STAT_*): only those the project raises or interprets.
inline constexpr uint8_t kCmdStatusOk = 0x00;
inline constexpr uint8_t kCmdStatusBadParam = 0x03;     // malformed or unsupported input
inline constexpr uint8_t kCmdStatusBadResource = 0x05;  // no such object
inline constexpr uint8_t kCmdStatusLimit = 0x08;        // a table or quota is full

struct CmdInHeaderLayout {  // first 8 B of every command input
  be32 opcode_uid;
  be32 op_mod;
};
struct CmdOutHeaderLayout {  // first 8 B of every command output
  be32 status;               // [31:24]
  be32 syndrome;
};
static_assert(sizeof(CmdInHeaderLayout) == 8 && sizeof(CmdOutHeaderLayout) == 8);

struct CreateMkeyInLayout {  // 272 B, translation entries follow
  CmdInHeaderLayout hdr;
  be32 reserved2;
  be32 dw3;                               // pg_access[31], mkey_umem_valid[30]
  MkeyContext mkc;                        // 16
  uint8_t reserved80[16];                 // 80..95
  be32 translations_octword_actual_size;  // 96
  be32 mkey_umem_id;                      // 100
  be64 mkey_umem_offset;                  // 104
  uint8_t reserved112[160];               // 112..271
};
inline constexpr unsigned kCreateMkeyPgAccessBit = 31;
inline constexpr unsigned kCreateMkeyUmemValidBit = 30;
static_assert(sizeof(CreateMkeyInLayout) == 272 && offsetof(CreateMkeyInLayout, dw3) == 12 &&
              offsetof(CreateMkeyInLayout, mkc) == 16 &&
              offsetof(CreateMkeyInLayout, translations_octword_actual_size) == 96 &&
              offsetof(CreateMkeyInLayout, mkey_umem_id) == 100 &&
              offsetof(CreateMkeyInLayout, mkey_umem_offset) == 104);

struct MkeyIndexCmdLayout {  // 16 B: CREATE_MKEY out, DESTROY/QUERY_MKEY in
  be32 dw0;
  be32 dw1;
  be32 mkey_index;  // [23:0]
  be32 dw3;         // QUERY_MKEY in: pg_access[31]
};
static_assert(sizeof(MkeyIndexCmdLayout) == 16);

struct QueryMkeyOutLayout {  // 272 B, translation entries follow (at least 2 octowords)
  CmdOutHeaderLayout hdr;
  uint8_t reserved8[8];
  MkeyContext mkc;          // 16
  uint8_t reserved80[192];  // 80..271
};
static_assert(sizeof(QueryMkeyOutLayout) == 272 && offsetof(QueryMkeyOutLayout, mkc) == 16);

struct PageFaultResumeInLayout {  // 16 B
  CmdInHeaderLayout hdr;
  be32 dw2;  // error[31], page_fault_type[26:24], wq_number[23:0]
  be32 dw3;  // token[23:0]
};
inline constexpr unsigned kResumeErrorBit = 31;
static_assert(sizeof(PageFaultResumeInLayout) == 16);

struct QueryHcaCapInLayout {  // 16 B
  CmdInHeaderLayout hdr;
  be32 dw2;  // other_function[31], function_id[15:0]
  be32 dw3;
};
static_assert(sizeof(QueryHcaCapInLayout) == 16);
inline constexpr size_t kHcaCapBytes = 0x1000;  // capability union (4 KiB)
inline constexpr size_t kQueryHcaCapOutBytes = 16 + kHcaCapBytes;
inline constexpr uint16_t kCapTypeGeneral = 0x0;
inline constexpr uint16_t kCapTypeOdp = 0x2;

// ---------------------------------------------------------------------------------------------
// Event queue entry (docs/prm.md, Page faults (ODP)), 64 B.
struct EqeLayout {
  uint8_t reserved0;
  uint8_t type;  // 1
  uint8_t reserved2;
  uint8_t sub_type;  // 3
  uint8_t reserved4[28];
  uint8_t data[28];  // 32..59
  uint8_t reserved60[2];
  uint8_t signature;  // 62
  uint8_t owner;      // 63
};
static_assert(sizeof(EqeLayout) == 64 && offsetof(EqeLayout, data) == 32 &&
              offsetof(EqeLayout, signature) == 62);
inline constexpr uint8_t kEventTypePageFault = 0x0c;

// Page-fault event data (EQE bytes 32..59), both subtypes share the first and last dwords.
struct PageFaultDataLayout {
  be32 bytes_committed;  // 0
  be32 dw1;              // WQE: wqe_index[15:0]; RDMA: r_key
  be32 dw2;              // packet_length[15:0] (both)
  be32 dw3;              // WQE: token; RDMA: rdma_op_len
  be32 rdma_va_hi;       // 16..23 RDMA: rdma_va (two dwords: only 4-byte aligned inside the EQE)
  be32 rdma_va_lo;
  be32 dw6;  // type[26:24], wq number / token [23:0]
};
static_assert(sizeof(PageFaultDataLayout) == 28);

// ---------------------------------------------------------------------------------------------
// Completion queue entry, 64 B (rdma-core mlx5dv.h `struct mlx5_cqe64` / `mlx5_err_cqe`).
struct CqeLayout {
  uint8_t reserved0[32];
  be32 srqn_uidx;       // 32
  be32 imm_inval_pkey;  // 36
  uint8_t reserved40[4];
  be32 byte_cnt;      // 44
  be64 timestamp;     // 48 (error CQE: bytes 54 vendor_err_synd, 55 syndrome overlay it)
  be32 sop_drop_qpn;  // 56: [31:24] wqe opcode (requester / error), [23:0] qpn
  be16 wqe_counter;   // 60
  uint8_t signature;  // 62
  uint8_t op_own;     // 63: opcode[7:4], format[3:2], se[1], owner[0]
};
static_assert(sizeof(CqeLayout) == 64 && offsetof(CqeLayout, imm_inval_pkey) == 36 &&
              offsetof(CqeLayout, byte_cnt) == 44 && offsetof(CqeLayout, sop_drop_qpn) == 56 &&
              offsetof(CqeLayout, wqe_counter) == 60 && offsetof(CqeLayout, op_own) == 63);
inline constexpr size_t kCqeVendorErrSyndByte = 54;
inline constexpr size_t kCqeSyndromeByte = 55;
inline constexpr uint8_t kCqeOpReq = 0x0;
inline constexpr uint8_t kCqeOpRespSendInv = 0x4;
inline constexpr uint8_t kCqeOpReqErr = 0xd;
inline constexpr uint8_t kCqeOpRespErr = 0xe;
inline constexpr uint8_t kCqeOpInvalid = 0xf;  // MLX5_CQE_INVALID: a slot not yet written
inline constexpr uint8_t kCqeSyndLocalLength = 0x01;
inline constexpr uint8_t kCqeSyndLocalQpOp = 0x02;
inline constexpr uint8_t kCqeSyndLocalProt = 0x04;
inline constexpr uint8_t kCqeSyndWrFlush = 0x05;
inline constexpr uint8_t kCqeSyndMwBind = 0x06;
inline constexpr uint8_t kCqeSyndBadResp = 0x10;
inline constexpr uint8_t kCqeSyndLocalAccess = 0x11;
inline constexpr uint8_t kCqeSyndRemoteInvalReq = 0x12;
inline constexpr uint8_t kCqeSyndRemoteAccess = 0x13;
inline constexpr uint8_t kCqeSyndRemoteOp = 0x14;
inline constexpr uint8_t kCqeVendorSyndOdpPfault = 0x93;

static_assert(std::is_trivially_copyable_v<MkeyContext> &&
              std::is_trivially_copyable_v<CtrlSegLayout> &&
              std::is_trivially_copyable_v<UmrCtrlSegLayout> &&
              std::is_trivially_copyable_v<CqeLayout>);

// ---------------------------------------------------------------------------------------------
// Generic PRM field access on a byte image made of big-endian dwords (the DEVX_GET/SET rule,
// docs/prm.md, Conventions), for the large capability structures that are not declared member by
// member. REQUIRES: 0 < width <= 32, the field does not straddle a dword, bytes has
// (bit_off/32+1)*4 bytes.
uint32_t PrmGet(const uint8_t* bytes, unsigned bit_off, unsigned width);
void PrmSet(uint8_t* bytes, unsigned bit_off, unsigned width, uint32_t value);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_PRM_H_
