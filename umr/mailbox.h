// Command mailboxes of the mkey path (docs/prm.md, Command mailboxes): CREATE_MKEY, QUERY_MKEY,
// DESTROY_MKEY and PAGE_FAULT_RESUME, each input and output with an encoder and a decoder. The real
// backend sends the encoded inputs through DevX and decodes the outputs; the software HCA decodes
// the inputs and encodes the outputs, so both sides speak the same PRM bytes.
//
// Encoders validate field widths (kOutOfRange) and consistency (kInvalidArgument) and zero all
// reserved bytes. Decoders fail with kInvalidArgument for a short buffer or a wrong opcode and
// ignore reserved bits.
//
// Thread safety: pure functions.
#ifndef REGCACHE_UMR_MAILBOX_H_
#define REGCACHE_UMR_MAILBOX_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/prm.h"
#include "umr/segments.h"

namespace regcache::umr {

using Mailbox16 = std::array<uint8_t, 16>;

// Output header of every command: status (0 = OK) and syndrome.
struct CmdStatus {
  uint8_t status = 0;
  uint32_t syndrome = 0;
  friend bool operator==(const CmdStatus&, const CmdStatus&) = default;
};
// The 16-byte output of commands that return only a status (DESTROY_MKEY, PAGE_FAULT_RESUME).
Mailbox16 EncodeCmdStatusOut(const CmdStatus& s);
absl::StatusOr<CmdStatus> DecodeCmdStatusOut(absl::Span<const uint8_t> out);

// Opcode of a command input (DW0[31:16]); fails for fewer than 8 bytes.
absl::StatusOr<uint16_t> PeekCommandOpcode(absl::Span<const uint8_t> in);

// ---- CREATE_MKEY (0x200) --------------------------------------------------------------------
struct CreateMkeyIn {
  uint16_t uid = 0;
  uint16_t op_mod = 0;
  bool pg_access = false;
  bool mkey_umem_valid = false;
  MkeyContextDesc mkc;
  uint32_t mkey_umem_id = 0;
  uint64_t mkey_umem_offset = 0;
  // Translation entries supplied (translations_octword_actual_size = size / 16).
  std::vector<uint8_t> translation;
  friend bool operator==(const CreateMkeyIn&, const CreateMkeyIn&) = default;
};
// 272 + translation.size() bytes. Fails (kInvalidArgument) if translation is not a multiple of
// 16 bytes; mkc field errors as EncodeMkeyContext.
absl::StatusOr<std::vector<uint8_t>> EncodeCreateMkeyIn(const CreateMkeyIn& in);
// Fails when shorter than 272 + actual_size * 16 bytes or the opcode is not 0x200.
absl::StatusOr<CreateMkeyIn> DecodeCreateMkeyIn(absl::Span<const uint8_t> in);

struct CreateMkeyOut {
  CmdStatus status;
  uint32_t mkey_index = 0;  // 24 bits
  friend bool operator==(const CreateMkeyOut&, const CreateMkeyOut&) = default;
};
absl::StatusOr<Mailbox16> EncodeCreateMkeyOut(const CreateMkeyOut& out);
absl::StatusOr<CreateMkeyOut> DecodeCreateMkeyOut(absl::Span<const uint8_t> out);

// The pool's key: free, umr_en, lr, qpn unbound, no translation supplied, capacity rounded up to
// 64 B of entries (MTT 8, KLM/KSM 4) and written as translations_octword_size.
struct FreeMkeyParams {
  AccessMode mode = AccessMode::kKlm;  // any access mode
  uint32_t capacity_entries = 4;       // > 0 for MTT/KLM/KSM; ignored (0 octowords) otherwise
  uint8_t variant = 0;                 // initial mkey_7_0
  uint32_t pd = 0;
  MkeyAccess access;
  bool en_rinval = false;
  uint8_t log_entity_size = 0;  // MTT / KSM: 12..31; others: 0
  bool pg_access = false;       // honour MTT rd_en/wr_en (ODP)
  friend bool operator==(const FreeMkeyParams&, const FreeMkeyParams&) = default;
};
// Fails: kInvalidArgument for zero capacity (MTT/KLM/KSM) or log_entity_size given for a mode
// without pages; kOutOfRange for log_entity_size outside 12..31, a capacity whose octowords
// overflow 32 bits, pd >= 2^24, a mode >= 32.
absl::StatusOr<CreateMkeyIn> BuildCreateFreeMkey(const FreeMkeyParams& p);
// Inverse of BuildCreateFreeMkey (capacity as written, i.e. rounded). Fails (kInvalidArgument)
// when `in` is not such a key (not free, umr_en clear, translation supplied, ...).
absl::StatusOr<FreeMkeyParams> DecodeCreateFreeMkey(const CreateMkeyIn& in);

// ---- QUERY_MKEY (0x201) ---------------------------------------------------------------------
struct QueryMkeyIn {
  uint16_t uid = 0;
  uint16_t op_mod = 0;
  uint32_t mkey_index = 0;  // 24 bits
  bool pg_access = false;
  friend bool operator==(const QueryMkeyIn&, const QueryMkeyIn&) = default;
};
absl::StatusOr<Mailbox16> EncodeQueryMkeyIn(const QueryMkeyIn& in);
absl::StatusOr<QueryMkeyIn> DecodeQueryMkeyIn(absl::Span<const uint8_t> in);

inline constexpr size_t kQueryMkeyOutMinBytes = 304;  // header + 2 translation octowords
struct QueryMkeyOut {
  CmdStatus status;
  MkeyContextDesc mkc;
  std::vector<uint8_t> translation;  // from byte 272; multiple of 16
  friend bool operator==(const QueryMkeyOut&, const QueryMkeyOut&) = default;
};
// 272 + max(translation.size(), 32) bytes (zero-filled).
absl::StatusOr<std::vector<uint8_t>> EncodeQueryMkeyOut(const QueryMkeyOut& out);
// The translation is every byte after 272, rounded down to octowords.
absl::StatusOr<QueryMkeyOut> DecodeQueryMkeyOut(absl::Span<const uint8_t> out);

// ---- DESTROY_MKEY (0x202) -------------------------------------------------------------------
struct DestroyMkeyIn {
  uint16_t uid = 0;
  uint16_t op_mod = 0;
  uint32_t mkey_index = 0;
  friend bool operator==(const DestroyMkeyIn&, const DestroyMkeyIn&) = default;
};
absl::StatusOr<Mailbox16> EncodeDestroyMkeyIn(const DestroyMkeyIn& in);
absl::StatusOr<DestroyMkeyIn> DecodeDestroyMkeyIn(absl::Span<const uint8_t> in);

// ---- PAGE_FAULT_RESUME (0x204) --------------------------------------------------------------
struct PageFaultResumeIn {
  uint16_t uid = 0;
  uint16_t op_mod = 0;
  bool error = false;           // fail the faulting operation
  uint8_t page_fault_type = 0;  // 3 bits, copied from the event
  uint32_t wq_number = 0;       // 24 bits
  uint32_t token = 0;           // 24 bits
  friend bool operator==(const PageFaultResumeIn&, const PageFaultResumeIn&) = default;
};
absl::StatusOr<Mailbox16> EncodePageFaultResumeIn(const PageFaultResumeIn& in);
absl::StatusOr<PageFaultResumeIn> DecodePageFaultResumeIn(absl::Span<const uint8_t> in);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_MAILBOX_H_
