#include "server/internal/sim_peer_service.h"

#include <string>
#include <vector>

#include "base/status_macros.h"
#include "server/internal/proto_convert.h"

namespace regcache::server::internal {

namespace pb = ::regcache::v1;
using service::SessionId;

grpc::Status SimPeerServiceImpl::PeerWrite(grpc::ServerContext* ctx,
                                           const pb::PeerWriteRequest* req,
                                           pb::PeerWriteResponse*) {
  return calls_.Run(ctx, [&](SessionId s) -> absl::Status {
    RETURN_IF_ERROR(daemon_->CheckMayChange(s));  // an observer may not act on another
    ASSIGN_OR_RETURN(SessionId target, calls_.Target(s, req->session_id()));
    const std::string& d = req->data();
    return port_->PeerWrite(
        target, req->rkey(), req->addr(),
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(d.data()), d.size()),
        Through(req->endpoint_id()));
  });
}

grpc::Status SimPeerServiceImpl::PeerRead(grpc::ServerContext* ctx, const pb::PeerReadRequest* req,
                                          pb::PeerReadResponse* resp) {
  return calls_.Run(ctx, [&](SessionId s) -> absl::Status {
    RETURN_IF_ERROR(daemon_->CheckMayChange(s));  // reads through the device: not an observer's
    ASSIGN_OR_RETURN(SessionId target, calls_.Target(s, req->session_id()));
    ASSIGN_OR_RETURN(std::vector<uint8_t> data,
                     port_->PeerRead(target, req->rkey(), req->addr(), req->length(),
                                     Through(req->endpoint_id())));
    resp->set_data(reinterpret_cast<const char*>(data.data()), data.size());
    return absl::OkStatus();
  });
}

}  // namespace regcache::server::internal
