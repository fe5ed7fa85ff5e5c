// The Prometheus endpoint of regcached: GET http://127.0.0.1:<port>/metrics returns every stat
// of the daemon in the text exposition format (base::stats::FormatPrometheus over
// Daemon::Stats()). Off by default (regcached --metrics_port=0); it binds 127.0.0.1 only.
//
// The HTTP server is civetweb (Debian's libcivetweb-dev), not a hand-written parser: the
// endpoint faces whatever local process connects, so request parsing belongs to a library
// that has been fuzzed and fixed for years.
//
// Thread safety: civetweb serves requests on its own threads; Daemon::Stats is thread-safe.
#ifndef REGCACHE_API_METRICS_SERVER_H_
#define REGCACHE_API_METRICS_SERVER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "service/daemon.h"

namespace regcache::api {

class MetricsServer {
 public:
  // Starts serving on 127.0.0.1:`port`. `daemon` must outlive the server. kUnavailable when the
  // port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(service::Daemon* daemon,
                                                              uint16_t port);
  virtual ~MetricsServer() = default;  // stops serving
};

}  // namespace regcache::api
#endif  // REGCACHE_API_METRICS_SERVER_H_
