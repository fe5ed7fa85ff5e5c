#include "service/internal/endpoints.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/error_reason.h"
#include "base/status_macros.h"

namespace regcache::service::internal {
namespace {

constexpr uint32_t kMax24 = (1u << 24) - 1;
constexpr hca::AccessFlags kRemoteBits = hca::kRemoteRead | hca::kRemoteWrite | hca::kRemoteAtomic;

}  // namespace

absl::Status CheckEndpointRequest(const hca::EndpointAddress& remote, hca::AccessFlags access) {
  if (remote.qpn == 0 || remote.qpn > kMax24) {
    return absl::InvalidArgumentError(
        absl::StrFormat("endpoint: the peer's qpn %d is outside 1..%d", remote.qpn, kMax24));
  }
  if (remote.psn > kMax24) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "endpoint: the peer's psn %d is over 24 bits (at most %d)", remote.psn, kMax24));
  }
  const uint32_t m = remote.mtu;
  if (m != 0 && m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "endpoint: mtu %d is not 0 (the port's) or one of 256, 512, 1024, 2048, 4096", m));
  }
  if (access == 0 || (access & ~kRemoteBits) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("endpoint: access %s must be a non-empty set of rr, rw, a (remote "
                        "operations only)",
                        hca::AccessToString(access)));
  }
  return absl::OkStatus();
}

absl::StatusOr<EndpointInfo> SessionEndpoints::Create(hca::Device* device, hca::Pd pd,
                                                      const hca::EndpointAddress& remote,
                                                      hca::AccessFlags access, uint32_t limit) {
  auto refused = [&](absl::Status s) {
    stats_->endpoints_refused.Inc();
    return s;
  };
  if (!device->capabilities().endpoints) {
    return refused(absl::UnimplementedError(absl::StrFormat("device %s:%s has no target endpoints",
                                                            device->capabilities().backend,
                                                            device->capabilities().device_name)));
  }
  if (absl::Status s = CheckEndpointRequest(remote, access); !s.ok()) return refused(s);
  if (limit != 0 && entries_.size() >= limit) {
    return refused(base::WithReason(
        absl::ResourceExhaustedError(absl::StrFormat(
            "endpoint limit: the session holds %d endpoints, the limit is %d (--max_endpoints)",
            entries_.size(), limit)),
        base::reason::kEndpointLimitReached,
        {{"limit", std::to_string(limit)}, {"used", std::to_string(entries_.size())}}));
  }
  absl::StatusOr<std::unique_ptr<hca::Endpoint>> ep =
      device->CreateEndpoint(pd, hca::EndpointOptions{access});
  if (!ep.ok()) return refused(base::Annotate(ep.status(), "creating the endpoint"));
  // On error the endpoint is destroyed here, before anything refers to it.
  if (absl::Status s = (*ep)->Connect(remote); !s.ok()) {
    return refused(base::Annotate(s, "connecting the endpoint to the peer"));
  }
  Entry e;
  e.info.id = next_id_++;
  e.info.local = (*ep)->local();
  e.info.remote = remote;
  e.info.access = access;
  e.info.created = absl::Now();
  e.endpoint = std::move(*ep);
  const EndpointInfo info = e.info;
  entries_.emplace(info.id, std::move(e));
  stats_->endpoints_created.Inc();
  stats_->endpoints_open.Add();
  return info;
}

absl::Status SessionEndpoints::Destroy(EndpointId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrFormat("no endpoint %d in this session", id));
  }
  entries_.erase(it);  // destroys the queue pair
  stats_->endpoints_destroyed.Inc();
  stats_->endpoints_open.Sub();
  return absl::OkStatus();
}

absl::StatusOr<EndpointInfo> SessionEndpoints::Find(EndpointId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrFormat("no endpoint %d in this session", id));
  }
  return it->second.info;
}

std::vector<EndpointInfo> SessionEndpoints::List() const {
  std::vector<EndpointInfo> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back(e.info);
  return out;
}

std::optional<EndpointId> SessionEndpoints::FindConnected(uint32_t local_qpn,
                                                          uint32_t peer_qpn) const {
  for (const auto& [id, e] : entries_) {
    if (e.info.local.qpn == local_qpn && e.info.remote.qpn == peer_qpn) return id;
  }
  return std::nullopt;
}

void SessionEndpoints::Clear() {
  if (entries_.empty()) return;  // a closed session's destructor: the stats may be gone
  stats_->endpoints_destroyed.Inc(entries_.size());
  stats_->endpoints_open.Sub(static_cast<int64_t>(entries_.size()));
  entries_.clear();
}

absl::StatusOr<std::unique_ptr<hca::Peer>> SessionEndpoints::RemotePeer(
    EndpointId id, hca::Device* device, const RemoteNode& node) const {
  if (!node) {
    return absl::UnimplementedError(
        "the peer data path through an endpoint needs the simulated remote node (--device=sim)");
  }
  ASSIGN_OR_RETURN(const EndpointInfo info, Find(id));
  return node(device, info.remote, info.local);
}

}  // namespace regcache::service::internal
