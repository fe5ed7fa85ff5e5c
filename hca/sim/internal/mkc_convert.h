// Conversion between umr's decoded mkey context (umr::MkeyContextDesc) and the sim's stored
// MkeyState, the access-bit mapping between umr::MkeyAccess and hca::AccessFlags, and the
// translation entries between hca's (hca::KlmEntry, hca::MttEntry: what callers pass) and umr's
// codec descriptors (umr::KlmEntry, umr::KsmEntry, umr::MttEntry: what the WQE bytes hold). The
// sim converts here and nowhere else.
//
// Thread safety: pure functions.
#ifndef REGCACHE_HCA_SIM_MKC_CONVERT_H_
#define REGCACHE_HCA_SIM_MKC_CONVERT_H_

#include "hca/device.h"
#include "hca/sim/internal/mkey_table.h"
#include "umr/segments.h"

namespace regcache::hca::sim {

AccessFlags FromMkeyAccess(const umr::MkeyAccess& a);
umr::MkeyAccess ToMkeyAccess(AccessFlags access);

MkeyState FromMkc(const umr::MkeyContextDesc& d);
umr::MkeyContextDesc ToMkc(const MkeyState& s);

// REQUIRES (KLM): e.length <= umr::kMaxKlmByteCount (the caller checks; higher bits are dropped).
umr::KlmEntry ToUmrKlm(const KlmEntry& e);
umr::KsmEntry ToUmrKsm(const KlmEntry& e);
umr::MttEntry ToUmrMtt(const MttEntry& e);
// KSM entries come back with length 0 (KeyInfo::klm's convention).
KlmEntry FromUmrKlm(const umr::KlmEntry& e);
KlmEntry FromUmrKsm(const umr::KsmEntry& e);
MttEntry FromUmrMtt(const umr::MttEntry& e);

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_MKC_CONVERT_H_
