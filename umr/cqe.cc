#include "umr/cqe.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace regcache::umr {

absl::StatusOr<CqeBytes> EncodeCqe(const Cqe& c) {
  if (c.opcode > 0xf || c.format > 3 || c.qpn > 0xffffff) {
    return absl::OutOfRangeError(absl::StrCat("CQE opcode=", c.opcode, " format=", c.format,
                                              " qpn=", c.qpn, " exceed their fields"));
  }
  if (c.is_error() && (c.imm_inval_pkey || c.byte_cnt || c.timestamp)) {
    return absl::InvalidArgumentError("error CQE with good-CQE fields set");
  }
  if (!c.is_error() && (c.syndrome || c.vendor_err_synd)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CQE opcode ", c.opcode, " is not an error but has a syndrome"));
  }
  CqeLayout l{};
  l.srqn_uidx = be32::FromHost(c.srqn_uidx);
  l.imm_inval_pkey = be32::FromHost(c.imm_inval_pkey);
  l.byte_cnt = be32::FromHost(c.byte_cnt);
  l.timestamp = be64::FromHost(c.timestamp);
  l.sop_drop_qpn = be32::FromHost((uint32_t{c.wqe_opcode} << 24) | c.qpn);
  l.wqe_counter = be16::FromHost(c.wqe_counter);
  l.signature = c.signature;
  l.op_own = static_cast<uint8_t>((c.opcode << 4) | (c.format << 2) | (c.se << 1) | c.owner);
  CqeBytes out;
  std::memcpy(out.data(), &l, sizeof(l));
  if (c.is_error()) {
    out[kCqeVendorErrSyndByte] = c.vendor_err_synd;
    out[kCqeSyndromeByte] = c.syndrome;
  }
  return out;
}

absl::StatusOr<Cqe> DecodeCqe(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(CqeLayout)) {
    return absl::InvalidArgumentError(absl::StrCat("CQE of ", bytes.size(), " B"));
  }
  CqeLayout l;
  std::memcpy(&l, bytes.data(), sizeof(l));
  Cqe c;
  c.opcode = l.op_own >> 4;
  c.format = (l.op_own >> 2) & 3;
  c.se = (l.op_own >> 1) & 1;
  c.owner = l.op_own & 1;
  c.signature = l.signature;
  c.wqe_counter = l.wqe_counter.ToHost();
  c.qpn = l.sop_drop_qpn.GetBits(23, 0);
  c.wqe_opcode = static_cast<uint8_t>(l.sop_drop_qpn.GetBits(31, 24));
  c.srqn_uidx = l.srqn_uidx.ToHost();
  if (c.is_error()) {
    c.syndrome = bytes[kCqeSyndromeByte];
    c.vendor_err_synd = bytes[kCqeVendorErrSyndByte];
  } else {
    c.imm_inval_pkey = l.imm_inval_pkey.ToHost();
    c.byte_cnt = l.byte_cnt.ToHost();
    c.timestamp = l.timestamp.ToHost();
  }
  return c;
}

const char* CqeSyndromeName(uint8_t s) {
  switch (s) {
    case kCqeSyndLocalLength:
      return "LOCAL_LENGTH_ERR";
    case kCqeSyndLocalQpOp:
      return "LOCAL_QP_OP_ERR";
    case kCqeSyndLocalProt:
      return "LOCAL_PROT_ERR";
    case kCqeSyndWrFlush:
      return "WR_FLUSH_ERR";
    case kCqeSyndMwBind:
      return "MW_BIND_ERR";
    case kCqeSyndBadResp:
      return "BAD_RESP_ERR";
    case kCqeSyndLocalAccess:
      return "LOCAL_ACCESS_ERR";
    case kCqeSyndRemoteInvalReq:
      return "REMOTE_INVAL_REQ_ERR";
    case kCqeSyndRemoteAccess:
      return "REMOTE_ACCESS_ERR";
    case kCqeSyndRemoteOp:
      return "REMOTE_OP_ERR";
    default:
      return "unknown";
  }
}

}  // namespace regcache::umr