// Conversion between umr's decoded mkey context (umr::MkeyContextDesc) and the sim's stored
// MkeyState. Access bits and translation entries convert with hca/prm_convert.h, as the mlx5
// backend's do.
//
// Thread safety: pure functions.
#ifndef REGCACHE_HCA_SIM_MKC_CONVERT_H_
#define REGCACHE_HCA_SIM_MKC_CONVERT_H_

#include "hca/device.h"
#include "hca/prm_convert.h"
#include "hca/sim/internal/mkey_table.h"
#include "umr/segments.h"

namespace regcache::hca::sim {

MkeyState FromMkc(const umr::MkeyContextDesc& d);
umr::MkeyContextDesc ToMkc(const MkeyState& s);

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_MKC_CONVERT_H_
