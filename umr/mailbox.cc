#include "umr/mailbox.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace regcache::umr {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void Store(const T& v, uint8_t* p) {
  std::memcpy(p, &v, sizeof(T));
}

absl::Status Fits24(const char* field, uint32_t v) {
  if (v > 0xffffff) {
    return absl::OutOfRangeError(absl::StrCat(field, "=", v, " does not fit its 24-bit field"));
  }
  return absl::OkStatus();
}

CmdInHeaderLayout InHeader(uint16_t opcode, uint16_t uid, uint16_t op_mod) {
  CmdInHeaderLayout h;
  h.opcode_uid = be32::FromHost((uint32_t{opcode} << 16) | uid);
  h.op_mod = be32::FromHost(op_mod);
  return h;
}

// Checks size and opcode; returns the header.
absl::StatusOr<CmdInHeaderLayout> CheckIn(absl::Span<const uint8_t> in, size_t need,
                                          uint16_t opcode, const char* name) {
  if (in.size() < need) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " input of ", in.size(), " B, need ", need));
  }
  const auto h = Load<CmdInHeaderLayout>(in.data());
  const uint16_t op = static_cast<uint16_t>(h.opcode_uid.ToHost() >> 16);
  if (op != opcode) {
    return absl::InvalidArgumentError(absl::StrCat(name, " input has opcode 0x", absl::Hex(op),
                                                   ", expected 0x", absl::Hex(opcode)));
  }
  return h;
}

CmdStatus LoadStatus(const uint8_t* p) {
  const auto h = Load<CmdOutHeaderLayout>(p);
  return CmdStatus{static_cast<uint8_t>(h.status.ToHost() >> 24), h.syndrome.ToHost()};
}
void StoreStatus(const CmdStatus& s, uint8_t* p) {
  CmdOutHeaderLayout h;
  h.status = be32::FromHost(uint32_t{s.status} << 24);
  h.syndrome = be32::FromHost(s.syndrome);
  Store(h, p);
}

absl::Status CheckOutSize(absl::Span<const uint8_t> out, size_t need, const char* name) {
  if (out.size() < need) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " output of ", out.size(), " B, need ", need));
  }
  return absl::OkStatus();
}

uint16_t Uid(const CmdInHeaderLayout& h) { return static_cast<uint16_t>(h.opcode_uid.ToHost()); }
uint16_t OpMod(const CmdInHeaderLayout& h) { return static_cast<uint16_t>(h.op_mod.ToHost()); }

absl::StatusOr<Mailbox16> EncodeIndexIn(uint16_t opcode, uint16_t uid, uint16_t op_mod,
                                        uint32_t index, bool pg_access) {
  RETURN_IF_ERROR(Fits24("mkey_index", index));
  MkeyIndexCmdLayout l{};
  const CmdInHeaderLayout h = InHeader(opcode, uid, op_mod);
  l.dw0 = h.opcode_uid;
  l.dw1 = h.op_mod;
  l.mkey_index = be32::FromHost(index);
  l.dw3 = be32::FromHost(pg_access ? 1u << 31 : 0);
  Mailbox16 m;
  Store(l, m.data());
  return m;
}

}  // namespace

Mailbox16 EncodeCmdStatusOut(const CmdStatus& s) {
  Mailbox16 m{};
  StoreStatus(s, m.data());
  return m;
}

absl::StatusOr<CmdStatus> DecodeCmdStatusOut(absl::Span<const uint8_t> out) {
  RETURN_IF_ERROR(CheckOutSize(out, 16, "command"));
  return LoadStatus(out.data());
}

absl::StatusOr<uint16_t> PeekCommandOpcode(absl::Span<const uint8_t> in) {
  if (in.size() < sizeof(CmdInHeaderLayout)) {
    return absl::InvalidArgumentError(absl::StrCat("command input of ", in.size(), " B"));
  }
  return static_cast<uint16_t>(Load<CmdInHeaderLayout>(in.data()).opcode_uid.ToHost() >> 16);
}

absl::StatusOr<std::vector<uint8_t>> EncodeCreateMkeyIn(const CreateMkeyIn& in) {
  if (in.translation.size() % kOctoword != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CREATE_MKEY translation of ", in.translation.size(), " B is not whole octowords"));
  }
  CreateMkeyInLayout l{};
  l.hdr = InHeader(kCmdCreateMkey, in.uid, in.op_mod);
  l.dw3 = be32::FromHost((uint32_t{in.pg_access} << kCreateMkeyPgAccessBit) |
                         (uint32_t{in.mkey_umem_valid} << kCreateMkeyUmemValidBit));
  RETURN_IF_ERROR(EncodeMkeyContext(in.mkc, &l.mkc));
  l.translations_octword_actual_size =
      be32::FromHost(static_cast<uint32_t>(in.translation.size() / kOctoword));
  l.mkey_umem_id = be32::FromHost(in.mkey_umem_id);
  l.mkey_umem_offset = be64::FromHost(in.mkey_umem_offset);
  std::vector<uint8_t> out(sizeof(l) + in.translation.size());
  Store(l, out.data());
  if (!in.translation.empty()) {
    std::memcpy(out.data() + sizeof(l), in.translation.data(), in.translation.size());
  }
  return out;
}

absl::StatusOr<CreateMkeyIn> DecodeCreateMkeyIn(absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(const CmdInHeaderLayout h,
                   CheckIn(in, sizeof(CreateMkeyInLayout), kCmdCreateMkey, "CREATE_MKEY"));
  const auto l = Load<CreateMkeyInLayout>(in.data());
  CreateMkeyIn d;
  d.uid = Uid(h);
  d.op_mod = OpMod(h);
  d.pg_access = l.dw3.GetBit(kCreateMkeyPgAccessBit);
  d.mkey_umem_valid = l.dw3.GetBit(kCreateMkeyUmemValidBit);
  d.mkc = DecodeMkeyContext(l.mkc);
  d.mkey_umem_id = l.mkey_umem_id.ToHost();
  d.mkey_umem_offset = l.mkey_umem_offset.ToHost();
  const uint64_t bytes = uint64_t{l.translations_octword_actual_size.ToHost()} * kOctoword;
  if (bytes > in.size() - sizeof(l)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CREATE_MKEY translations_octword_actual_size=", bytes / kOctoword, " needs ",
                     bytes, " B after the header, ", in.size() - sizeof(l), " given"));
  }
  d.translation.assign(in.data() + sizeof(l), in.data() + sizeof(l) + bytes);
  return d;
}

absl::StatusOr<Mailbox16> EncodeCreateMkeyOut(const CreateMkeyOut& out) {
  RETURN_IF_ERROR(Fits24("mkey_index", out.mkey_index));
  Mailbox16 m{};
  StoreStatus(out.status, m.data());
  Store(be32::FromHost(out.mkey_index), m.data() + 8);
  return m;
}

absl::StatusOr<CreateMkeyOut> DecodeCreateMkeyOut(absl::Span<const uint8_t> out) {
  RETURN_IF_ERROR(CheckOutSize(out, 16, "CREATE_MKEY"));
  return CreateMkeyOut{LoadStatus(out.data()), Load<be32>(out.data() + 8).ToHost() & 0xffffff};
}

absl::StatusOr<CreateMkeyIn> BuildCreateFreeMkey(const FreeMkeyParams& p) {
  const bool listed =
      p.mode == AccessMode::kMtt || p.mode == AccessMode::kKlm || p.mode == AccessMode::kKsm;
  const bool paged = p.mode == AccessMode::kMtt || p.mode == AccessMode::kKsm;
  if (static_cast<uint8_t>(p.mode) >= 32) {
    return absl::OutOfRangeError(
        absl::StrCat("access mode ", static_cast<int>(p.mode), " does not fit 5 bits"));
  }
  if (paged && (p.log_entity_size < kMinLogEntitySize || p.log_entity_size > kMaxLogEntitySize)) {
    return absl::OutOfRangeError(
        absl::StrCat("log_entity_size=", p.log_entity_size, " outside 12..31"));
  }
  if (!paged && p.log_entity_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("log_entity_size=", p.log_entity_size,
                                                   " given for access mode ",
                                                   AccessModeName(static_cast<uint8_t>(p.mode))));
  }
  uint64_t octo = 0;
  if (listed) {
    if (p.capacity_entries == 0) {
      return absl::InvalidArgumentError("free key with capacity 0");
    }
    octo = PaddedTranslationBytes(p.mode, p.capacity_entries) / kOctoword;
    if (octo > 0xffffffffu) {
      return absl::OutOfRangeError(
          absl::StrCat("capacity ", p.capacity_entries, " overflows translations_octword_size"));
    }
  }
  RETURN_IF_ERROR(Fits24("pd", p.pd));
  CreateMkeyIn in;
  in.pg_access = p.pg_access;
  in.mkc.free = true;
  in.mkc.umr_en = true;
  in.mkc.access_mode = static_cast<uint8_t>(p.mode);
  in.mkc.access = p.access;
  in.mkc.access.local_read = true;
  in.mkc.qpn = kQpnUnbound;
  in.mkc.mkey_7_0 = p.variant;
  in.mkc.en_rinval = p.en_rinval;
  in.mkc.pd = p.pd;
  in.mkc.translations_octword_size = static_cast<uint32_t>(octo);
  in.mkc.log_entity_size = p.log_entity_size;
  return in;
}

absl::StatusOr<FreeMkeyParams> DecodeCreateFreeMkey(const CreateMkeyIn& in) {
  if (!in.mkc.free || !in.mkc.umr_en || !in.translation.empty() || in.mkc.qpn != kQpnUnbound ||
      !in.mkc.access.local_read) {
    return absl::InvalidArgumentError(
        "CREATE_MKEY is not a free, UMR-enabled, unbound key without translation");
  }
  FreeMkeyParams p;
  p.mode = static_cast<AccessMode>(in.mkc.access_mode);
  const uint64_t per_octo = p.mode == AccessMode::kMtt ? 2 : 1;
  p.capacity_entries = static_cast<uint32_t>(in.mkc.translations_octword_size * per_octo);
  p.variant = in.mkc.mkey_7_0;
  p.pd = in.mkc.pd;
  p.access = in.mkc.access;
  p.en_rinval = in.mkc.en_rinval;
  p.log_entity_size = in.mkc.log_entity_size;
  p.pg_access = in.pg_access;
  return p;
}

absl::StatusOr<Mailbox16> EncodeQueryMkeyIn(const QueryMkeyIn& in) {
  return EncodeIndexIn(kCmdQueryMkey, in.uid, in.op_mod, in.mkey_index, in.pg_access);
}

absl::StatusOr<QueryMkeyIn> DecodeQueryMkeyIn(absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(const CmdInHeaderLayout h, CheckIn(in, 16, kCmdQueryMkey, "QUERY_MKEY"));
  const auto l = Load<MkeyIndexCmdLayout>(in.data());
  return QueryMkeyIn{Uid(h), OpMod(h), l.mkey_index.ToHost() & 0xffffff, l.dw3.GetBit(31)};
}

absl::StatusOr<std::vector<uint8_t>> EncodeQueryMkeyOut(const QueryMkeyOut& out) {
  if (out.translation.size() % kOctoword != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QUERY_MKEY translation of ", out.translation.size(), " B is not whole octowords"));
  }
  QueryMkeyOutLayout l{};
  RETURN_IF_ERROR(EncodeMkeyContext(out.mkc, &l.mkc));
  const size_t tail = std::max<size_t>(out.translation.size(), kQueryMkeyOutMinBytes - sizeof(l));
  std::vector<uint8_t> bytes(sizeof(l) + tail, 0);
  Store(l, bytes.data());
  StoreStatus(out.status, bytes.data());
  if (!out.translation.empty()) {
    std::memcpy(bytes.data() + sizeof(l), out.translation.data(), out.translation.size());
  }
  return bytes;
}

absl::StatusOr<QueryMkeyOut> DecodeQueryMkeyOut(absl::Span<const uint8_t> out) {
  RETURN_IF_ERROR(CheckOutSize(out, sizeof(QueryMkeyOutLayout), "QUERY_MKEY"));
  QueryMkeyOut d;
  d.status = LoadStatus(out.data());
  d.mkc = DecodeMkeyContext(Load<QueryMkeyOutLayout>(out.data()).mkc);
  const size_t tail = (out.size() - sizeof(QueryMkeyOutLayout)) / kOctoword * kOctoword;
  d.translation.assign(out.data() + sizeof(QueryMkeyOutLayout),
                       out.data() + sizeof(QueryMkeyOutLayout) + tail);
  return d;
}

absl::StatusOr<Mailbox16> EncodeDestroyMkeyIn(const DestroyMkeyIn& in) {
  return EncodeIndexIn(kCmdDestroyMkey, in.uid, in.op_mod, in.mkey_index, false);
}

absl::StatusOr<DestroyMkeyIn> DecodeDestroyMkeyIn(absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(const CmdInHeaderLayout h, CheckIn(in, 16, kCmdDestroyMkey, "DESTROY_MKEY"));
  const auto l = Load<MkeyIndexCmdLayout>(in.data());
  return DestroyMkeyIn{Uid(h), OpMod(h), l.mkey_index.ToHost() & 0xffffff};
}

absl::StatusOr<Mailbox16> EncodePageFaultResumeIn(const PageFaultResumeIn& in) {
  RETURN_IF_ERROR(Fits24("wq_number", in.wq_number));
  RETURN_IF_ERROR(Fits24("token", in.token));
  if (in.page_fault_type > 7) {
    return absl::OutOfRangeError(
        absl::StrCat("page_fault_type=", in.page_fault_type, " does not fit 3 bits"));
  }
  PageFaultResumeInLayout l{};
  l.hdr = InHeader(kCmdPageFaultResume, in.uid, in.op_mod);
  l.dw2 = be32::FromHost((uint32_t{in.error} << kResumeErrorBit) |
                         (uint32_t{in.page_fault_type} << 24) | in.wq_number);
  l.dw3 = be32::FromHost(in.token);
  Mailbox16 m;
  Store(l, m.data());
  return m;
}

absl::StatusOr<PageFaultResumeIn> DecodePageFaultResumeIn(absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(const CmdInHeaderLayout h,
                   CheckIn(in, 16, kCmdPageFaultResume, "PAGE_FAULT_RESUME"));
  const auto l = Load<PageFaultResumeInLayout>(in.data());
  PageFaultResumeIn d;
  d.uid = Uid(h);
  d.op_mod = OpMod(h);
  d.error = l.dw2.GetBit(kResumeErrorBit);
  d.page_fault_type = static_cast<uint8_t>(l.dw2.GetBits(26, 24));
  d.wq_number = l.dw2.GetBits(23, 0);
  d.token = l.dw3.GetBits(23, 0);
  return d;
}

}  // namespace regcache::umr