// Compile-time ties between the spellings of the values that cross the wire, as the client sees
// them: the access bits of the proto (regcache.v1.Access), of the client library
// (api::AccessBits) and of the rings (shm::kKnownAccessBits) are one set of numbers, passed
// through unconverted, so they must not drift; likewise the prefetch modes of the proto, the
// rings and the client. The daemon ties the same wire values to its device's and cache's types
// on its side (server/wire_values.cc, service/internal/ring_server.cc). Nothing here runs.
#include <cstdint>

#include "protocol/shm_protocol.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.pb.h"

namespace regcache::api {
namespace {

namespace pb = ::regcache::v1;
namespace shm = ::regcache::protocol::shm;

// True when the two spellings of one bit have the same value.
constexpr bool Same(pb::Access wire, AccessBits client) {
  return static_cast<uint32_t>(wire) == static_cast<uint32_t>(client);
}

static_assert(Same(pb::ACCESS_LOCAL_READ, kLocalRead));
static_assert(Same(pb::ACCESS_LOCAL_WRITE, kLocalWrite));
static_assert(Same(pb::ACCESS_REMOTE_READ, kRemoteRead));
static_assert(Same(pb::ACCESS_REMOTE_WRITE, kRemoteWrite));
static_assert(Same(pb::ACCESS_REMOTE_ATOMIC, kRemoteAtomic));
// No bit beyond the five: a new one must be added to every spelling.
static_assert(uint32_t{kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic} ==
              shm::kKnownAccessBits);
static_assert(pb::Access_MAX == pb::ACCESS_REMOTE_ATOMIC);

// An endpoint address crosses as plain numbers and raw GID bytes (16 of them, a 16-bit LID):
// server/wire_values.cc checks the device's widths against the same numbers.
static_assert(sizeof(RemoteQp{}.gid) == 16);
static_assert(sizeof(RemoteQp{}.lid) == 2);

static_assert(pb::PREFETCH_UNSPECIFIED == static_cast<int>(PrefetchMode::kNone));
static_assert(pb::PREFETCH_SYNC == static_cast<int>(PrefetchMode::kSync));
static_assert(pb::PREFETCH_ASYNC == static_cast<int>(PrefetchMode::kAsync));
static_assert(pb::Prefetch_MAX == pb::PREFETCH_ASYNC);
static_assert(shm::kPrefetchNone == static_cast<uint32_t>(PrefetchMode::kNone));
static_assert(shm::kPrefetchSync == static_cast<uint32_t>(PrefetchMode::kSync));
static_assert(shm::kPrefetchAsync == static_cast<uint32_t>(PrefetchMode::kAsync));

}  // namespace
}  // namespace regcache::api
