// regcache::api::Client — the C++ client library of regcached: the one public header an
// application includes (#include "regcache/client.h"; everything it declares is in
// regcache::api, and it includes nothing of the daemon's).
//
//   namespace rc = regcache::api;
//   ASSIGN_OR_RETURN(std::unique_ptr<rc::Client> c, rc::Client::Connect("/run/regcache"));
//   ASSIGN_OR_RETURN(rc::Memory m, c->AllocateMemory(1 << 20));      // mapped here, attached
//   ASSIGN_OR_RETURN(rc::Key k, c->Register(m.data, 4096, rc::kRemoteWrite | ...));
//   ... hand k.rkey and the address to a peer; k.lkey for local SGEs ...
//   c->Release(k.handle);
//
// Connect opens the control socket (<socket_dir>/control.sock: the daemon checks this process's
// credentials and opens its session; the session lives exactly as long as this connection) and
// a gRPC channel over <socket_dir>/grpc.sock; every call carries the session token. With
// ClientOptions::fast_path (the default) it also maps the session's shared-memory rings, and
// the key calls (Register, Window, Release, Invalidate, Prefetch, Query) travel over them.
// Memory is shareable memory: AllocateMemory receives the daemon's memfd over the control
// socket, maps it MAP_SHARED here and attaches it at that address; AttachFd sends a memfd of the
// caller's (created with MFD_ALLOW_SEALING: the daemon seals it against shrinking; a file of a
// hugetlbfs mount cannot be sealed, and is taken only where the daemon's device is not the sim).
// Registrations use this process's own virtual addresses.
//
// Errors are canonical absl::Status codes, listed at class Client and with each method. Where one
// code has several causes the daemon names the cause: ErrorReason(status) ("KEY_QUOTA_EXCEEDED",
// "MEMORY_QUOTA_EXCEEDED", ...) and ErrorMetadata(status) (the numbers behind it). Every call
// has a deadline (ClientOptions::call_timeout).
//
// Thread safety: all methods may be called concurrently, except Close and destruction.
// Destroying the client closes the session: the daemon invalidates every key of it.
#ifndef REGCACHE_CLIENT_H_
#define REGCACHE_CLIENT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

// libibverbs' types, for ImportPd / AttachRegion; include <infiniband/verbs.h> to use them.
struct ibv_context;
struct ibv_pd;
struct ibv_mr;

// What libregcache.so exports of the C++ API: these classes, nothing else of the library.
#if defined(__GNUC__) || defined(__clang__)
#define REGCACHE_CPP_API __attribute__((visibility("default")))
#else
#define REGCACHE_CPP_API
#endif

namespace regcache::api {

// The access bits (the same values as regcache.v1.Access and the rings' access word).
enum AccessBits : uint32_t {
  kLocalRead = 1u << 0,
  kLocalWrite = 1u << 1,
  kRemoteRead = 1u << 2,
  kRemoteWrite = 1u << 3,
  kRemoteAtomic = 1u << 4,
};

// Prefetch of on-demand memory: none, before the call returns, or queued to the daemon's fault
// servicer (the same values as regcache.v1.Prefetch).
enum class PrefetchMode : uint32_t {
  kNone = 0,
  kSync = 1,
  kAsync = 2,
};

// The stable reason regcached gave for an error (google.rpc.ErrorInfo.reason of domain
// "regcache.io"; the table is in docs/api.md), e.g. "KEY_QUOTA_EXCEEDED"; "" when `status` is
// OK or carries none. Errors carry one where the daemon knows the cause, over gRPC and over the
// fast path's rings (ClientOptions::fast_path) alike.
REGCACHE_CPP_API std::string ErrorReason(const absl::Status& status);
// The numbers behind the reason (ErrorInfo.metadata: "limit", "used", ...); empty without one,
// and for errors of the fast path's rings, which carry the reason but not its numbers.
REGCACHE_CPP_API std::map<std::string, std::string> ErrorMetadata(const absl::Status& status);

struct ClientOptions {
  absl::Duration call_timeout = absl::Seconds(10);  // deadline of every call; default 10 s
  // Register, Window, Release, Invalidate, Prefetch and Query travel over the session's
  // shared-memory rings (docs/architecture.md) instead of gRPC: the same codes and messages,
  // a fraction of the latency. false: everything over gRPC. Default true.
  bool fast_path = true;
  // With the fast path: keep the grants this process holds, so that a Register a held grant
  // covers (same or fewer rights) is answered in this process, without IPC, and Release of it
  // only drops a local reference. Revoked grants are never handed out again (the daemon's
  // state words say so before it revokes); unreferenced grants stay held at the daemon until
  // it asks for them back (quota or pool pressure) or the session ends. false: every call
  // goes to the daemon. Default true.
  bool client_cache = true;
  // Dial 127.0.0.1:<port> instead of the unix socket (the daemon's --grpc_tcp_port).
  uint16_t tcp_port = 0;
  // The device the session lives on, by name (hca device name: "mlx5_1", "rxe0", "sim1"), for a
  // daemon that serves several NICs (its --device list). Empty (default): the daemon's first
  // device. A name the daemon does not serve fails Connect with kNotFound listing those it does.
  std::string device;
  // A read-only observer instead of a session (regcachectl's status, stats, sessions, keys;
  // readiness probes): authenticated by the daemon like a session (its allow-list, and the admin
  // calls on this process's credentials) but holding nothing on the daemon — no PD, no pool, no
  // fast path — and counted in no session count. Status, Stats, Sessions, ListKeys,
  // ListEndpoints and ListMemory work (the observer's own lists are empty; session_id() is the
  // observer's id); every call that would change or hold something (Register, memory,
  // endpoints, Drain, the peer calls) fails with kPermissionDenied. Default false.
  bool observer = false;
  // Refuse a device that does not confine a peer to a key's own range: Connect fails with
  // kFailedPrecondition (naming the device and its KeyBounds) unless the session's device
  // enforces each key's range (DeviceInfo::key_range_enforced). Default false: such a device is
  // usable, and Client::device() says what holds on it.
  bool require_key_bounds = false;
  // The session gets a device context of its own in the daemon (regcached --allow_pd_export),
  // which ImportPd imports: its PD, keys, queues, endpoints and memory live there, so the
  // imported context reaches this session's objects and no other's, and what this process
  // leaves in it goes when the session ends and this process closes it. Connect fails with
  // kPermissionDenied where the daemon does not allow it and kUnimplemented on a device that
  // cannot export a PD. Costs the daemon one device context. Default false.
  bool own_device_context = false;
};

// What confines a remote peer holding one of a session's rkeys (docs/key_bounds.md). Rights and
// the session's PD hold on every device; the range depends on the device.
enum class KeyBounds : uint8_t {
  kUnknown = 0,     // the daemon could not tell (or predates this report)
  kKey = 1,         // the key's own range: the device checks every access against it
  kCut = 2,         // the key's own range: the daemon (--strict_key_bounds) gives every key a
                    // memory region of its own, cut at the key's edges, on a device that checks
                    // only the region (Soft-RoCE)
  kAttachment = 3,  // only the attached memory the key lies in: a peer holding the key can read
                    // or write (as its rights allow) the rest of that attachment (Soft-RoCE
                    // without --strict_key_bounds)
};
// "unknown", "key", "cut", "attachment".
const char* KeyBoundsName(KeyBounds b);

// The NIC a session lives on (Client::device()): every key of the session belongs to it, so a
// process pairs the keys with queue pairs it opened on the same device (same node GUID / GID).
struct DeviceInfo {
  uint32_t index = 0;             // its place in the daemon's --device list
  std::string name;               // e.g. "mlx5_1"
  uint64_t node_guid = 0;         // host byte order, as ibv_query_device's node_guid (be64toh)
  uint8_t port = 0;               // the port the GID belongs to (1-based)
  std::array<uint8_t, 16> gid{};  // the port's GID, raw bytes in network order
  KeyBounds key_bounds = KeyBounds::kUnknown;
  // Whether a peer holding one of the session's rkeys is confined to that key's own range.
  bool key_range_enforced() const {
    return key_bounds == KeyBounds::kKey || key_bounds == KeyBounds::kCut;
  }
};

// Why a key this process held stopped working (Client::SetRevocationCallback).
enum class RevocationReason : uint32_t {
  kInvalidated = 1,        // Invalidate, from any thread of this process (or an admin)
  kParentInvalidated = 2,  // a window whose registration was invalidated
  kMemoryDetached = 3,     // the memory under it was detached
  kReregistered = 4,       // a re-registration narrowed it (a new key replaced it)
  kReclaimed = 5,          // the daemon took it back: this session held more than its fair
                           // share of the device's keys while another session waited for keys
  kUnknown = 100,          // revoked while the library lost track of events (it fell behind)
};

struct Revocation {
  uint64_t handle = 0;
  uint32_t key = 0;  // 0 with kUnknown
  RevocationReason reason = RevocationReason::kUnknown;
};

// Memory attached to this session and mapped in this process.
struct Memory {
  uint64_t id = 0;
  void* data = nullptr;  // this process's mapping; registrations use these addresses
  uint64_t length = 0;
};

struct Key {
  uint64_t handle = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t va = 0;  // the covering registration's range
  uint64_t length = 0;
  uint32_t access = 0;
  bool hit = false;
  bool same_key = false;  // Reregister: the key and handle traded in were kept (same rkey)
};

// The session's PD in this process (Client::ImportPd; docs/client_memory.md).
struct ImportedPd {
  ibv_context* context = nullptr;  // the daemon's device context, imported (ibv_import_device)
  ibv_pd* pd = nullptr;            // the session's PD in it (ibv_import_pd)
  uint32_t pd_handle = 0;
};

// One register request of a RegisterBatch.
struct RegisterItem {
  const void* addr = nullptr;
  uint64_t length = 0;
  uint32_t access = 0;
  PrefetchMode prefetch = PrefetchMode::kNone;
};

struct KeyInfo {
  uint64_t handle = 0;
  uint32_t key = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t holders = 0;
  bool revoked = false;
  bool is_window = false;
  uint64_t parent = 0;
  std::string key_state;
};

struct StatValue {
  std::string component;
  std::string name;
  std::string kind;
  int64_t value = 0;
  uint64_t count = 0, sum = 0, p50 = 0, p99 = 0, max = 0;
};

struct SessionUsage {
  uint64_t live_registrations = 0;
  uint64_t revoked_held = 0;
  uint64_t cached_unreferenced = 0;
  uint64_t backings = 0;
  uint64_t backed_bytes = 0;
  uint64_t pool_outstanding = 0;
  uint64_t pool_total = 0;
};

struct REGCACHE_CPP_API StatsSnapshot {
  std::vector<StatValue> stats;
  SessionUsage session;
  // The value of component/name ("cache", "live_registrations"); a component whose series carry
  // labels (`cache{device="sim0"}`) matches its plain name when exactly one series has the stat
  // (kFailedPrecondition when several do: name one with its labels); kNotFound if absent.
  absl::StatusOr<int64_t> Get(const std::string& component, const std::string& name) const;
};

struct DaemonInfo {
  std::string device;
  std::string backend;
  uint64_t sessions = 0;
  bool draining = false;
  int64_t uptime_ms = 0;
  bool peer = false;
  bool endpoints = false;  // Client::CreateEndpoint works on the daemon's device
  // How the device was chosen: "named <spec>", or for --device=auto which backend and why the
  // ones tried before it were not.
  std::string device_selection;
  // Every device the daemon serves (the fields above are the first's), with how it was chosen
  // and the sessions open on it.
  struct Device {
    DeviceInfo info;
    std::string backend;
    std::string selection;
    uint64_t sessions = 0;
    std::string key_bounds_detail;  // how the daemon knows info.key_bounds, in words
    // "ok", or why the device failed (a NIC's fatal error): no key can be made on it, and calls
    // that would make one fail with UNAVAILABLE, reason DEVICE_FAILED.
    std::string health;
  };
  std::vector<Device> devices;
};

// One side of an RC connection (docs/endpoints.md): what the other side connects its queue pair
// to. For Client::CreateEndpoint, the peer's queue pair, as its ibv_query_qp / ibv_query_gid
// say; back comes the daemon's, in the same form, for the peer to connect to.
struct RemoteQp {
  uint32_t qpn = 0;               // queue pair number, 1..2^24-1
  uint32_t psn = 0;               // first packet sequence number this side sends, < 2^24
  std::array<uint8_t, 16> gid{};  // the port GID, raw bytes in network order (RoCE needs one)
  uint16_t lid = 0;               // InfiniBand only; 0 on RoCE
  uint32_t mtu = 0;  // 256, 512, 1024, 2048 or 4096; 0 in a request: the daemon port's active MTU
};

// A target endpoint of this session.
struct EndpointInfo {
  uint64_t id = 0;      // this session's own id, from 1
  RemoteQp local;       // the daemon's queue pair: hand it to the peer
  RemoteQp peer;        // the peer's, as named
  uint32_t access = 0;  // remote operations accepted (kRemoteRead / kRemoteWrite / kRemoteAtomic)
  int64_t created_unix_ms = 0;
};

struct SessionRecord {
  uint64_t id = 0;
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool admin = false;
  SessionUsage usage;
  uint64_t memories = 0;
  std::string device;  // the device it lives on
};

// Most items one RegisterBatch or ReleaseBatch may carry.
inline constexpr size_t kMaxBatchItems = 1024;

class Client;

// One hold on a key, released when the KeyRef is destroyed or reset (RAII). Move-only. The
// Client must outlive it. Thread-compatible: one KeyRef is used by one thread at a time; any
// number of KeyRefs of one client may be used concurrently.
class REGCACHE_CPP_API KeyRef {
 public:
  KeyRef() = default;
  KeyRef(Client* client, const Key& key) : client_(client), key_(key) {}
  ~KeyRef() { reset(); }
  KeyRef(KeyRef&& o) noexcept : client_(o.client_), key_(o.key_) { o.client_ = nullptr; }
  KeyRef& operator=(KeyRef&& o) noexcept {
    if (this != &o) {
      reset();
      client_ = o.client_;
      key_ = o.key_;
      o.client_ = nullptr;
    }
    return *this;
  }
  KeyRef(const KeyRef&) = delete;
  KeyRef& operator=(const KeyRef&) = delete;

  explicit operator bool() const { return client_ != nullptr; }
  const Key& key() const { return key_; }
  const Key* operator->() const { return &key_; }
  // Releases the hold now (a release error — the daemon gone — is not reported: the session's
  // end releases everything anyway).
  void reset();
  // Gives up ownership without releasing: the caller releases key().handle itself.
  Key Detach() {
    client_ = nullptr;
    return key_;
  }

 private:
  Client* client_ = nullptr;
  Key key_;
};

// Errors. Every call can fail with what any call to the daemon can: kUnavailable (no daemon, or
// it is draining: reason DRAINING), kDeadlineExceeded (ClientOptions::call_timeout passed, or
// the daemon saw too little time left: DEADLINE_TOO_SHORT), kUnauthenticated (the session is
// gone: SESSION_UNKNOWN), kPermissionDenied with OBSERVER_READ_ONLY for a change asked of an
// observer's client. A `handle` argument is refused with kInvalidArgument when 0, and with
// kNotFound when it is not one of this session's (reason HANDLE_NOT_OWNED: another session's
// and a made-up one alike) or is this session's but no longer held. The method comments list what
// else each answers. Every error carries the daemon's message, and its stable reason where it has
// one (ErrorReason(status)).
class REGCACHE_CPP_API Client {
 public:
  // kPermissionDenied when this process's credentials are not on the daemon's allow-list;
  // kUnavailable when no daemon listens there. An empty `socket_dir`: REGCACHE_SOCKET_DIR when
  // it is set and not empty, else /run/regcache (the daemon's default too).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& socket_dir,
                                                         const ClientOptions& options = {});
  virtual ~Client() = default;

  virtual uint64_t session_id() const = 0;
  virtual bool admin() const = 0;
  // The device this session lives on (ClientOptions::device), as the daemon said when it opened
  // the session: every Key of this client belongs to it.
  virtual const DeviceInfo& device() const = 0;

  // --- Memory ---
  // Daemon-allocated memfd, mapped here MAP_SHARED and attached at that address.
  // kInvalidArgument for length 0 or unaligned; kResourceExhausted past the session's memory quota
  // (MEMORY_QUOTA_EXCEEDED) or the daemon's memory budget (DAEMON_MEMORY_BUDGET_EXHAUSTED); the
  // mapping's errno here otherwise.
  virtual absl::StatusOr<Memory> AllocateMemory(uint64_t length, bool hugetlb = false,
                                                bool on_demand = false) = 0;
  // Sends `fd` (not closed; the daemon keeps its own reference), maps [offset, +length) here
  // and attaches it: a memfd, or a file of a hugetlbfs mount (ranges in whole huge pages).
  // kInvalidArgument for an fd that is not a regular file or too small for the range;
  // kFailedPrecondition for a file whose seals the daemon cannot add (a hugetlbfs file on the
  // sim); kResourceExhausted past the memory quotas, as AllocateMemory.
  virtual absl::StatusOr<Memory> AttachFd(int fd, uint64_t offset, uint64_t length,
                                          bool on_demand = false) = 0;
  // Sends dma-buf `fd` (memory another driver exported: a GPU buffer through its driver's
  // dma-buf export, or udmabuf's over a memfd; not closed, the daemon keeps its own reference)
  // and attaches [offset, +length) of it with keys speaking the addresses [va, +length) (for a
  // GPU buffer typically its device pointer). Nothing is mapped here or in the daemon: the
  // device registers it by descriptor (ibv_reg_dmabuf_mr; docs/client_memory.md), so a remote
  // peer's RDMA reaches the exporter's memory directly. Memory::data is `va`.
  // kInvalidArgument for an fd that is not a dma-buf, a range outside it, or va nullptr;
  // kUnimplemented where the daemon's device cannot register dma-bufs (the message says which
  // layer refused: backend, provider or kernel driver); kResourceExhausted past the quotas.
  virtual absl::StatusOr<Memory> AttachDmabuf(int fd, uint64_t offset, uint64_t length,
                                              const void* va) = 0;
  // Detaches (every key over it is invalidated) and unmaps it here (memory of AttachRegion:
  // only detaches; the region stays registered, the caller's to deregister). kNotFound for
  // memory this session has not attached.
  virtual absl::Status DetachMemory(const Memory& memory) = 0;

  // --- This session's PD and memory this process registers itself (docs/client_memory.md) ---
  // Imports the session's PD here (a session of ClientOptions::own_device_context): the daemon
  // sends the command fd of the session's own device context and the PD's handle;
  // ibv_import_device and ibv_import_pd make them this process's. Queue pairs, CQs and memory
  // regions created in it are in the session's PD: the session's keys work as lkeys in their
  // SGEs and as rkeys for their peers. Once per client: later calls return the same. The
  // context and PD are valid until Close (which unimports them); destroy what you created in
  // them first. Objects created in the context belong to it, not to this process: they go
  // when both the session has ended and this process closed the context (Close, or its exit).
  // kUnimplemented when the daemon's device cannot export PDs (the message says why);
  // kPermissionDenied when the daemon does not allow it (regcached --allow_pd_export);
  // kFailedPrecondition for a session without own_device_context; the import verbs' errno
  // otherwise.
  virtual absl::StatusOr<ImportedPd> ImportPd() = 0;
  // Attaches [addr, +length) of `mr`, a region this process registered in the imported PD
  // (ibv_reg_mr, ibv_reg_dmabuf_mr, ...; with IBV_ACCESS_MW_BIND where the daemon's keys are
  // memory windows), as memory of the session: Register over it then returns keys as for any
  // attached memory. addr nullptr: the whole region. The daemon never touches the memory;
  // DetachMemory or the session's end only forgets it, and deregistering the region stays the
  // caller's, after detaching. Errors as regcached's Daemon::AttachRegion: kOutOfRange for a
  // range not within the region, kNotFound for a region the daemon's context does not have,
  // kAlreadyExists for a region attached before, kInvalidArgument for mr nullptr.
  virtual absl::StatusOr<Memory> AttachRegion(const ibv_mr* mr, const void* addr = nullptr,
                                              uint64_t length = 0,
                                              uint32_t access = kLocalRead | kLocalWrite |
                                                                kRemoteRead | kRemoteWrite |
                                                                kRemoteAtomic) = 0;

  // --- Keys ---
  // A key for [addr, +length) of attached memory with at least `access`. `prefetch` applies to
  // on-demand memory only. kInvalidArgument for a null addr, length 0 or unknown access bits;
  // kOutOfRange when attached memory does not cover the range; kResourceExhausted for the
  // session's key quota (KEY_QUOTA_EXCEEDED), the device's key budget
  // (DEVICE_KEY_BUDGET_EXHAUSTED) or the key pool (KEY_POOL_EXHAUSTED).
  virtual absl::StatusOr<Key> Register(const void* addr, uint64_t length, uint32_t access,
                                       PrefetchMode prefetch = PrefetchMode::kNone) = 0;
  // Register, with the hold owned by the returned KeyRef (released when it goes).
  absl::StatusOr<KeyRef> Acquire(const void* addr, uint64_t length, uint32_t access,
                                 PrefetchMode prefetch = PrefetchMode::kNone);
  // Window, likewise.
  absl::StatusOr<KeyRef> AcquireWindow(uint64_t parent, uint64_t offset, uint64_t length,
                                       uint32_t access);
  // Makes the translations of on-demand memory present (writable too when `write`).
  // kOutOfRange when attached memory does not cover the range.
  virtual absl::Status Prefetch(const void* addr, uint64_t length, bool write,
                                PrefetchMode mode) = 0;
  // A window key over [offset, +length) of the held key `parent`, with at most its access.
  // kOutOfRange for a range outside the parent; kFailedPrecondition when the parent was
  // invalidated (KEY_REVOKED); the quotas and budgets as Register.
  virtual absl::StatusOr<Key> Window(uint64_t parent, uint64_t offset, uint64_t length,
                                     uint32_t access) = 0;
  // Gives back one hold of `handle`.
  virtual absl::Status Release(uint64_t handle) = 0;
  // `callback` is called, from a thread of the library, for every key this process holds
  // (through the client cache) that the daemon revoked — after the library stopped handing it
  // out. Replaces the previous callback; an empty function removes it. Needs the fast path and
  // the client cache; without them it is never called.
  virtual void SetRevocationCallback(std::function<void(const Revocation&)> callback) = 0;
  // Revokes the key now (peers lose access); the handle still needs its Release.
  virtual absl::Status Invalidate(uint64_t handle) = 0;
  // The state of a held key.
  virtual absl::StatusOr<KeyInfo> Query(uint64_t handle) = 0;
  // session 0: this session's keys; another id: admin only (kPermissionDenied,
  // ADMIN_REQUIRED).
  virtual absl::StatusOr<std::vector<KeyInfo>> ListKeys(uint64_t session = 0) = 0;

  // --- Re-registration and batches ---
  // The kernel's rereg_mr: trades this session's hold on `handle` for one on [addr, +length)
  // with `access`. When this session is the registration's only holder and the change only
  // adds (a range containing the old one, more rights) the key is rewritten in place: same
  // rkey and handle, Key::same_key. Otherwise a new key (the old one is invalidated first when
  // rights are taken away). When the daemon refused the call the hold on `handle` is kept
  // (revoked when the daemon had to invalidate it first: Query says so). When the outcome is
  // unknown (kDeadlineExceeded, kCancelled, kUnavailable) the daemon releases whatever the
  // lost call made; the hold on `handle` is gone if the call ran and kept if it never did:
  // Query(handle) tells (holders), and a caller that still holds it releases it.
  virtual absl::StatusOr<Key> Reregister(uint64_t handle, const void* addr, uint64_t length,
                                         uint32_t access) = 0;
  // Registers every item in one call, in order: one result per item (an item's error does not
  // stop the others). The daemon maps the batch's misses together, so a batch costs about one
  // UMR round trip rather than one per key (docs/fast_path.md). The outer status is the call's
  // own (session, deadline, transport; more than kMaxBatchItems items: kInvalidArgument).
  virtual absl::StatusOr<std::vector<absl::StatusOr<Key>>> RegisterBatch(
      absl::Span<const RegisterItem> items) = 0;
  // Releases every handle in one call, in order: one status per handle.
  virtual absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(
      absl::Span<const uint64_t> handles) = 0;

  // --- Introspection and admin ---
  // Sessions and Drain are admin only (kPermissionDenied, ADMIN_REQUIRED).
  virtual absl::Status Ping() = 0;
  virtual absl::StatusOr<StatsSnapshot> Stats() = 0;
  virtual absl::StatusOr<DaemonInfo> Status() = 0;
  virtual absl::StatusOr<std::vector<SessionRecord>> Sessions() = 0;
  virtual absl::Status Drain() = 0;

  // --- Target endpoints (docs/endpoints.md) ---
  // Asks the daemon for an RC queue pair in this session's PD, connected to `peer` (the remote
  // node's queue pair), accepting the remote operations in `access`. Returns it with the
  // daemon's address (EndpointInfo::local), which the peer connects its queue pair to; from
  // then on the peer's one-sided READ / WRITE / atomics reach this session's memory through
  // its rkeys, with no posting here, each checked against the rkey's rights, PD and range (the
  // key's own range, or its whole attachment's where device().key_bounds says kAttachment).
  // The endpoint lives until DestroyEndpoint or the end of the session. kInvalidArgument for a
  // malformed address or access (the message names the field); kResourceExhausted past the daemon's
  // per-session limit (--max_endpoints); kUnimplemented on a device without endpoints
  // (DaemonInfo::endpoints).
  virtual absl::StatusOr<EndpointInfo> CreateEndpoint(const RemoteQp& peer,
                                                      uint32_t access = kRemoteRead | kRemoteWrite |
                                                                        kRemoteAtomic) = 0;
  // The peer's accesses fail from now on. kNotFound for an id this session does not hold.
  virtual absl::Status DestroyEndpoint(uint64_t id) = 0;
  // session 0: this session's endpoints; another id: admin only.
  virtual absl::StatusOr<std::vector<EndpointInfo>> ListEndpoints(uint64_t session = 0) = 0;

  // Closes the session (the control connection) and unmaps this client's memory.
  virtual void Close() = 0;
};

}  // namespace regcache::api
#endif  // REGCACHE_CLIENT_H_
