// The ring messages' codec: validation of a RingRequest the daemon copied out of shared memory,
// and the status fields of a RingCompletion (protocol/shm_protocol.h). Pure functions with no
// state and no dependency on the daemon, so that a fuzzer can drive them directly.
//
// Thread safety: every function is pure.
#ifndef REGCACHE_PROTOCOL_RING_CODEC_H_
#define REGCACHE_PROTOCOL_RING_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "protocol/shm_protocol.h"

namespace regcache::protocol::shm {

// A request that passed validation, in wire integers: the daemon converts them to its own types
// at its edge (service/internal/ring_server.cc).
struct DecodedRequest {
  uint64_t seq = 0;
  RingOp op = RingOp::kNop;
  uint64_t handle = 0;  // window parent, release, invalidate, reregister, query
  uint64_t va = 0;      // register, reregister, prefetch; window: the offset
  uint64_t length = 0;
  uint32_t access = 0;                // kKnownAccessBits only
  bool write = false;                 // kPrefetch
  uint32_t prefetch = kPrefetchNone;  // register, prefetch: kPrefetchNone, Sync or Async
  uint64_t deadline_ns = 0;           // CLOCK_MONOTONIC; 0 = none (any value is valid)
};

// Validates `copy` (a private copy: never a pointer into shared memory) field by field: a known
// op; reserved fields zero; the fields the op does not use zero; flags only those the op knows
// (kFlagWrite, on kPrefetch); access only kKnownAccessBits; a prefetch value of
// kPrefetchNone/Sync/Async; where the op takes a range, a length that is non-zero and does not
// wrap; where it takes a handle, a non-zero handle. kInvalidArgument naming the first bad
// field otherwise. Semantic checks (does the handle exist, is the range attached) are the
// daemon's, after decoding.
absl::StatusOr<DecodedRequest> DecodeRequest(const RingRequest& copy);
// The same into `out` (the daemon's hot path: no DecodedRequest copied through a StatusOr).
// `out` is unspecified on error.
absl::Status DecodeRequest(const RingRequest& copy, DecodedRequest& out);

// A completion for request `seq`/`op` with `status`'s code and message (its first
// kMessageBytes - 1 bytes, NUL-terminated); every other field zero, slot kNoSlot. A longer
// message: the completion also carries kFlagLongMessage, and `*long_message` gets the whole
// message (cut to kLongMessageBytes - 1 bytes), for the channel's message slot; with
// `long_message` null it is only cut.
RingCompletion CompletionFor(uint64_t seq, uint16_t op, const absl::Status& status,
                             std::string* long_message = nullptr);

// The status a completion carries, validated: a code outside absl's canonical codes becomes
// kUnknown; the message is read up to its NUL or kMessageBytes bytes, or, when the completion
// carries kFlagLongMessage and `long_message` (the channel's message slot, copied out) is not
// empty, is `long_message` up to its NUL.
absl::Status StatusFromCompletion(const RingCompletion& completion,
                                  absl::string_view long_message = {});

}  // namespace regcache::protocol::shm
#endif  // REGCACHE_PROTOCOL_RING_CODEC_H_
