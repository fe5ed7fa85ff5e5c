// ODP page faults in the sim as PRM bytes: the page-fault EQEs the device raises and the
// PAGE_FAULT_RESUME that answers them (docs/prm.md, Page faults (ODP)), both through
// umr/odp_event.h.
//
// Device side. An access that meets an absent MTT entry of an on-demand key parks (Park). The
// device writes a 64-byte page-fault EQE (umr::EncodePageFaultEqe) into its event ring, with an
// owner bit per pass as an mlx5 EQ (entries start with owner 1, the driver's init value, so
// nothing is valid before the first write), and makes the eventfd readable:
//   - a remote access (peer READ / WRITE / atomic through an rkey): RDMA-responder subtype with
//     r_key, rdma_va, rdma_op_len = the bytes needed, type RDMA (| WRITE for writes and atomics);
//     wq_number is the token (on hardware the stalled responder QP's number);
//   - a local access (an SGE through an lkey): WQE subtype with wq_number = the peer's QPN, the
//     token, and wqe_index naming the faulting WQE, which the device leaves in its requester WQE
//     ring (a control segment and one data segment: lkey, addr, byte_count) where the driver
//     reads it back, as the kernel copies the WQE from the user SQ; type REQUESTOR (| WRITE when
//     the access writes local memory).
// The key and address reported are those of the level that faulted (the backing's MTT key and
// the address in its space): what the kernel finds after walking an indirect chain.
// Lengths above 2^31 - 1 are reported as 2^31 - 1 (a data segment's limit); the access faults
// again for the rest. Tokens are 24 bits, unique among parked accesses.
// A parked access waits for a PAGE_FAULT_RESUME naming its token (Resume, executed by the
// command path from mailbox bytes): error = 1 fails it, error = 0 retries it. It gives up after
// `timeout` (kDeadlineExceeded); its EQE then stays in the ring and Next skips it.
//
// Host ("driver") side. Next decodes the next valid EQE (and, for a WQE fault, the WQE) into an
// hca::FaultEvent and remembers the decoded event, so ResumeCommandFor can answer it with
// umr::ResumeFor as a fault servicer on hardware would.
//
// Thread safety: all methods may be called concurrently (one lock; Park waits without it).
#ifndef REGCACHE_HCA_SIM_FAULT_QUEUE_H_
#define REGCACHE_HCA_SIM_FAULT_QUEUE_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/unique_fd.h"
#include "hca/device.h"
#include "hca/sim/internal/translator.h"
#include "hca/sim/sim_options.h"
#include "umr/odp_event.h"
#include "umr/prm.h"

namespace regcache::hca::sim {

class FaultQueue {
 public:
  static constexpr uint32_t kDepth = 1024;  // EQEs (and requester WQEBBs); a power of two
  // The longest fault reported: a data segment's byte_count (bit 31 is the inline marker).
  static constexpr uint32_t kMaxFaultLength = umr::kInlineSegBit - 1;

  // `stats` must outlive this.
  FaultQueue(SimStats* stats, absl::Duration timeout);
  ~FaultQueue();
  FaultQueue(const FaultQueue&) = delete;
  FaultQueue& operator=(const FaultQueue&) = delete;

  // Readable (eventfd) while EQEs are pending.
  int fd() const { return event_fd_.get(); }

  // Device side. Raises the event for `need` (`qpn`: the accessing peer's QP) and waits for its
  // resume: OK (retry), DeviceError kRemoteAccess / kLocalProt with vendor 0x93 (resumed with
  // error), kDeadlineExceeded (not resumed within the timeout, including waiting for ring room).
  absl::Status Park(const FaultNeed& need, AccessKind kind, uint32_t qpn);
  // Executes a decoded PAGE_FAULT_RESUME: kNotFound when no access is parked on in.token (or it
  // was resumed already), kInvalidArgument when wq_number or page_fault_type differ from the
  // fault's.
  absl::Status Resume(const umr::PageFaultResumeIn& in);

  // Host side. Waits up to `timeout` for the next EQE of a still parked access.
  absl::StatusOr<FaultEvent> Next(absl::Duration timeout);
  // The resume command for a token Next delivered (forgotten once returned): kNotFound for
  // any other token.
  absl::StatusOr<umr::PageFaultResumeIn> ResumeCommandFor(uint64_t token, bool error);

  // A copy of the event ring (kDepth x 64 bytes, slot order).
  std::vector<uint8_t> EventRingForTest();

 private:
  using Wqebb = std::array<uint8_t, umr::kWqebb>;
  struct Parked {
    uint32_t eqe_counter = 0;  // which EQE announced it (older EQEs with its token are stale)
    uint8_t type = 0;
    uint32_t wq_number = 0;
    bool resumed = false;
    bool ok = false;
  };

  // Writes the EQE (and the WQE) for `need` at the producer position. Returns the token.
  uint32_t Raise(const FaultNeed& need, AccessKind kind, uint32_t qpn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decodes the EQE at the consumer position into *ev; returns its token.
  uint32_t Decode(FaultEvent* ev, umr::PageFaultEvent* raw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SimStats* const stats_;
  const absl::Duration timeout_;
  const base::UniqueFd event_fd_;

  base::Mutex mu_;
  base::CondVar cv_;  // EQE produced / consumed, access resumed
  std::unique_ptr<umr::Eqe[]> eq_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Wqebb[]> requester_wqes_ ABSL_GUARDED_BY(mu_);  // by EQE slot
  uint32_t eq_producer_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t eq_consumer_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint32_t, Parked> parked_ ABSL_GUARDED_BY(mu_);  // device side
  // Host side: events Next returned and nobody resumed yet; every token is also in parked_.
  std::map<uint32_t, umr::PageFaultEvent> delivered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_FAULT_QUEUE_H_
