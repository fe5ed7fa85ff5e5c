// The client's key calls over the fast path: each builds a RingRequest, runs it on the ring
// (client/internal/ring_client.h) and turns the completion into the public types of
// include/regcache/client.h, or into an absl::Status with the daemon's code and message.
// RingTransport (client/internal/key_transport.h) serves them to the client.
// Internal to client/.
//
// Thread safety: as RingClient (any thread).
#ifndef REGCACHE_CLIENT_INTERNAL_RING_KEYS_H_
#define REGCACHE_CLIENT_INTERNAL_RING_KEYS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/internal/key_transport.h"
#include "client/internal/ring_client.h"
#include "regcache/client.h"

namespace regcache::api::internal {

// The grant a completion carries (register, window, reregister).
Key KeyFromCompletion(const shm::RingCompletion& c);

absl::StatusOr<Granted> RingRegister(RingClient& ring, const void* addr, uint64_t length,
                                     uint32_t access, PrefetchMode prefetch);
absl::StatusOr<Granted> RingReregister(RingClient& ring, uint64_t handle, const void* addr,
                                       uint64_t length, uint32_t access);
// Many registers or releases posted at once (one doorbell); one result per item, in order.
absl::StatusOr<std::vector<absl::StatusOr<Granted>>> RingRegisterBatch(
    RingClient& ring, absl::Span<const RegisterItem> items);
absl::StatusOr<std::vector<absl::Status>> RingReleaseBatch(RingClient& ring,
                                                           absl::Span<const uint64_t> handles);
absl::Status RingPrefetch(RingClient& ring, const void* addr, uint64_t length, bool write,
                          PrefetchMode mode);
absl::StatusOr<Key> RingWindow(RingClient& ring, uint64_t parent, uint64_t offset, uint64_t length,
                               uint32_t access);
absl::Status RingRelease(RingClient& ring, uint64_t handle);
absl::Status RingInvalidate(RingClient& ring, uint64_t handle);
absl::StatusOr<KeyInfo> RingQuery(RingClient& ring, uint64_t handle);
// The ring's own round trip (kNop).
absl::Status RingNop(RingClient& ring);

}  // namespace regcache::api::internal
#endif  // REGCACHE_CLIENT_INTERNAL_RING_KEYS_H_
