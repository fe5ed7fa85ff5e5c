// The Prometheus endpoint of regcached: GET http://<address>/metrics returns every stat of the
// daemon (Daemon::Stats(): per component, per device and per tenant), the process's own
// (process_cpu_seconds_total, ...) and regcache_build_info, in the text exposition format, clean
// under `promtool check metrics`; docs/metrics.md lists the metrics and their names' rules
// (server/internal/prometheus_text.h renders them). Off by default (regcached --metrics_address,
// or --metrics_port=N for 127.0.0.1:N); it binds 127.0.0.1 unless told another address.
//
// The endpoint is shared by every local process, so no client may be able to hold it: any
// number of idle, slow-sending or slow-reading connections must not delay another client's
// scrape. It is served by server/internal/http_endpoint.h: libmicrohttpd speaks HTTP from one
// epoll thread (GET /metrics only: 404 for other paths, 405 for other methods, its own 4xx/505
// for malformed, oversized or non-1.x requests), and the endpoint decides who gets in: a deadline
// per connection from its accept (10 s, Prometheus's default scrape timeout), at most 64
// connections (the one that made no progress for the longest is closed to make room for a new
// one), one request per connection.
//
// Thread safety: requests are answered on the endpoint's thread; Daemon::Stats is thread-safe.
#ifndef REGCACHE_SERVER_METRICS_SERVER_H_
#define REGCACHE_SERVER_METRICS_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "service/daemon.h"

namespace regcache::server {

struct MetricsServerOptions {
  // HOST:PORT to listen on: "127.0.0.1:9464", "0.0.0.0:9464" (every IPv4 address, for a pod),
  // "[::]:9464"; port 0 picks a free one (see port()).
  std::string address = "127.0.0.1:0";
  // The labels of regcache_build_info.
  std::string version = "unknown";
  std::string build_type = "unknown";
};

class MetricsServer {
 public:
  // Starts serving on options.address. `daemon` must outlive the server. kInvalidArgument for
  // an address that is not HOST:PORT; kUnavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(service::Daemon* daemon,
                                                              const MetricsServerOptions& options);
  virtual ~MetricsServer() = default;  // stops serving
  // The port it listens on.
  virtual uint16_t port() const = 0;

  // Splits "HOST:PORT" ("[V6]:PORT" for an IPv6 address). kInvalidArgument naming what is
  // wrong: no port, a port that is not a number in 0..65535, an empty host.
  static absl::Status ParseAddress(absl::string_view address, std::string* host, uint16_t* port);
};

}  // namespace regcache::server
#endif  // REGCACHE_SERVER_METRICS_SERVER_H_
