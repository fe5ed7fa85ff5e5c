// Completion queue entry, 64 B (rdma-core mlx5dv.h `struct mlx5_cqe64`, `struct mlx5_err_cqe`;
// layout in prm.h). The software HCA encodes CQEs for the WQEs it executes; the engine decodes
// them. Opcode (op_own[7:4]): REQ 0x0, RESP_SEND_INV 0x4, REQ_ERR 0xd, RESP_ERR 0xe. Error CQEs
// carry syndrome (byte 55) and vendor_err_synd (byte 54) where a good CQE has its timestamp, and
// leave bytes 36..53 reserved.
//
// Thread safety: pure functions.
#ifndef REGCACHE_UMR_CQE_H_
#define REGCACHE_UMR_CQE_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/prm.h"

namespace regcache::umr {

struct Cqe {
  uint8_t opcode = kCqeOpReq;  // 4 bits
  uint8_t format = 0;          // 2 bits
  bool se = false;
  bool owner = false;
  uint8_t signature = 0;
  uint16_t wqe_counter = 0;  // WQE index of the completed WQE
  uint32_t qpn = 0;          // 24 bits
  uint8_t wqe_opcode = 0;    // sop_drop_qpn[31:24]: the WQE's opcode on requester CQEs
  uint32_t srqn_uidx = 0;
  // Good CQEs only (must be 0 in an error CQE):
  uint32_t imm_inval_pkey = 0;  // RESP_SEND_INV: the invalidated key
  uint32_t byte_cnt = 0;
  uint64_t timestamp = 0;
  // Error CQEs only (must be 0 otherwise):
  uint8_t syndrome = 0;
  uint8_t vendor_err_synd = 0;
  bool is_error() const { return opcode == kCqeOpReqErr || opcode == kCqeOpRespErr; }
  friend bool operator==(const Cqe&, const Cqe&) = default;
};

using CqeBytes = std::array<uint8_t, sizeof(CqeLayout)>;

// Fails: kOutOfRange for opcode >= 16, format >= 4, qpn >= 2^24; kInvalidArgument when fields of
// the other kind (good / error) are set.
absl::StatusOr<CqeBytes> EncodeCqe(const Cqe& c);
// Fails (kInvalidArgument) for fewer than 64 bytes. Fields of the other kind decode as 0.
absl::StatusOr<Cqe> DecodeCqe(absl::Span<const uint8_t> bytes);

const char* CqeSyndromeName(uint8_t syndrome);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_CQE_H_
