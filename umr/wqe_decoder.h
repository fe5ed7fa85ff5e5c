// WQE decoders: bytes -> typed descriptions. The software HCA (hca/sim) runs DecodeWqe on the
// bytes posted into its send ring (gathered across the ring end with umr::GatherWqe, sq.h) and
// executes the result; tests use the per-operation decoders to check that each builder's output
// decodes back to its request.
//
// DecodeWqe accepts any bytes and never reads past `bytes`: malformed input is an error, never a
// crash. Errors are kInvalidArgument for malformed bytes (DS 0, DS beyond the bytes given, DS
// that disagrees with the segments, klm_octowords exceeding the WQE, undefined fence or
// free-check values, unknown mkey_mask bits) and kUnimplemented for well-formed WQEs this project
// does not execute (other opcodes, BSF, inline data segments). Reserved bits are ignored.
//
// Usage in the sim:
//   ASSIGN_OR_RETURN(absl::Span<const uint8_t> w, GatherWqe(ring, slot, &scratch));
//   ASSIGN_OR_RETURN(WqeDesc d, DecodeWqe(w));
//   if (d.ctrl.opcode == kOpcodeUmr) {
//     // apply d.mkc fields selected by d.umr.mkey_mask, honour d.umr.check_free; translation:
//     ASSIGN_OR_RETURN(Translation t, DecodeTranslation(key_mode, d.inline_translation));
//     // written at entry offset d.umr.translation_offset * 16 / entry size
//   }
//
// Thread safety: pure functions.
#ifndef REGCACHE_UMR_WQE_DECODER_H_
#define REGCACHE_UMR_WQE_DECODER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/segments.h"
#include "umr/wqe_builder.h"

namespace regcache::umr {

// Decodes one WQE starting at bytes[0]; bytes may be longer than the WQE (DS decides).
absl::StatusOr<WqeDesc> DecodeWqe(absl::Span<const uint8_t> bytes);

// Per-post fields of the control segment.
WqeHeader DecodeWqeHeader(const CtrlSegDesc& ctrl);

// A translation list interpreted for a key's access mode: the list of that mode is filled.
struct Translation {
  AccessMode mode = AccessMode::kKlm;
  std::vector<MttEntry> mtt;
  std::vector<KlmEntry> klm;
  std::vector<KsmEntry> ksm;
  size_t size() const { return mtt.size() + klm.size() + ksm.size(); }
  friend bool operator==(const Translation&, const Translation&) = default;
};
// Fails: kUnimplemented for modes without MTT/KLM/KSM entries; kInvalidArgument when the byte
// count is not a multiple of the entry size. Padding entries are returned as they are (zero).
absl::StatusOr<Translation> DecodeTranslation(AccessMode mode, absl::Span<const uint8_t> bytes);

// Decoders of the operation builders. Each fails with kInvalidArgument when `d` is not a WQE that
// the matching builder produces (opcode, flags, mask), naming the mismatch.
//
// DecodeMapKey takes the access mode from the mkc image (BuildMapKey writes it) and drops
// trailing all-zero entries of the last 64-B block: they are the padding, and to the device a
// zero entry and a padding entry are the same thing.
absl::StatusOr<MapKeyRequest> DecodeMapKey(const WqeDesc& d);
// A map in pointer mode (BuildMapKeyByPointer): `pointed` are the bytes its data segment names
// (the device reads them through the segment's lkey). Also accepts an inline map (then
// `pointed` is ignored).
absl::StatusOr<MapKeyRequest> DecodeMapKey(const WqeDesc& d, absl::Span<const uint8_t> pointed);
absl::StatusOr<UpdateKeyRequest> DecodeUpdateKey(const WqeDesc& d);
// `mode` is the key's access mode (not carried by a rewrite WQE).
absl::StatusOr<RewriteTranslationRequest> DecodeRewriteTranslation(const WqeDesc& d,
                                                                   AccessMode mode);
absl::StatusOr<LocalInvalidateRequest> DecodeLocalInvalidate(const WqeDesc& d);
absl::StatusOr<SendInvalidateRequest> DecodeSendInvalidate(const WqeDesc& d);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_WQE_DECODER_H_
