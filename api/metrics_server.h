// The Prometheus endpoint of regcached: GET http://127.0.0.1:<port>/metrics returns every stat
// of the daemon in the text exposition format (base::stats::FormatPrometheus over
// Daemon::Stats()). Off by default (regcached --metrics_port=0); it binds 127.0.0.1 only.
//
// The endpoint is shared by every local process, so no client may be able to hold it: any
// number of idle, slow-sending or slow-reading connections must not delay another client's
// scrape. It is served by api/internal/http_endpoint.h: one thread with epoll and non-blocking
// sockets, a buffer per connection, a deadline per connection (10 s, Prometheus's default scrape
// timeout), at most 64 connections (the one idle longest is closed to make room for a new one),
// one request per connection, and a request parser (api/http_request.h) that checks every byte
// of a head of at most 8 KiB and serves GET /metrics only (404 for other paths, 405 for other
// methods, 400/431/505 for malformed, oversized or non-1.x requests).
//
// Why not a library: civetweb, used before, serves a connection on one of num_threads threads
// from accept to close and blocks that thread while the client is silent (up to its request
// timeout), so num_threads idle connections stop every scrape; more threads or shorter timeouts
// only move that bound, and no civetweb setting makes it serve connections without a thread
// each. What the endpoint must parse is small enough to check completely here.
//
// Thread safety: requests are answered on the endpoint's thread; Daemon::Stats is thread-safe.
#ifndef REGCACHE_API_METRICS_SERVER_H_
#define REGCACHE_API_METRICS_SERVER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "service/daemon.h"

namespace regcache::api {

class MetricsServer {
 public:
  // Starts serving on 127.0.0.1:`port` (0: a free port the kernel picks; see port()). `daemon`
  // must outlive the server. kUnavailable when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(service::Daemon* daemon,
                                                              uint16_t port);
  virtual ~MetricsServer() = default;  // stops serving
  // The port it listens on.
  virtual uint16_t port() const = 0;
};

}  // namespace regcache::api
#endif  // REGCACHE_API_METRICS_SERVER_H_
