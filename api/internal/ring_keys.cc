#include "api/internal/ring_keys.h"

#include <string>

#include "base/status_macros.h"
#include "cache/lifecycle.h"
#include "service/ring_codec.h"

namespace regcache::api::internal {
namespace {

shm::RingRequest Request(shm::RingOp op) {
  shm::RingRequest r{};
  r.op = static_cast<uint16_t>(op);
  return r;
}

// The completion of `r`, or the transport's error, or the daemon's.
absl::StatusOr<shm::RingCompletion> Run(RingClient& ring, const shm::RingRequest& r) {
  ASSIGN_OR_RETURN(shm::RingCompletion c, ring.Call(r));
  RETURN_IF_ERROR(shm::StatusFromCompletion(c));
  return c;
}

absl::Status RunStatus(RingClient& ring, const shm::RingRequest& r) {
  return Run(ring, r).status();
}

// PrefetchMode's values are the ring's (kNone 0, kSync 1, kAsync 2); others pass through for
// the daemon to refuse.
uint32_t RingPrefetchValue(PrefetchMode m) { return static_cast<uint32_t>(m); }
static_assert(static_cast<uint32_t>(PrefetchMode::kSync) == shm::kPrefetchSync);
static_assert(static_cast<uint32_t>(PrefetchMode::kAsync) == shm::kPrefetchAsync);

}  // namespace

Key KeyFromCompletion(const shm::RingCompletion& c) {
  return Key{c.handle, c.lkey, c.rkey, c.va, c.length, c.access, (c.flags & shm::kFlagHit) != 0};
}

absl::StatusOr<Key> RingRegister(RingClient& ring, const void* addr, uint64_t length,
                                 uint32_t access, PrefetchMode prefetch) {
  shm::RingRequest r = Request(shm::RingOp::kRegister);
  r.va = reinterpret_cast<uint64_t>(addr);
  r.length = length;
  r.access = access;
  r.prefetch = RingPrefetchValue(prefetch);
  ASSIGN_OR_RETURN(shm::RingCompletion c, Run(ring, r));
  return KeyFromCompletion(c);
}

absl::Status RingPrefetch(RingClient& ring, const void* addr, uint64_t length, bool write,
                          PrefetchMode mode) {
  shm::RingRequest r = Request(shm::RingOp::kPrefetch);
  r.va = reinterpret_cast<uint64_t>(addr);
  r.length = length;
  r.flags = write ? shm::kFlagWrite : 0;
  r.prefetch = RingPrefetchValue(mode);
  return RunStatus(ring, r);
}

absl::StatusOr<Key> RingWindow(RingClient& ring, uint64_t parent, uint64_t offset, uint64_t length,
                               uint32_t access) {
  shm::RingRequest r = Request(shm::RingOp::kWindow);
  r.handle = parent;
  r.va = offset;
  r.length = length;
  r.access = access;
  ASSIGN_OR_RETURN(shm::RingCompletion c, Run(ring, r));
  return KeyFromCompletion(c);
}

absl::Status RingRelease(RingClient& ring, uint64_t handle) {
  shm::RingRequest r = Request(shm::RingOp::kRelease);
  r.handle = handle;
  return RunStatus(ring, r);
}

absl::Status RingInvalidate(RingClient& ring, uint64_t handle) {
  shm::RingRequest r = Request(shm::RingOp::kInvalidate);
  r.handle = handle;
  return RunStatus(ring, r);
}

absl::StatusOr<KeyInfo> RingQuery(RingClient& ring, uint64_t handle) {
  shm::RingRequest r = Request(shm::RingOp::kQuery);
  r.handle = handle;
  ASSIGN_OR_RETURN(shm::RingCompletion c, Run(ring, r));
  KeyInfo k;
  k.handle = c.handle;
  k.key = c.rkey;
  k.va = c.va;
  k.length = c.length;
  k.access = c.access;
  k.holders = c.holders;
  k.revoked = (c.flags & shm::kFlagRevoked) != 0;
  k.is_window = (c.flags & shm::kFlagWindow) != 0;
  k.parent = c.parent;
  k.key_state = std::string(cache::KeyStateName(static_cast<cache::KeyState>(c.key_state)));
  return k;
}

absl::Status RingNop(RingClient& ring) { return RunStatus(ring, Request(shm::RingOp::kNop)); }

}  // namespace regcache::api::internal
