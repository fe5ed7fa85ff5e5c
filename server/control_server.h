// The control socket of regcached: <socket_dir>/control.sock, a unix SOCK_SEQPACKET socket,
// mode 0666 (the allow-list checked on the peer's credentials is the policy, not the file
// mode). Protocol: protocol/control_protocol.h.
//
// One connection is one session: on accept the server reads SO_PEERCRED, calls
// Daemon::OpenSession and sends the Welcome (session id, token, and the fast path's two files,
// closed here once sent) unprompted — or, refused, an
// Error, and closes the connection. On EOF, a reset, or a client that stops reading, it calls
// Daemon::CloseSession, which runs every key of the session through the lifecycle and unmaps
// its memory. An Open with kOpenObserver gets Daemon::OpenObserver instead: a Welcome without
// files and a read-only token, logged at debug level only; its EOF just forgets it.
//
// One thread serves every connection with epoll. It never blocks on a client: sends are
// MSG_DONTWAIT, and a client whose receive queue is full is dropped (its session closed).
// CloseSession runs on that thread (it waits for the session's calls in flight).
//
// Thread safety: SendMemoryFd may be called from any thread (the gRPC service's).
#ifndef REGCACHE_SERVER_CONTROL_SERVER_H_
#define REGCACHE_SERVER_CONTROL_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/grpc_service.h"
#include "service/daemon.h"

namespace regcache::server {

class ControlServer : public FdSender {
 public:
  // Binds <socket_dir>/control.sock (replacing a stale socket file) and starts the thread.
  // `daemon` must outlive the server.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Start(service::Daemon* daemon,
                                                              const std::string& socket_dir);
  // Stops the thread and closes every connection (each open session is closed). Idempotent.
  virtual void Stop() = 0;
  // Sessions with a live control connection.
  virtual size_t connections() const = 0;
};

}  // namespace regcache::server
#endif  // REGCACHE_SERVER_CONTROL_SERVER_H_
