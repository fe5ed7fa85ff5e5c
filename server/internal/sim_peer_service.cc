#include "server/internal/sim_peer_service.h"

#include <optional>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "server/internal/proto_convert.h"

namespace regcache::server::internal {

namespace pb = ::regcache::v1;
using service::SessionId;

namespace {

// Whom a peer call reaches: the session and endpoint it names, or (endpoint_qpn) the endpoint a
// remote node's queue pair is connected to, on the caller's device.
struct Route {
  SessionId session = 0;
  std::optional<service::EndpointId> endpoint;
};

template <typename Request>
absl::StatusOr<Route> RouteOf(SessionCalls& calls, service::SimPeerPort& port, SessionId caller,
                              const Request& req) {
  if (req.endpoint_qpn() == 0) {
    if (req.peer_qpn() != 0) {
      return absl::InvalidArgumentError("peer_qpn is only meaningful with endpoint_qpn");
    }
    ASSIGN_OR_RETURN(SessionId target, calls.Target(caller, req.session_id()));
    return Route{target, Through(req.endpoint_id())};
  }
  if (req.session_id() != 0 || req.endpoint_id() != 0) {
    return absl::InvalidArgumentError(
        "endpoint_qpn names the endpoint by its queue pair: session_id and endpoint_id must be 0");
  }
  ASSIGN_OR_RETURN(service::SimPeerPort::EndpointRef ref,
                   port.FindEndpoint(caller, req.endpoint_qpn(), req.peer_qpn()));
  return Route{ref.session, ref.endpoint};
}

}  // namespace

grpc::Status SimPeerServiceImpl::PeerWrite(grpc::ServerContext* ctx,
                                           const pb::PeerWriteRequest* req,
                                           pb::PeerWriteResponse*) {
  return calls_.Run(ctx, [&](SessionId s) -> absl::Status {
    RETURN_IF_ERROR(daemon_->CheckMayChange(s));  // an observer may not act on another
    ASSIGN_OR_RETURN(Route to, RouteOf(calls_, *port_, s, *req));
    const std::string& d = req->data();
    return port_->PeerWrite(
        to.session, req->rkey(), req->addr(),
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(d.data()), d.size()),
        to.endpoint);
  });
}

grpc::Status SimPeerServiceImpl::PeerRead(grpc::ServerContext* ctx, const pb::PeerReadRequest* req,
                                          pb::PeerReadResponse* resp) {
  return calls_.Run(ctx, [&](SessionId s) -> absl::Status {
    RETURN_IF_ERROR(daemon_->CheckMayChange(s));  // reads through the device: not an observer's
    ASSIGN_OR_RETURN(Route to, RouteOf(calls_, *port_, s, *req));
    ASSIGN_OR_RETURN(
        std::vector<uint8_t> data,
        port_->PeerRead(to.session, req->rkey(), req->addr(), req->length(), to.endpoint));
    resp->set_data(reinterpret_cast<const char*>(data.data()), data.size());
    return absl::OkStatus();
  });
}

}  // namespace regcache::server::internal
