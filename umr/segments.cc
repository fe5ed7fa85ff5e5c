#include "umr/segments.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace regcache::umr {
namespace {

absl::Status TooWide(const char* field, uint64_t value, unsigned bits) {
  return absl::OutOfRangeError(
      absl::StrCat(field, "=", value, " does not fit its ", bits, "-bit field"));
}

template <typename T>
void Load(const uint8_t* p, T* out) {
  std::memcpy(out, p, sizeof(T));
}
template <typename T>
void Store(const T& v, uint8_t* p) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

const char* AccessModeName(uint8_t mode) {
  switch (mode) {
    case kAccessModePa:
      return "PA";
    case kAccessModeMtt:
      return "MTT";
    case kAccessModeKlm:
      return "KLM";
    case kAccessModeKsm:
      return "KSM";
    case kAccessModeSwIcm:
      return "SW_ICM";
    case kAccessModeMemic:
      return "MEMIC";
    case kAccessModeCrossing:
      return "CROSSING";
    default:
      return "unknown";
  }
}

absl::Status EncodeMkeyContext(const MkeyContextDesc& d, MkeyContext* out) {
  if (d.access_mode >= 32) return TooWide("access_mode", d.access_mode, 5);
  if (d.qpn > 0xffffff) return TooWide("qpn", d.qpn, 24);
  if (d.pd > 0xffffff) return TooWide("pd", d.pd, 24);
  if (d.log_entity_size >= 32) return TooWide("log_entity_size", d.log_entity_size, 5);
  if (d.ma_translation_mode >= 4) return TooWide("ma_translation_mode", d.ma_translation_mode, 2);
  if (d.crypto_en >= 4) return TooWide("crypto_en", d.crypto_en, 2);
  *out = MkeyContext{};
  uint32_t dw0 = 0;
  dw0 |= uint32_t{d.free} << kMkcFreeBit;
  dw0 |= uint32_t(d.access_mode >> 2) << kMkcAm42Lo;
  dw0 |= uint32_t{d.relaxed_ordering_write} << kMkcRelaxedOrderingWriteBit;
  dw0 |= uint32_t{d.small_fence_on_rdma_read_response} << kMkcSmallFenceBit;
  dw0 |= uint32_t{d.umr_en} << kMkcUmrEnBit;
  dw0 |= uint32_t{d.access.remote_atomic} << kMkcABit;
  dw0 |= uint32_t{d.access.remote_write} << kMkcRwBit;
  dw0 |= uint32_t{d.access.remote_read} << kMkcRrBit;
  dw0 |= uint32_t{d.access.local_write} << kMkcLwBit;
  dw0 |= uint32_t{d.access.local_read} << kMkcLrBit;
  dw0 |= uint32_t(d.access_mode & 3) << kMkcAm10Lo;
  dw0 |= uint32_t(d.ma_translation_mode) << kMkcMaTranslationLo;
  out->dw0 = be32::FromHost(dw0);
  out->qpn_mkey = be32::FromHost((d.qpn << 8) | d.mkey_7_0);
  uint32_t fp = d.pd;
  fp |= uint32_t{d.length64} << kMkcLength64Bit;
  fp |= uint32_t{d.bsf_en} << kMkcBsfEnBit;
  fp |= uint32_t{d.sync_umr} << kMkcSyncUmrBit;
  fp |= uint32_t{d.expected_sigerr_count} << kMkcSigerrBit;
  fp |= uint32_t{d.en_rinval} << kMkcEnRinvalBit;
  out->flags_pd = be32::FromHost(fp);
  out->start_addr = be64::FromHost(d.start_addr);
  out->len = be64::FromHost(d.len);
  out->bsf_octword_size = be32::FromHost(d.bsf_octword_size);
  out->dw12 = be32::FromHost(uint32_t{d.crossing_target_vhca_id} << kMkcCrossingVhcaLo);
  out->translations_octword_size = be32::FromHost(d.translations_octword_size);
  out->dw14 = be32::FromHost((uint32_t{d.relaxed_ordering_read} << kMkcRelaxedOrderingReadBit) |
                             d.log_entity_size);
  out->dw15 = be32::FromHost(uint32_t{d.crypto_en} << kMkcCryptoEnLo);
  return absl::OkStatus();
}

MkeyContextDesc DecodeMkeyContext(const MkeyContext& m) {
  MkeyContextDesc d;
  d.free = m.dw0.GetBit(kMkcFreeBit);
  d.access_mode = static_cast<uint8_t>((m.dw0.GetBits(kMkcAm42Hi, kMkcAm42Lo) << 2) |
                                       m.dw0.GetBits(kMkcAm10Hi, kMkcAm10Lo));
  d.relaxed_ordering_write = m.dw0.GetBit(kMkcRelaxedOrderingWriteBit);
  d.small_fence_on_rdma_read_response = m.dw0.GetBit(kMkcSmallFenceBit);
  d.umr_en = m.dw0.GetBit(kMkcUmrEnBit);
  d.access.remote_atomic = m.dw0.GetBit(kMkcABit);
  d.access.remote_write = m.dw0.GetBit(kMkcRwBit);
  d.access.remote_read = m.dw0.GetBit(kMkcRrBit);
  d.access.local_write = m.dw0.GetBit(kMkcLwBit);
  d.access.local_read = m.dw0.GetBit(kMkcLrBit);
  d.ma_translation_mode =
      static_cast<uint8_t>(m.dw0.GetBits(kMkcMaTranslationHi, kMkcMaTranslationLo));
  d.qpn = m.qpn_mkey.GetBits(kMkcQpnHi, kMkcQpnLo);
  d.mkey_7_0 = static_cast<uint8_t>(m.qpn_mkey.GetBits(kMkcMkey70Hi, kMkcMkey70Lo));
  d.length64 = m.flags_pd.GetBit(kMkcLength64Bit);
  d.bsf_en = m.flags_pd.GetBit(kMkcBsfEnBit);
  d.sync_umr = m.flags_pd.GetBit(kMkcSyncUmrBit);
  d.expected_sigerr_count = m.flags_pd.GetBit(kMkcSigerrBit);
  d.en_rinval = m.flags_pd.GetBit(kMkcEnRinvalBit);
  d.pd = m.flags_pd.GetBits(kMkcPdHi, kMkcPdLo);
  d.start_addr = m.start_addr.ToHost();
  d.len = m.len.ToHost();
  d.bsf_octword_size = m.bsf_octword_size.ToHost();
  d.crossing_target_vhca_id =
      static_cast<uint16_t>(m.dw12.GetBits(kMkcCrossingVhcaHi, kMkcCrossingVhcaLo));
  d.translations_octword_size = m.translations_octword_size.ToHost();
  d.relaxed_ordering_read = m.dw14.GetBit(kMkcRelaxedOrderingReadBit);
  d.log_entity_size =
      static_cast<uint8_t>(m.dw14.GetBits(kMkcLogEntitySizeHi, kMkcLogEntitySizeLo));
  d.crypto_en = static_cast<uint8_t>(m.dw15.GetBits(kMkcCryptoEnHi, kMkcCryptoEnLo));
  return d;
}

absl::Status EncodeCtrlSeg(const CtrlSegDesc& d, CtrlSegLayout* out) {
  if (d.qpn > 0xffffff) return TooWide("qpn", d.qpn, 24);
  if (d.ds > kMaxDs) return TooWide("ds", d.ds, 6);
  if (d.completion_mode > 3) return TooWide("completion_mode", d.completion_mode, 2);
  if (static_cast<uint8_t>(d.fence) > kMaxFenceMode) {
    return absl::OutOfRangeError(
        absl::StrCat("fence mode ", static_cast<int>(d.fence), " is not defined (0..4)"));
  }
  *out = CtrlSegLayout{};
  out->opmod_idx_opcode =
      be32::FromHost((uint32_t{d.opmod} << 24) | (uint32_t{d.wqe_index} << 8) | d.opcode);
  out->qpn_ds = be32::FromHost((d.qpn << 8) | d.ds);
  out->signature = d.signature;
  out->fm_ce_se =
      static_cast<uint8_t>((static_cast<uint8_t>(d.fence) << kFmShift) |
                           (d.completion_mode << kCeShift) | (d.solicited ? kSeSolicited : 0));
  out->imm = be32::FromHost(d.imm);
  return absl::OkStatus();
}

absl::StatusOr<CtrlSegDesc> DecodeCtrlSeg(const CtrlSegLayout& s) {
  CtrlSegDesc d;
  const uint32_t w0 = s.opmod_idx_opcode.ToHost();
  d.opmod = static_cast<uint8_t>(w0 >> 24);
  d.wqe_index = static_cast<uint16_t>(w0 >> 8);
  d.opcode = static_cast<uint8_t>(w0);
  d.qpn = s.qpn_ds.GetBits(31, 8);
  d.ds = static_cast<uint8_t>(s.qpn_ds.GetBits(5, 0));
  d.signature = s.signature;
  const uint8_t fm = s.fm_ce_se >> kFmShift;
  if (fm > kMaxFenceMode) {
    return absl::InvalidArgumentError(absl::StrCat("ctrl fence mode ", fm, " is not defined"));
  }
  d.fence = static_cast<FenceMode>(fm);
  d.completion_mode = (s.fm_ce_se >> kCeShift) & 3;
  d.solicited = (s.fm_ce_se & kSeSolicited) != 0;
  d.imm = s.imm.ToHost();
  return d;
}

absl::Status EncodeUmrCtrlSeg(const UmrCtrlSegDesc& d, UmrCtrlSegLayout* out) {
  if (!d.translation_offset_en && d.translation_offset != 0) {
    return absl::InvalidArgumentError(absl::StrCat("translation_offset=", d.translation_offset,
                                                   " requires translation_offset_en"));
  }
  if (d.translation_offset_en && d.bsf_octowords != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bsf_octowords=", d.bsf_octowords, " shares its field with the translation offset"));
  }
  if (d.translation_offset > kMaxTranslationOffset) {
    return TooWide("translation_offset", d.translation_offset, 48);
  }
  if (static_cast<uint8_t>(d.check_free) > 2) {
    return absl::OutOfRangeError("check_free value is not defined");
  }
  *out = UmrCtrlSegLayout{};
  out->flags = static_cast<uint8_t>((d.inline_translation ? kUmrFlagInline : 0) |
                                    (static_cast<uint8_t>(d.check_free) << kUmrCheckFreeShift) |
                                    (d.translation_offset_en ? kUmrFlagTranslationOffset : 0) |
                                    (d.check_qpn ? kUmrFlagCheckQpn : 0));
  out->klm_octowords = be16::FromHost(d.klm_octowords);
  if (d.translation_offset_en) {
    out->translation_offset_or_bsf = be16::FromHost(static_cast<uint16_t>(d.translation_offset));
    out->translation_offset_47_16 =
        be32::FromHost(static_cast<uint32_t>(d.translation_offset >> 16));
  } else {
    out->translation_offset_or_bsf = be16::FromHost(d.bsf_octowords);
  }
  out->mkey_mask = be64::FromHost(d.mkey_mask);
  return absl::OkStatus();
}

absl::StatusOr<UmrCtrlSegDesc> DecodeUmrCtrlSeg(const UmrCtrlSegLayout& s) {
  UmrCtrlSegDesc d;
  d.inline_translation = (s.flags & kUmrFlagInline) != 0;
  const uint8_t cf = (s.flags & kUmrCheckFreeMask) >> kUmrCheckFreeShift;
  if (cf == 3) {
    return absl::InvalidArgumentError("UMR check-free value 3 is not defined");
  }
  d.check_free = static_cast<FreeCheck>(cf);
  d.translation_offset_en = (s.flags & kUmrFlagTranslationOffset) != 0;
  d.check_qpn = (s.flags & kUmrFlagCheckQpn) != 0;
  d.klm_octowords = s.klm_octowords.ToHost();
  if (d.translation_offset_en) {
    d.translation_offset = (uint64_t{s.translation_offset_47_16.ToHost()} << 16) |
                           s.translation_offset_or_bsf.ToHost();
  } else {
    d.bsf_octowords = s.translation_offset_or_bsf.ToHost();
  }
  d.mkey_mask = s.mkey_mask.ToHost();
  return d;
}

absl::Status EncodeDataSeg(const DataSegDesc& d, DataSegLayout* out) {
  if (d.byte_count & kInlineSegBit) {
    return absl::InvalidArgumentError(
        absl::StrCat("data segment byte_count=", d.byte_count, " has the inline bit set"));
  }
  out->byte_count = be32::FromHost(d.byte_count);
  out->lkey = be32::FromHost(d.lkey);
  out->addr = be64::FromHost(d.addr);
  return absl::OkStatus();
}

absl::StatusOr<DataSegDesc> DecodeDataSeg(const DataSegLayout& s) {
  const uint32_t bc = s.byte_count.ToHost();
  if (bc & kInlineSegBit) {
    return absl::UnimplementedError("inline data segments are not supported");
  }
  return DataSegDesc{bc, s.lkey.ToHost(), s.addr.ToHost()};
}

absl::Status EncodeMttEntries(absl::Span<const MttEntry> in, uint8_t* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    const MttEntry& e = in[i];
    if (e.addr & ~kMttAddrMask) {
      return absl::InvalidArgumentError(
          absl::StrCat("MTT entry ", i, " address 0x", absl::Hex(e.addr), " has bits 7:0 set"));
    }
    MttEntryLayout l;
    l.ptag_flags = be64::FromHost(e.addr | (e.read ? kMttRead : 0) | (e.write ? kMttWrite : 0));
    Store(l, out + i * sizeof(l));
  }
  return absl::OkStatus();
}

void EncodeKlmEntries(absl::Span<const KlmEntry> in, uint8_t* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    KlmEntryLayout l;
    l.byte_count = be32::FromHost(in[i].byte_count);
    l.mkey = be32::FromHost(in[i].mkey);
    l.address = be64::FromHost(in[i].address);
    Store(l, out + i * sizeof(l));
  }
}

void EncodeKsmEntries(absl::Span<const KsmEntry> in, uint8_t* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    KsmEntryLayout l;
    l.key = be32::FromHost(in[i].mkey);
    l.va = be64::FromHost(in[i].va);
    Store(l, out + i * sizeof(l));
  }
}

size_t RepeatBlockBytes(const RepeatBlock& in) { return (in.entries.size() + 1) * kOctoword; }

absl::Status EncodeRepeatBlock(const RepeatBlock& in, uint8_t* out) {
  if (in.entries.empty() || in.entries.size() > 0xffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeat block with ", in.entries.size(), " entries (1..65535)"));
  }
  uint32_t sum = 0;
  for (size_t i = 0; i < in.entries.size(); ++i) {
    const RepeatEntry& e = in.entries[i];
    if (e.stride < e.byte_count) {
      return absl::InvalidArgumentError(
          absl::StrCat("repeat entry ", i, " stride=", e.stride, " < byte_count=", e.byte_count));
    }
    sum += e.byte_count;
    RepeatEntryLayout l;
    l.stride = be16::FromHost(e.stride);
    l.byte_count = be16::FromHost(e.byte_count);
    l.memkey = be32::FromHost(e.mkey);
    l.va = be64::FromHost(e.va);
    Store(l, out + (i + 1) * kOctoword);
  }
  RepeatBlockHeaderLayout h;
  h.byte_count = be32::FromHost(sum);
  h.op = be32::FromHost(kRepeatBlockOp);
  h.repeat_count = be32::FromHost(in.repeat_count);
  h.num_ent = be16::FromHost(static_cast<uint16_t>(in.entries.size()));
  Store(h, out);
  return absl::OkStatus();
}

namespace {
absl::Status CheckMultiple(absl::Span<const uint8_t> bytes, size_t unit, const char* what) {
  if (bytes.size() % unit != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " list of ", bytes.size(), " bytes is not a multiple of ", unit));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::vector<MttEntry>> DecodeMttEntries(absl::Span<const uint8_t> bytes) {
  if (auto s = CheckMultiple(bytes, kMttEntryBytes, "MTT"); !s.ok()) return s;
  std::vector<MttEntry> v(bytes.size() / kMttEntryBytes);
  for (size_t i = 0; i < v.size(); ++i) {
    MttEntryLayout l;
    Load(bytes.data() + i * sizeof(l), &l);
    const uint64_t x = l.ptag_flags.ToHost();
    v[i] = MttEntry{x & kMttAddrMask, (x & kMttRead) != 0, (x & kMttWrite) != 0};
  }
  return v;
}

absl::StatusOr<std::vector<KlmEntry>> DecodeKlmEntries(absl::Span<const uint8_t> bytes) {
  if (auto s = CheckMultiple(bytes, kKlmEntryBytes, "KLM"); !s.ok()) return s;
  std::vector<KlmEntry> v(bytes.size() / kKlmEntryBytes);
  for (size_t i = 0; i < v.size(); ++i) {
    KlmEntryLayout l;
    Load(bytes.data() + i * sizeof(l), &l);
    v[i] = KlmEntry{l.byte_count.ToHost(), l.mkey.ToHost(), l.address.ToHost()};
  }
  return v;
}

absl::StatusOr<std::vector<KsmEntry>> DecodeKsmEntries(absl::Span<const uint8_t> bytes) {
  if (auto s = CheckMultiple(bytes, kKlmEntryBytes, "KSM"); !s.ok()) return s;
  std::vector<KsmEntry> v(bytes.size() / kKlmEntryBytes);
  for (size_t i = 0; i < v.size(); ++i) {
    KsmEntryLayout l;
    Load(bytes.data() + i * sizeof(l), &l);
    v[i] = KsmEntry{l.key.ToHost(), l.va.ToHost()};
  }
  return v;
}

absl::StatusOr<RepeatBlock> DecodeRepeatBlock(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kOctoword) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeat block needs a 16-byte header, got ", bytes.size(), " bytes"));
  }
  RepeatBlockHeaderLayout h;
  Load(bytes.data(), &h);
  if (h.op.ToHost() != kRepeatBlockOp) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeat block op=0x", absl::Hex(h.op.ToHost()), ", expected 0x400"));
  }
  const size_t n = h.num_ent.ToHost();
  if (n == 0 || (n + 1) * kOctoword > bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeat block num_ent=", n, " does not fit ", bytes.size(), " bytes"));
  }
  RepeatBlock b;
  b.repeat_count = h.repeat_count.ToHost();
  b.entries.resize(n);
  uint32_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    RepeatEntryLayout l;
    Load(bytes.data() + (i + 1) * kOctoword, &l);
    b.entries[i] =
        RepeatEntry{l.stride.ToHost(), l.byte_count.ToHost(), l.memkey.ToHost(), l.va.ToHost()};
    sum += b.entries[i].byte_count;
  }
  if (sum != h.byte_count.ToHost()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repeat block byte_count=", h.byte_count.ToHost(), " but entries sum to ", sum));
  }
  return b;
}

}  // namespace regcache::umr