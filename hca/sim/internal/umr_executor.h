// Executes one decoded UMR WQE against the key table — the device side of umr/wqe_builder.h.
//
// Semantics (docs/prm.md, UMR WQE; Invalidation): the target is found by the INDEX in ctrl.imm.
// Under the target slot's exclusive lock, in this order:
//   the index is a created key; umr_en = 1; the key's PD equals the posting queue's PD; the
//   free-check condition of the UMR control segment (1: must be free, 2: must not be free); no
//   PD change (mask bit 7 is for REG_UMR queues only); only modelled mask bits; the translation
//   data is inline, 64-byte aligned in size and offset, and fits the key's
//   translations_octword_size at the translation offset.
// Any failure returns the DeviceError (MW_BIND 0x06 for key state, LOCAL_QP_OP 0x02 for the WQE
// itself) and leaves the key exactly as it was. Success applies every mkc field selected by the
// mask (LEN+length64, PAGE_SIZE, START_ADDR, EN_RINVAL, KEY, QPN, LR, LW, RR, RW, A, FREE,
// SMALL_FENCE / relaxed ordering accepted and ignored) and writes the translation entries,
// decoded for the key's access mode, at the offset.
//
// Thread safety: may run concurrently with translations and other executors.
#ifndef REGCACHE_HCA_SIM_UMR_EXECUTOR_H_
#define REGCACHE_HCA_SIM_UMR_EXECUTOR_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "hca/sim/internal/mkey_table.h"
#include "umr/wqe_builder.h"

namespace regcache::hca::sim {

struct UmrOutcome {
  bool local_invalidate = false;  // the WQE only set free = 1
};

// `allowed`: what the device lets a UMR change; a WQE whose mkey_mask selects A or PAGE_SIZE
// against it fails with LOCAL_QP_OP and changes nothing.
// A UMR in pointer mode names its translation by a data segment: `read_local` reads those bytes
// as the device's DMA engine does, through the segment's lkey in the queue's PD (a local read
// access, checked like any other); null refuses pointer mode.
using ReadLocal = std::function<absl::Status(uint32_t lkey, uint64_t addr, absl::Span<uint8_t>)>;

absl::Status ExecuteUmr(MkeyTable* table, uint32_t queue_pd, const umr::WqeDesc& wqe,
                        umr::UmrModifyCaps allowed, UmrOutcome* outcome,
                        const ReadLocal& read_local = nullptr);

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_UMR_EXECUTOR_H_
