// The HTTP server under server/metrics_server.h: answers GET of one path (on 127.0.0.1 unless told
// another address) with a body made on demand, and no client, however slow or idle, can delay
// another's answer.
//
// How: one thread, epoll, non-blocking sockets, and nothing on that thread ever waits for a
// client. Each connection has its own request parser (server/http_request.h) and response buffer
// and moves on only when its socket is ready; a readiness event does a bounded amount of work
// (one read, at most kWriteBurst bytes written), so a scrape proceeds as soon as its own socket
// allows. What a connection may hold is bounded too:
//   - a deadline from its accept to its last byte sent (options.deadline): a client that sends
//     its request or reads its answer too slowly is closed when it passes;
//   - a bound on open connections (options.max_connections): a new connection is always
//     accepted, and when the bound is reached the connection that has been idle longest (no
//     byte read or written for the longest time) is closed first;
//   - a bound on the request head (options.max_head_bytes; 431 past it).
// One request per connection: the answer says "Connection: close", the server shuts its side
// down and discards what the client still sends (so that closing does not reset the answer
// away) until EOF, the deadline or kLingerBytes.
//
// Memory: at most max_connections × (head limit + one body).
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
