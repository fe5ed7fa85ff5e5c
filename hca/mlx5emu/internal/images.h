// What each emulated model reports: its QUERY_HCA_CAP answers (general and ODP capability
// unions, as umr/caps.h encodes them) and its verbs attributes (ibv_query_device_ex,
// ibv_query_port), kept consistent with each other. docs/mlx5emu.md says where the values come
// from and which are choices rather than firmware facts.
//
// Thread safety: pure data.
#ifndef REGCACHE_HCA_MLX5EMU_INTERNAL_IMAGES_H_
#define REGCACHE_HCA_MLX5EMU_INTERNAL_IMAGES_H_

#include <cstdint>
#include <string>

#include "umr/caps.h"

namespace regcache::hca::mlx5emu {

struct Image {
  std::string model;  // "ConnectX-6 Dx"
  umr::HcaCaps general;
  umr::OdpCaps odp;
  uint32_t vendor_part_id = 0;  // PCI device id
  uint32_t max_qp_wr = 0;
  int max_qp_rd_atom = 0;
  int max_cqe = 0;
  uint32_t log_max_mkey_emulated = 16;  // the key table the emulator really allocates
};

// The two models: a ConnectX-6 Dx and a ConnectX-7.
Image ConnectX6Dx();
Image ConnectX7();

}  // namespace regcache::hca::mlx5emu
#endif  // REGCACHE_HCA_MLX5EMU_INTERNAL_IMAGES_H_
