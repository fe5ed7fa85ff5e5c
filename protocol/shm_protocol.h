// The shared-memory fast path between a client process and regcached: the layout of the two
// files a session shares with the daemon, the ring messages, and the wake-up protocol.
//
// gRPC stays the control plane (sessions, memory, stats, admin). Keys in the hot path —
// register, window, release, invalidate, re-register, prefetch, query — travel over these
// rings: a round trip is two cache-line transfers and, only when a side sleeps, a futex wake.
//
// Files. Daemon::OpenSession creates both (memfds, sized once, sealed against shrinking and
// growing, so a client can never make the daemon's mapping fault) and the control socket's
// first Welcome carries them to the client (SCM_RIGHTS, channel file first), with the geometry
// (channels, slots); the client checks both headers against the sizes of the files it mapped:
//
//   channel file   client maps it read-write. ChannelFileHeader (one 4 KiB page), then
//                  `channels` Channel structs. Each channel is one request ring (client
//                  produces, daemon consumes) and one completion ring (daemon produces, client
//                  consumes), kRingDepth entries each.
//   state file     client maps it READ-ONLY (the daemon seals it with F_SEAL_FUTURE_WRITE after
//                  mapping it itself, so no writable mapping of it can be made afterwards).
//                  StateHeader (one 4 KiB page), then the revocation event ring
//                  (kEventCapacity RevocationEvents), then `slots` grant state words.
//
// Threads. A session has `channels` channels (default 16). A client thread claims one for as
// long as it lives (the client library hands them out; with more threads than channels,
// threads share a channel under a client-side lock). Each ring therefore has one producer
// and one consumer, and the daemon never cares which client thread wrote a request. The
// daemon serves a session with ONE worker thread of its own: it sweeps the session's channels
// round robin, at most kBurstPerChannel requests of a channel per sweep, so a client thread
// that floods its channel delays the session's other threads by at most a burst, and a
// session that floods delays nobody else — other sessions have their own workers, which the
// kernel schedules fairly. A worker spins adaptively while requests keep arriving, then
// sleeps on the session's doorbell futex: an idle session costs no CPU.
//
// Wake-up (both directions are the same Dekker handshake on 32-bit futex words):
//   client posts   writes the RingRequest at req[head % depth], store-release req_head =
//                  head + 1, full fence, then if daemon_waiting != 0: daemon_waiting = 0,
//                  doorbell += 1, FUTEX_WAKE(doorbell).
//   daemon sleeps  daemon_waiting = 1, full fence, re-reads every channel's req_head; if none
//                  has work, FUTEX_WAIT(doorbell, value read before setting daemon_waiting).
//   daemon answers writes the RingCompletion at cpl[head % depth], store-release cpl_head =
//                  head + 1, full fence, then if client_waiting != 0: FUTEX_WAKE(cpl_head).
//   client waits   spins on cpl_head; then client_waiting = 1, full fence, re-reads cpl_head;
//                  if unchanged, FUTEX_WAIT(cpl_head, value), then client_waiting = 0.
//   client prepares (a hint, optional) posting = 1 on its channel, then the doorbell as when
//                  it posts; posting = 0 once it posted. A worker about to sleep stays awake
//                  while a channel says posting, for a bounded time (a client that sets it and
//                  never posts costs the worker that spin, nothing else).
//   client reads   copies the completion out, then counts it consumed; it may publish
//                  cpl_tail late, but no later than its next post (store-release cpl_tail
//                  before it writes the next request): the daemon then sees at least as much
//                  room as the client used, and one line carries both indices per round trip.
// The daemon finds work by sweeping the channels' req_head words; a channel with nothing
// posted costs one load of a line that stays in the daemon's cache until its client writes.
// The futexes are shared (not FUTEX_PRIVATE), since the words live in a file two processes map.
//
// Trust. The daemon trusts nothing in the channel file. It keeps its own copies of req_tail,
// cpl_head and the session's geometry and never reads back anything it wrote. It reads a
// client index once per use and checks it against its own copy: req_head - req_tail and
// cpl_head - cpl_tail must stay within kRingDepth (unsigned, wrapping), or the channel is
// marked broken (ChannelControl::state) and never served again — the session's other channels
// and every other session go on. A request is copied out of the ring into the worker's stack
// first and validated field by field on the copy (protocol/ring_codec.h, DecodeRequest: op,
// reserved fields and the fields the op does not use zero, flags known and meant for the op,
// access bits, lengths non-zero and not wrapping); a bad request gets a completion
// with kInvalidArgument and its own sequence number, and the worker moves on. The daemon takes
// a request only while the completion ring has room for its answer (cpl_head - cpl_tail <
// depth), so a client that stops reading completions only stops its own channel.
//
// Sequence numbers are the client's business: the client library numbers a channel's requests
// itself and, having posted one, waits for the completion with that number (discarding older
// ones, answers to calls whose deadline passed — and giving back what such an answer granted,
// should it come after all). Completions of a channel come in request order.
//
// Status codes in completions are absl::StatusCode values — the canonical codes gRPC carries
// too — and the error's message (its first kMessageBytes - 1 bytes, NUL-terminated; a longer
// one whole in Channel::messages, flagged kFlagLongMessage: never cut), with the
// error's reason (docs/api.md) as its number in protocol::kNumberedReasons; its metadata (the
// numbers behind it) travels over gRPC only.
//
// Grant state. Every grant the daemon hands a session (over any transport) holds a state slot
// for as long as the session holds the handle: the 32-bit word slots[slot] is
// (generation << 1) | revoked. A completion that returns a grant carries (slot, generation).
// Before the daemon revokes a key the session holds — Invalidate from any thread, the parent of
// a window invalidated, its memory detached, re-registration that takes rights away — it sets
// the revoked bit, and only then invalidates; when the session closes or the daemon drains it
// sets StateHeader::session_state first. So a client that reads its word as (generation << 1)
// before handing out a cached grant never hands out a grant whose revocation had begun. The
// daemon also appends a RevocationEvent to the event ring (overwriting the oldest; a reader
// that falls more than kEventCapacity behind rescans its grants' words instead): it writes the
// event's fields, then its `sequence` (store-release), then event_head = sequence + 1
// (store-release), and FUTEX_WAKEs event_head. A reader copies an event out, then re-reads
// event_head: if it moved kEventCapacity or more past the event's index, the copy may be torn.
// Only a grant's LAST hold released frees its slot (the generation goes up, the revoked bit is
// cleared); a grant the daemon could give no slot carries kNoSlot, and the client does not keep
// it in any cache.
// StateHeader::reclaim is a counter the daemon raises when the session's key quota or the
// device's pool is under pressure: the client library then releases the grants nobody in the
// process references. The daemon's own hold counts stay authoritative: a client that ignores
// reclaim only exhausts its own quota.
#ifndef REGCACHE_PROTOCOL_SHM_PROTOCOL_H_
#define REGCACHE_PROTOCOL_SHM_PROTOCOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace regcache::protocol::shm {

inline constexpr uint32_t kChannelFileMagic = 0x52434348;  // "RCCH"
inline constexpr uint32_t kStateFileMagic = 0x52435354;    // "RCST"
inline constexpr uint32_t kShmVersion = 2;                 // 2: Channel::messages

inline constexpr uint32_t kRingDepth = 64;  // entries per ring; a power of two
inline constexpr uint32_t kDefaultChannels = 16;
inline constexpr uint32_t kMaxChannels = 64;
inline constexpr uint32_t kBurstPerChannel = 16;
inline constexpr uint32_t kEventCapacity = 1024;  // a power of two
inline constexpr uint32_t kDefaultSlots = 1u << 18;
inline constexpr uint32_t kNoSlot = 0xffffffffu;
inline constexpr size_t kMessageBytes = 48;
// An error message that does not fit a completion (kMessageBytes - 1 bytes) travels whole in
// the channel's message slot of that completion (Channel::messages), up to this many bytes with
// its NUL; the completion then carries kFlagLongMessage and the message's start.
inline constexpr size_t kLongMessageBytes = 1024;
inline constexpr size_t kPageBytes = 4096;

enum class RingOp : uint16_t {
  kRegister = 1,    // va, length, access, prefetch           -> grant
  kWindow = 2,      // handle = parent, va = offset, length, access -> grant
  kRelease = 3,     // handle                                 -> status
  kInvalidate = 4,  // handle                                 -> status
  kReregister = 5,  // handle, va, length, access             -> grant (maybe the same key)
  kPrefetch = 6,    // va, length, flags & kFlagWrite, prefetch (1 sync, 2 async) -> status
  kQuery = 7,       // handle                                 -> grant fields + holders, flags
  kNop = 8,         // nothing: the ring's own round trip (benchmarks, liveness)
};
inline constexpr uint16_t kMaxRingOp = 8;
// The ops whose OK answer hands the caller a hold on a key (which someone must release).
inline bool OpGrants(RingOp op) {
  return op == RingOp::kRegister || op == RingOp::kWindow || op == RingOp::kReregister;
}

// RingRequest::flags
inline constexpr uint16_t kFlagWrite = 1u << 0;  // kPrefetch: make pages writable too
inline constexpr uint16_t kKnownRequestFlags = kFlagWrite;

// RingCompletion::flags
inline constexpr uint16_t kFlagHit = 1u << 0;          // the grant came from the daemon's cache
inline constexpr uint16_t kFlagRevoked = 1u << 1;      // kQuery; a grant revoked before it went out
inline constexpr uint16_t kFlagWindow = 1u << 2;       // kQuery: a window
inline constexpr uint16_t kFlagSameKey = 1u << 3;      // kReregister: the rkey was kept
inline constexpr uint16_t kFlagLongMessage = 1u << 4;  // an error: the whole message is in
                                                       // Channel::messages, same index

// Prefetch values: those of the daemon's odp::PrefetchMode + 1 (0 = none); the daemon converts
// at its edge, where a static_assert ties the two (service/internal/ring_server.cc).
inline constexpr uint32_t kPrefetchNone = 0;
inline constexpr uint32_t kPrefetchSync = 1;
inline constexpr uint32_t kPrefetchAsync = 2;

// The access bits a request may carry: local read, local write, remote read, remote write,
// remote atomic (1, 2, 4, 8, 16), the values of the device's hca::AccessBits, the client's
// api::AccessBits and the proto's regcache.v1.Access (static_asserts tie them where both sides
// are visible).
inline constexpr uint32_t kKnownAccessBits = 0x1f;

struct RingRequest {
  uint64_t seq;        // the client's; echoed in the completion
  uint16_t op;         // RingOp
  uint16_t flags;      // kKnownRequestFlags only
  uint32_t access;     // kKnownAccessBits (register, window, reregister)
  uint64_t handle;     // window parent, release, invalidate, reregister, query
  uint64_t va;         // register, reregister, prefetch: client address; window: offset
  uint64_t length;     // register, window, reregister, prefetch
  uint32_t prefetch;   // register, prefetch: kPrefetch*
  uint32_t reserved0;  // must be 0
  // When the caller stops waiting: CLOCK_MONOTONIC in ns (one host, one clock); 0 = never. A
  // request found past it does nothing; a grant made for one that passed it meanwhile is
  // released again (both answer kDeadlineExceeded).
  uint64_t deadline_ns;
  uint64_t reserved1;  // must be 0
};
static_assert(sizeof(RingRequest) == 64);

struct RingCompletion {
  uint64_t seq;
  uint16_t op;
  uint16_t flags;  // kFlagHit, kFlagRevoked, kFlagWindow, kFlagSameKey
  uint32_t code;   // absl::StatusCode; 0 = OK
  uint64_t handle;
  uint32_t lkey;
  uint32_t rkey;
  uint64_t va;
  uint64_t length;
  uint32_t access;
  uint32_t slot;                // grant state slot, kNoSlot if none
  uint32_t slot_generation;     // the slot's generation while this grant holds it
  uint32_t holders;             // kQuery
  uint64_t parent;              // kQuery: a window's parent handle, 0 otherwise
  uint32_t key_state;           // kQuery: the key's state, an index of kKeyStateNames
  uint32_t reason;              // an error's reason, protocol::ReasonNumber; 0: none (and on OK)
  char message[kMessageBytes];  // error text, NUL-terminated; empty on OK
};
static_assert(sizeof(RingCompletion) == 128);

// A key's lifecycle states by their number on the wire (RingCompletion::key_state), in the
// daemon's order (cache::KeyState; service/internal/ring_server.cc ties the two). A client
// shows a number past the end as "unknown".
inline constexpr const char* kKeyStateNames[] = {
    "free",         "mapping",  "active",      "draining", "fencing",
    "invalidating", "unmapped", "quarantined", "recovery", "destroyed",
};
inline constexpr const char* KeyStateName(uint32_t wire) {
  return wire < sizeof(kKeyStateNames) / sizeof(kKeyStateNames[0]) ? kKeyStateNames[wire]
                                                                   : "unknown";
}
// The completion's first cache line: everything before `parent`. The daemon writes only these
// bytes for an OK completion of an op other than kQuery (the second half would be zeros:
// parent, key_state and an empty message are kQuery's or an error's); a reader copies the rest
// only when code != 0 or op == kQuery, and takes it as zero otherwise.
inline constexpr size_t kCompletionHeadBytes = 64;
static_assert(offsetof(RingCompletion, parent) == kCompletionHeadBytes);

// One channel's indices. Client-written and daemon-written words sit on separate cache lines.
struct ChannelControl {
  // Written by the client.
  alignas(64) std::atomic<uint32_t> req_head;  // requests posted
  std::atomic<uint32_t> cpl_tail;              // completions consumed (see "Wake-up")
  std::atomic<uint32_t> client_waiting;        // the client sleeps (or is about to) on cpl_head
  std::atomic<uint32_t> posting;               // requests are on their way (a hint; see "Wake-up")
  // Written by the daemon.
  alignas(64) std::atomic<uint32_t> req_tail;  // requests taken (published copy)
  std::atomic<uint32_t> cpl_head;              // completions posted; the client's futex
  std::atomic<uint32_t> state;                 // kChannelOk or kChannelBroken
};
inline constexpr uint32_t kChannelOk = 0;
inline constexpr uint32_t kChannelBroken = 1;

struct Channel {
  ChannelControl control;
  RingRequest requests[kRingDepth];
  RingCompletion completions[kRingDepth];
  // messages[i]: the whole message of completions[i] when it carries kFlagLongMessage, written
  // by the daemon before it publishes the completion, NUL-terminated within the slot; the
  // client reads it before it moves cpl_tail past the completion. Untouched otherwise (the
  // file's pages stay unallocated until a long error needs them).
  char messages[kRingDepth][kLongMessageBytes];
};

struct ChannelFileHeader {
  // Written once by the daemon at creation (never read back by it).
  uint32_t magic;
  uint32_t version;
  uint32_t channels;
  uint32_t depth;
  uint64_t session_id;
  uint64_t channel_offset;  // of Channel 0 in the file
  uint64_t channel_stride;  // sizeof(Channel)
  // The doorbell: the daemon's worker sleeps on it.
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> daemon_waiting;
};
static_assert(sizeof(ChannelFileHeader) <= kPageBytes);

struct RevocationEvent {
  uint64_t handle;
  uint32_t key;
  uint32_t slot;
  uint32_t generation;
  uint32_t reason;    // RevokeReason
  uint64_t sequence;  // the event's index since the session opened (detects overwrite)
};
static_assert(sizeof(RevocationEvent) == 32);

enum class RevokeReason : uint32_t {
  kInvalidated = 1,        // Invalidate (from any thread of the client, or an admin)
  kParentInvalidated = 2,  // a window whose registration was invalidated
  kMemoryDetached = 3,     // the memory under the key was detached
  kReregistered = 4,       // re-registration replaced or narrowed it
  kSessionClosing = 5,     // not sent per key: StateHeader::session_state says it
  kReclaimed = 6,          // taken back: the session held more than its fair share of the
                           // device's keys while another session waited for keys
};

inline constexpr uint32_t kSessionOpen = 0;
inline constexpr uint32_t kSessionClosing = 1;

struct StateHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t event_capacity;
  uint64_t session_id;
  uint64_t event_offset;                            // of the event ring in the file
  uint64_t slot_offset;                             // of slot word 0 in the file
  alignas(64) std::atomic<uint32_t> session_state;  // kSessionOpen / kSessionClosing
  std::atomic<uint32_t> reclaim;                    // raised under pressure
  // Why the session is closing, written before session_state: a reason's number
  // (protocol/reason_numbers.h: DRAINING), 0 for the session's own end.
  std::atomic<uint32_t> close_reason;
  alignas(64) std::atomic<uint32_t> event_head;  // events written; a futex the client may wait on
};
static_assert(sizeof(StateHeader) <= kPageBytes);

// Slot words.
inline constexpr uint32_t SlotWord(uint32_t generation, bool revoked) {
  return (generation << 1) | (revoked ? 1u : 0u);
}
inline constexpr uint32_t SlotGeneration(uint32_t word) { return word >> 1; }
inline constexpr bool SlotRevoked(uint32_t word) { return (word & 1u) != 0; }

// File sizes for a geometry.
inline constexpr uint64_t ChannelFileBytes(uint32_t channels) {
  uint64_t bytes = kPageBytes + uint64_t{channels} * sizeof(Channel);
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}
inline constexpr uint64_t StateFileBytes(uint32_t slots) {
  uint64_t bytes = kPageBytes + uint64_t{kEventCapacity} * sizeof(RevocationEvent) +
                   uint64_t{slots} * sizeof(uint32_t);
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

}  // namespace regcache::protocol::shm
#endif  // REGCACHE_PROTOCOL_SHM_PROTOCOL_H_
