// Between the device boundary's values (hca/device.h) and umr/'s PRM descriptors: the access
// bits, translation entries, the CREATE_MKEY parameters of a pooled key and the decoded
// QUERY_MKEY image. Every backend that speaks PRM bytes (the sim, which executes them, and mlx5,
// which hands them to firmware and hardware) converts here, so both produce the same bytes for
// the same request.
//
// Thread safety: pure functions.
#ifndef REGCACHE_HCA_PRM_CONVERT_H_
#define REGCACHE_HCA_PRM_CONVERT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "hca/device.h"
#include "umr/mailbox.h"
#include "umr/segments.h"

namespace regcache::hca {

AccessFlags FromMkeyAccess(const umr::MkeyAccess& a);
umr::MkeyAccess ToMkeyAccess(AccessFlags access);

// REQUIRES (KLM): e.length <= umr::kMaxKlmByteCount (the caller checks; higher bits are dropped).
umr::KlmEntry ToUmrKlm(const KlmEntry& e);
umr::KsmEntry ToUmrKsm(const KlmEntry& e);
umr::MttEntry ToUmrMtt(const MttEntry& e);
// KSM entries come back with length 0 (KeyInfo::klm's convention).
KlmEntry FromUmrKlm(const umr::KlmEntry& e);
KlmEntry FromUmrKsm(const umr::KsmEntry& e);
MttEntry FromUmrMtt(const umr::MttEntry& e);

// The CREATE_MKEY parameters of `CreateIndirectKeys(pd, capacity, ..., options)` on a device
// whose keys hold up to `max_klm_entries`: free, umr_en, variant 0, KLM or KSM.
// kInvalidArgument for a capacity outside 1..max_klm_entries, a kMtt layout or a KSM entity
// size outside 12..31.
absl::StatusOr<umr::FreeMkeyParams> IndirectKeyParams(Pd pd, uint32_t capacity,
                                                      uint32_t max_klm_entries,
                                                      const IndirectKeyOptions& options);
// The same for CreateDirectKeys: an MTT key honouring per-entry rights (pg_access), so maps may
// carry absent entries. kInvalidArgument for a capacity outside 1..2^30 or a page size outside
// 12..31.
absl::StatusOr<umr::FreeMkeyParams> DirectKeyParams(Pd pd, uint32_t capacity,
                                                    const DirectKeyOptions& options);
// The CREATE_MKEY input mailbox of `p` (umr::BuildCreateFreeMkey, encoded); its range errors
// are the caller's REQUIRES (kInvalidArgument).
absl::StatusOr<std::vector<uint8_t>> PoolKeyMailbox(const umr::FreeMkeyParams& p);

// The KeyInfo of key index `index` from its decoded QUERY_MKEY output. kInvalidArgument when the
// translation is malformed.
absl::StatusOr<KeyInfo> KeyInfoFromQuery(uint32_t index, const umr::QueryMkeyOut& out);

}  // namespace regcache::hca
#endif  // REGCACHE_HCA_PRM_CONVERT_H_
