// hca/sim — the software HCA: a model of the ConnectX memory-key path (docs/prm.md) that executes
// the PRM bytes umr/ builds. It is the embedded default device of regcached and the device every
// unit test runs against.
//
// What it models (see translator.h for the access checks, umr_executor.h for UMR semantics):
//   - a key table of mkey contexts indexed by the 24-bit index; CREATE / QUERY / DESTROY_MKEY
//     are executed from PRM mailbox bytes (commands.h) that the device's own methods encode
//     with umr/mailbox.h, as the DevX backend does;
//   - send queues as real rings of 64-byte WQEBBs: Post* build WQEs with umr/ builders into the
//     ring, Doorbell() publishes the producer index, the engine gathers and decodes the bytes
//     with umr/ decoders and executes them; completions are 64-byte CQEs in a CQ ring with an
//     owner bit, written with umr::EncodeCqe and polled back with umr::DecodeCqe;
//   - two execution modes: kInline (the doorbell executes in the caller's thread: deterministic
//     tests) and kThread (each queue has an engine thread: realistic concurrency);
//   - the peer data path: RDMA READ/WRITE, 8-byte atomics and SEND with invalidate through rkeys,
//     local SGE access through lkeys, moving real bytes (DMA address = this process's VA);
//   - ODP: on-demand backings start with absent MTT entries; an access needing one raises a
//     page-fault EQE into the device's event ring and parks (fault_queue.h); NextFaultEvent
//     decodes the EQE, ResumeFault answers with a PAGE_FAULT_RESUME mailbox that the command
//     path executes: error 0 retries the access, error 1 fails it with vendor syndrome 0x93;
//   - target endpoints (endpoints.h): responder RC queue pairs in a PD with a QP number from the
//     device's QP number space, a GID of the sim's RoCE port and a random PSN; and, for tests, a
//     simulated remote node (CreateRemoteQp) whose one-sided operations reach a session's memory
//     only through such an endpoint;
//   - fault injection and counters.
//
// Syndromes the sim chooses where the PRM sources read do not say (docs/prm.md, Open points
// and the sim's choices):
//   access through a bad rkey (any check)      REMOTE_ACCESS 0x13   kPermissionDenied
//   access through a bad lkey                  LOCAL_PROT 0x04      kPermissionDenied
//   UMR on a key whose state refuses it        MW_BIND 0x06         kFailedPrecondition
//     (no such index, umr_en 0, free-check failed, queue PD != key PD, capacity exceeded,
//      PD change from an ordinary queue)
//   malformed or unsupported WQE               LOCAL_QP_OP 0x02     kInvalidArgument
//   misaligned atomic; SEND-with-invalidate    REMOTE_INVAL_REQ 0x12 kInvalidArgument
//     of a key without en_rinval (or free, other PD, wrong variant)
//   ODP fault resumed with error               REMOTE_ACCESS / LOCAL_PROT + vendor 0x93
//                                                                   kUnavailable
//   remote-node access to an endpoint that is  WR_FLUSH 0x05        kAborted
//     gone or not connected to that requester    (hardware: transport retry exceeded, then
//                                                 every later request flushed)
//   remote-node access the endpoint's          REMOTE_ACCESS 0x13   kPermissionDenied
//     remote_access does not allow
// UMRs locate their target by index only (the variant in ctrl.imm is not compared; docs/prm.md,
// Open points and the sim's choices).
// After an error completion the queue keeps executing (the sim does not model the QP error
// state; the device.h contract lets a real backend flush and recover instead).
//
// Thread safety: as hca::Device. Test hooks (…ForTest) may be called from any thread.
#ifndef REGCACHE_HCA_SIM_SIM_DEVICE_H_
#define REGCACHE_HCA_SIM_SIM_DEVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/stats.h"
#include "hca/backend.h"
#include "hca/device.h"
#include "hca/sim/sim_options.h"

namespace regcache::hca::sim {

// A requester queue pair on a simulated remote node (test-only): the other side of a target
// endpoint. It has its own address (what a client hands the daemon as the peer's); Connect
// gives the Peer through which its one-sided operations (Write, Read, CompareSwap, FetchAdd)
// arrive at the endpoint whose address is named. Every access succeeds only while that endpoint
// exists, is connected to exactly this queue pair (QPN, GID, PSN) and allows the operation, and
// then as the rkey allows in the endpoint's PD; otherwise it fails with the syndromes listed
// above. SendWithInvalidate is kUnimplemented (an endpoint posts no receives) and so are the
// local calls (a remote node has no local keys on this device). The Peer outlives the RemoteQp
// (it is the connected queue pair) but not the device.
class RemoteQp {
 public:
  virtual ~RemoteQp() = default;
  virtual const EndpointAddress& local() const = 0;
  // Once (kFailedPrecondition after that); kInvalidArgument for a malformed address (as
  // Endpoint::Connect). Succeeds whether or not the endpoint exists: as on hardware, only the
  // traffic finds out.
  virtual absl::StatusOr<std::unique_ptr<Peer>> Connect(const EndpointAddress& endpoint) = 0;
};

class SimDevice : public Device {
 public:
  virtual const SimStats& stats() const = 0;

  // A requester on the remote node: the remote node's GID, a fresh QP number of the remote
  // node's own number space, a random PSN, MTU 4096.
  virtual std::unique_ptr<RemoteQp> CreateRemoteQp() = 0;
  // A requester that plays the peer with address `as` (the one a client named when it asked
  // for an endpoint). kInvalidArgument for a malformed address.
  virtual absl::StatusOr<std::unique_ptr<RemoteQp>> CreateRemoteQpAs(const EndpointAddress& as) = 0;

  // Fault injection. Each applies to the next matching event device-wide.
  // The next UMR WQE executed fails with `syndrome` and changes nothing.
  virtual void FailNextUmrForTest(Syndrome syndrome) = 0;
  // Every completion becomes visible `delay` after its WQE executed (zero: off).
  virtual void DelayCompletionsForTest(absl::Duration delay) = 0;
  // The next ResumeFault(token, true) acts as ResumeFault(token, false).
  virtual void FailNextResumeForTest() = 0;

  // Raw PRM access, for tests that prove the device speaks the bytes a DevX backend would.
  // Executes one command input mailbox (CREATE/QUERY/DESTROY_MKEY, PAGE_FAULT_RESUME) as
  // mlx5dv_devx_obj_create / _query / _destroy / devx_general_cmd hand it over; `*out` receives
  // the output mailbox (status and syndrome on failure). The live_keys gauge is not adjusted.
  virtual absl::Status ExecuteCommandForTest(absl::Span<const uint8_t> in,
                                             std::vector<uint8_t>* out) = 0;
  // A copy of the page-fault event ring: FaultQueue::kDepth 64-byte EQEs in slot order.
  virtual std::vector<uint8_t> EventRingForTest() = 0;
};

// A sim device with `options`; `open` gives the stats registry.
absl::StatusOr<std::unique_ptr<SimDevice>> NewSimDevice(const SimOptions& options,
                                                        const OpenOptions& open = {});

// The remote node's side of an endpoint, for code that holds the device as an hca::Device (the
// daemon's simulated peer): a requester playing `as`, connected to the endpoint at `endpoint`.
// kUnimplemented when `device` is not a sim device; errors as CreateRemoteQpAs and Connect.
absl::StatusOr<std::unique_ptr<Peer>> ConnectRemotePeer(Device* device, const EndpointAddress& as,
                                                        const EndpointAddress& endpoint);

// Registers the "sim" backend with hca::OpenDevice. Idempotent; call it from the binary that
// wants the backend (see hca/backend.h on why registration is explicit).
void RegisterBackend();

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_SIM_DEVICE_H_
