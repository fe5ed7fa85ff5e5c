// Between the daemon's values and the gRPC API's messages
// (protocol/proto/regcache/v1/regcache.proto): grants, key and usage listings, device and endpoint
// descriptions, batch item statuses, and the request fields that need checking where the proto is
// looser than the daemon's types. Internal to api/.
//
// Thread safety: pure functions.
#ifndef REGCACHE_SERVER_INTERNAL_PROTO_CONVERT_H_
#define REGCACHE_SERVER_INTERNAL_PROTO_CONVERT_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/servicer.h"
#include "regcache/v1/regcache.pb.h"
#include "service/daemon.h"

namespace regcache::server::internal {

namespace pb = ::regcache::v1;

// The wire's prefetch mode as the daemon spells it: nullopt for PREFETCH_UNSPECIFIED.
absl::StatusOr<std::optional<odp::PrefetchMode>> PrefetchFromProto(int mode);

void ToProto(const cache::KeyGrant& g, uint32_t device_index, pb::KeyGrant* out);

void ToProto(const service::DeviceStatus& d, pb::DeviceInfo* out);

// One batch item's outcome, google.rpc.Status style (the codes are absl's, 1:1 with gRPC's).
void ToProto(const absl::Status& s, pb::ItemStatus* out);

// INVALID_ARGUMENT for a batch of more than 1024 items, naming the call.
absl::Status CheckBatchSize(absl::string_view call, int items);

void ToProto(const cache::RegistrationInfo& r, pb::KeyInfo* out);

void ToProto(const cache::TenantUsage& u, pb::Usage* out);

// A peer's address off the wire, checked where the proto is looser than the device's types
// (gid length, lid width, 24-bit qpn and psn); the daemon checks the rest (mtu, access).
absl::StatusOr<hca::EndpointAddress> FromProto(const pb::EndpointAddress& a);

void ToProto(const hca::EndpointAddress& a, pb::EndpointAddress* out);

void ToProto(const service::EndpointInfo& e, pb::EndpointInfo* out);

// PeerWrite / PeerRead's endpoint_id: 0 is none.
std::optional<service::EndpointId> Through(uint64_t endpoint_id);

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_PROTO_CONVERT_H_
