#include "server/metrics_server.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/stats.h"
#include "server/internal/http_endpoint.h"
#include "server/internal/process_metrics.h"
#include "server/internal/prometheus_text.h"

namespace regcache::server {
namespace {

class MetricsServerImpl final : public MetricsServer {
 public:
  explicit MetricsServerImpl(std::unique_ptr<internal::HttpEndpoint> endpoint)
      : endpoint_(std::move(endpoint)) {}
  uint16_t port() const override { return endpoint_->port(); }

 private:
  std::unique_ptr<internal::HttpEndpoint> endpoint_;
};

// One scrape's answer.
std::string Scrape(service::Daemon* daemon, const std::string& build_labels) {
  internal::PrometheusText text;
  text.AddStats(daemon->Stats());
  for (const service::DeviceStatus& d : daemon->Status().devices) {
    const hca::KeyBounds b = d.capabilities.key_bounds;
    const service::DeviceIdentity& id = d.identity;
    text.AddGauge(
        "regcache_device_info",
        "one series per device the daemon serves, naming it in its labels; the value is always 1",
        absl::StrFormat("device=\"%s\",backend=\"%s\",index=\"%d\",node_guid=\"0x%016x\","
                        "port=\"%d\"",
                        internal::PrometheusText::EscapeLabelValue(id.name),
                        internal::PrometheusText::EscapeLabelValue(id.backend), id.index,
                        id.node_guid, id.port),
        1);
    text.AddGauge(
        "regcache_device_key_range_enforced",
        "1 when the device confines a peer holding a key to the key's own range; the "
        "key_bounds label says how (key, cut) or what holds instead (attachment, "
        "unknown): docs/key_bounds.md",
        absl::StrCat("device=\"", internal::PrometheusText::EscapeLabelValue(d.identity.name),
                     "\",key_bounds=\"", hca::KeyBoundsName(b), "\""),
        hca::KeyRangeEnforced(b) ? 1 : 0);
    text.AddGauge("regcache_device_up",
                  "1 while the device works, 0 once it reported a fatal error "
                  "(IBV_EVENT_DEVICE_FATAL): no key can be made on it until regcached restarts",
                  absl::StrCat("device=\"",
                               internal::PrometheusText::EscapeLabelValue(d.identity.name), "\""),
                  d.health.ok() ? 1 : 0);
  }
  text.AddGauge("regcache_build_info",
                "regcached's version and CMake build type, as labels; the value is always 1",
                build_labels, 1);
  absl::StatusOr<internal::ProcessStats> process = internal::ReadProcessStats();
  if (process.ok()) {
    internal::AddProcessMetrics(*process, &text);
  } else {
    static std::atomic<bool> said{false};  // once: every scrape would say the same
    if (!said.exchange(true))
      RC_LOG(WARNING) << "metrics: no process metrics: " << process.status();
  }
  return text.Render();
}

}  // namespace

absl::Status MetricsServer::ParseAddress(absl::string_view address, std::string* host,
                                         uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not HOST:PORT"));
  }
  absl::string_view h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  uint32_t p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': the port is not a number in 0..65535"));
  }
  if (h.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", address, "' has no host (0.0.0.0 listens on every address)"));
  }
  *host = std::string(h);
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    service::Daemon* daemon, const MetricsServerOptions& options) {
  internal::HttpEndpointOptions endpoint_options;
  uint16_t port = 0;
  if (absl::Status s = ParseAddress(options.address, &endpoint_options.host, &port); !s.ok()) {
    return s;
  }
  endpoint_options.path = "/metrics";
  endpoint_options.content_type = "text/plain; version=0.0.4; charset=utf-8";
  const std::string build_labels = absl::StrCat(
      "version=\"", internal::PrometheusText::EscapeLabelValue(options.version), "\",build_type=\"",
      internal::PrometheusText::EscapeLabelValue(options.build_type), "\"");
  absl::StatusOr<std::unique_ptr<internal::HttpEndpoint>> endpoint = internal::HttpEndpoint::Start(
      port, endpoint_options, [daemon, build_labels] { return Scrape(daemon, build_labels); });
  if (!endpoint.ok()) return endpoint.status();
  const bool v6 = endpoint_options.host.find(':') != std::string::npos;
  RC_LOG(INFO) << "metrics on http://" << (v6 ? "[" : "") << endpoint_options.host
               << (v6 ? "]" : "") << ":" << (*endpoint)->port() << "/metrics";
  return std::unique_ptr<MetricsServer>(std::make_unique<MetricsServerImpl>(std::move(*endpoint)));
}

}  // namespace regcache::server
