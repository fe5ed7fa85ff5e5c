// SimPeerPort — the simulated peer's data path: what a remote node does with a session's rkeys,
// on a daemon whose device simulates one (device "sim"). It is how tests, the demo and
// regcachectl prove that a key reaches the client's memory, that a revoked key stops, and
// that an endpoint's checks hold; nothing a client needs to register memory goes through it,
// so it lives apart from Daemon (reached through Daemon::sim_peer(), nullptr where no device
// simulates a peer) and is served over gRPC as regcache.v1.SimPeerService only.
//
// Errors carry the device syndrome (hca::ErrorOf). Without `endpoint`, the peer is a queue pair
// in the session's PD; with it, the accesses arrive through that endpoint of the session (played
// by DaemonConfig::remote_node as the peer the client named), with its checks
// (docs/endpoints.md); kNotFound for an endpoint the session does not hold, kUnimplemented for
// a session on a device that does not simulate a peer.
//
// Thread safety: every method may be called from any thread.
#ifndef REGCACHE_SERVICE_SIM_PEER_H_
#define REGCACHE_SERVICE_SIM_PEER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hca/device.h"
#include "service/types.h"

namespace regcache::service {

class SimPeerPort {
 public:
  static constexpr uint64_t kMaxRead = uint64_t{1} << 20;

  virtual ~SimPeerPort() = default;

  virtual absl::Status PeerWrite(SessionId session, hca::Key rkey, uint64_t addr,
                                 absl::Span<const uint8_t> data,
                                 std::optional<EndpointId> endpoint = std::nullopt) = 0;
  // The endpoint a remote node reaches with queue pair `peer_qpn` connected to the daemon's
  // queue pair `endpoint_qpn`, among the endpoints of every session on `caller`'s device: the
  // session and endpoint to name to PeerWrite / PeerRead. This lets a second client play the
  // remote node a session handed a peer descriptor to. kNotFound when no endpoint there has that
  // pair of queue pairs.
  struct EndpointRef {
    SessionId session = 0;
    EndpointId endpoint = 0;
  };
  virtual absl::StatusOr<EndpointRef> FindEndpoint(SessionId caller, uint32_t endpoint_qpn,
                                                   uint32_t peer_qpn) = 0;
  // kInvalidArgument above kMaxRead bytes.
  virtual absl::StatusOr<std::vector<uint8_t>> PeerRead(
      SessionId session, hca::Key rkey, uint64_t addr, uint64_t length,
      std::optional<EndpointId> endpoint = std::nullopt) = 0;
};

}  // namespace regcache::service
#endif  // REGCACHE_SERVICE_SIM_PEER_H_
