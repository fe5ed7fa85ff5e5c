// The sim's target endpoints (hca::Endpoint) and the simulated remote node that reaches them.
//
// A target endpoint is a responder RC queue pair in one PD. Here it is a shared EndpointState
// in the device's EndpointTable, keyed by its QP number: the Endpoint object the caller owns,
// the table and every remote connection to it see the same state, and destroying the Endpoint
// takes it out of the table and marks it dead.
//
// The remote node is a requester on another machine (test-only, SimDevice::CreateRemoteQp). Its
// accesses are looked up afresh each time, as packets addressed to (GID, QPN) are: they reach
// the endpoint only while it exists, is connected (RTR) to exactly this requester (its QPN,
// GID and PSN), and its remote_access allows the operation; then the endpoint's PD and the rkey
// decide as for any peer (translator.h). What a requester sees otherwise:
//   target QP gone or never there, or connected to      transport retry exceeded on hardware;
//   another requester (the packets are dropped)         the sim reports WR_FLUSH 0x05 (kAborted),
//                                                       what every later request on that
//                                                       requester completes with
//   the endpoint's remote_access lacks the operation    REMOTE_ACCESS 0x13 (kPermissionDenied)
//
// Thread safety: everything may be used from any thread.
#ifndef REGCACHE_HCA_SIM_ENDPOINTS_H_
#define REGCACHE_HCA_SIM_ENDPOINTS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "hca/device.h"
#include "hca/sim/sim_options.h"

namespace regcache::hca::sim {

class RemoteQp;  // hca/sim/sim_device.h

// The sim's port: RoCE (no LID), active MTU 4096, link-local GIDs fe80::5349:<node>: node 1 is
// the device, node 2 the simulated remote node.
inline constexpr uint32_t kSimPortMtu = 4096;
inline constexpr uint16_t kSimDeviceNode = 1;
inline constexpr uint16_t kSimRemoteNode = 2;
std::array<uint8_t, 16> SimGid(uint16_t node);

// What Endpoint::Connect (and a remote QP's Connect) accepts: qpn and psn within 24 bits, qpn
// not 0, mtu 0 or a power of two in 256..4096, a non-zero GID (the port is RoCE). kInvalidArgument
// naming the field otherwise.
absl::Status CheckEndpointAddress(const EndpointAddress& a);

struct EndpointState {
  EndpointAddress local;  // qpn, psn, the device's GID, the port MTU
  Pd pd;
  AccessFlags remote_access = 0;

  base::Mutex mu;
  bool alive ABSL_GUARDED_BY(mu) = true;
  std::optional<EndpointAddress> remote ABSL_GUARDED_BY(mu);  // set by Connect (mtu resolved)
};

class EndpointTable {
 public:
  explicit EndpointTable(SimStats* stats);

  // A new endpoint of `pd` with QP number `qpn` and a random PSN, registered under its qpn.
  // REQUIRES: qpn not in use. kInvalidArgument for local bits in `remote_access`.
  absl::StatusOr<std::unique_ptr<Endpoint>> Create(Pd pd, uint32_t qpn, AccessFlags remote_access)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The live endpoint with this QP number; nullptr if none.
  std::shared_ptr<EndpointState> Find(uint32_t qpn) const ABSL_LOCKS_EXCLUDED(mu_);
  // Live endpoints of `pd`.
  size_t CountInPd(Pd pd) const ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the endpoint out of the table and marks it dead (Endpoint's destructor).
  void Remove(const std::shared_ptr<EndpointState>& state) ABSL_LOCKS_EXCLUDED(mu_);

  SimStats* stats() const { return stats_; }
  // A random 24-bit PSN.
  uint32_t NewPsn() ABSL_LOCKS_EXCLUDED(mu_);
  // The address of a new requester on the remote node: its GID, the next QP number of its own
  // number space, a random PSN, MTU 4096.
  EndpointAddress NewRemoteAddress() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  SimStats* const stats_;
  mutable base::Mutex mu_;
  std::map<uint32_t, std::shared_ptr<EndpointState>> by_qpn_ ABSL_GUARDED_BY(mu_);
  std::mt19937 psn_rng_ ABSL_GUARDED_BY(mu_);
  uint32_t next_remote_qpn_ ABSL_GUARDED_BY(mu_) = 0x100;
};

// The data path of a peer whose accesses arrive on queue pair `qpn` of `pd` (the device's own
// peer implementation), used once a remote access passed the endpoint's checks.
using PeerFactory = std::function<std::unique_ptr<Peer>(Pd pd, uint32_t qpn)>;

// A remote node's requester queue pair with address `self`. `table` and `make_peer` must outlive
// it and every Peer it returns.
std::unique_ptr<RemoteQp> NewRemoteQp(const EndpointAddress& self, EndpointTable* table,
                                      PeerFactory make_peer);

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_ENDPOINTS_H_
