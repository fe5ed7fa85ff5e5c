// The sim's key table: the memory protection table of a ConnectX, indexed by the 24-bit mkey
// index, each slot holding the decoded (host-order) mkey context and its translation table.
//
// Who writes a slot. The command path (commands.h: CREATE_MKEY fills it, DESTROY_MKEY clears it)
// and the UMR executor (umr_executor.h) decode PRM bytes with umr/ and write MkeyState and the
// translation table. Two device-side paths in sim_device.cc write a slot directly, as the HCA or
// the kernel would: a SEND with invalidate sets the target key's `free` on the responder, and
// Device::Prefetch writes the MTT entries of an on-demand backing (the sim's stand-in for the
// kernel's ibv_advise_mr; odp/ on the sim makes pages present with UMRs instead). The translator
// (translator.h) and QUERY_MKEY only read. The cache never touches the table: it changes keys
// only through queue requests (UMRs) and commands.
//
// Thread safety: the table is safe for concurrent use. Each slot has its own reader/writer lock:
// translations take it shared for a few loads (no global lock on the access path), every writer
// takes it exclusively (a UMR or a command for the whole check-and-commit of one WQE), so a failing
// WQE leaves the slot unchanged and a reader never sees half an update. Slot allocation uses one
// table lock.
#ifndef REGCACHE_HCA_SIM_MKEY_TABLE_H_
#define REGCACHE_HCA_SIM_MKEY_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "hca/device.h"
#include "umr/mkey.h"
#include "umr/prm.h"
#include "umr/segments.h"

namespace regcache::hca::sim {

// The decoded mkey context fields the model uses (PRM names; docs/prm.md, Mkey context (MKC)).
struct MkeyState {
  bool free = true;
  bool umr_en = false;
  uint8_t access_mode = 0;  // umr::kAccessModeMtt, kAccessModeKlm or kAccessModeKsm
  AccessFlags access = 0;   // lr/lw/rr/rw/a as hca::AccessBits
  uint8_t variant = 0;      // mkey_7_0
  uint32_t qpn = umr::kQpnUnbound;
  uint32_t pd = 0;
  bool length64 = false;
  bool en_rinval = false;
  uint64_t start_addr = 0;
  uint64_t len = 0;
  uint32_t translations_octword_size = 0;
  uint8_t log_entity_size = 0;
};

// The stored form of one MTT entry: the page address with umr::kMttRead / kMttWrite in its low
// bits (the entry's 8 bytes read big-endian).
inline uint64_t StoredMtt(const umr::MttEntry& e) {
  return e.addr | (e.read ? umr::kMttRead : 0) | (e.write ? umr::kMttWrite : 0);
}
inline umr::MttEntry LoadedMtt(uint64_t stored) {
  return umr::MttEntry{stored & umr::kMttAddrMask, (stored & umr::kMttRead) != 0,
                       (stored & umr::kMttWrite) != 0};
}
// A KSM entry as the slot's KLM table holds it (byte_count 0: the entity size applies).
inline umr::KlmEntry StoredKsm(const umr::KsmEntry& e) { return umr::KlmEntry{0, e.mkey, e.va}; }

struct MkeySlot {
  mutable base::Mutex mu;
  bool exists ABSL_GUARDED_BY(mu) = false;
  // Set by RegisterBacking(on_demand): an absent MTT entry faults instead of failing. Like
  // hardware, this is not an MKC bit (docs/prm.md, Page faults (ODP)).
  bool on_demand ABSL_GUARDED_BY(mu) = false;
  MkeyState state ABSL_GUARDED_BY(mu);
  // MTT keys: one BE-decoded entry per page (address | umr::kMttWrite | umr::kMttRead);
  // capacity entries.
  std::vector<uint64_t> mtt ABSL_GUARDED_BY(mu);
  // KLM/KSM keys: capacity entries, host order (KSM entries have byte_count 0);
  // klm_end[j] = T[j] + n[j] (KLM prefix sums).
  std::vector<umr::KlmEntry> klm ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> klm_end ABSL_GUARDED_BY(mu);

  // Recomputes klm_end after the KLM entries changed.
  void RecomputeKlmEnds() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Number of translation entries the state's octoword size holds.
  static uint32_t CapacityEntries(const MkeyState& s);
};

class MkeyTable {
 public:
  // Indices 0 and 1 are never handed out (key 0x100 is MLX5_INVALID_LKEY). REQUIRES: 2 < size.
  explicit MkeyTable(uint32_t size);

  uint32_t size() const { return size_; }

  // Reserves a free index (lowest first after the most recently freed are used: FIFO of freed
  // indices, then never-used ones). kResourceExhausted when full.
  absl::StatusOr<uint32_t> Allocate();
  // Returns an index to the allocator. REQUIRES: the slot's `exists` was cleared.
  void Release(uint32_t index);

  // The slot of `index`, or nullptr when out of range. Slots live as long as the table.
  MkeySlot* Slot(uint32_t index) const { return index < size_ ? &slots_[index] : nullptr; }

  uint32_t live_count() const;

 private:
  const uint32_t size_;
  std::unique_ptr<MkeySlot[]> slots_;
  mutable base::Mutex mu_;
  std::vector<uint32_t> freed_ ABSL_GUARDED_BY(mu_);  // FIFO (front = oldest)
  size_t freed_head_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t next_unused_ ABSL_GUARDED_BY(mu_) = umr::KeyIndex(umr::kInvalidLkey) + 1;
  uint32_t live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_MKEY_TABLE_H_
