#include "api/metrics_server.h"

#include <string>
#include <utility>

#include "api/internal/http_endpoint.h"
#include "base/log.h"
#include "base/stats.h"

namespace regcache::api {
namespace {

class MetricsServerImpl final : public MetricsServer {
 public:
  explicit MetricsServerImpl(std::unique_ptr<internal::HttpEndpoint> endpoint)
      : endpoint_(std::move(endpoint)) {}
  uint16_t port() const override { return endpoint_->port(); }

 private:
  std::unique_ptr<internal::HttpEndpoint> endpoint_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(service::Daemon* daemon,
                                                                    uint16_t port) {
  internal::HttpEndpointOptions options;
  options.path = "/metrics";
  options.content_type = "text/plain; version=0.0.4";
  absl::StatusOr<std::unique_ptr<internal::HttpEndpoint>> endpoint = internal::HttpEndpoint::Start(
      port, options, [daemon] { return base::stats::FormatPrometheus(daemon->Stats()); });
  if (!endpoint.ok()) return endpoint.status();
  RC_LOG(INFO) << "metrics on http://127.0.0.1:" << (*endpoint)->port() << "/metrics";
  return std::unique_ptr<MetricsServer>(std::make_unique<MetricsServerImpl>(std::move(*endpoint)));
}

}  // namespace regcache::api
