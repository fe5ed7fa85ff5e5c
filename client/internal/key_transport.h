// KeyTransport — how the client's key calls reach the daemon, chosen once at Connect: the
// session's rings (the fast path, client/internal/ring_keys.h) or gRPC (the fast path off in
// ClientOptions, or a daemon that offers no rings; client/grpc_keys.cc). ClientImpl
// (client/client_keys.cc) keeps its grant cache in front of either; only grants that arrive with
// a state slot (the rings') are cached, so over gRPC every call reaches the daemon.
// Internal to client/.
//
// Errors: as the calls of the same name in include/regcache/client.h. A transport reports the
// daemon's code and message unchanged.
//
// Thread safety: every method may be called from any thread.
#ifndef REGCACHE_CLIENT_INTERNAL_KEY_TRANSPORT_H_
#define REGCACHE_CLIENT_INTERNAL_KEY_TRANSPORT_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "protocol/shm_protocol.h"
#include "regcache/client.h"

namespace regcache::api::internal {

// A grant with its state slot (shm::kNoSlot: none, so not cacheable) and the slot's generation.
struct Granted {
  Key key;
  uint32_t slot = protocol::shm::kNoSlot;
  uint32_t generation = 0;
};

class KeyTransport {
 public:
  virtual ~KeyTransport() = default;

  virtual absl::StatusOr<Granted> Register(const void* addr, uint64_t length, uint32_t access,
                                           PrefetchMode prefetch) = 0;
  virtual absl::StatusOr<Granted> Reregister(uint64_t handle, const void* addr, uint64_t length,
                                             uint32_t access) = 0;
  virtual absl::StatusOr<Key> Window(uint64_t parent, uint64_t offset, uint64_t length,
                                     uint32_t access) = 0;
  virtual absl::Status Release(uint64_t handle) = 0;
  virtual absl::Status Invalidate(uint64_t handle) = 0;
  // Gives back `holds` holds of `handle` (their failures ignored: the session keeps what it
  // could not give back, and ends with the client), then Invalidate(handle); its status. The
  // default makes the two calls; the rings post them together, one round trip.
  virtual absl::Status ReleaseThenInvalidate(uint64_t handle, uint32_t holds) {
    std::vector<uint64_t> handles(holds, handle);
    for (size_t i = 0; i < handles.size(); i += kMaxBatchItems) {
      const size_t n = std::min(kMaxBatchItems, handles.size() - i);
      (void)ReleaseBatch(absl::MakeConstSpan(handles).subspan(i, n));
    }
    return Invalidate(handle);
  }
  virtual absl::Status Prefetch(const void* addr, uint64_t length, bool write,
                                PrefetchMode mode) = 0;
  virtual absl::StatusOr<KeyInfo> Query(uint64_t handle) = 0;
  // A hint that a call will follow shortly, made before work that precedes it (a batch's
  // lookups): the rings wake their worker now (RingClient::Announce). Nothing by default.
  virtual void Announce() {}
  // One result per item, in order (the transport checks the daemon's reply has exactly that).
  // REQUIRES: at most kMaxBatchItems items.
  virtual absl::StatusOr<std::vector<absl::StatusOr<Granted>>> RegisterBatch(
      absl::Span<const RegisterItem> items) = 0;
  virtual absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(
      absl::Span<const uint64_t> handles) = 0;
};

class RingClient;
class ClientImpl;
// Over the session's rings; `ring` must outlive the transport.
std::unique_ptr<KeyTransport> RingTransport(RingClient& ring);
// Over the client's gRPC channel, with its session and deadlines (client/grpc_keys.cc); `client`
// must outlive the transport.
std::unique_ptr<KeyTransport> GrpcTransport(ClientImpl& client);

// Answers every call with kFailedPrecondition "client closed" (a client after Close;
// client/client_keys.cc).
std::unique_ptr<KeyTransport> ClosedTransport();

// A batch reply has exactly one result per item; anything else is a broken daemon.
absl::Status CheckBatchReply(size_t results, size_t items);

}  // namespace regcache::api::internal
#endif  // REGCACHE_CLIENT_INTERNAL_KEY_TRANSPORT_H_
