// WQE builders: descriptors -> the exact bytes a ConnectX send queue executes.
//
// A UMR WQE (opcode 0x25) as built here (docs/prm.md, UMR WQE), DS counted in 16-byte units:
//
//   byte 0   +--------------------------------------------------------------+ -.
//            | ctrl seg (16 B)  opmod|wqe_index|0x25  qpn|ds  sig fm_ce_se  |  |
//            |                  imm = target key (index<<8 | variant)       |  | WQEBB 0
//        16  +--------------------------------------------------------------+  |
//            | UMR ctrl seg (48 B) flags(inline, check_free[6:5], xlt_off,  |  |
//            |   check_qpn) klm_octowords  xlt_offset[15:0] | bsf          |  |
//            |   mkey_mask (BE64)  xlt_offset[47:16]  reserved               |  |
//        64  +--------------------------------------------------------------+ -'
//            | mkey context seg (64 B): the mkc image; only fields selected  |    WQEBB 1
//            |   by mkey_mask are applied                                     |
//       128  +--------------------------------------------------------------+
//            | inline translation: KLM/KSM 16 B or MTT 8 B entries, padded   |    WQEBB 2..
//            |   with zero entries to 64 B (klm_octowords x 16 B)             |
//            |   -- or, without the INLINE flag --                            |
//            | one data segment (16 B): byte_count, lkey, addr of the list    |
//            +--------------------------------------------------------------+
//   DS = 8 + klm_octowords (inline) or 9 (pointer); WQEBBs = ceil(DS / 4); DS <= 63.
//
// SEND with invalidate (opcode 0x01): ctrl seg (imm = key to invalidate) + data segments.
//
// Each builder validates its request completely before writing anything that matters: an invalid
// request yields a Status naming the field and the values (kInvalidArgument for inconsistent
// input, kOutOfRange for values beyond a limit, kUnimplemented for modes the builder does not
// support) and the output bytes are unspecified. On success the first WqeSize::bytes() bytes of
// `out` hold the WQE; the tail of the last WQEBB is not touched. Builders never allocate.
//
// `out` is a contiguous, 8-byte aligned buffer (kInvalidArgument otherwise); to post into a ring
// use SqRing (umr/sq.h), which hands out either the ring slot or a scratch buffer when the WQE may
// cross the ring end.
//
// Thread safety: pure functions over caller-owned memory.
#ifndef REGCACHE_UMR_WQE_BUILDER_H_
#define REGCACHE_UMR_WQE_BUILDER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/caps.h"
#include "umr/prm.h"
#include "umr/segments.h"

namespace regcache::umr {

// Size of a built WQE.
struct WqeSize {
  uint8_t ds = 0;      // 16-byte units
  uint8_t wqebbs = 0;  // 64-byte blocks = ceil(ds / 4)
  size_t bytes() const { return size_t{ds} * kOctoword; }
  friend bool operator==(const WqeSize&, const WqeSize&) = default;
};
constexpr uint8_t WqebbsForDs(unsigned ds) { return static_cast<uint8_t>((ds + 3) / 4); }

// Every UMR WQE starts with ctrl (16 B) + UMR ctrl (48 B) + mkey context (64 B): 8 DS, two
// WQEBBs. An inline translation follows, padded to 64 B (PaddedTranslationBytes).
inline constexpr unsigned kUmrHeadDs = 8;
inline constexpr unsigned kUmrHeadWqebbs = kUmrHeadDs * kOctoword / kWqebb;
static_assert(kUmrHeadWqebbs == 2);

// Per-post control-segment fields, chosen by the queue (umr/sq.h) rather than by the operation.
struct WqeHeader {
  uint16_t wqe_index = 0;  // producer counter in WQEBBs, mod 2^16
  uint32_t sqn = 0;        // 24 bits
  FenceMode fence = FenceMode::kNone;
  bool signaled = true;  // CE = CQ_UPDATE, else no CQE on success
  bool solicited = false;
  friend bool operator==(const WqeHeader&, const WqeHeader&) = default;
};

// ---------------------------------------------------------------------------------------------
// The generic form: any UMR / SEND_INVAL / NOP WQE as a typed description. The decoder
// (wqe_decoder.h) yields exactly this; EncodeWqe is its inverse.
struct WqeDesc {
  CtrlSegDesc ctrl;  // ctrl.ds is computed by EncodeWqe; the decoder reports it
  // Opcode UMR only:
  UmrCtrlSegDesc umr;
  MkeyContextDesc mkc;
  std::vector<uint8_t> inline_translation;         // umr.klm_octowords * 16 bytes when inline
  std::optional<DataSegDesc> translation_pointer;  // when !umr.inline_translation
  // Opcodes SEND_INVAL / SEND: the gather list.
  std::vector<DataSegDesc> data;
  friend bool operator==(const WqeDesc&, const WqeDesc&) = default;
};

// Encodes `d` (opcode UMR, SEND_INVAL, SEND or NOP) into `out`, computing ctrl.ds.
// Fails: kUnimplemented for other opcodes or a BSF (bsf_octowords != 0); kInvalidArgument when
// the translation bytes disagree with umr.klm_octowords / the INLINE flag, or non-UMR WQEs carry
// UMR parts; kOutOfRange when DS > 63 or `out` is too small; any segment encoder's error.
absl::StatusOr<WqeSize> EncodeWqe(const WqeDesc& d, absl::Span<uint8_t> out);

// ---------------------------------------------------------------------------------------------
// Operation builders. Each has a decoder in wqe_decoder.h returning the same request.

// Map a key: load its translation inline, set access / start / length / variant, free -> 0.
// mkey_mask = FREE | KEY | LEN | START_ADDR | EN_RINVAL | LR | LW | RR | RW, plus A where the
// device lets a UMR change it (`modify.atomic`: then every map writes the key's `a`, so a key
// never keeps a right from its previous use), plus PAGE_SIZE for MTT and KSM where the device
// lets a UMR change it (otherwise the key keeps the entity size it was created with). The mkc
// image also carries umr_en = 1, the access mode and qpn = 0xffffff (not masked: the access
// mode is fixed at CREATE_MKEY).
struct MapKeyRequest {
  uint32_t key = 0;                    // target key; its low byte is the new variant (mkey_7_0)
  AccessMode mode = AccessMode::kKlm;  // kMtt, kKlm or kKsm
  MkeyAccess access;
  uint64_t start_addr = 0;
  uint64_t length = 0;  // must be 0 with length64
  bool length64 = false;
  uint8_t log_entity_size = 0;  // MTT page / KSM entity size, 12..31; must be 0 for KLM
  bool en_rinval = false;
  FreeCheck check_free = FreeCheck::kMustBeFree;
  UmrModifyCaps modify;  // the device's; decides the A and PAGE_SIZE mask bits
  // Exactly the list matching `mode` is non-empty.
  absl::InlinedVector<KlmEntry, 4> klm;
  absl::InlinedVector<KsmEntry, 4> ksm;
  absl::InlinedVector<MttEntry, 8> mtt;
  friend bool operator==(const MapKeyRequest&, const MapKeyRequest&) = default;
};
// `capacity_entries` is the key's translation capacity in entries (its mkc
// translations_octword_size converted). Fails: kUnimplemented for a mode other than
// MTT/KLM/KSM; kInvalidArgument for an empty list or a list of the wrong kind, a zero KLM
// byte_count, length with length64, an MTT address with bits 7:0 set, log_entity_size != 0 for
// KLM; kFailedPrecondition for remote atomic access where `modify.atomic` is false (the key's
// `a`, 0 since CREATE_MKEY, cannot be set by UMR); kOutOfRange for more entries than capacity, a
// KLM byte_count > 2 GiB, log_entity_size outside 12..31 (MTT/KSM), a length beyond what the
// entries cover, DS > 63, `out` too small.
absl::StatusOr<WqeSize> BuildMapKey(const WqeHeader& h, const MapKeyRequest& r,
                                    uint32_t capacity_entries, absl::Span<uint8_t> out);

// Where a map's translation goes when it travels by pointer instead of inline (a list longer
// than one WQE carries): the padded list is written into `bytes`, which the device reads at
// `addr` under local key `lkey` (registered memory of the queue's PD).
struct TranslationStaging {
  absl::Span<uint8_t> bytes;
  uint64_t addr = 0;
  uint32_t lkey = 0;
};
// The same map in pointer mode: INLINE clear, klm_octowords = the padded list's size, one data
// segment {byte_count = padded bytes, lkey, addr} after the mkey context (DS 9, 3 WQEBBs,
// whatever the list's length). Fails as BuildMapKey, and kOutOfRange when `staging.bytes` is
// smaller than the padded list (PaddedTranslationBytes).
absl::StatusOr<WqeSize> BuildMapKeyByPointer(const WqeHeader& h, const MapKeyRequest& r,
                                             uint32_t capacity_entries,
                                             const TranslationStaging& staging,
                                             absl::Span<uint8_t> out);

// The mkey_mask a map of `mode` carries on a device that allows `modify` (see MapKeyRequest).
uint64_t MapKeyMask(AccessMode mode, UmrModifyCaps modify);

// Update selected fields of a live key: the mkc image carries `fields`, `mask` says which apply.
// No translation (klm_octowords 0, INLINE set as the kernel does).
struct UpdateKeyRequest {
  uint32_t key = 0;
  uint64_t mask = 0;
  MkeyContextDesc fields;
  FreeCheck check_free = FreeCheck::kMustNotBeFree;
  friend bool operator==(const UpdateKeyRequest&, const UpdateKeyRequest&) = default;
};
// Fails: kInvalidArgument for an empty mask or bits outside kMaskKnown; kUnimplemented for
// BSF_EN / EN_SIGERR / access-mode bits; field-width errors of EncodeMkeyContext.
absl::StatusOr<WqeSize> BuildUpdateKey(const WqeHeader& h, const UpdateKeyRequest& r,
                                       absl::Span<uint8_t> out);

// Rewrite a range of a key's translation table (TRANSLATION_OFFSET): entries
// [first_entry, first_entry + n) are replaced, nothing else (mkey_mask 0). The range must start
// and end on 64-byte boundaries (MTT: multiples of 8 entries, KLM/KSM: of 4): padding would
// overwrite neighbours, so it is refused rather than added. The entries travel inline, or, with
// `pointer`, in a buffer the device reads (pointer->byte_count bytes, 64-B multiple).
struct RewriteTranslationRequest {
  uint32_t key = 0;
  AccessMode mode = AccessMode::kMtt;
  uint64_t first_entry = 0;
  FreeCheck check_free = FreeCheck::kMustNotBeFree;
  absl::InlinedVector<KlmEntry, 4> klm;  // inline lists: exactly the one matching `mode`
  absl::InlinedVector<KsmEntry, 4> ksm;
  absl::InlinedVector<MttEntry, 8> mtt;
  std::optional<DataSegDesc> pointer;  // instead of an inline list
  friend bool operator==(const RewriteTranslationRequest&,
                         const RewriteTranslationRequest&) = default;
};
// `extended_offset` = cap umr_extended_translation_offset (else the offset must fit 16 bits).
// Fails: kUnimplemented for modes other than MTT/KLM/KSM; kInvalidArgument for an unaligned
// first_entry or entry count, both or neither of a list and a pointer, MTT address bits 7:0;
// kOutOfRange for an offset beyond 48 (or 16) bits, a KLM byte_count > 2 GiB, DS > 63, `out`
// too small.
absl::StatusOr<WqeSize> BuildRewriteTranslation(const WqeHeader& h,
                                                const RewriteTranslationRequest& r,
                                                bool extended_offset, absl::Span<uint8_t> out);

// Local invalidate: a UMR that sets free = 1 (mask FREE); the variant is kept (the cache bumps
// it when it maps the index again). DS 8.
struct LocalInvalidateRequest {
  uint32_t key = 0;
  FreeCheck check_free = FreeCheck::kNone;
  friend bool operator==(const LocalInvalidateRequest&, const LocalInvalidateRequest&) = default;
};
absl::StatusOr<WqeSize> BuildLocalInvalidate(const WqeHeader& h, const LocalInvalidateRequest& r,
                                             absl::Span<uint8_t> out);

// SEND with invalidate (opcode 0x01): the responder invalidates `invalidate_key` (needs
// en_rinval on that key). Fails: kOutOfRange when 1 + sgl.size() > 63 or `out` is too small;
// A NOP: the control segment alone (DS 1). Posted signalled, its completion says every WQE
// before it has executed (a queue's flush).
absl::StatusOr<WqeSize> BuildNop(const WqeHeader& h, absl::Span<uint8_t> out);

// kInvalidArgument for a byte_count with bit 31 set.
struct SendInvalidateRequest {
  uint32_t invalidate_key = 0;
  absl::InlinedVector<DataSegDesc, 4> sgl;
  friend bool operator==(const SendInvalidateRequest&, const SendInvalidateRequest&) = default;
};
absl::StatusOr<WqeSize> BuildSendInvalidate(const WqeHeader& h, const SendInvalidateRequest& r,
                                            absl::Span<uint8_t> out);

// Largest inline KLM/KSM list in one WQE (DS 60), and MTT list (DS 60 -> 104 entries).
inline constexpr size_t kMaxInlineKlms = 52;
inline constexpr size_t kMaxInlineMtts = 104;

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_WQE_BUILDER_H_
