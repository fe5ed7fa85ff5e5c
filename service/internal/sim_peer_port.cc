#include "service/internal/sim_peer_port.h"

#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "service/internal/device_set.h"
#include "service/internal/endpoints.h"

namespace regcache::service::internal {

absl::StatusOr<hca::Peer*> SessionsSimPeer::PeerPort(Session& s, std::optional<EndpointId> endpoint,
                                                     std::unique_ptr<hca::Peer>* through) {
  hca::Device* device = s.device->device.get();
  if (!s.device->SimulatesPeer()) {
    return absl::UnimplementedError(
        "the peer data path is only exposed with --device=sim, or --peer_on_any_device for a "
        "device's own requester (a real peer is a remote node)");
  }
  if (endpoint.has_value()) {
    ASSIGN_OR_RETURN(*through, s.endpoints->RemotePeer(*endpoint, device, *node_));
    return through->get();
  }
  if (s.peer_port == nullptr) {
    ASSIGN_OR_RETURN(cache::TenantUsage u, s.device->cache->Usage(s.tenant));
    ASSIGN_OR_RETURN(s.peer_port, device->CreatePeer(u.pd));
  }
  return s.peer_port.get();
}

absl::Status SessionsSimPeer::PeerWrite(SessionId session, hca::Key rkey, uint64_t addr,
                                        absl::Span<const uint8_t> data,
                                        std::optional<EndpointId> endpoint) {
  ASSIGN_OR_RETURN(auto pin, pin_(session));
  Session& s = **pin;
  base::MutexLock lock(&s.mu);
  std::unique_ptr<hca::Peer> through;
  ASSIGN_OR_RETURN(hca::Peer * peer, PeerPort(s, endpoint, &through));
  return peer->Write(rkey, addr, data);
}

absl::StatusOr<std::vector<uint8_t>> SessionsSimPeer::PeerRead(SessionId session, hca::Key rkey,
                                                               uint64_t addr, uint64_t length,
                                                               std::optional<EndpointId> endpoint) {
  ASSIGN_OR_RETURN(auto pin, pin_(session));
  Session& s = **pin;
  if (length > kMaxRead) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a peer read of %d bytes: at most %d", length, kMaxRead));
  }
  base::MutexLock lock(&s.mu);
  std::unique_ptr<hca::Peer> through;
  ASSIGN_OR_RETURN(hca::Peer * peer, PeerPort(s, endpoint, &through));
  std::vector<uint8_t> out(length);
  RETURN_IF_ERROR(peer->Read(rkey, addr, absl::MakeSpan(out)));
  return out;
}

absl::StatusOr<SimPeerPort::EndpointRef> SessionsSimPeer::FindEndpoint(SessionId caller,
                                                                       uint32_t endpoint_qpn,
                                                                       uint32_t peer_qpn) {
  ASSIGN_OR_RETURN(auto pin, pin_(caller));
  for (const std::shared_ptr<Session>& s : sessions_->All()) {
    if (s->device != (**pin).device) continue;
    base::MutexLock lock(&s->mu);
    if (auto id = s->endpoints->FindConnected(endpoint_qpn, peer_qpn))
      return EndpointRef{s->id, *id};
  }
  return absl::NotFoundError(absl::StrFormat(
      "no endpoint with queue pair 0x%x connected to peer queue pair 0x%x on this device",
      endpoint_qpn, peer_qpn));
}

}  // namespace regcache::service::internal
