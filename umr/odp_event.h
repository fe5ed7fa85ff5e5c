// ODP page-fault event queue entry and the PAGE_FAULT_RESUME that answers it (docs/prm.md, Page
// faults (ODP)). The software HCA encodes an EQE when an access meets an absent MTT entry; the
// fault servicer (odp/) decodes it and resumes with ResumeFor.
//
// Thread safety: pure functions.
#ifndef REGCACHE_UMR_ODP_EVENT_H_
#define REGCACHE_UMR_ODP_EVENT_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/mailbox.h"
#include "umr/prm.h"

namespace regcache::umr {

enum class PageFaultSubtype : uint8_t { kWqe = 0, kRdma = 1 };

// Flag view of the 3-bit fault type (docs/prm.md, Page faults (ODP)).
inline constexpr uint8_t kPageFaultRequestor = 1 << 0;
inline constexpr uint8_t kPageFaultWrite = 1 << 1;
inline constexpr uint8_t kPageFaultRdma = 1 << 2;
// wq_number and the resume token are 24-bit fields.
inline constexpr uint32_t kMaxPageFaultToken = 0xffffff;

struct PageFaultEvent {
  PageFaultSubtype subtype = PageFaultSubtype::kRdma;
  uint32_t bytes_committed = 0;
  uint8_t type = 0;        // 3 bits
  uint32_t wq_number = 0;  // 24 bits: WQE subtype: QPN/SRQN; RDMA subtype: token (= QPN)
  uint16_t packet_length = 0;
  // WQE subtype only (must be 0 for RDMA):
  uint16_t wqe_index = 0;
  uint32_t token = 0;
  // RDMA subtype only (must be 0 for WQE):
  uint32_t rkey = 0;
  uint32_t rdma_op_len = 0;
  uint64_t rdma_va = 0;
  uint8_t owner = 0;  // EQE byte 63 (owner bit in bit 0)
  friend bool operator==(const PageFaultEvent&, const PageFaultEvent&) = default;
};

using Eqe = std::array<uint8_t, sizeof(EqeLayout)>;

// Fails: kOutOfRange for type >= 8 or wq_number >= 2^24; kInvalidArgument for fields of the
// other subtype set.
absl::StatusOr<Eqe> EncodePageFaultEqe(const PageFaultEvent& e);
// Fails (kInvalidArgument) for fewer than 64 bytes, an EQE type other than 0x0c, or a subtype
// other than 0 / 1.
absl::StatusOr<PageFaultEvent> DecodePageFaultEqe(absl::Span<const uint8_t> eqe);

// The resume command for `e`: page_fault_type = e.type; wq_number = e.wq_number; token = the
// event's token (WQE subtype: token field, low 24 bits; RDMA subtype: e.wq_number).
PageFaultResumeIn ResumeFor(const PageFaultEvent& e, bool error);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_ODP_EVENT_H_
