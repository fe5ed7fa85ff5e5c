// Peer descriptors: everything a remote peer needs to use one of this session's keys, in a
// compact, versioned byte string (and a text form of it) that the application carries to the
// peer over its own channel (a TCP socket, a KV-store, the framework's metadata exchange). The
// analogue of UCX's packed rkeys and NIXL's serialized agent metadata. docs/descriptors.md has
// the byte layout and the compatibility rules.
//
//   namespace rc = regcache::api;
//   ASSIGN_OR_RETURN(rc::Key k, c->Register(buf, len, rc::kLocalRead | rc::kRemoteWrite));
//   ASSIGN_OR_RETURN(rc::PeerDescriptor d, rc::DescribeKey(c->device(), k, &endpoint));
//   ASSIGN_OR_RETURN(std::string bytes, rc::PackDescriptor(d));     // to the peer ...
//   ... on the peer:
//   ASSIGN_OR_RETURN(rc::PeerDescriptor d, rc::UnpackDescriptor(bytes));
//   ... connect a queue pair to d.endpoint (or to the node d.gid names), then RDMA WRITE to
//   [d.addr, d.addr + d.length) with d.rkey.
//
// A descriptor is a description, not a capability the library enforces: whoever holds the rkey
// and can reach the queue pair can use the key, exactly as with a raw rkey. Revocation works as
// always: once the key is invalidated (Client::Invalidate, Release of a revocable grant, the
// session's end) the peer's next access fails; the descriptor does not extend a key's life.
//
// Errors: kInvalidArgument for a descriptor that is malformed, truncated, of another format, or
// that describes nothing usable (no remote right, an empty or wrapping range, an endpoint
// address out of range); the message names the field. kFailedPrecondition for a descriptor of a
// newer format version than this library reads. These functions need no daemon.
// Thread safety: all are pure functions.
#ifndef REGCACHE_DESCRIPTOR_H_
#define REGCACHE_DESCRIPTOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "regcache/client.h"

namespace regcache::api {

// The format version PackDescriptor writes and the newest UnpackDescriptor reads.
inline constexpr uint8_t kDescriptorVersion = 1;
// Sizes of a packed descriptor: without and with an endpoint.
inline constexpr size_t kDescriptorBytes = 64;
inline constexpr size_t kDescriptorWithEndpointBytes = 96;
// The text form: this prefix, then the packed bytes in unpadded base64url (RFC 4648 §5).
inline constexpr std::string_view kDescriptorTextPrefix = "rcd1:";

struct PeerDescriptor {
  // The NIC the key belongs to (Client::device()).
  uint64_t node_guid = 0;                      // host byte order, as DeviceInfo::node_guid
  std::array<uint8_t, 16> gid{};               // the port's GID, raw bytes in network order
  uint8_t port = 0;                            // 1-based
  KeyBounds key_bounds = KeyBounds::kUnknown;  // what confines the peer (docs/key_bounds.md)
  // The key.
  uint32_t rkey = 0;
  uint64_t addr = 0;    // the first byte the peer may address (the key's va)
  uint64_t length = 0;  // bytes from addr
  uint32_t access = 0;  // the remote rights only: kRemoteRead | kRemoteWrite | kRemoteAtomic
  // Where the key is used through a target endpoint (docs/endpoints.md): the daemon's queue pair,
  // for the peer to connect its own to (EndpointInfo::local). Absent where the peer reaches the
  // key another way (a queue pair in an imported PD, a connection manager of the application's).
  std::optional<RemoteQp> endpoint;
};

// The descriptor of `key` on `device` (the client's Client::device()), carrying `endpoint`'s
// address when one is given. Only the key's remote rights go in; kInvalidArgument for a key
// with none (no peer could use it) and for anything PackDescriptor would refuse.
REGCACHE_CPP_API absl::StatusOr<PeerDescriptor> DescribeKey(const DeviceInfo& device,
                                                            const Key& key,
                                                            const EndpointInfo* endpoint = nullptr);

// The descriptor in its byte form (kDescriptorBytes, or kDescriptorWithEndpointBytes with an
// endpoint). Refuses, with the same errors, exactly what UnpackDescriptor would refuse, so a
// packed descriptor always unpacks to an equal one.
REGCACHE_CPP_API absl::StatusOr<std::string> PackDescriptor(const PeerDescriptor& descriptor);
REGCACHE_CPP_API absl::StatusOr<PeerDescriptor> UnpackDescriptor(std::string_view bytes);

// The text form ("rcd1:..."; safe in URLs, file names, JSON strings and shell words) and back.
REGCACHE_CPP_API absl::StatusOr<std::string> DescriptorToText(const PeerDescriptor& descriptor);
REGCACHE_CPP_API absl::StatusOr<PeerDescriptor> DescriptorFromText(std::string_view text);

// Field-for-field equality (the endpoints' too).
REGCACHE_CPP_API bool operator==(const PeerDescriptor& a, const PeerDescriptor& b);

}  // namespace regcache::api
#endif  // REGCACHE_DESCRIPTOR_H_
