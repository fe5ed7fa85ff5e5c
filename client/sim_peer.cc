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

}  // namespace

absl::Status SimPeerWrite(Client& client, uint32_t rkey, uint64_t addr, const std::string& data,
                          uint64_t session, uint64_t endpoint) {
  absl::StatusOr<internal::ClientImpl*> impl = Impl(client);
  if (!impl.ok()) return impl.status();
  return (*impl)->PeerWrite(rkey, addr, data, session, endpoint);
}

absl::StatusOr<std::string> SimPeerRead(Client& client, uint32_t rkey, uint64_t addr,
                                        uint64_t length, uint64_t session, uint64_t endpoint) {
  absl::StatusOr<internal::ClientImpl*> impl = Impl(client);
  if (!impl.ok()) return impl.status();
  return (*impl)->PeerRead(rkey, addr, length, session, endpoint);
}

}  // namespace regcache::api
