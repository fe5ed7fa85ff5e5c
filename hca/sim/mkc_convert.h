// Conversion between umr's decoded mkey context (umr::MkeyContextDesc) and the sim's stored
// MkeyState, plus the access-bit mapping between umr::MkeyAccess and hca::AccessFlags.
//
// Thread safety: pure functions.
#ifndef REGCACHE_HCA_SIM_MKC_CONVERT_H_
#define REGCACHE_HCA_SIM_MKC_CONVERT_H_

#include "hca/device.h"
#include "hca/sim/mkey_table.h"
#include "umr/segments.h"

namespace hca::sim {

AccessFlags FromMkeyAccess(const umr::MkeyAccess& a);
umr::MkeyAccess ToMkeyAccess(AccessFlags access);

MkeyState FromMkc(const umr::MkeyContextDesc& d);
umr::MkeyContextDesc ToMkc(const MkeyState& s);

}  // namespace hca::sim

#endif  // REGCACHE_HCA_SIM_MKC_CONVERT_H_
