// Compile-time ties between the gRPC wire's values and the daemon's types: the access bits of
// the proto (regcache.v1.Access) are the device's hca::AccessBits, passed through unconverted
// (the rings' are tied where the ring server converts them: service/internal/ring_server.cc).
// The client ties the same wire values to its own spelling (client/wire_values.cc). Nothing
// here runs.
#include <cstdint>

#include "hca/device.h"
#include "regcache/v1/regcache.pb.h"

namespace regcache::server {
namespace {

namespace pb = ::regcache::v1;

constexpr bool Same(pb::Access wire, hca::AccessBits device) {
  return static_cast<uint32_t>(wire) == static_cast<uint32_t>(device);
}

static_assert(Same(pb::ACCESS_LOCAL_READ, hca::kLocalRead));
static_assert(Same(pb::ACCESS_LOCAL_WRITE, hca::kLocalWrite));
static_assert(Same(pb::ACCESS_REMOTE_READ, hca::kRemoteRead));
static_assert(Same(pb::ACCESS_REMOTE_WRITE, hca::kRemoteWrite));
static_assert(Same(pb::ACCESS_REMOTE_ATOMIC, hca::kRemoteAtomic));
// An endpoint address crosses as plain numbers and raw GID bytes (client/wire_values.cc).
static_assert(sizeof(hca::EndpointAddress{}.gid) == 16);
static_assert(sizeof(hca::EndpointAddress{}.lid) == 2);

}  // namespace
}  // namespace regcache::server
