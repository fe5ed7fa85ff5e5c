// The software HCA's device core: the key table and its firmware commands, address translation
// (with ODP page faults), and the execution of one send-queue WQE from its bytes. It has no
// queues and no hca::Device face of its own. Two faces sit on it: the sim (sim_device.h: its
// own rings, driven through hca::Queue) and the emulated ConnectX (hca/mlx5emu: rdma-core's
// entry points, driven by the mlx5 backend's own writes). So both execute one model of the
// ConnectX memory-key path (docs/prm.md), never two.
//
// What the core checks is what the device checks (translator, UMR executor and command
// interface, each documented in its own header): a key's state, PD, range, rights and
// translation; a UMR's masks, alignment, free check and capacity; a mailbox's fields. The
// rules a device applies to a WQE beyond the UMR's own (its size against max_wqe_sz_sq, its
// fence, its queue number and index) are the face's choice, passed per WQE as SendRules.
//
// Thread safety: every method may be called concurrently (slots are locked one at a time).
#ifndef REGCACHE_HCA_SIM_SIM_CORE_H_
#define REGCACHE_HCA_SIM_SIM_CORE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "hca/device.h"
#include "hca/sim/sim_options.h"
#include "umr/caps.h"
#include "umr/segments.h"
#include "umr/sq.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {

struct CoreOptions {
  uint32_t max_keys = 1u << 16;  // key table slots (indices 0 and 1 are never handed out)
  uint32_t max_indirection = 4;  // KLM/KSM hops a translation follows
  absl::Duration fault_timeout = absl::Seconds(5);  // a parked access gives up
  // QUERY_HCA_CAP answers; without them the command is refused (BAD_PARAM).
  std::optional<umr::HcaCaps> general_caps;
  std::optional<umr::OdpCaps> odp_caps;
  // CREATE_MKEY of a PD AllocPd did not return: BAD_PARAM, as firmware checks the PD object.
  bool check_pd_on_create = false;
  // The longest KLM/KSM list a key may have (2^log_max_klm_list_size); 0: any.
  uint32_t max_klm_entries = 0;
};

// How a translation meets an absent page of an on-demand key.
enum class FaultPolicy {
  kPark,     // raise a page-fault event and wait for PAGE_FAULT_RESUME (the daemon serves it)
  kResolve,  // the kernel's ODP: make the page present (as Prefetch does) and go on
};

// The rules a device applies to each send WQE beyond those of the UMR itself.
struct SendRules {
  umr::UmrModifyCaps modify;  // what a UMR may change (umr_modify_*_disabled)
  // Bytes a WQE may have (max_wqe_sz_sq); 0: the ring's limit only. Larger: LOCAL_QP_OP.
  uint32_t max_wqe_bytes = 0;
  // The weakest fence a UMR may carry (from umr_fence); unset: any. Weaker: LOCAL_QP_OP.
  std::optional<umr::FenceMode> min_umr_fence;
  // False (umr_indirect_mkey_disabled): a UMR on a KLM/KSM key fails LOCAL_QP_OP.
  bool indirect_umr = true;
  // The queue's number: a WQE whose control segment names another fails LOCAL_QP_OP. Unset: any.
  std::optional<uint32_t> qpn;
  // A WQE whose wqe_index is not its producer position (mod 2^16) fails LOCAL_QP_OP.
  bool check_wqe_index = false;
  // How the list of a pointer-mode UMR is read when its pages are absent.
  FaultPolicy pointer_faults = FaultPolicy::kPark;
  // The face's own rule for a UMR that passed the others (a hardware behaviour it models); a
  // failure is the WQE's status and the key is left as it was. Null: none.
  std::function<absl::Status(const umr::WqeDesc& wqe)> umr_check;
};

// What executing one WQE did.
struct WqeResult {
  uint32_t wqebbs = 1;               // how far the producer position moves
  bool signaled = true;              // a CQE is due (an error always gets one)
  uint8_t opcode = umr::kOpcodeUmr;  // the WQE's opcode, for the CQE
  bool local_invalidate = false;     // a UMR that only set free
  absl::Status status;               // DeviceError (syndrome, vendor syndrome) on failure
};

class HcaCore {
 public:
  static absl::StatusOr<std::unique_ptr<HcaCore>> Create(const CoreOptions& options);
  ~HcaCore();
  HcaCore(const HcaCore&) = delete;
  HcaCore& operator=(const HcaCore&) = delete;

  SimStats& stats();
  const CoreOptions& options() const;

  // --- protection domains ---
  uint32_t AllocPd();
  absl::Status DeallocPd(uint32_t pdn);  // kNotFound for an unknown one
  bool HasPd(uint32_t pdn) const;

  // --- firmware commands (commands.h): PRM mailboxes in and out ---
  // `on_demand` marks a created MTT key as an ODP key (on hardware the kernel's MR flag).
  absl::Status RunCommand(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                          bool on_demand = false);
  // CREATE_MKEY from `mailbox`; returns the index and counts the key live.
  absl::StatusOr<uint32_t> CreateMkey(absl::Span<const uint8_t> mailbox, bool on_demand = false);
  // DESTROY_MKEY of `index` (kNotFound when no such key).
  absl::Status DestroyMkey(uint32_t index);
  // The CREATE_MKEY input of a live MTT key over [addr, addr+length) of this process, pages of
  // 2^log_page_size, every entry present (pinned) or, on demand, every entry absent: what a
  // kernel's ibv_reg_mr makes.
  static absl::StatusOr<std::vector<uint8_t>> MttKeyMailbox(uint32_t pdn, uint64_t addr,
                                                            uint64_t length, AccessFlags access,
                                                            unsigned log_page_size, bool on_demand);
  // The same with the key's addresses starting at `iova` rather than `addr` (ibv_reg_mr_iova2,
  // ibv_reg_dmabuf_mr): start_addr = iova, the translation still `addr`'s pages.
  // kInvalidArgument unless iova and addr lie at the same offset within a page.
  static absl::StatusOr<std::vector<uint8_t>> MttKeyMailboxAt(uint32_t pdn, uint64_t addr,
                                                              uint64_t iova, uint64_t length,
                                                              AccessFlags access,
                                                              unsigned log_page_size,
                                                              bool on_demand);

  // --- accesses ---
  // Translates [va, va+len) of `key` for an access of `kind` arriving on queue pair `qpn` in PD
  // `pdn`. Absent pages of an on-demand key are handled by `policy`. DeviceError on refusal.
  absl::Status Translate(uint32_t pdn, uint32_t qpn, Key key, uint64_t va, uint64_t len,
                         AccessKind kind, FaultPolicy policy, Segments* out);
  // A local read through `lkey`, as the DMA engine reads a local SGE or a UMR's list.
  absl::Status ReadThroughLkey(uint32_t pdn, uint32_t qpn, Key lkey, uint64_t addr,
                               absl::Span<uint8_t> out, FaultPolicy policy);
  // Makes [addr, addr+length) of an on-demand backing present (writable if `write`).
  absl::Status Prefetch(Key backing, uint64_t addr, uint64_t length, bool write);
  // The responder's half of SEND with invalidate: frees `rkey` if it may.
  absl::Status InvalidateRemote(uint32_t pdn, Key rkey);

  // --- send queues ---
  // Executes the WQE at `counter` of `ring` (a whole number of 64-byte WQEBBs) for a queue of
  // PD `pdn`: NOP and UMR run, any other opcode fails LOCAL_QP_OP. `take_injected` (may be
  // null) is asked once per UMR that passed the WQE checks: a syndrome other than kNone fails it
  // with that instead (a test's fault). The WQE is read from `ring` once, into `scratch` where
  // it wraps.
  WqeResult ExecuteSendWqe(uint32_t pdn, absl::Span<const uint8_t> ring, uint32_t counter,
                           const SendRules& rules, const std::function<Syndrome()>& take_injected,
                           umr::WqeScratch* scratch);

  // --- ODP page-fault events (fault_queue.h) ---
  absl::StatusOr<FaultEvent> NextFaultEvent(absl::Duration timeout);
  int FaultEventFd() const;
  // The PAGE_FAULT_RESUME input answering a delivered event.
  absl::StatusOr<std::vector<uint8_t>> ResumeMailbox(uint64_t token, bool error);
  std::vector<uint8_t> EventRingForTest();

 private:
  struct Impl;
  explicit HcaCore(std::unique_ptr<Impl> impl);
  // Whether `key` names an MTT key (or none: the UMR executor gives that its own error).
  bool IsMttKey(Key key) const;
  std::unique_ptr<Impl> impl_;
};

// The data movement of an access, once translated.
void CopyIn(const Segments& segs, absl::Span<const uint8_t> data);
void CopyOut(const Segments& segs, absl::Span<uint8_t> out);
// An 8-byte atomic at the one aligned location `segs` names (else REMOTE_INVAL_REQ): compare
// and swap (a = compare, b = swap) or fetch and add (a = addend). Returns the old value.
absl::StatusOr<uint64_t> AtomicAt(const Segments& segs, bool compare_swap, uint64_t a, uint64_t b);

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_SIM_CORE_H_
