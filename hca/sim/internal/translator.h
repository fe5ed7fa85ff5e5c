// The sim's address translation: from (PD, key, address, length, kind of access) to the host memory
// the access touches, following the ConnectX memory-key path (docs/prm.md, Mkey context (MKC),
// Access modes, Translation entries).
//
// For the requested key and again for every key reached through a KLM/KSM entry, the checks run
// in this order (the first that fails decides the error):
//   1. the index names a created key, and its variant equals the key's low byte (mkey_7_0);
//   2. the key is not free;
//   3. the key's PD is the PD of the queue pair the access arrives on;
//   4. range: start_addr <= va and va+len <= start_addr+len (2^64 with length64), computed
//      without 64-bit wrap-around, and va+len itself must not wrap;
//   5. access bits: lr always; lw for a local write; rr / rw / a for a remote read / write /
//      atomic;
//   6. translation by access mode:
//      MTT (1): P = 2^log_entity_size, S = start_addr, u = (va−S) + (S mod P), i = ⌊u/P⌋,
//               δ = u mod P, address = ptag(MTT[i]) + δ; MTT[i] must have rd_en for a read and
//               wr_en for a write (absent entries of an on-demand key raise a page fault);
//               accesses crossing pages continue at i+1 with δ = 0;
//      KLM (2): d = va−S, entry j with T[j] <= d < T[j]+n[j] (T = prefix sum of byte counts),
//               continues in (mkey[j], address[j] + d − T[j]); crossing entries continue at j+1;
//      KSM (3): B = 2^log_entity_size, j = ⌊d/B⌋, continues in (key[j], va[j] + d mod B);
//   7. a key reached through more than max_indirection KLM/KSM hops fails.
// Failures are DeviceError with kRemoteAccess (0x13) for remote kinds and kLocalProt (0x04) for
// local ones; the message names the key, the check and the values.
//
// Thread safety: Translate may run concurrently with itself and with UMRs/commands; it reads each
// slot under that slot's shared lock only while it copies what it needs (no lock is held across
// levels or during the data movement, so as on hardware an access that already translated is not
// stopped by a later invalidation).
#ifndef REGCACHE_HCA_SIM_TRANSLATOR_H_
#define REGCACHE_HCA_SIM_TRANSLATOR_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "hca/device.h"
#include "hca/sim/internal/mkey_table.h"
#include "hca/sim/sim_options.h"

namespace regcache::hca::sim {

// Where an on-demand key needs a page: reported instead of an error.
struct FaultNeed {
  Key key = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  bool write = false;
};

class Translator {
 public:
  // `table` must outlive the translator.
  Translator(const MkeyTable* table, uint32_t max_indirection)
      : table_(table), max_indirection_(max_indirection) {}

  // Translates [va, va+len) of `key` for an access of `kind` arriving in PD `pd`. On success
  // appends the host segments, in address order, to *out (adjacent ones merged). On failure
  // returns the DeviceError; if the failure is an absent page of an on-demand key, *fault is
  // set as well (the status is then kUnavailable "page fault") and the caller may park and retry.
  // A zero-length access performs the key checks of the requested key only.
  absl::Status Translate(uint32_t pd, Key key, uint64_t va, uint64_t len, AccessKind kind,
                         Segments* out, std::optional<FaultNeed>* fault) const;

 private:
  absl::Status Walk(uint32_t pd, Key key, uint64_t va, uint64_t len, AccessKind kind,
                    uint32_t depth, Segments* out, std::optional<FaultNeed>* fault) const;

  const MkeyTable* const table_;
  const uint32_t max_indirection_;
};

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_TRANSLATOR_H_
