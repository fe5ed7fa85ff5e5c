// The HTTP server under server/metrics_server.h: answers GET of one path (on 127.0.0.1 unless told
// another address) with a body made on demand, and no client, however slow or idle, can delay
// another's answer.
//
// How: libmicrohttpd (Debian's libmicrohttpd12) speaks HTTP — request parsing, strict for
// clients, and writing the answer — from one internal epoll thread on non-blocking sockets, so a
// scrape proceeds as soon as its own socket allows. Admission is the endpoint's own: it keeps the
// listening socket, accepts on a thread of its own and hands each connection to libmicrohttpd
// (MHD_add_connection), keeping a duplicate of the socket through which it can shut the
// connection down. libmicrohttpd alone would refuse the newcomer at its connection limit and
// count its timeout from the last byte, which a client trickling bytes resets; here:
//   - a deadline from its accept (options.deadline): a connection that has not finished by then
//     (request sent and answer read) is shut down, trickling or not;
//   - a bound on open connections (options.max_connections): a new connection is always
//     accepted, and when the bound is reached the one whose last progress (its accept, or its
//     request answered) is oldest is shut down first;
//   - a bound on the request head (options.max_head_bytes: libmicrohttpd's per-connection
//     memory; it answers 414 or 431 past it).
// One request per connection: every answer says "Connection: close".
//
// Memory: at most max_connections × (head limit + one body), plus connections shut down that
// libmicrohttpd has not closed yet.
#ifndef REGCACHE_SERVER_INTERNAL_HTTP_ENDPOINT_H_
#define REGCACHE_SERVER_INTERNAL_HTTP_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace regcache::server::internal {

struct HttpEndpointOptions {
  // The address to listen on: an IPv4 or IPv6 address ("0.0.0.0", "::", "10.0.0.5") or a name
  // that resolves to one (the first answer is used).
  std::string host = "127.0.0.1";
  std::string path = "/metrics";  // GET of this path: 200; other paths 404; other methods 405
  std::string content_type = "text/plain";
  size_t max_connections = 64;
  size_t max_head_bytes = 8192;
  absl::Duration deadline = absl::Seconds(10);  // Prometheus's default scrape timeout
};

class HttpEndpoint {
 public:
  // Bytes written to one connection per readiness event, so that one fast reader of a large
  // body does not hold the thread either.
  static constexpr size_t kWriteBurst = 256 << 10;
  // What the server still reads (and drops) after its answer before it closes.
  static constexpr size_t kLingerBytes = 64 << 10;

  // Binds options.host:`port` (0: any free port, see port()) and starts the serving thread.
  // `body` makes the 200 answer's body; it runs on that thread, so it must not block for long
  // (every connection waits while it runs). kUnavailable when the address cannot be bound (or does
  // not resolve); kInvalidArgument for max_connections or max_head_bytes of 0.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(uint16_t port,
                                                             const HttpEndpointOptions& options,
                                                             std::function<std::string()> body);
  // Stops the thread and closes every connection.
  virtual ~HttpEndpoint() = default;
  // The port it listens on.
  virtual uint16_t port() const = 0;
};

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_HTTP_ENDPOINT_H_
