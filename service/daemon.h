// service::Daemon — the core of regcached, without any transport.
//
// It owns the device (opened by name), the registration cache over it, the sessions of the
// clients, and the shareable memory those sessions use. The transports in server/ (the unix control
// socket that carries peer credentials and file descriptors, the gRPC service, the metrics
// endpoint) call into it; nothing here knows gRPC, protobuf or sockets.
//
// Devices. One daemon serves every NIC of its host: DaemonConfig::device lists device specs,
// and each device gets its own registration cache (PDs, key pools, UMR queues), fault servicer
// and stats (labelled device="<name>" when there are several). A session lives on exactly one
// device, chosen when it opens (by name; default the first): its PD, keys and quotas are that
// device's, and every grant it gets belongs to it (DeviceIdentity says which NIC that is: name,
// node GUID, port GID). A key of one device means nothing on another: the other device's PD
// refuses it (docs/architecture.md, "Several devices").
//
// Sessions. A client process gets one session (one cache tenant: its own PD, quotas, pool and
// queues) when it connects to the control socket. The transport passes the peer's credentials
// (SO_PEERCRED); OpenSession refuses uids/gids that are not on the allow-list. The session has
// a secret token the client presents on every gRPC call (Authenticate). When the client
// disconnects or dies, the transport calls CloseSession: every key of the session goes through
// the lifecycle (cache::RegCache::CloseTenant), its memory is unmapped, and all counters return
// to where they were; every other session is untouched.
//
// Memory. Backing memory is shareable memory mapped in both processes; registrations use the
// client's own virtual addresses:
//   - AllocateMemory: the daemon creates a memfd (optionally hugetlb), seals it against
//     shrinking and growing, maps it, and hands the transport an fd to pass to the client;
//     the client maps it and says where (AttachMemory);
//   - ImportMemory: the client passed an fd. The daemon requires it to be sealed against
//     shrinking — or seals it itself — because a file that shrinks under a mapping turns every
//     later device access into SIGBUS; then maps it; AttachMemory follows. So the fd must be a
//     memfd created with MFD_ALLOW_SEALING (or already sealed); a file that cannot be sealed is
//     refused with kFailedPrecondition, and that includes a file opened on a hugetlbfs mount.
//     Huge pages come from AllocateMemory(hugetlb) instead. A dma-buf (memory another driver
//     exported) is kept by descriptor and never mapped: AttachMemory has the device register it
//     (hca::Device::RegisterDmabufBacking) at the client's addresses.
//   AttachMemory registers the daemon's mapping with the device once (one backing) at the
//   client's address; DetachMemory invalidates every key over it, deregisters and unmaps.
//
// On-demand memory (ODP). AttachMemory(on_demand) registers the memory with every translation
// absent: on `sim` the daemon's odp::Servicer makes pages present when the device faults on
// them (or when prefetched) and zaps them before the memory is detached; on mlx5 the kernel
// services faults and prefetch goes through ibv_advise_mr. Register can prefetch the range it
// maps (synchronously or not), and Prefetch does it for any attached range. A device without
// ODP refuses on_demand and prefetch with kUnimplemented.
//
// Target endpoints (docs/endpoints.md). A session may ask for RC queue pairs in its PD,
// connected to a remote peer's queue pair (the client names the peer's address and gets the
// daemon's): the peer's one-sided READ / WRITE / atomics then reach the session's memory through
// the session's rkeys with no posting by the client, on devices whose PDs the client cannot
// import. They count against DaemonConfig::max_endpoints and are destroyed when the session
// closes, before its PD.
//
// The fast path (protocol/shm_protocol.h). Each session also gets two shared files (its request
// and completion rings; its grant state words and revocation events, read-only to the client)
// and one worker thread that serves the rings by calling the key methods below. Every grant
// the session holds, whichever transport it came over, has a state slot whose revoked bit is
// set before the key is invalidated (Invalidate, DetachMemory) and the session's state says
// "closing" before CloseSession or Drain closes it.
//
// Thread safety: every method may be called from any thread. Calls on one session run
// concurrently with each other; CloseSession waits for the session's calls in flight, and
// later calls on it fail with kNotFound.
#ifndef REGCACHE_SERVICE_DAEMON_H_
#define REGCACHE_SERVICE_DAEMON_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/stats.h"
#include "cache/options.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/servicer.h"
#include "protocol/shm_protocol.h"
#include "service/sim_peer.h"
#include "service/types.h"

namespace regcache::service {

namespace shm = ::regcache::protocol::shm;

class Daemon {
 public:
  // Opens the devices and builds a cache on each. `registry` (may be null) receives every stat.
  // kInvalidArgument for an empty item in the device list, "auto" with other devices, or two
  // devices with the same name; otherwise hca::OpenDevice's error for the device that failed.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(const DaemonConfig& config,
                                                        base::stats::Registry* registry);
  virtual ~Daemon() = default;

  // --- Sessions ---
  // Also creates the session's fast path: its shared files (their fds in the grant, owned by
  // the caller) and the worker thread that serves its rings.
  // kPermissionDenied when the peer is not on the allow-list; kUnavailable while draining;
  // kResourceExhausted past max_sessions; errno-based errors creating the shared files or the
  // worker. The session lives on the device named `device` (empty: the first device).
  // kNotFound for a device the daemon does not serve (the message lists those it does);
  // kResourceExhausted past max_sessions_per_device on that device too. `own_context`: the
  // session gets a device context of its own (internal/device_set.h OpenOwnContext), which
  // ExportPd and AttachRegion need; kPermissionDenied without DaemonConfig::allow_pd_export,
  // kUnimplemented on a device that cannot export a PD.
  virtual absl::StatusOr<SessionGrant> OpenSession(const PeerCredentials& peer,
                                                   absl::string_view device = {},
                                                   bool own_context = false) = 0;
  // An observer (service/internal/observers.h): a token for the read-only calls only — Status,
  // Stats (Usage answers an empty usage), Sessions (with admin, decided on `peer` as for a
  // session), ListKeys / ListEndpoints / ListMemory (empty for the observer itself; another
  // session's with admin) — with no device resources and counted in no session count. Every
  // call that would change or hold something answers kPermissionDenied for it. CloseSession
  // ends it. kPermissionDenied when the peer is not on the allow-list; kNotFound for a device
  // the daemon does not serve (the grant names the device, for the caller's information);
  // kResourceExhausted past internal::kMaxObservers. Allowed while draining (probes read the
  // draining daemon's status). The grant has observer = true and no fds.
  virtual absl::StatusOr<SessionGrant> OpenObserver(const PeerCredentials& peer,
                                                    absl::string_view device = {}) = 0;
  // OK when `session` is not an observer; kPermissionDenied (naming why) for an observer. For
  // transports whose mutating calls act on another session than the caller's (admin calls).
  virtual absl::Status CheckMayChange(SessionId session) = 0;
  // The device the session lives on (every grant of the session belongs to it). kNotFound for
  // an unknown or closed session.
  virtual absl::StatusOr<DeviceIdentity> SessionDevice(SessionId session) = 0;
  // The session whose token this is. kUnauthenticated for an unknown or malformed token.
  virtual absl::StatusOr<SessionId> Authenticate(absl::string_view token) = 0;
  // Marks the session closing in its state file, stops its ring worker (the request it was
  // serving completes), destroys its endpoints, then runs every key of the session through the
  // lifecycle and unmaps its memory. kNotFound if the session is unknown or already closed.
  virtual absl::Status CloseSession(SessionId session) = 0;
  // OK if `session` (or observer) is admin; else kPermissionDenied (reason ADMIN_REQUIRED)
  // saying that `action` needs an admin session, and the refusal is logged with the peer's
  // credentials (rate-limited). kNotFound if the session is unknown.
  virtual absl::Status RequireAdmin(SessionId session, absl::string_view action) = 0;

  // --- Memory ---
  // kInvalidArgument for length 0 or not a multiple of the page size (hugetlb: 2 MiB) or above
  // max_memory_length; kResourceExhausted when the session's memory quota would be exceeded;
  // errno-based errors from memfd_create/ftruncate/mmap.
  virtual absl::StatusOr<AllocatedMemory> AllocateMemory(SessionId session, uint64_t length,
                                                         bool hugetlb) = 0;
  // Takes ownership of `fd` (closed on error too). `length` bytes from `offset` (page aligned)
  // must lie within the file. kInvalidArgument for a non-regular file or out-of-file ranges;
  // kFailedPrecondition for a file that cannot be sealed against shrinking (hugetlbfs files).
  virtual absl::StatusOr<MemoryId> ImportMemory(SessionId session, int fd, uint64_t offset,
                                                uint64_t length) = 0;
  // Registers the memory with the device at the client's address. kInvalidArgument for a
  // client_va of 0 or one whose range wraps; kAlreadyExists if attached or overlapping another
  // attachment; kUnimplemented for on_demand on a device without ODP.
  virtual absl::Status AttachMemory(SessionId session, MemoryId memory, uint64_t client_va,
                                    bool on_demand) = 0;
  // Invalidates every key over it, deregisters, unmaps (a client region: forgets it).
  // kNotFound for an unknown id.
  virtual absl::Status DetachMemory(SessionId session, MemoryId memory) = 0;
  virtual absl::StatusOr<std::vector<MemoryInfo>> ListMemory(SessionId session) = 0;

  // --- Clients' own PDs and memory (docs/client_memory.md) ---
  // The session's PD for the client to import (ibv_import_device on the fd, ibv_import_pd with
  // the handle); the fd is the caller's, to pass on (SCM_RIGHTS) and close: it reaches the
  // session's own device context and nothing else. kUnimplemented on a device without
  // hca::Capabilities::pd_export (the message says why); kPermissionDenied unless
  // DaemonConfig::allow_pd_export; kFailedPrecondition for a session opened without
  // own_context (it shares the daemon's context, which is never exported).
  virtual absl::StatusOr<hca::PdExport> ExportPd(SessionId session) = 0;
  // Attaches [region.va, +length) of a region the client registered in that PD as memory of
  // the session: Register over it then hands out keys as over any attached memory. The daemon
  // never maps, reads or writes it, and never deregisters it: DetachMemory (or the session's
  // end) only forgets it, and the client deregisters it afterwards. Prefetch over it does
  // nothing (it pages as the client registered it).
  // kInvalidArgument (length 0, a range that wraps, access bits, a region length that is not
  // the device's); kOutOfRange (the range is not within the region); kNotFound (no region with
  // that handle); kAlreadyExists (overlaps attached memory, or the region is already attached
  // or is the daemon's own); kResourceExhausted (the session's memory quota); kUnimplemented /
  // kPermissionDenied as ExportPd.
  virtual absl::StatusOr<MemoryId> AttachRegion(SessionId session, const ClientRegion& region) = 0;

  // --- Keys (see cache/reg_cache.h for the semantics and error codes) ---
  // With a prefetch mode (odp::PrefetchMode: before Register returns, or queued to the fault
  // servicer), the range's on-demand pages are made present too (for write when `access` has
  // local or remote write); pinned memory needs nothing. A sync prefetch that fails releases the
  // grant and returns the error. nullopt: no prefetch.
  virtual absl::StatusOr<cache::KeyGrant> Register(
      SessionId session, uint64_t va, uint64_t length, hca::AccessFlags access,
      std::optional<odp::PrefetchMode> prefetch = std::nullopt) = 0;
  // Register for each call, the misses mapped together (cache::RegCache::RegisterBatch): one
  // result per call, in order; a call fails alone. The call itself fails only as a session does.
  virtual absl::StatusOr<std::vector<absl::StatusOr<cache::KeyGrant>>> RegisterBatch(
      SessionId session, absl::Span<const RegisterCall> calls) = 0;
  // Makes the translations of [va, va + length) of the session's attached memory present
  // (for write too when `write`). kOutOfRange if the range is not attached memory;
  // kUnimplemented without ODP; kResourceExhausted when the async queue is full. With `mode`
  // nullopt it only checks the request (session, ODP, range) and makes nothing present.
  virtual absl::Status Prefetch(SessionId session, uint64_t va, uint64_t length, bool write,
                                std::optional<odp::PrefetchMode> mode) = 0;
  virtual absl::StatusOr<cache::KeyGrant> CreateWindow(SessionId session, cache::Handle parent,
                                                       uint64_t offset, uint64_t length,
                                                       hca::AccessFlags access) = 0;
  // RegCache::Reregister on the session's tenant: the hold on `handle` traded for one on
  // [va, +length) with `access` (in place, same rkey, when only the caller holds it and nothing
  // is taken away). Errors as RegCache::Reregister; kNotFound for a closed session.
  virtual absl::StatusOr<cache::KeyGrant> Reregister(SessionId session, cache::Handle handle,
                                                     uint64_t va, uint64_t length,
                                                     hca::AccessFlags access) = 0;
  virtual absl::Status Release(SessionId session, cache::Handle handle) = 0;
  virtual absl::Status Invalidate(SessionId session, cache::Handle handle) = 0;
  virtual absl::StatusOr<cache::RegistrationInfo> Query(SessionId session,
                                                        cache::Handle handle) = 0;
  virtual absl::StatusOr<std::vector<cache::RegistrationInfo>> ListKeys(SessionId session) = 0;
  virtual absl::StatusOr<cache::TenantUsage> Usage(SessionId session) = 0;

  // --- Target endpoints (docs/endpoints.md) ---
  // An RC queue pair in the session's PD, connected to the peer at `remote`, accepting the
  // remote operations in `access` (each access is still checked against the rkey it names).
  // Returns it with the daemon's own address (`local`) for the peer to connect to.
  // REQUIRES: remote.qpn in 1..2^24-1, remote.psn < 2^24, remote.mtu 0 (the port's) or one of
  // 256..4096; access a non-empty OR of kRemoteRead, kRemoteWrite, kRemoteAtomic.
  // kInvalidArgument naming the field otherwise (also the device's own address checks, e.g. a
  // zero GID on a RoCE port); kResourceExhausted past max_endpoints (the message names the
  // limit) or when the device has no queue pair left; kUnimplemented on a device without
  // endpoints (hca::Capabilities::endpoints).
  virtual absl::StatusOr<EndpointInfo> CreateEndpoint(SessionId session,
                                                      const hca::EndpointAddress& remote,
                                                      hca::AccessFlags access) = 0;
  // Destroys the queue pair: the peer's accesses fail from now on. kNotFound for an id this
  // session does not hold.
  virtual absl::Status DestroyEndpoint(SessionId session, EndpointId endpoint) = 0;
  // By id.
  virtual absl::StatusOr<std::vector<EndpointInfo>> ListEndpoints(SessionId session) = 0;

  // --- The simulated peer (service/sim_peer.h): nullptr when no device of this daemon
  // simulates one. ---
  virtual SimPeerPort* sim_peer() = 0;

  // --- Introspection and shutdown ---
  virtual DaemonStatus Status() = 0;
  // Admin only (kPermissionDenied otherwise).
  virtual absl::StatusOr<std::vector<SessionInfo>> Sessions(SessionId caller) = 0;
  virtual std::vector<base::stats::Sample> Stats() = 0;
  // Stops accepting sessions and calls (kUnavailable from then on) and closes every session.
  // Idempotent. Returns the first error closing a session.
  virtual absl::Status Drain() = 0;
  virtual bool draining() const = 0;
};

}  // namespace regcache::service
#endif  // REGCACHE_SERVICE_DAEMON_H_
