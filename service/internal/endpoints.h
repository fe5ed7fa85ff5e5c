// The target endpoints of one session (docs/endpoints.md): RC queue pairs in the session's PD,
// each connected to the peer the client named, counted against the daemon's per-session limit
// and destroyed with the session. Internal to service/: callers use service/daemon.h.
//
// Thread safety: SessionEndpoints is not synchronized: the session's `mu` guards it
// (service/internal/session_table.h). EndpointStats are atomic.
#ifndef REGCACHE_SERVICE_INTERNAL_ENDPOINTS_H_
#define REGCACHE_SERVICE_INTERNAL_ENDPOINTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/stats.h"
#include "hca/device.h"
#include "service/types.h"

namespace regcache::service::internal {

#define REGCACHE_ENDPOINT_STATS(COUNTER, GAUGE, HISTOGRAM)                                       \
  COUNTER(endpoints_created, "target endpoints created and connected")                           \
  COUNTER(endpoints_refused, "endpoint requests refused (bad address, limit, device)")           \
  COUNTER(endpoints_destroyed, "target endpoints destroyed (by the client or with the session)") \
  GAUGE(endpoints_open, "target endpoints open now")

RC_DEFINE_STATS(EndpointStats, REGCACHE_ENDPOINT_STATS);

// A client's request for an endpoint, before the device sees it: `remote` qpn in 1..2^24-1,
// psn < 2^24, mtu 0 or one of 256, 512, 1024, 2048, 4096; `access` a non-empty OR of
// kRemoteRead, kRemoteWrite, kRemoteAtomic. kInvalidArgument naming the field otherwise.
absl::Status CheckEndpointRequest(const hca::EndpointAddress& remote, hca::AccessFlags access);

class SessionEndpoints {
 public:
  // `stats` must outlive this object.
  explicit SessionEndpoints(EndpointStats* stats) : stats_(stats) {}
  ~SessionEndpoints() { Clear(); }
  SessionEndpoints(const SessionEndpoints&) = delete;
  SessionEndpoints& operator=(const SessionEndpoints&) = delete;

  // Checks the request (CheckEndpointRequest), the limit (`limit` endpoints held at once, 0:
  // none), creates an endpoint of `pd` on `device` and connects it to `remote`. Nothing is kept
  // on error. kUnimplemented on a device without endpoints; kResourceExhausted at the limit
  // (naming it); the device's errors otherwise.
  absl::StatusOr<EndpointInfo> Create(hca::Device* device, hca::Pd pd,
                                      const hca::EndpointAddress& remote, hca::AccessFlags access,
                                      uint32_t limit);
  // kNotFound for an id this session does not hold.
  absl::Status Destroy(EndpointId id);
  absl::StatusOr<EndpointInfo> Find(EndpointId id) const;
  std::vector<EndpointInfo> List() const;
  // The endpoint whose queue pair is `local_qpn`, connected to the peer queue pair `peer_qpn`.
  std::optional<EndpointId> FindConnected(uint32_t local_qpn, uint32_t peer_qpn) const;
  size_t size() const { return entries_.size(); }
  // Destroys every endpoint: the session is closing (this must happen before its PD goes).
  void Clear();

  // The simulated peer of endpoint `id`: `node` playing the peer the client named, connected
  // to the endpoint. kNotFound for an unknown id; kUnimplemented without a remote node.
  absl::StatusOr<std::unique_ptr<hca::Peer>> RemotePeer(EndpointId id, hca::Device* device,
                                                        const RemoteNode& node) const;

 private:
  struct Entry {
    EndpointInfo info;
    std::unique_ptr<hca::Endpoint> endpoint;
  };
  EndpointStats* const stats_;
  std::map<EndpointId, Entry> entries_;
  EndpointId next_id_ = 1;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_ENDPOINTS_H_
