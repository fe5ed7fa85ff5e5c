#include "umr/odp_event.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace regcache::umr {

absl::StatusOr<Eqe> EncodePageFaultEqe(const PageFaultEvent& e) {
  if (e.type > 7) {
    return absl::OutOfRangeError(absl::StrCat("page fault type=", e.type, " does not fit 3 bits"));
  }
  if (e.wq_number > kMaxPageFaultToken) {
    return absl::OutOfRangeError(absl::StrCat("wq_number=", e.wq_number, " does not fit 24 bits"));
  }
  const bool wqe = e.subtype == PageFaultSubtype::kWqe;
  if (wqe && (e.rkey || e.rdma_op_len || e.rdma_va)) {
    return absl::InvalidArgumentError("WQE page fault with RDMA fields set");
  }
  if (!wqe && (e.wqe_index || e.token)) {
    return absl::InvalidArgumentError("RDMA page fault with WQE fields set");
  }
  EqeLayout l{};
  l.type = kEventTypePageFault;
  l.sub_type = static_cast<uint8_t>(e.subtype);
  l.owner = e.owner;
  PageFaultDataLayout d{};
  d.bytes_committed = be32::FromHost(e.bytes_committed);
  d.dw1 = be32::FromHost(wqe ? e.wqe_index : e.rkey);
  d.dw2 = be32::FromHost(e.packet_length);
  d.dw3 = be32::FromHost(wqe ? e.token : e.rdma_op_len);
  d.rdma_va_hi = be32::FromHost(static_cast<uint32_t>(e.rdma_va >> 32));
  d.rdma_va_lo = be32::FromHost(static_cast<uint32_t>(e.rdma_va));
  d.dw6 = be32::FromHost((uint32_t{e.type} << 24) | e.wq_number);
  std::memcpy(l.data, &d, sizeof(d));
  Eqe out;
  std::memcpy(out.data(), &l, sizeof(l));
  return out;
}

absl::StatusOr<PageFaultEvent> DecodePageFaultEqe(absl::Span<const uint8_t> eqe) {
  if (eqe.size() < sizeof(EqeLayout)) {
    return absl::InvalidArgumentError(absl::StrCat("EQE of ", eqe.size(), " B"));
  }
  EqeLayout l;
  std::memcpy(&l, eqe.data(), sizeof(l));
  if (l.type != kEventTypePageFault) {
    return absl::InvalidArgumentError(
        absl::StrCat("EQE type 0x", absl::Hex(l.type), " is not a page fault (0x0c)"));
  }
  if (l.sub_type > 1) {
    return absl::InvalidArgumentError(absl::StrCat("page fault sub_type ", l.sub_type));
  }
  PageFaultDataLayout d;
  std::memcpy(&d, l.data, sizeof(d));
  PageFaultEvent e;
  e.subtype = static_cast<PageFaultSubtype>(l.sub_type);
  e.owner = l.owner;
  e.bytes_committed = d.bytes_committed.ToHost();
  e.packet_length = static_cast<uint16_t>(d.dw2.GetBits(15, 0));
  e.type = static_cast<uint8_t>(d.dw6.GetBits(26, 24));
  e.wq_number = d.dw6.GetBits(23, 0);
  if (e.subtype == PageFaultSubtype::kWqe) {
    e.wqe_index = static_cast<uint16_t>(d.dw1.GetBits(15, 0));
    e.token = d.dw3.ToHost();
  } else {
    e.rkey = d.dw1.ToHost();
    e.rdma_op_len = d.dw3.ToHost();
    e.rdma_va = (uint64_t{d.rdma_va_hi.ToHost()} << 32) | d.rdma_va_lo.ToHost();
  }
  return e;
}

PageFaultResumeIn ResumeFor(const PageFaultEvent& e, bool error) {
  PageFaultResumeIn r;
  r.error = error;
  r.page_fault_type = e.type;
  r.wq_number = e.wq_number;
  r.token = e.subtype == PageFaultSubtype::kWqe ? (e.token & kMaxPageFaultToken) : e.wq_number;
  return r;
}

}  // namespace regcache::umr