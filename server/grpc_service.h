// The gRPC transport of regcached: the regcache.v1.RegCacheService service
// (protocol/proto/regcache/v1/regcache.proto; conventions in docs/api.md) over service::Daemon, the
// simulated peer's regcache.v1.SimPeerService when a device simulates one (the sim;
// server/internal/sim_peer_service.h), and the standard health and reflection services.
//
// Health: SERVING for "" and for each service's full name ("regcache.v1.RegCacheService") while
// serving; NOT_SERVING for all of them from the moment a drain starts (Draining(), an admin
// Drain, Shutdown).
//
// Lists (ListKeys, ListMemory, ListEndpoints, Sessions) are paged: server/internal/paging.h.
//
// Listening: unix:<socket_dir>/grpc.sock always; 127.0.0.1:<tcp_port> when tcp_port != 0 (the
// address is fixed to loopback: a daemon that hands out keys to local memory has no business
// on other interfaces).
//
// Every call except Ping and Status must carry the session token from the control socket in
// the metadata key "x-regcache-session" (protocol/control_protocol.h); the service resolves it with
// Daemon::Authenticate (UNAUTHENTICATED when missing or unknown). Sessions and Drain need an
// admin session; ListKeys, ListEndpoints and SimPeerService's PeerWrite and PeerRead may name
// another session (session_id), which also needs an admin session (PERMISSION_DENIED otherwise) —
// that is how regcachectl lists every session's keys and endpoints and acts as "the remote peer" of
// a client on the sim device. CreateEndpoint and DestroyEndpoint act on the caller's session only
// (docs/endpoints.md).
//
// Errors: absl codes map 1:1 onto gRPC codes, and a reason the daemon attached
// (base/error_reason.h) travels as a google.rpc.ErrorInfo in the status details
// (protocol/grpc_status.h). Requests larger than
// max_receive_message_bytes are refused by gRPC with RESOURCE_EXHAUSTED; requests that do not
// parse are refused by gRPC (INTERNAL) before reaching the service.
//
// Batches: RegisterBatch and ReleaseBatch run their items in order on the caller's session,
// each exactly as Register / Release would, and answer one google.rpc-style status per item
// (a bad item fails alone). More than 1024 items: INVALID_ARGUMENT, nothing done. Reregister
// is Daemon::Reregister (cache/reg_cache.h: in place, narrowed or replaced).
//
// Deadlines: a call whose deadline has already passed, or has less than 2 ms left (gRPC rounds
// deadlines up to whole milliseconds), returns DEADLINE_EXCEEDED without doing anything; the
// check is repeated before each slow step (creating memory, sending its fd, mapping a key, each
// item of a batch) and after a key was made: a Register, Window or batch item whose deadline
// passed meanwhile releases its key again, so no hold outlives a call the client gave up on.
// Drain, once started, is carried out and answered OK.
//
// AllocateMemory: the daemon creates the memfd; the service hands it to the FdSender (the
// control server) for the caller's session, which sends it tagged with the memory id BEFORE
// the RPC returns, so a client that reads its control socket after the reply always finds it.
// If the fd cannot be sent the memory is released again (DetachMemory) and the call fails.
//
// Thread safety: the server runs calls on gRPC's thread pool; the Daemon is thread-safe.
#ifndef REGCACHE_SERVER_GRPC_SERVICE_H_
#define REGCACHE_SERVER_GRPC_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "service/daemon.h"

namespace regcache::server {

// Delivers a memfd to the client of a session (implemented by the control server).
class FdSender {
 public:
  virtual ~FdSender() = default;
  // Sends `memory.fd` (not closed here) tagged with memory.id. kNotFound when the session has
  // no control connection, kUnavailable when the client is not reading.
  virtual absl::Status SendMemoryFd(service::SessionId session,
                                    const service::AllocatedMemory& memory) = 0;
};

struct GrpcServerOptions {
  std::string socket_dir;                     // REQUIRED: grpc.sock is created in it
  uint16_t tcp_port = 0;                      // 0 (default): no TCP listener
  int max_receive_message_bytes = 64 * 1024;  // default 64 KiB
  std::function<void()> on_drain;             // called after an admin Drain succeeded
};

class GrpcServer {
 public:
  // Builds and starts the server. `daemon` and `fds` must outlive it. kUnavailable when a
  // listener cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(service::Daemon* daemon, FdSender* fds,
                                                           const GrpcServerOptions& options);
  virtual ~GrpcServer() = default;
  // A drain has started: health (grpc.health.v1) answers NOT_SERVING from now on for "" and
  // for every service's name, so probes and load balancers stop sending work while the daemon
  // finishes what it has. Idempotent; an admin Drain call does the same by itself.
  virtual void Draining() = 0;
  // A device failed for good (hca::Device::Health): health answers NOT_SERVING from now on, as
  // for a drain, so probes take the node out; calls are still served (those that would make a
  // key on the failed device fail with DEVICE_FAILED). Idempotent.
  virtual void DeviceFailed() = 0;
  // Stops accepting calls, lets calls in flight finish until `grace` passes, cancels the rest.
  // Health turns NOT_SERVING first. Idempotent.
  virtual void Shutdown(absl::Duration grace) = 0;
  // The target clients dial: "unix:<socket_dir>/grpc.sock".
  virtual std::string unix_target() const = 0;
};

}  // namespace regcache::server
#endif  // REGCACHE_SERVER_GRPC_SERVICE_H_
