// The simulated peer: what a remote node connected to a session's PD does with its rkeys, on a
// regcached whose device simulates one (--device=sim). For tests, demos and tools that want to
// see a key at work (data landing in the client's memory, a revoked key refused, an endpoint's
// checks) without a second machine. Nothing an application needs to register memory is here;
// a real peer is a remote node with its own queue pair (docs/endpoints.md).
//
//   #include "regcache/sim_peer.h"
//   RETURN_IF_ERROR(regcache::api::SimPeerWrite(*client, key.rkey, key.va, "hello"));
//
// Both calls go over the client's gRPC connection (regcache.v1.SimPeerService), as the client's
// session. Errors:
//   kUnimplemented       the daemon's devices simulate no peer (a production daemon)
//   kFailedPrecondition  `client` was not made by Client::Connect
//   kInvalidArgument     SimPeerRead of more than 1 MiB
//   kNotFound            an endpoint this session does not hold (or no longer)
//   kPermissionDenied    another session without admin rights, or an observer session
//   kUnavailable         the daemon is gone or draining
//   the device's answer  the access itself failed (rkey unknown or revoked, range or rights
//                        outside the key): the code and message the device's completion
//                        syndrome maps to
// Thread safety: as the client's own calls.
#ifndef REGCACHE_SIM_PEER_H_
#define REGCACHE_SIM_PEER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "regcache/client.h"
#include "regcache/descriptor.h"

namespace regcache::api {

// Writes `data` at `addr` through `rkey`. session 0: a peer in this session's PD; another id:
// that session's (admin only). endpoint 0: a queue pair in that PD; another id: through that
// endpoint of the session, as the peer named for it.
REGCACHE_CPP_API absl::Status SimPeerWrite(Client& client, uint32_t rkey, uint64_t addr,
                                           const std::string& data, uint64_t session = 0,
                                           uint64_t endpoint = 0);

// Reads `length` bytes (at most 1 MiB) at `addr` through `rkey`; session and endpoint as for
// SimPeerWrite.
REGCACHE_CPP_API absl::StatusOr<std::string> SimPeerRead(Client& client, uint32_t rkey,
                                                         uint64_t addr, uint64_t length,
                                                         uint64_t session = 0,
                                                         uint64_t endpoint = 0);

// As the remote node that holds queue pair `self` (the address its owner gave CreateEndpoint)
// and connected it to `descriptor.endpoint` — what a real peer does after UnpackDescriptor —
// writes `data` at `addr` through descriptor.rkey. `client` stands in for that node's own NIC:
// any session of the same daemon on the same device (docs/integrating.md). Besides the errors
// above: kInvalidArgument for a descriptor without an endpoint or a `self.qpn` outside
// 1..2^24-1; kNotFound when no endpoint on the client's device has that queue pair connected to
// `self` (never created, destroyed, or its session ended).
REGCACHE_CPP_API absl::Status SimPeerWrite(Client& client, const PeerDescriptor& descriptor,
                                           const RemoteQp& self, uint64_t addr,
                                           const std::string& data);
// Reads `length` bytes (at most 1 MiB) at `addr` the same way.
REGCACHE_CPP_API absl::StatusOr<std::string> SimPeerRead(Client& client,
                                                         const PeerDescriptor& descriptor,
                                                         const RemoteQp& self, uint64_t addr,
                                                         uint64_t length);

}  // namespace regcache::api
#endif  // REGCACHE_SIM_PEER_H_
