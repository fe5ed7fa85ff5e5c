// One builder and one decoder per PRM segment: the mkey context, the send control segment, the
// UMR control segment, the data segment, and the MTT / KLM / KSM / repeated-block translation
// entries. Descriptors are plain host-order structs with operator==, so tests compare a decoded
// descriptor with the one that was encoded.
//
// Builders (Encode*) validate every field against its PRM width and write the whole segment,
// reserved bytes included (zeroed); on failure they return kInvalidArgument / kOutOfRange naming
// the field and value, and the output is left unspecified. Decoders (Decode*) read any bytes:
// reserved bits are ignored, values the PRM leaves undefined (fence mode > 4, free-check value 3,
// an inline data segment where a pointer is expected) are errors.
//
// Thread safety: pure functions over caller-owned memory.
#ifndef REGCACHE_UMR_SEGMENTS_H_
#define REGCACHE_UMR_SEGMENTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/prm.h"

namespace regcache::umr {

// ---------------------------------------------------------------------------------------------
// Mkey context (docs/prm.md, Mkey context (MKC); Access modes).

// Access mode values (docs/prm.md, Access modes); the PRM field is 5 bits, so MkeyContextDesc keeps
// a raw byte.
enum class AccessMode : uint8_t {
  kPa = kAccessModePa,
  kMtt = kAccessModeMtt,
  kKlm = kAccessModeKlm,
  kKsm = kAccessModeKsm,
  kSwIcm = kAccessModeSwIcm,
  kMemic = kAccessModeMemic,
  kCrossing = kAccessModeCrossing,
};
const char* AccessModeName(uint8_t mode);

// The five access bits of mkc DW0 (lr is required by every key the kernel or rdma-core makes).
struct MkeyAccess {
  bool local_read = true;
  bool local_write = false;
  bool remote_read = false;
  bool remote_write = false;
  bool remote_atomic = false;
  friend bool operator==(const MkeyAccess&, const MkeyAccess&) = default;
};

// Every field of the 64-byte mkey context, host order. Defaults: an in-use, unbound key.
struct MkeyContextDesc {
  bool free = false;
  uint8_t access_mode = kAccessModePa;  // 5 bits, split 4_2 : 1_0 on the wire
  bool relaxed_ordering_write = false;
  bool small_fence_on_rdma_read_response = false;
  bool umr_en = false;
  MkeyAccess access;
  uint8_t ma_translation_mode = 0;  // 2 bits
  uint32_t qpn = kQpnUnbound;       // 24 bits
  uint8_t mkey_7_0 = 0;
  bool length64 = false;
  bool bsf_en = false;
  bool sync_umr = false;
  bool expected_sigerr_count = false;
  bool en_rinval = false;
  uint32_t pd = 0;  // 24 bits
  uint64_t start_addr = 0;
  uint64_t len = 0;
  uint32_t bsf_octword_size = 0;
  uint16_t crossing_target_vhca_id = 0;
  uint32_t translations_octword_size = 0;
  bool relaxed_ordering_read = false;
  uint8_t log_entity_size = 0;  // 5 bits (kernel / rdma-core 44 layout)
  uint8_t crypto_en = 0;        // 2 bits
  friend bool operator==(const MkeyContextDesc&, const MkeyContextDesc&) = default;
};

// Fails with kOutOfRange if access_mode >= 32, qpn or pd >= 2^24, log_entity_size >= 32,
// ma_translation_mode or crypto_en >= 4. Writes all 64 bytes.
absl::Status EncodeMkeyContext(const MkeyContextDesc& d, MkeyContext* out);
// Never fails: every bit pattern is a context; reserved bits are ignored.
MkeyContextDesc DecodeMkeyContext(const MkeyContext& mkc);

// ---------------------------------------------------------------------------------------------
// Send control segment (docs/prm.md, UMR WQE).

enum class FenceMode : uint8_t {
  kNone = 0,
  kInitiatorSmall = 1,
  kFence = 2,
  kStrongOrdering = 3,
  kSmallAndFence = 4,
};
inline constexpr uint8_t kMaxFenceMode = 4;

struct CtrlSegDesc {
  uint8_t opmod = 0;
  uint16_t wqe_index = 0;  // producer counter in WQEBBs mod 2^16
  uint8_t opcode = 0;
  uint32_t qpn = 0;  // 24 bits (SQ number)
  uint8_t ds = 0;    // 6 bits, 16-byte units
  uint8_t signature = 0;
  FenceMode fence = FenceMode::kNone;
  uint8_t completion_mode = 0;  // 2 bits; kCeCqUpdate = signalled
  bool solicited = false;
  uint32_t imm = 0;  // host order: UMR target key, or key to invalidate
  bool signaled() const {
    return completion_mode == kCeCqUpdate || completion_mode == kCeCqUpdateAndEqe;
  }
  friend bool operator==(const CtrlSegDesc&, const CtrlSegDesc&) = default;
};

// Fails (kOutOfRange) for qpn >= 2^24, ds > 63, completion_mode > 3, fence > 4.
absl::Status EncodeCtrlSeg(const CtrlSegDesc& d, CtrlSegLayout* out);
// Fails (kInvalidArgument) for an undefined fence mode (5..7).
absl::StatusOr<CtrlSegDesc> DecodeCtrlSeg(const CtrlSegLayout& seg);

// ---------------------------------------------------------------------------------------------
// UMR control segment (docs/prm.md, UMR WQE).

// The 2-bit free-check condition, by value (docs/prm.md, UMR WQE: the kernel's and rdma-core's
// names for value 1 look opposite; both mean "must be free").
enum class FreeCheck : uint8_t { kNone = 0, kMustBeFree = 1, kMustNotBeFree = 2 };

inline constexpr uint64_t kMaxTranslationOffset = (uint64_t{1} << 48) - 1;  // octowords

struct UmrCtrlSegDesc {
  bool inline_translation = true;  // else one data (pointer) segment follows the mkey context
  FreeCheck check_free = FreeCheck::kNone;
  bool translation_offset_en = false;
  bool check_qpn = false;
  uint16_t klm_octowords = 0;       // translation data carried, 16-byte units
  uint64_t translation_offset = 0;  // octowords, 48 bits; only with translation_offset_en
  uint16_t bsf_octowords = 0;       // only without translation_offset_en
  uint64_t mkey_mask = 0;
  friend bool operator==(const UmrCtrlSegDesc&, const UmrCtrlSegDesc&) = default;
};

// Fails with kInvalidArgument if translation_offset is set without translation_offset_en or
// bsf_octowords with it; kOutOfRange if translation_offset > 2^48-1.
absl::Status EncodeUmrCtrlSeg(const UmrCtrlSegDesc& d, UmrCtrlSegLayout* out);
// Fails with kInvalidArgument for free-check value 3. Reserved flag bits are ignored.
absl::StatusOr<UmrCtrlSegDesc> DecodeUmrCtrlSeg(const UmrCtrlSegLayout& seg);

// ---------------------------------------------------------------------------------------------
// Data (pointer) segment (docs/prm.md, UMR WQE).

struct DataSegDesc {
  uint32_t byte_count = 0;  // 0 means 2 GiB to the device; bit 31 must be clear (inline marker)
  uint32_t lkey = 0;
  uint64_t addr = 0;
  friend bool operator==(const DataSegDesc&, const DataSegDesc&) = default;
};
// Fails (kInvalidArgument) if byte_count has the inline bit (bit 31) set.
absl::Status EncodeDataSeg(const DataSegDesc& d, DataSegLayout* out);
// Fails (kUnimplemented) for an inline data segment.
absl::StatusOr<DataSegDesc> DecodeDataSeg(const DataSegLayout& seg);

// ---------------------------------------------------------------------------------------------
// Translation entries (docs/prm.md, Translation entries). Lists are padded to 64 B on the wire
// (kTranslationAlign).

struct MttEntry {
  uint64_t addr = 0;   // DMA address of the page; bits 7:0 must be 0
  bool read = false;   // rd_en (entry present)
  bool write = false;  // wr_en
  friend bool operator==(const MttEntry&, const MttEntry&) = default;
};
struct KlmEntry {
  uint32_t byte_count = 0;  // <= 2 GiB (validated by the builders, not here)
  uint32_t mkey = 0;
  uint64_t address = 0;
  friend bool operator==(const KlmEntry&, const KlmEntry&) = default;
};
struct KsmEntry {
  uint32_t mkey = 0;
  uint64_t va = 0;
  friend bool operator==(const KsmEntry&, const KsmEntry&) = default;
};
struct RepeatEntry {
  uint16_t stride = 0;  // byte_count + bytes skipped
  uint16_t byte_count = 0;
  uint32_t mkey = 0;
  uint64_t va = 0;
  friend bool operator==(const RepeatEntry&, const RepeatEntry&) = default;
};
struct RepeatBlock {
  uint32_t repeat_count = 0;
  std::vector<RepeatEntry> entries;  // header byte_count = sum of entries' byte_count
  friend bool operator==(const RepeatBlock&, const RepeatBlock&) = default;
};

inline constexpr size_t kMttEntryBytes = 8;
inline constexpr size_t kKlmEntryBytes = 16;

// Entries of `mode` per 64-byte translation block: MTT 8, KLM/KSM 4.
constexpr size_t EntriesPer64B(AccessMode mode) { return mode == AccessMode::kMtt ? 8 : 4; }
constexpr size_t EntryBytes(AccessMode mode) {
  return mode == AccessMode::kMtt ? kMttEntryBytes : kKlmEntryBytes;
}
// Entries of `mode` per octoword (the unit of translations_octword_size): MTT 2, KLM/KSM 1.
constexpr size_t EntriesPerOctoword(AccessMode mode) { return kOctoword / EntryBytes(mode); }
// Octowords per 64-byte translation block (the alignment of UMR translation lengths/offsets).
inline constexpr size_t kOctowordsPer64B = kTranslationAlign / kOctoword;
// Bytes of `n` entries padded to 64 B.
constexpr size_t PaddedTranslationBytes(AccessMode mode, size_t n) {
  return (n * EntryBytes(mode) + kTranslationAlign - 1) / kTranslationAlign * kTranslationAlign;
}

// Writers: `out` must hold n * entry bytes; no padding is written. MTT fails (kInvalidArgument)
// when an address has bits 7:0 set.
absl::Status EncodeMttEntries(absl::Span<const MttEntry> in, uint8_t* out);
void EncodeKlmEntries(absl::Span<const KlmEntry> in, uint8_t* out);
void EncodeKsmEntries(absl::Span<const KsmEntry> in, uint8_t* out);
// Header + entries = (entries + 1) octowords. Fails (kInvalidArgument) for no entries or a
// stride smaller than its byte_count.
absl::Status EncodeRepeatBlock(const RepeatBlock& in, uint8_t* out);
size_t RepeatBlockBytes(const RepeatBlock& in);

// Readers: fail (kInvalidArgument) unless bytes.size() is a multiple of the entry size.
absl::StatusOr<std::vector<MttEntry>> DecodeMttEntries(absl::Span<const uint8_t> bytes);
absl::StatusOr<std::vector<KlmEntry>> DecodeKlmEntries(absl::Span<const uint8_t> bytes);
absl::StatusOr<std::vector<KsmEntry>> DecodeKsmEntries(absl::Span<const uint8_t> bytes);
// Fails (kInvalidArgument) for a wrong op, num_ent not fitting `bytes`, or a byte_count that
// disagrees with the entries' sum.
absl::StatusOr<RepeatBlock> DecodeRepeatBlock(absl::Span<const uint8_t> bytes);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_SEGMENTS_H_
