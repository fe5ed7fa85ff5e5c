// Compile-time ties between the spellings of the values that cross the wire: the access bits of
// the proto (regcache.v1.Access), the client library (api::AccessBits) and the device
// (hca::AccessBits) are one set of numbers, passed through unconverted, so they must not drift;
// likewise the prefetch modes of the proto and the client. (The daemon's odp::PrefetchMode is
// converted by name at the proto boundary, in grpc_service.cc.) Nothing here runs.
#include <cstdint>

#include "hca/device.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.pb.h"

namespace regcache::api {
namespace {

namespace pb = ::regcache::v1;

// True when the three spellings of one bit have the same value.
constexpr bool Same(pb::Access wire, AccessBits client, hca::AccessBits device) {
  return static_cast<uint32_t>(wire) == static_cast<uint32_t>(client) &&
         static_cast<uint32_t>(client) == static_cast<uint32_t>(device);
}

static_assert(Same(pb::ACCESS_LOCAL_READ, kLocalRead, hca::kLocalRead));
static_assert(Same(pb::ACCESS_LOCAL_WRITE, kLocalWrite, hca::kLocalWrite));
static_assert(Same(pb::ACCESS_REMOTE_READ, kRemoteRead, hca::kRemoteRead));
static_assert(Same(pb::ACCESS_REMOTE_WRITE, kRemoteWrite, hca::kRemoteWrite));
static_assert(Same(pb::ACCESS_REMOTE_ATOMIC, kRemoteAtomic, hca::kRemoteAtomic));
// No bit beyond the five: a new one must be added to all three.
static_assert(uint32_t{kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic} ==
              hca::kAllAccess);
static_assert(pb::Access_MAX == pb::ACCESS_REMOTE_ATOMIC);

// An endpoint address crosses as plain numbers and raw GID bytes: the client's RemoteQp and the
// device's EndpointAddress must hold the same widths.
static_assert(sizeof(RemoteQp{}.gid) == sizeof(hca::EndpointAddress{}.gid));
static_assert(sizeof(RemoteQp{}.lid) == sizeof(hca::EndpointAddress{}.lid));

static_assert(pb::PREFETCH_UNSPECIFIED == static_cast<int>(PrefetchMode::kNone));
static_assert(pb::PREFETCH_SYNC == static_cast<int>(PrefetchMode::kSync));
static_assert(pb::PREFETCH_ASYNC == static_cast<int>(PrefetchMode::kAsync));
static_assert(pb::Prefetch_MAX == pb::PREFETCH_ASYNC);

}  // namespace
}  // namespace regcache::api