#include "umr/wqe_builder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "umr/mkey.h"

namespace regcache::umr {
namespace {

constexpr size_t kUmrHeadBytes = kUmrHeadDs * kOctoword;

template <typename T>
void Store(const T& v, uint8_t* p) {
  std::memcpy(p, &v, sizeof(T));
}

absl::Status CheckDs(unsigned ds, absl::Span<uint8_t> out) {
  const size_t out_size = out.size();
  if (reinterpret_cast<uintptr_t>(out.data()) % 8 != 0) {
    return absl::InvalidArgumentError("WQE output buffer is not 8-byte aligned");
  }
  if (ds > kMaxDs) {
    return absl::OutOfRangeError(
        absl::StrCat("WQE needs DS=", ds, " (", ds * kOctoword, " B), the 6-bit limit is 63"));
  }
  if (ds * kOctoword > out_size) {
    return absl::OutOfRangeError(
        absl::StrCat("WQE needs ", ds * kOctoword, " B, the output holds ", out_size, " B"));
  }
  return absl::OkStatus();
}

CtrlSegDesc MakeCtrl(const WqeHeader& h, uint8_t opcode, unsigned ds, uint32_t imm) {
  CtrlSegDesc c;
  c.wqe_index = h.wqe_index;
  c.opcode = opcode;
  c.qpn = h.sqn;
  c.ds = static_cast<uint8_t>(ds);
  c.fence = h.fence;
  c.completion_mode = h.signaled ? kCeCqUpdate : 0;
  c.solicited = h.solicited;
  c.imm = imm;
  return c;
}

// Writes ctrl + UMR ctrl + mkey context (128 B) in place: building the segments in locals and
// copying them out costs a store-forwarding stall per segment on the hot path.
// REQUIRES: out is 8-byte aligned (CheckDs).
absl::Status WriteUmrHead(const WqeHeader& h, uint32_t key, unsigned ds, const UmrCtrlSegDesc& u,
                          const MkeyContextDesc& m, uint8_t* out) {
  RETURN_IF_ERROR(
      EncodeCtrlSeg(MakeCtrl(h, kOpcodeUmr, ds, key), reinterpret_cast<CtrlSegLayout*>(out)));
  RETURN_IF_ERROR(EncodeUmrCtrlSeg(u, reinterpret_cast<UmrCtrlSegLayout*>(out + 16)));
  return EncodeMkeyContext(m, reinterpret_cast<MkeyContext*>(out + 64));
}

bool SupportedTranslationMode(AccessMode m) {
  return m == AccessMode::kMtt || m == AccessMode::kKlm || m == AccessMode::kKsm;
}

// Number of entries in the list matching `mode`; the other lists must be empty.
template <typename Req>
absl::StatusOr<size_t> ListCount(const Req& r) {
  if (!SupportedTranslationMode(r.mode)) {
    return absl::UnimplementedError(
        absl::StrCat("access mode ", AccessModeName(static_cast<uint8_t>(r.mode)), " (",
                     static_cast<int>(r.mode), ") has no translation list this builder writes"));
  }
  const size_t n[3] = {r.mtt.size(), r.klm.size(), r.ksm.size()};
  const size_t mine = r.mode == AccessMode::kMtt ? 0 : r.mode == AccessMode::kKlm ? 1 : 2;
  static const char* const kNames[3] = {"MTT", "KLM", "KSM"};
  for (size_t i = 0; i < 3; ++i) {
    if (i != mine && n[i] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(n[i], " ", kNames[i], " entries given for a ", kNames[mine], " key"));
    }
  }
  return n[mine];
}

absl::Status CheckKlmByteCounts(absl::Span<const KlmEntry> klm, bool allow_zero) {
  for (size_t i = 0; i < klm.size(); ++i) {
    if (klm[i].byte_count > kMaxKlmByteCount) {
      return absl::OutOfRangeError(
          absl::StrCat("KLM entry ", i, " byte_count=", klm[i].byte_count, " exceeds 2 GiB"));
    }
    if (!allow_zero && klm[i].byte_count == 0) {
      return absl::InvalidArgumentError(absl::StrCat("KLM entry ", i, " has byte_count 0"));
    }
  }
  return absl::OkStatus();
}

// Writes the list of `r.mode` at `dst` and zero-pads it to `padded` bytes.
template <typename Req>
absl::Status WriteList(const Req& r, uint8_t* dst, size_t padded) {
  size_t used = 0;
  switch (r.mode) {
    case AccessMode::kMtt:
      RETURN_IF_ERROR(EncodeMttEntries(r.mtt, dst));
      used = r.mtt.size() * kMttEntryBytes;
      break;
    case AccessMode::kKlm:
      EncodeKlmEntries(r.klm, dst);
      used = r.klm.size() * kKlmEntryBytes;
      break;
    default:
      EncodeKsmEntries(r.ksm, dst);
      used = r.ksm.size() * kKlmEntryBytes;
      break;
  }
  std::memset(dst + used, 0, padded - used);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WqeSize> EncodeWqe(const WqeDesc& d, absl::Span<uint8_t> out) {
  CtrlSegDesc ctrl = d.ctrl;
  const bool is_umr = ctrl.opcode == kOpcodeUmr;
  if (!is_umr && ctrl.opcode != kOpcodeSendInval && ctrl.opcode != kOpcodeSend &&
      ctrl.opcode != kOpcodeNop) {
    return absl::UnimplementedError(
        absl::StrCat("opcode 0x", absl::Hex(ctrl.opcode), " is not encoded by umr/"));
  }
  unsigned ds = 1;
  if (is_umr) {
    if (!d.data.empty()) {
      return absl::InvalidArgumentError("a UMR WQE carries no gather list");
    }
    if (d.umr.bsf_octowords != 0) {
      return absl::UnimplementedError(
          absl::StrCat("BSF (bsf_octowords=", d.umr.bsf_octowords, ") is not supported"));
    }
    if (d.umr.inline_translation) {
      if (d.translation_pointer.has_value()) {
        return absl::InvalidArgumentError("inline UMR with a translation pointer");
      }
      if (d.inline_translation.size() != size_t{d.umr.klm_octowords} * kOctoword) {
        return absl::InvalidArgumentError(
            absl::StrCat("inline translation of ", d.inline_translation.size(),
                         " B but klm_octowords=", d.umr.klm_octowords));
      }
      ds = kUmrHeadDs + d.umr.klm_octowords;
    } else {
      if (!d.translation_pointer.has_value() || !d.inline_translation.empty()) {
        return absl::InvalidArgumentError(
            "a UMR without the INLINE flag needs exactly a translation pointer");
      }
      ds = kUmrHeadDs + 1;
    }
  } else {
    if (d.umr != UmrCtrlSegDesc{} || d.mkc != MkeyContextDesc{} || !d.inline_translation.empty() ||
        d.translation_pointer.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("opcode 0x", absl::Hex(ctrl.opcode), " carries UMR parts"));
    }
    if (ctrl.opcode == kOpcodeNop && !d.data.empty()) {
      return absl::InvalidArgumentError("NOP carries no gather list");
    }
    ds = 1 + static_cast<unsigned>(d.data.size());
  }
  RETURN_IF_ERROR(CheckDs(ds, out));
  ctrl.ds = static_cast<uint8_t>(ds);
  uint8_t* p = out.data();
  if (is_umr) {
    // WriteUmrHead takes the header pieces; rebuild the ctrl directly to keep every field.
    CtrlSegLayout c;
    RETURN_IF_ERROR(EncodeCtrlSeg(ctrl, &c));
    UmrCtrlSegLayout u;
    RETURN_IF_ERROR(EncodeUmrCtrlSeg(d.umr, &u));
    MkeyContext m;
    RETURN_IF_ERROR(EncodeMkeyContext(d.mkc, &m));
    Store(c, p);
    Store(u, p + 16);
    Store(m, p + 64);
    if (d.umr.inline_translation) {
      if (!d.inline_translation.empty()) {
        std::memcpy(p + kUmrHeadBytes, d.inline_translation.data(), d.inline_translation.size());
      }
    } else {
      DataSegLayout ds_l;
      RETURN_IF_ERROR(EncodeDataSeg(*d.translation_pointer, &ds_l));
      Store(ds_l, p + kUmrHeadBytes);
    }
  } else {
    CtrlSegLayout c;
    RETURN_IF_ERROR(EncodeCtrlSeg(ctrl, &c));
    Store(c, p);
    for (size_t i = 0; i < d.data.size(); ++i) {
      DataSegLayout l;
      RETURN_IF_ERROR(EncodeDataSeg(d.data[i], &l));
      Store(l, p + (i + 1) * kOctoword);
    }
  }
  return WqeSize{static_cast<uint8_t>(ds), WqebbsForDs(ds)};
}

uint64_t MapKeyMask(AccessMode mode, UmrModifyCaps modify) {
  uint64_t mask = kMaskFree | kMaskKey | kMaskLen | kMaskStartAddr | kMaskEnRinval | kMaskLr |
                  kMaskLw | kMaskRr | kMaskRw;
  if (modify.atomic) mask |= kMaskA;
  if (mode != AccessMode::kKlm && modify.entity_size) mask |= kMaskPageSize;
  return mask;
}

// The map, inline (staging null) or by pointer.
static absl::StatusOr<WqeSize> BuildMap(const WqeHeader& h, const MapKeyRequest& r,
                                        uint32_t capacity_entries,
                                        const TranslationStaging* staging,
                                        absl::Span<uint8_t> out) {
  ASSIGN_OR_RETURN(const size_t n, ListCount(r));
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("map of key 0x", absl::Hex(r.key), " with an empty translation list"));
  }
  if (n > capacity_entries) {
    return absl::OutOfRangeError(absl::StrCat(n, " entries exceed the capacity of key 0x",
                                              absl::Hex(r.key), " (", capacity_entries, ")"));
  }
  if (r.length64 && r.length != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("length=", r.length, " given with length64 (must be 0)"));
  }
  uint64_t mask = MapKeyMask(r.mode, r.modify);
  if (r.access.remote_atomic && !r.modify.atomic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key 0x", absl::Hex(r.key),
        ": remote atomic access cannot be set by UMR on this device (umr_modify_atomic_disabled)"));
  }
  // Bytes the translation covers, saturated at 2^64 - 1.
  unsigned __int128 covered = 0;
  uint64_t lead = 0;  // MTT: offset of start_addr in its first page
  if (r.mode == AccessMode::kKlm) {
    if (r.log_entity_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("log_entity_size=", r.log_entity_size, " given for a KLM key (must be 0)"));
    }
    RETURN_IF_ERROR(CheckKlmByteCounts(r.klm, /*allow_zero=*/false));
    for (const KlmEntry& e : r.klm) covered += e.byte_count;
  } else {
    if (r.log_entity_size < kMinLogEntitySize || r.log_entity_size > kMaxLogEntitySize) {
      return absl::OutOfRangeError(
          absl::StrCat("log_entity_size=", r.log_entity_size, " outside 12..31"));
    }
    covered = static_cast<unsigned __int128>(n) << r.log_entity_size;
    if (r.mode == AccessMode::kMtt) lead = r.start_addr & ((uint64_t{1} << r.log_entity_size) - 1);
  }
  if (!r.length64 && static_cast<unsigned __int128>(lead) + r.length > covered) {
    return absl::OutOfRangeError(
        absl::StrCat("length=", r.length, " (+", lead, " B into the first page) exceeds the ",
                     static_cast<uint64_t>(covered), " B the ", n, " entries cover"));
  }
  const size_t padded = PaddedTranslationBytes(r.mode, n);
  const unsigned octo = static_cast<unsigned>(padded / kOctoword);
  if (octo > 0xffff) {
    return absl::OutOfRangeError(absl::StrCat(n, " entries exceed what one UMR loads"));
  }
  const unsigned ds = staging != nullptr ? kUmrHeadDs + 1 : kUmrHeadDs + octo;
  RETURN_IF_ERROR(CheckDs(ds, out));
  if (staging != nullptr && staging->bytes.size() < padded) {
    return absl::OutOfRangeError(
        absl::StrCat("staging of ", staging->bytes.size(), " bytes for a translation of ", padded));
  }

  UmrCtrlSegDesc u;
  u.inline_translation = staging == nullptr;
  u.check_free = r.check_free;
  u.klm_octowords = static_cast<uint16_t>(octo);
  u.mkey_mask = mask;
  uint8_t* p = out.data();
  RETURN_IF_ERROR(
      EncodeCtrlSeg(MakeCtrl(h, kOpcodeUmr, ds, r.key), reinterpret_cast<CtrlSegLayout*>(p)));
  RETURN_IF_ERROR(EncodeUmrCtrlSeg(u, reinterpret_cast<UmrCtrlSegLayout*>(p + 16)));
  // The mkc image is written field by field rather than through MkeyContextDesc and
  // EncodeMkeyContext: every value was validated above, and this is the engine's hot path.
  // DecodeMapKey's round-trip test pins it to the same bytes EncodeMkeyContext would write.
  auto* m = reinterpret_cast<MkeyContext*>(p + 64);
  *m = MkeyContext{};
  const uint8_t am = static_cast<uint8_t>(r.mode);
  m->dw0 = be32::FromHost((1u << kMkcUmrEnBit) | (uint32_t{r.access.remote_atomic} << kMkcABit) |
                          (uint32_t{r.access.remote_write} << kMkcRwBit) |
                          (uint32_t{r.access.remote_read} << kMkcRrBit) |
                          (uint32_t{r.access.local_write} << kMkcLwBit) |
                          (uint32_t{r.access.local_read} << kMkcLrBit) |
                          (uint32_t(am >> 2) << kMkcAm42Lo) | (uint32_t(am & 3) << kMkcAm10Lo));
  m->qpn_mkey = be32::FromHost((kQpnUnbound << 8) | KeyVariant(r.key));
  m->flags_pd = be32::FromHost((uint32_t{r.length64} << kMkcLength64Bit) |
                               (uint32_t{r.en_rinval} << kMkcEnRinvalBit));
  m->start_addr = be64::FromHost(r.start_addr);
  m->len = be64::FromHost(r.length);
  m->dw14 = be32::FromHost(r.log_entity_size);
  if (staging != nullptr) {
    RETURN_IF_ERROR(WriteList(r, staging->bytes.data(), padded));
    DataSegLayout l;
    RETURN_IF_ERROR(EncodeDataSeg(
        DataSegDesc{static_cast<uint32_t>(padded), staging->lkey, staging->addr}, &l));
    std::memcpy(out.data() + kUmrHeadBytes, &l, sizeof(l));
  } else {
    RETURN_IF_ERROR(WriteList(r, out.data() + kUmrHeadBytes, padded));
  }
  return WqeSize{static_cast<uint8_t>(ds), WqebbsForDs(ds)};
}

absl::StatusOr<WqeSize> BuildMapKey(const WqeHeader& h, const MapKeyRequest& r,
                                    uint32_t capacity_entries, absl::Span<uint8_t> out) {
  return BuildMap(h, r, capacity_entries, nullptr, out);
}

absl::StatusOr<WqeSize> BuildMapKeyByPointer(const WqeHeader& h, const MapKeyRequest& r,
                                             uint32_t capacity_entries,
                                             const TranslationStaging& staging,
                                             absl::Span<uint8_t> out) {
  return BuildMap(h, r, capacity_entries, &staging, out);
}

absl::StatusOr<WqeSize> BuildUpdateKey(const WqeHeader& h, const UpdateKeyRequest& r,
                                       absl::Span<uint8_t> out) {
  if (r.mask == 0) return absl::InvalidArgumentError("update with an empty mkey_mask");
  if (r.mask & ~kMaskKnown) {
    return absl::InvalidArgumentError(absl::StrCat("mkey_mask 0x", absl::Hex(r.mask),
                                                   " has unknown bits 0x",
                                                   absl::Hex(r.mask & ~kMaskKnown)));
  }
  if (r.mask & (kMaskBsfEn | kMaskEnSigerr | kMaskAccessMode)) {
    return absl::UnimplementedError(absl::StrCat(
        "mkey_mask bits 0x", absl::Hex(r.mask & (kMaskBsfEn | kMaskEnSigerr | kMaskAccessMode)),
        " (BSF / signature / access mode) are not supported"));
  }
  RETURN_IF_ERROR(CheckDs(kUmrHeadDs, out));
  UmrCtrlSegDesc u;
  u.inline_translation = true;
  u.check_free = r.check_free;
  u.mkey_mask = r.mask;
  RETURN_IF_ERROR(WriteUmrHead(h, r.key, kUmrHeadDs, u, r.fields, out.data()));
  return WqeSize{kUmrHeadDs, WqebbsForDs(kUmrHeadDs)};
}

absl::StatusOr<WqeSize> BuildRewriteTranslation(const WqeHeader& h,
                                                const RewriteTranslationRequest& r,
                                                bool extended_offset, absl::Span<uint8_t> out) {
  ASSIGN_OR_RETURN(const size_t listed, ListCount(r));
  const size_t per64 = EntriesPer64B(r.mode);
  const size_t esz = EntryBytes(r.mode);
  size_t n = listed;
  if (r.pointer.has_value()) {
    if (listed != 0) {
      return absl::InvalidArgumentError("rewrite given both inline entries and a pointer");
    }
    const uint32_t bc = r.pointer->byte_count;
    if (bc == 0 || bc % kTranslationAlign != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("translation pointer byte_count=", bc, " is not a non-zero multiple of 64"));
    }
    n = bc / esz;
  } else if (listed == 0) {
    return absl::InvalidArgumentError("rewrite with neither entries nor a pointer");
  }
  if (r.first_entry % per64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_entry=", r.first_entry, " is not 64-B aligned (a multiple of ", per64,
                     " ", AccessModeName(static_cast<uint8_t>(r.mode)), " entries)"));
  }
  if (n % per64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " entries do not end on a 64-B boundary (multiple of ", per64, ")"));
  }
  if (r.mode == AccessMode::kKlm) RETURN_IF_ERROR(CheckKlmByteCounts(r.klm, /*allow_zero=*/true));
  if (r.first_entry > (kMaxTranslationOffset * kOctoword) / esz) {
    return absl::OutOfRangeError(
        absl::StrCat("first_entry=", r.first_entry, " beyond the 48-bit translation offset"));
  }
  const uint64_t offset = r.first_entry * esz / kOctoword;
  if (!extended_offset && offset > 0xffff) {
    return absl::OutOfRangeError(
        absl::StrCat("translation offset ", offset,
                     " octowords needs umr_extended_translation_offset (16-bit limit 65535)"));
  }
  const size_t bytes = n * esz;
  if (bytes / kOctoword > 0xffff) {
    return absl::OutOfRangeError(absl::StrCat(bytes, " B of translation exceed klm_octowords"));
  }
  const unsigned ds = r.pointer.has_value() ? kUmrHeadDs + 1
                                            : kUmrHeadDs + static_cast<unsigned>(bytes / kOctoword);
  RETURN_IF_ERROR(CheckDs(ds, out));
  UmrCtrlSegDesc u;
  u.inline_translation = !r.pointer.has_value();
  u.check_free = r.check_free;
  u.translation_offset_en = true;
  u.translation_offset = offset;
  u.klm_octowords = static_cast<uint16_t>(bytes / kOctoword);
  u.mkey_mask = 0;
  MkeyContextDesc m;  // nothing masked: an empty image
  m.access = MkeyAccess{false, false, false, false, false};
  RETURN_IF_ERROR(WriteUmrHead(h, r.key, ds, u, m, out.data()));
  if (r.pointer.has_value()) {
    DataSegLayout l;
    RETURN_IF_ERROR(EncodeDataSeg(*r.pointer, &l));
    Store(l, out.data() + kUmrHeadBytes);
  } else {
    RETURN_IF_ERROR(WriteList(r, out.data() + kUmrHeadBytes, bytes));
  }
  return WqeSize{static_cast<uint8_t>(ds), WqebbsForDs(ds)};
}

absl::StatusOr<WqeSize> BuildLocalInvalidate(const WqeHeader& h, const LocalInvalidateRequest& r,
                                             absl::Span<uint8_t> out) {
  RETURN_IF_ERROR(CheckDs(kUmrHeadDs, out));
  UmrCtrlSegDesc u;
  u.inline_translation = true;
  u.check_free = r.check_free;
  u.mkey_mask = kMaskFree;
  MkeyContextDesc m;
  m.access = MkeyAccess{false, false, false, false, false};
  m.free = true;
  RETURN_IF_ERROR(WriteUmrHead(h, r.key, kUmrHeadDs, u, m, out.data()));
  return WqeSize{kUmrHeadDs, WqebbsForDs(kUmrHeadDs)};
}

absl::StatusOr<WqeSize> BuildNop(const WqeHeader& h, absl::Span<uint8_t> out) {
  RETURN_IF_ERROR(CheckDs(1, out));
  CtrlSegLayout c;
  RETURN_IF_ERROR(EncodeCtrlSeg(MakeCtrl(h, kOpcodeNop, 1, 0), &c));
  Store(c, out.data());
  return WqeSize{1, WqebbsForDs(1)};
}

absl::StatusOr<WqeSize> BuildSendInvalidate(const WqeHeader& h, const SendInvalidateRequest& r,
                                            absl::Span<uint8_t> out) {
  const unsigned ds = 1 + static_cast<unsigned>(r.sgl.size());
  RETURN_IF_ERROR(CheckDs(ds, out));
  CtrlSegLayout c;
  RETURN_IF_ERROR(EncodeCtrlSeg(MakeCtrl(h, kOpcodeSendInval, ds, r.invalidate_key), &c));
  Store(c, out.data());
  for (size_t i = 0; i < r.sgl.size(); ++i) {
    DataSegLayout l;
    RETURN_IF_ERROR(EncodeDataSeg(r.sgl[i], &l));
    Store(l, out.data() + (i + 1) * kOctoword);
  }
  return WqeSize{static_cast<uint8_t>(ds), WqebbsForDs(ds)};
}

}  // namespace regcache::umr