#include "hca/mlx5emu/internal/images.h"

namespace regcache::hca::mlx5emu {
namespace {

// What both models report alike: 2^24 mkeys, four levels of indirection, KSM, 2^16 KLM entries
// per key, 1 KiB send WQEs, atomics, page faults, relaxed ordering, RC ODP for every operation.
Image Common() {
  Image i;
  umr::HcaCaps& c = i.general;
  c.log_max_mkey = 24;
  c.max_indirection = 4;
  c.fixed_buffer_size = true;
  c.log_max_mrw_sz = 64;
  c.umr_extended_translation_offset = true;
  c.log_max_klm_list_size = 16;
  c.atomic = true;
  c.pg = true;
  c.max_wqe_sz_sq = 1024;
  c.relaxed_ordering_write = true;
  c.relaxed_ordering_read = true;
  c.relaxed_ordering_write_umr = true;
  c.relaxed_ordering_read_umr = true;
  i.odp.rc = {.send = true, .receive = true, .write = true, .read = true, .atomic = true};
  i.odp.ud = {.send = true};
  i.max_qp_wr = 32768;
  i.max_qp_rd_atom = 16;
  i.max_cqe = (1 << 22) - 1;
  return i;
}

}  // namespace

Image ConnectX6Dx() {
  Image i = Common();
  i.model = "ConnectX-6 Dx";
  i.vendor_part_id = 0x101d;
  i.general.umr_fence = 1;  // UMRs carry the initiator small fence
  return i;
}

Image ConnectX7() {
  Image i = Common();
  i.model = "ConnectX-7";
  i.vendor_part_id = 0x1021;
  // The other branch of the backend's fence choice: a device that asks for no UMR fence.
  i.general.umr_fence = 2;
  i.general.crypto = true;
  return i;
}

}  // namespace regcache::hca::mlx5emu
