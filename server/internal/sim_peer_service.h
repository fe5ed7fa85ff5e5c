// regcache.v1.SimPeerService: what a remote node connected to a session's PD does with that
// session's rkeys (PeerWrite, PeerRead), on a device that simulates one (the sim): the gRPC face
// of service::SimPeerPort. GrpcServer registers it only when the daemon has one
// (Daemon::sim_peer()), so a production daemon does not offer it at all. A call may name
// another session (admin only) or go through one of the session's target endpoints; or, as the
// remote node a peer descriptor was handed to, go through whichever endpoint on the caller's
// device has the queue pair it names connected to the peer queue pair it names.
#ifndef REGCACHE_SERVER_INTERNAL_SIM_PEER_SERVICE_H_
#define REGCACHE_SERVER_INTERNAL_SIM_PEER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>

#include "regcache/v1/regcache.grpc.pb.h"
#include "server/internal/grpc_calls.h"
#include "service/daemon.h"
#include "service/sim_peer.h"

namespace regcache::server::internal {

class SimPeerServiceImpl final : public ::regcache::v1::SimPeerService::Service {
 public:
  SimPeerServiceImpl(service::Daemon* daemon, service::SimPeerPort* port)
      : daemon_(daemon), port_(port), calls_(daemon) {}

  grpc::Status PeerWrite(grpc::ServerContext* ctx, const ::regcache::v1::PeerWriteRequest* req,
                         ::regcache::v1::PeerWriteResponse* resp) override;
  // INVALID_ARGUMENT above service::SimPeerPort::kMaxRead (1 MiB).
  grpc::Status PeerRead(grpc::ServerContext* ctx, const ::regcache::v1::PeerReadRequest* req,
                        ::regcache::v1::PeerReadResponse* resp) override;

 private:
  service::Daemon* daemon_;
  service::SimPeerPort* port_;
  SessionCalls calls_;
};

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_SIM_PEER_SERVICE_H_
