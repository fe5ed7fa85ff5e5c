// regcache/sim_peer.h: the simulated peer's calls, over the client's gRPC connection.
#include "regcache/sim_peer.h"

#include "client/internal/client_impl.h"

namespace regcache::api {
namespace {

absl::StatusOr<internal::ClientImpl*> Impl(Client& client) {
  auto* impl = dynamic_cast<internal::ClientImpl*>(&client);
  if (impl == nullptr) {
    return absl::FailedPreconditionError(
        "the simulated peer is reached through a client made by Client::Connect");
  }
  return impl;
}

// The route of a remote node holding `self`, connected to the descriptor's endpoint.
absl::StatusOr<internal::ClientImpl::PeerRoute> RouteOf(const PeerDescriptor& d,
                                                        const RemoteQp& self) {
  if (!d.endpoint.has_value()) {
    return absl::InvalidArgumentError(
        "the descriptor names no endpoint: the simulated remote node connects to one (give "
        "DescribeKey the endpoint the key is used through)");
  }
  if (self.qpn == 0 || self.qpn >= (1u << 24)) {
    return absl::InvalidArgumentError("self.qpn is outside 1..2^24-1");
  }
  return internal::ClientImpl::PeerRoute{.endpoint_qpn = d.endpoint->qpn, .peer_qpn = self.qpn};
}

}  // namespace

absl::Status SimPeerWrite(Client& client, const PeerDescriptor& descriptor, const RemoteQp& self,
                          uint64_t addr, const std::string& data) {
  absl::StatusOr<internal::ClientImpl*> impl = Impl(client);
  if (!impl.ok()) return impl.status();
  absl::StatusOr<internal::ClientImpl::PeerRoute> route = RouteOf(descriptor, self);
  if (!route.ok()) return route.status();
  return (*impl)->PeerWrite(descriptor.rkey, addr, data, *route);
}

absl::StatusOr<std::string> SimPeerRead(Client& client, const PeerDescriptor& descriptor,
                                        const RemoteQp& self, uint64_t addr, uint64_t length) {
  absl::StatusOr<internal::ClientImpl*> impl = Impl(client);
  if (!impl.ok()) return impl.status();
  absl::StatusOr<internal::ClientImpl::PeerRoute> route = RouteOf(descriptor, self);
  if (!route.ok()) return route.status();
  return (*impl)->PeerRead(descriptor.rkey, addr, length, *route);
}

absl::Status SimPeerWrite(Client& client, uint32_t rkey, uint64_t addr, const std::string& data,
                          uint64_t session, uint64_t endpoint) {
  absl::StatusOr<internal::ClientImpl*> impl = Impl(client);
  if (!impl.ok()) return impl.status();
  return (*impl)->PeerWrite(rkey, addr, data, {.session = session, .endpoint = endpoint});
}

absl::StatusOr<std::string> SimPeerRead(Client& client, uint32_t rkey, uint64_t addr,
                                        uint64_t length, uint64_t session, uint64_t endpoint) {
  absl::StatusOr<internal::ClientImpl*> impl = Impl(client);
  if (!impl.ok()) return impl.status();
  return (*impl)->PeerRead(rkey, addr, length, {.session = session, .endpoint = endpoint});
}

}  // namespace regcache::api
