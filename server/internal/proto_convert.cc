#include "server/internal/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace regcache::server::internal {

// The wire's prefetch mode as the daemon spells it: nullopt for PREFETCH_UNSPECIFIED.
absl::StatusOr<std::optional<odp::PrefetchMode>> PrefetchFromProto(int mode) {
  switch (mode) {
    case pb::PREFETCH_UNSPECIFIED:
      return std::nullopt;
    case pb::PREFETCH_SYNC:
      return odp::PrefetchMode::kSync;
    case pb::PREFETCH_ASYNC:
      return odp::PrefetchMode::kAsync;
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown prefetch mode %d", mode));
}

void ToProto(const cache::KeyGrant& g, uint32_t device_index, pb::KeyGrant* out) {
  out->set_device_index(device_index);
  out->set_handle(g.handle);
  out->set_lkey(g.lkey);
  out->set_rkey(g.rkey);
  out->set_va(g.va);
  out->set_length(g.length);
  out->set_access(g.access);
  out->set_hit(g.hit);
  out->set_same_key(g.same_key);
}

void ToProto(const service::DeviceStatus& d, pb::DeviceInfo* out) {
  out->set_index(d.identity.index);
  out->set_name(d.identity.name);
  out->set_backend(d.identity.backend);
  out->set_node_guid(d.identity.node_guid);
  out->set_port(d.identity.port);
  out->set_gid(std::string(d.identity.gid.begin(), d.identity.gid.end()));
  out->set_spec(d.spec);
  out->set_selection(d.selection);
  out->set_sessions(d.sessions);
  out->set_odp(d.capabilities.odp);
  out->set_peer(d.capabilities.peer);
  out->set_endpoints(d.capabilities.endpoints);
  out->set_max_keys(d.capabilities.max_keys);
  out->set_key_bounds(hca::KeyBoundsName(d.capabilities.key_bounds));
  out->set_key_bounds_detail(d.capabilities.key_bounds_detail);
  out->set_health(d.health.ok() ? "ok" : std::string(d.health.message()));
}

// One batch item's outcome, google.rpc.Status style (the codes are absl's, 1:1 with gRPC's).
void ToProto(const absl::Status& s, pb::ItemStatus* out) {
  out->set_code(static_cast<int32_t>(s.code()));
  if (!s.ok()) out->set_message(std::string(s.message()));
}

// Most items one batch may carry: a full RegisterBatch stays under the default 64 KiB request
// limit (GrpcServerOptions::max_receive_message_bytes), so a client is told this bound rather
// than a message-size error.
constexpr int kMaxBatchItems = 1024;

absl::Status CheckBatchSize(absl::string_view call, int items) {
  if (items <= kMaxBatchItems) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %d items, more than the limit of %d", call, items, kMaxBatchItems));
}

void ToProto(const cache::RegistrationInfo& r, pb::KeyInfo* out) {
  out->set_handle(r.handle);
  out->set_key(r.key);
  out->set_va(r.va);
  out->set_length(r.length);
  out->set_access(r.access);
  out->set_holders(r.holders);
  out->set_revoked(r.revoked);
  out->set_is_window(r.is_window);
  out->set_parent(r.parent);
  out->set_windows(r.windows);
  out->set_klm_entries(r.klm_entries);
  out->set_key_state(std::string(cache::KeyStateName(r.key_state)));
}

void ToProto(const cache::TenantUsage& u, pb::Usage* out) {
  out->set_pdn(u.pd.pdn);
  out->set_live_registrations(u.live_registrations);
  out->set_revoked_held(u.revoked_held);
  out->set_cached_unreferenced(u.cached_unreferenced);
  out->set_backings(u.backings);
  out->set_backed_bytes(u.backed_bytes);
  out->set_pool_free(u.pool_free);
  out->set_pool_quarantined(u.pool_quarantined);
  out->set_pool_outstanding(u.pool_outstanding);
  out->set_pool_total(u.pool_total);
}

// A peer's address off the wire, checked where the proto is looser than the device's types
// (gid length, lid width, 24-bit qpn and psn); the daemon checks the rest (mtu, access).
absl::StatusOr<hca::EndpointAddress> FromProto(const pb::EndpointAddress& a) {
  constexpr uint32_t kMax24 = (1u << 24) - 1;
  hca::EndpointAddress out;
  if (a.qpn() > kMax24 || a.psn() > kMax24) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "endpoint address: qpn %d and psn %d must be below 2^24", a.qpn(), a.psn()));
  }
  if (a.gid().size() != out.gid.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "endpoint address: gid is %d bytes, not exactly %d", a.gid().size(), out.gid.size()));
  }
  if (a.lid() > 0xffff) {
    return absl::InvalidArgumentError(
        absl::StrFormat("endpoint address: lid %d is over 16 bits", a.lid()));
  }
  out.qpn = a.qpn();
  out.psn = a.psn();
  std::copy(a.gid().begin(), a.gid().end(), out.gid.begin());
  out.lid = static_cast<uint16_t>(a.lid());
  out.mtu = a.mtu();
  return out;
}

void ToProto(const hca::EndpointAddress& a, pb::EndpointAddress* out) {
  out->set_qpn(a.qpn);
  out->set_psn(a.psn);
  out->set_gid(reinterpret_cast<const char*>(a.gid.data()), a.gid.size());
  out->set_lid(a.lid);
  out->set_mtu(a.mtu);
}

void ToProto(const service::EndpointInfo& e, pb::EndpointInfo* out) {
  out->set_endpoint_id(e.id);
  ToProto(e.local, out->mutable_local());
  ToProto(e.remote, out->mutable_peer());
  out->set_access(e.access);
  out->set_created_unix_ms(absl::ToUnixMillis(e.created));
}

// PeerWrite / PeerRead's endpoint_id: 0 is none.
std::optional<service::EndpointId> Through(uint64_t endpoint_id) {
  if (endpoint_id == 0) return std::nullopt;
  return endpoint_id;
}

}  // namespace regcache::server::internal
