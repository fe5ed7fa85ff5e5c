// The daemon's SimPeerPort (service/sim_peer.h) over its session table: the simulated peer's
// writes and reads through a session's PD or one of its target endpoints, and the search for
// the endpoint a remote node's queue pair is connected to. Internal to service/.
//
// Thread safety: every method may be called from any thread; each call pins its session
// (through the daemon's pin function, which refuses while draining) and holds its `mu`.
#ifndef REGCACHE_SERVICE_INTERNAL_SIM_PEER_PORT_H_
#define REGCACHE_SERVICE_INTERNAL_SIM_PEER_PORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "service/internal/session_table.h"
#include "service/sim_peer.h"
#include "service/types.h"

namespace regcache::service::internal {

class SessionsSimPeer final : public SimPeerPort {
 public:
  using PinFn = std::function<absl::StatusOr<std::unique_ptr<SessionRef>>(SessionId)>;
  // `sessions` and `node` must outlive this object.
  SessionsSimPeer(const SessionTable* sessions, const RemoteNode* node, PinFn pin)
      : sessions_(sessions), node_(node), pin_(std::move(pin)) {}

  absl::Status PeerWrite(SessionId session, hca::Key rkey, uint64_t addr,
                         absl::Span<const uint8_t> data,
                         std::optional<EndpointId> endpoint) override;
  absl::StatusOr<std::vector<uint8_t>> PeerRead(SessionId session, hca::Key rkey, uint64_t addr,
                                                uint64_t length,
                                                std::optional<EndpointId> endpoint) override;
  absl::StatusOr<EndpointRef> FindEndpoint(SessionId caller, uint32_t endpoint_qpn,
                                           uint32_t peer_qpn) override;

 private:
  // The sim's peer port for the session's PD, or (with `endpoint`) the sim's remote node
  // connected to that endpoint of the session, kept in `*through` for the call.
  absl::StatusOr<hca::Peer*> PeerPort(Session& s, std::optional<EndpointId> endpoint,
                                      std::unique_ptr<hca::Peer>* through)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  const SessionTable* const sessions_;
  const RemoteNode* const node_;
  const PinFn pin_;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_SIM_PEER_PORT_H_
