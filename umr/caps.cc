#include "umr/caps.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace regcache::umr {
namespace {

// name, PRM bit offset inside cmd_hca_cap, width (docs/prm.md, HCA capabilities).
#define RC_HCA_CAP_FIELDS(X)                    \
  X(relaxed_ordering_write_umr, 0xd0, 1)        \
  X(relaxed_ordering_read_umr, 0xd1, 1)         \
  X(relaxed_ordering_write, 0xe8, 1)            \
  X(relaxed_ordering_read_pci_enabled, 0xe9, 1) \
  X(log_max_mkey, 0xea, 6)                      \
  X(terminate_scatter_list_mkey, 0xf6, 1)       \
  X(repeated_mkey, 0xf7, 1)                     \
  X(dump_fill_mkey, 0xf8, 1)                    \
  X(max_indirection, 0x100, 8)                  \
  X(fixed_buffer_size, 0x108, 1)                \
  X(log_max_mrw_sz, 0x109, 7)                   \
  X(log_max_bsf_list_size, 0x112, 6)            \
  X(umr_extended_translation_offset, 0x118, 1)  \
  X(null_mkey, 0x119, 1)                        \
  X(log_max_klm_list_size, 0x11a, 6)            \
  X(repeated_block_disabled, 0x206, 1)          \
  X(umr_modify_entity_size_disabled, 0x207, 1)  \
  X(umr_modify_atomic_disabled, 0x208, 1)       \
  X(umr_indirect_mkey_disabled, 0x209, 1)       \
  X(umr_fence, 0x20a, 2)                        \
  X(atomic, 0x21e, 1)                           \
  X(pg, 0x227, 1)                               \
  X(umr_ptr_rlky, 0x230, 1)                     \
  X(mkey_by_name, 0x266, 1)                     \
  X(max_wqe_sz_sq, 0x290, 16)                   \
  X(relaxed_ordering_read, 0x32a, 1)            \
  X(ats, 0x461, 1)                              \
  X(crypto, 0x469, 1)

constexpr size_t kCapStart = 16;
// odp_cap_bits (docs/prm.md, HCA capabilities): sig at bit 0x40, per-transport dwords from byte 16.
constexpr unsigned kOdpSigBit = 0x40;
constexpr unsigned kOdpTransportBase[5] = {0x80, 0xa0, 0xc0, 0xe0, 0x100};  // rc uc ud xrc dc

absl::Status Put(uint8_t* cap, const char* name, unsigned off, unsigned width, uint64_t v) {
  if (width < 32 && v >> width) {
    return absl::OutOfRangeError(
        absl::StrCat("cap ", name, "=", v, " does not fit its ", width, "-bit field"));
  }
  PrmSet(cap, off, width, static_cast<uint32_t>(v));
  return absl::OkStatus();
}

std::vector<uint8_t> OutWithStatus(const CmdStatus& s) {
  std::vector<uint8_t> out(kQueryHcaCapOutBytes, 0);
  const Mailbox16 h = EncodeCmdStatusOut(s);
  std::memcpy(out.data(), h.data(), h.size());
  return out;
}

absl::Status CheckOut(absl::Span<const uint8_t> out) {
  if (out.size() < kQueryHcaCapOutBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("QUERY_HCA_CAP output of ", out.size(), " B, need ", kQueryHcaCapOutBytes));
  }
  return absl::OkStatus();
}

OdpTransportCaps GetTransport(const uint8_t* cap, unsigned base) {
  OdpTransportCaps t;
  t.send = PrmGet(cap, base + 0, 1);
  t.receive = PrmGet(cap, base + 1, 1);
  t.write = PrmGet(cap, base + 2, 1);
  t.read = PrmGet(cap, base + 3, 1);
  t.atomic = PrmGet(cap, base + 4, 1);
  t.srq_receive = PrmGet(cap, base + 5, 1);
  return t;
}
void PutTransport(uint8_t* cap, unsigned base, const OdpTransportCaps& t) {
  PrmSet(cap, base + 0, 1, t.send);
  PrmSet(cap, base + 1, 1, t.receive);
  PrmSet(cap, base + 2, 1, t.write);
  PrmSet(cap, base + 3, 1, t.read);
  PrmSet(cap, base + 4, 1, t.atomic);
  PrmSet(cap, base + 5, 1, t.srq_receive);
}

}  // namespace

absl::StatusOr<Mailbox16> EncodeQueryHcaCapIn(const QueryHcaCapIn& in) {
  if (in.cap_type > 0x7fff) {
    return absl::OutOfRangeError(absl::StrCat("cap_type=", in.cap_type, " does not fit 15 bits"));
  }
  Mailbox16 m{};
  PrmSet(m.data(), 0x00, 16, kCmdQueryHcaCap);
  PrmSet(m.data(), 0x30, 16, static_cast<uint32_t>(in.cap_type << 1) | in.current);
  PrmSet(m.data(), 0x40, 1, in.other_function);
  PrmSet(m.data(), 0x50, 16, in.function_id);
  return m;
}

absl::StatusOr<QueryHcaCapIn> DecodeQueryHcaCapIn(absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(const uint16_t op, PeekCommandOpcode(in));
  if (in.size() < 16 || op != kCmdQueryHcaCap) {
    return absl::InvalidArgumentError(absl::StrCat("not a QUERY_HCA_CAP input (opcode 0x",
                                                   absl::Hex(op), ", ", in.size(), " B)"));
  }
  QueryHcaCapIn d;
  const uint32_t op_mod = PrmGet(in.data(), 0x30, 16);
  d.cap_type = static_cast<uint16_t>(op_mod >> 1);
  d.current = op_mod & 1;
  d.other_function = PrmGet(in.data(), 0x40, 1);
  d.function_id = static_cast<uint16_t>(PrmGet(in.data(), 0x50, 16));
  return d;
}

absl::StatusOr<std::vector<uint8_t>> EncodeQueryHcaCapOut(const CmdStatus& s, const HcaCaps& c) {
  std::vector<uint8_t> out = OutWithStatus(s);
  uint8_t* cap = out.data() + kCapStart;
#define RC_PUT(name, off, width) RETURN_IF_ERROR(Put(cap, #name, off, width, c.name));
  RC_HCA_CAP_FIELDS(RC_PUT)
#undef RC_PUT
  return out;
}

absl::StatusOr<HcaCaps> DecodeHcaCaps(absl::Span<const uint8_t> out) {
  RETURN_IF_ERROR(CheckOut(out));
  const uint8_t* cap = out.data() + kCapStart;
  HcaCaps c;
#define RC_GET(name, off, width) c.name = static_cast<decltype(c.name)>(PrmGet(cap, off, width));
  RC_HCA_CAP_FIELDS(RC_GET)
#undef RC_GET
  return c;
}

absl::StatusOr<std::vector<uint8_t>> EncodeQueryOdpCapOut(const CmdStatus& s, const OdpCaps& c) {
  std::vector<uint8_t> out = OutWithStatus(s);
  uint8_t* cap = out.data() + kCapStart;
  PrmSet(cap, kOdpSigBit, 1, c.sig);
  const OdpTransportCaps* t[5] = {&c.rc, &c.uc, &c.ud, &c.xrc, &c.dc};
  for (int i = 0; i < 5; ++i) PutTransport(cap, kOdpTransportBase[i], *t[i]);
  return out;
}

absl::StatusOr<OdpCaps> DecodeOdpCaps(absl::Span<const uint8_t> out) {
  RETURN_IF_ERROR(CheckOut(out));
  const uint8_t* cap = out.data() + kCapStart;
  OdpCaps c;
  c.sig = PrmGet(cap, kOdpSigBit, 1);
  OdpTransportCaps* t[5] = {&c.rc, &c.uc, &c.ud, &c.xrc, &c.dc};
  for (int i = 0; i < 5; ++i) *t[i] = GetTransport(cap, kOdpTransportBase[i]);
  return c;
}

}  // namespace regcache::umr