// The control-socket protocol: small fixed-size binary messages over a unix SOCK_SEQPACKET
// socket (<socket_dir>/control.sock). One connection is one session.
//
// Why a socket next to gRPC: it is what carries the peer's credentials (SO_PEERCRED) and file
// descriptors (SCM_RIGHTS), and its EOF is how the daemon learns that a client died — gRPC over
// a unix socket gives neither reliably. Everything else travels over gRPC.
//
// Every message starts with a 16-byte header; one SEQPACKET datagram is one message, so a
// message is never split or merged:
//
//   0      4        6       8         12          16
//   | magic | version | type | length | reserved=0 | body (length - 16 bytes) ...
//
// magic "RCCS" (0x52434353), version 4, length = header + body, exactly the size of the type's
// struct below. All fields are host byte order (the socket never leaves the host). The receiver
// copies the datagram out first and validates every field of the copy; a datagram that is too
// short, too long, of an unknown magic/version/type or with a length that does not match its
// type gets an Error reply (never a crash), and any descriptors that came with it are closed.
//
// The conversation:
//   client -> Open      {device name; empty: the daemon's first device; flags}, the first
//                       message, right after connect: a daemon serves several devices and the
//                       session lives on one of them. With kOpenObserver in flags the
//                       connection is an observer instead (below).
//   daemon -> Welcome   SO_PEERCRED and the device -> Daemon::OpenSession, then either
//                       Welcome{session id, token, admin, ring_channels, grant_slots, the
//                       device: index, name, node GUID, port, GID} with TWO fds (SCM_RIGHTS:
//                       the fast path's channel file, then its state file;
//                       protocol/shm_protocol.h) or, refused, Error{code, message} and the
//                       daemon closes the connection. The client presents the token on
//                       every gRPC call (metadata "x-regcache-session").
//                       The daemon answers only after it has READ the Open, and the client sends
//                       nothing else before the answer: a unix socket closed with unread data
//                       makes the peer's next read fail with ECONNRESET, and a refused client
//                       would lose the Error that says why. A connection that sends anything
//                       but Open first gets an Error and is closed; one that sends nothing is
//                       closed after kOpenTimeout.
//                       An observer (Open with kOpenObserver: regcachectl's read-only
//                       commands) is authenticated by SO_PEERCRED and the allow-list like a
//                       session, but gets no device resources: no PD, no pool, no rings. Its
//                       Welcome has observer = 1, no fds, and a token that serves the read-only
//                       gRPC calls only (Status, Stats, Sessions, ListKeys, ListEndpoints,
//                       ListMemory, with the admin checks on the observer's peer credentials);
//                       every call that would change or hold something is refused with
//                       PERMISSION_DENIED. Observers are not sessions: they are counted in no
//                       session count and hold no session slot.
//   client -> Hello     optional: the daemon answers with the Welcome again, without fds (the
//                       files are sent once per session).
//   daemon -> MemoryFd  {memory id, length, hugetlb} + one fd (SCM_RIGHTS): the memfd of a
//                       gRPC AllocateMemory, sent on the caller's session before the RPC returns.
//   client -> ImportFd  {nonce, offset, length} + one fd: memory the client brings (a sealable
//                       memfd, which the daemon maps; or a dma-buf, which it keeps unmapped and
//                       the device registers by descriptor; a file of a hugetlbfs mount, which
//                       cannot be sealed, only where the device is not the sim).
//                       daemon -> Imported{nonce, memory id} or Error{nonce, ...}.
//   client -> ExportPd  {nonce}: the session's PD for this process to import
//                       (docs/client_memory.md; the session opened with kOpenOwnContext).
//                       daemon -> PdExport{nonce, pd handle} + one fd (the command fd of the
//                       session's own device context, for ibv_import_device) or
//                       Error{nonce, ...}.
//   client -> AttachRegion {nonce, mr handle, region, range, access}: a region this process
//                       registered in that PD attached as the session's memory.
//                       daemon -> Imported{nonce, memory id} or Error{nonce, ...}.
//   EOF (either side)   the session ends: Daemon::CloseSession runs every key through the
//                       lifecycle and unmaps the memory.
// The daemon sends with MSG_DONTWAIT and drops a client whose receive queue is full.
#ifndef REGCACHE_PROTOCOL_CONTROL_PROTOCOL_H_
#define REGCACHE_PROTOCOL_CONTROL_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace regcache::protocol {

inline constexpr uint32_t kControlMagic = 0x52434353;  // "RCCS"
// 2: the Welcome carries the fast path's geometry and files. 3: the client opens its session
// with Open, naming its device, and the Welcome says which device the session lives on.
// 4: Open carries flags (kOpenObserver) and the Welcome says whether it is an observer's; a
// version-3 daemon would have refused the flag as a non-zero reserved field, a version-3 client
// would not know a Welcome without fds may be an observer's. 5: an Error carries the number of
// its reason (protocol/reason_numbers.h), so a refused Open says PEER_NOT_ALLOWED, DRAINING...
inline constexpr uint16_t kControlVersion = 5;
// OpenMsg::flags.
inline constexpr uint32_t kOpenObserver = 1;  // a read-only observer, not a session
// A session with a device context of its own (Daemon::OpenSession's own_context), whose PD
// ExportPd can hand out. A daemon that predates it refuses it as an unknown bit.
inline constexpr uint32_t kOpenOwnContext = 2;
inline constexpr uint32_t kOpenKnownFlags = kOpenObserver | kOpenOwnContext;
// How long a new connection may take to send its Open.
inline constexpr absl::Duration kOpenTimeout = absl::Seconds(10);
// Device names in Open and Welcome: NUL-padded, at most this many bytes.
inline constexpr size_t kDeviceNameBytes = 64;
// Where the daemon's sockets are when nobody says: REGCACHE_SOCKET_DIR if it is set and not
// empty, else kDefaultSocketDir. Every program and library asks this when given no directory.
inline constexpr char kDefaultSocketDir[] = "/run/regcache";
inline constexpr char kSocketDirEnv[] = "REGCACHE_SOCKET_DIR";
inline std::string DefaultSocketDir() {
  const char* env = std::getenv(kSocketDirEnv);
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(kDefaultSocketDir);
}
inline constexpr char kControlSocketName[] = "control.sock";
inline constexpr char kGrpcSocketName[] = "grpc.sock";
inline constexpr char kSessionMetadataKey[] = "x-regcache-session";

enum class ControlType : uint16_t {
  kHello = 1,         // client -> daemon (optional: asks for the Welcome again)
  kWelcome = 2,       // daemon -> client
  kError = 3,         // daemon -> client
  kMemoryFd = 4,      // daemon -> client, with an fd
  kImportFd = 5,      // client -> daemon, with an fd
  kImported = 6,      // daemon -> client
  kExportPd = 7,      // client -> daemon
  kPdExport = 8,      // daemon -> client, with an fd
  kAttachRegion = 9,  // client -> daemon
  kOpen = 10,         // client -> daemon, first message: opens the session
};

struct ControlHeader {
  uint32_t magic = kControlMagic;
  uint16_t version = kControlVersion;
  uint16_t type = 0;
  uint32_t length = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(ControlHeader) == 16);

struct HelloMsg {
  ControlHeader header;
};
struct OpenMsg {
  ControlHeader header;
  // The device the session lives on, NUL-padded (a name of exactly kDeviceNameBytes bytes has
  // no NUL); all zero: the daemon's first device.
  char device[kDeviceNameBytes] = {};
  uint32_t flags = 0;     // kOpen* bits; the daemon refuses unknown bits
  uint32_t reserved = 0;  // must be 0
};
struct WelcomeMsg {
  ControlHeader header;
  uint64_t session_id = 0;
  char token[32] = {};  // hex digits, not NUL-terminated
  uint8_t admin = 0;
  uint8_t observer = 0;  // 1: an observer's Welcome (no fds, read-only token)
  uint8_t pad[2] = {};
  // The fast path's geometry (protocol/shm_protocol.h); the first Welcome's two fds are its
  // files. The client checks both against the files' headers and sizes.
  uint32_t ring_channels = 0;
  uint32_t grant_slots = 0;
  // What confines a peer holding one of the session's keys (hca::KeyBounds: 1 key, 2 cut,
  // 3 attachment; 0 unknown, which is also what a daemon that predates the field sends).
  uint8_t key_bounds = 0;
  uint8_t reserved[3] = {};
  // The session's device (service::DeviceIdentity): every key of the session belongs to it.
  uint32_t device_index = 0;
  uint8_t port = 0;
  uint8_t pad2[3] = {};
  uint64_t node_guid = 0;
  uint8_t gid[16] = {};
  char device[kDeviceNameBytes] = {};  // NUL-padded
};
struct ErrorMsg {
  ControlHeader header;
  uint64_t nonce = 0;        // the ImportFd this answers, 0 otherwise
  uint32_t code = 0;         // absl::StatusCode
  uint16_t in_reply_to = 0;  // ControlType of the offending message, 0 if none
  uint16_t message_length = 0;
  uint32_t reason = 0;  // the reason's number (protocol/reason_numbers.h), 0: none
  char message[228] = {};
};
struct MemoryFdMsg {
  ControlHeader header;
  uint64_t memory_id = 0;
  uint64_t length = 0;
  uint8_t hugetlb = 0;
  uint8_t pad[7] = {};
};
struct ImportFdMsg {
  ControlHeader header;
  uint64_t nonce = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};
struct ImportedMsg {
  ControlHeader header;
  uint64_t nonce = 0;
  uint64_t memory_id = 0;
};
struct ExportPdMsg {
  ControlHeader header;
  uint64_t nonce = 0;
};
struct PdExportMsg {
  ControlHeader header;
  uint64_t nonce = 0;
  uint32_t pd_handle = 0;
  uint32_t reserved = 0;
};
// service::ClientRegion on the wire.
struct AttachRegionMsg {
  ControlHeader header;
  uint64_t nonce = 0;
  uint32_t mr_handle = 0;
  uint32_t access = 0;  // AccessBits
  uint64_t region_addr = 0;
  uint64_t region_length = 0;
  uint64_t va = 0;
  uint64_t length = 0;
};

// The largest message; receive buffers are one byte larger so that an oversized datagram is
// seen as such (MSG_TRUNC) rather than accepted.
inline constexpr size_t kMaxControlMessage = sizeof(ErrorMsg);
static_assert(sizeof(WelcomeMsg) <= kMaxControlMessage && sizeof(OpenMsg) <= kMaxControlMessage);

// The device name an Open or Welcome carries: up to the first NUL. kInvalidArgument for a name
// with bytes other than printable ASCII.
absl::StatusOr<std::string> DeviceNameOf(const char (&field)[kDeviceNameBytes]);
// Copies `name` into such a field. kInvalidArgument for a name longer than kDeviceNameBytes.
absl::Status SetDeviceName(absl::string_view name, char (&field)[kDeviceNameBytes]);

// The size a message of `type` must have, or 0 for an unknown type.
size_t ControlMessageSize(uint16_t type);

// Fills the header of a message struct.
template <typename Msg>
Msg MakeControlMessage(ControlType type) {
  Msg m{};
  m.header.magic = kControlMagic;
  m.header.version = kControlVersion;
  m.header.type = static_cast<uint16_t>(type);
  m.header.length = sizeof(Msg);
  return m;
}

ErrorMsg MakeErrorMessage(const absl::Status& status, uint64_t nonce, uint16_t in_reply_to);
// The status an Error message carries (its code validated: unknown codes become kUnknown), with
// its reason when the number is one this build knows.
absl::Status StatusFromErrorMessage(const ErrorMsg& m);

// A received datagram, validated: `bytes` holds exactly ControlMessageSize(type) bytes.
struct ControlMessage {
  ControlType type = ControlType::kHello;
  std::vector<uint8_t> bytes;
  std::vector<int> fds;  // owned by the receiver

  // Copies the payload out. REQUIRES: sizeof(Msg) == bytes.size().
  template <typename Msg>
  Msg As() const {
    Msg m;
    static_assert(std::is_trivially_copyable_v<Msg>);
    std::memcpy(&m, bytes.data(), sizeof(Msg));
    return m;
  }
};

// Validates a datagram of `size` bytes (copied by the caller): kInvalidArgument naming what is
// wrong. On OK `*type` is the message type.
absl::Status ValidateControlDatagram(const uint8_t* data, size_t size, bool truncated,
                                     ControlType* type);

// The most fds one message carries (the receiver takes no more).
inline constexpr size_t kMaxControlFds = 4;

// Sends one message with `fds` (at most kMaxControlFds; not closed) using
// MSG_DONTWAIT | MSG_NOSIGNAL. kUnavailable when the peer's queue is full (EAGAIN) or it is
// gone; kInvalidArgument for too many fds.
absl::Status SendControlMessage(int sock, const void* msg, size_t size, absl::Span<const int> fds);
// With one optional fd (-1: none).
inline absl::Status SendControlMessage(int sock, const void* msg, size_t size, int fd) {
  if (fd < 0) return SendControlMessage(sock, msg, size, absl::Span<const int>());
  return SendControlMessage(sock, msg, size, absl::Span<const int>(&fd, 1));
}

// Receives one message, waiting up to `timeout` (absl::InfiniteDuration(): forever;
// absl::ZeroDuration(): do not wait). kDeadlineExceeded on timeout, kUnavailable on EOF,
// kInvalidArgument for a datagram that fails validation or carries more than kMaxControlFds
// descriptors (every descriptor that arrived already closed).
// Received fds are close-on-exec.
absl::StatusOr<ControlMessage> ReceiveControlMessage(int sock, absl::Duration timeout);

// Closes every fd in `fds` and clears it.
void CloseFds(std::vector<int>* fds);

}  // namespace regcache::protocol
#endif  // REGCACHE_PROTOCOL_CONTROL_PROTOCOL_H_
