// The client library: introspection, admin, target endpoints and the sim's peer, over gRPC
// (client/internal/client_impl.h).
#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "client/internal/client_impl.h"

namespace regcache::api::internal {

SessionUsage FromProto(const pb::Usage& u) {
  SessionUsage o;
  o.live_registrations = u.live_registrations();
  o.revoked_held = u.revoked_held();
  o.cached_unreferenced = u.cached_unreferenced();
  o.backings = u.backings();
  o.backed_bytes = u.backed_bytes();
  o.pool_outstanding = u.pool_outstanding();
  o.pool_total = u.pool_total();
  return o;
}

Key FromProto(const pb::KeyGrant& g) {
  Key k{g.handle(), g.lkey(), g.rkey(), g.va(), g.length(), g.access(), g.hit()};
  k.same_key = g.same_key();
  return k;
}

KeyInfo FromProto(const pb::KeyInfo& k) {
  KeyInfo o;
  o.handle = k.handle();
  o.key = k.key();
  o.va = k.va();
  o.length = k.length();
  o.access = k.access();
  o.holders = k.holders();
  o.revoked = k.revoked();
  o.is_window = k.is_window();
  o.parent = k.parent();
  o.key_state = k.key_state();
  return o;
}

namespace {

RemoteQp FromProto(const pb::EndpointAddress& a) {
  RemoteQp o;
  o.qpn = a.qpn();
  o.psn = a.psn();
  // The daemon always sends 16 bytes; anything else is copied as far as it goes.
  std::copy_n(a.gid().begin(), std::min(a.gid().size(), o.gid.size()), o.gid.begin());
  o.lid = static_cast<uint16_t>(a.lid());
  o.mtu = a.mtu();
  return o;
}

void ToProto(const RemoteQp& q, pb::EndpointAddress* out) {
  out->set_qpn(q.qpn);
  out->set_psn(q.psn);
  out->set_gid(reinterpret_cast<const char*>(q.gid.data()), q.gid.size());
  out->set_lid(q.lid);
  out->set_mtu(q.mtu);
}

}  // namespace

EndpointInfo FromProto(const pb::EndpointInfo& e) {
  EndpointInfo o;
  o.id = e.endpoint_id();
  o.local = FromProto(e.local());
  o.peer = FromProto(e.peer());
  o.access = e.access();
  o.created_unix_ms = e.created_unix_ms();
  return o;
}

absl::StatusOr<EndpointInfo> ClientImpl::CreateEndpoint(const RemoteQp& peer, uint32_t access) {
  pb::CreateEndpointRequest req;
  ToProto(peer, req.mutable_peer());
  req.set_access(access);
  pb::CreateEndpointResponse resp;
  RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::CreateEndpoint, req, &resp));
  return FromProto(resp.endpoint());
}

absl::Status ClientImpl::DestroyEndpoint(uint64_t id) {
  pb::DestroyEndpointRequest req;
  req.set_endpoint_id(id);
  pb::DestroyEndpointResponse resp;
  return Call(&pb::RegCacheService::Stub::DestroyEndpoint, req, &resp);
}

absl::Status ClientImpl::AllPages(
    const std::function<absl::StatusOr<std::string>(const std::string&)>& page) {
  std::string token;
  do {
    ASSIGN_OR_RETURN(std::string next, page(token));
    // Each page starts after the last id of the one before, so a daemon that repeats a token
    // is broken; stop rather than loop.
    if (!next.empty() && next == token) return absl::InternalError("the daemon repeated a page");
    token = std::move(next);
  } while (!token.empty());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EndpointInfo>> ClientImpl::ListEndpoints(uint64_t session) {
  std::vector<EndpointInfo> out;
  RETURN_IF_ERROR(AllPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    pb::ListEndpointsRequest req;
    req.set_session_id(session);
    req.set_page_token(token);
    pb::ListEndpointsResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::ListEndpoints, req, &resp));
    for (const pb::EndpointInfo& e : resp.endpoints()) out.push_back(FromProto(e));
    return resp.next_page_token();
  }));
  return out;
}

absl::StatusOr<std::vector<KeyInfo>> ClientImpl::ListKeys(uint64_t session) {
  std::vector<KeyInfo> out;
  RETURN_IF_ERROR(AllPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    pb::ListKeysRequest req;
    req.set_session_id(session);
    req.set_page_token(token);
    pb::ListKeysResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::ListKeys, req, &resp));
    for (const pb::KeyInfo& k : resp.keys()) out.push_back(FromProto(k));
    return resp.next_page_token();
  }));
  return out;
}

absl::Status ClientImpl::Ping() {
  pb::PingRequest req;
  pb::PingResponse resp;
  return Call(&pb::RegCacheService::Stub::Ping, req, &resp);
}

absl::StatusOr<StatsSnapshot> ClientImpl::Stats() {
  pb::StatsRequest req;
  pb::StatsResponse resp;
  RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::Stats, req, &resp));
  StatsSnapshot out;
  out.session = FromProto(resp.session_usage());
  for (const pb::Stat& s : resp.stats()) {
    out.stats.push_back(StatValue{s.component(), s.name(), s.kind(), s.value(), s.count(), s.sum(),
                                  s.p50(), s.p99(), s.max()});
  }
  return out;
}

absl::StatusOr<DaemonInfo> ClientImpl::Status() {
  pb::StatusRequest req;
  pb::StatusResponse resp;
  RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::Status, req, &resp));
  DaemonInfo info{resp.device(),    resp.backend(), resp.sessions(),  resp.draining(),
                  resp.uptime_ms(), resp.peer(),    resp.endpoints(), resp.device_selection()};
  for (const pb::DeviceInfo& d : resp.devices()) {
    DaemonInfo::Device out;
    out.info.index = d.index();
    out.info.name = d.name();
    out.info.node_guid = d.node_guid();
    out.info.port = static_cast<uint8_t>(d.port());
    std::memcpy(out.info.gid.data(), d.gid().data(), std::min(d.gid().size(), out.info.gid.size()));
    out.backend = d.backend();
    out.selection = d.selection();
    for (KeyBounds b : {KeyBounds::kKey, KeyBounds::kCut, KeyBounds::kAttachment}) {
      if (d.key_bounds() == KeyBoundsName(b)) out.info.key_bounds = b;  // else unknown
    }
    out.key_bounds_detail = d.key_bounds_detail();
    out.health = d.health().empty() ? "ok" : d.health();
    out.sessions = d.sessions();
    info.devices.push_back(std::move(out));
  }
  return info;
}

absl::StatusOr<std::vector<SessionRecord>> ClientImpl::Sessions() {
  std::vector<SessionRecord> out;
  RETURN_IF_ERROR(AllPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    pb::SessionsRequest req;
    req.set_page_token(token);
    pb::SessionsResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::Sessions, req, &resp));
    for (const pb::SessionInfo& s : resp.sessions()) {
      out.push_back(SessionRecord{s.session_id(), s.pid(), s.uid(), s.gid(), s.admin(),
                                  FromProto(s.usage()), s.memories(), s.device()});
    }
    return resp.next_page_token();
  }));
  return out;
}

absl::Status ClientImpl::Drain() {
  pb::DrainRequest req;
  pb::DrainResponse resp;
  return Call(&pb::RegCacheService::Stub::Drain, req, &resp);
}

absl::Status ClientImpl::PeerWrite(uint32_t rkey, uint64_t addr, const std::string& data,
                                   const PeerRoute& route) {
  pb::PeerWriteRequest req;
  req.set_rkey(rkey);
  req.set_addr(addr);
  req.set_data(data);
  req.set_session_id(route.session);
  req.set_endpoint_id(route.endpoint);
  req.set_endpoint_qpn(route.endpoint_qpn);
  req.set_peer_qpn(route.peer_qpn);
  pb::PeerWriteResponse resp;
  return Call(&pb::SimPeerService::Stub::PeerWrite, req, &resp);
}

absl::StatusOr<std::string> ClientImpl::PeerRead(uint32_t rkey, uint64_t addr, uint64_t length,
                                                 const PeerRoute& route) {
  pb::PeerReadRequest req;
  req.set_rkey(rkey);
  req.set_addr(addr);
  req.set_length(length);
  req.set_session_id(route.session);
  req.set_endpoint_id(route.endpoint);
  req.set_endpoint_qpn(route.endpoint_qpn);
  req.set_peer_qpn(route.peer_qpn);
  pb::PeerReadResponse resp;
  RETURN_IF_ERROR(Call(&pb::SimPeerService::Stub::PeerRead, req, &resp));
  return resp.data();
}

// client/internal/client_testing.h.
absl::Status ClientImpl::RawCall(const std::string& method, const std::string& bytes) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::ByteBuffer response;
  return protocol::FromGrpcStatus(
      protocol::BlockingRawCall(generic, &ctx, method, bytes, &response));
}

}  // namespace regcache::api::internal
