#include "api/metrics_server.h"

#include <civetweb.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/stats.h"

namespace regcache::api {
namespace {

class MetricsServerImpl final : public MetricsServer {
 public:
  explicit MetricsServerImpl(service::Daemon* daemon) : daemon_(daemon) {}
  ~MetricsServerImpl() override {
    if (ctx_ != nullptr) mg_stop(ctx_);
  }

  absl::Status Start(uint16_t port) {
    std::string ports = absl::StrCat("127.0.0.1:", port);
    const char* options[] = {"listening_ports", ports.c_str(), "num_threads", "2", nullptr};
    mg_callbacks callbacks{};
    ctx_ = mg_start(&callbacks, nullptr, options);
    if (ctx_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", ports));
    }
    mg_set_request_handler(ctx_, "/metrics$", &MetricsServerImpl::Handle, this);
    RC_LOG(INFO) << "metrics on http://" << ports << "/metrics";
    return absl::OkStatus();
  }

 private:
  static int Handle(mg_connection* conn, void* cbdata) {
    auto* self = static_cast<MetricsServerImpl*>(cbdata);
    const mg_request_info* info = mg_get_request_info(conn);
    if (info == nullptr || std::string(info->request_method) != "GET") {
      mg_send_http_error(conn, 405, "%s", "only GET");
      return 405;
    }
    std::string body = base::stats::FormatPrometheus(self->daemon_->Stats());
    mg_send_http_ok(conn, "text/plain; version=0.0.4", static_cast<long long>(body.size()));
    mg_write(conn, body.data(), body.size());
    return 200;
  }

  service::Daemon* const daemon_;
  mg_context* ctx_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(service::Daemon* daemon,
                                                                    uint16_t port) {
  mg_init_library(0);
  auto server = std::make_unique<MetricsServerImpl>(daemon);
  absl::Status s = server->Start(port);
  if (!s.ok()) return s;
  return std::unique_ptr<MetricsServer>(std::move(server));
}

}  // namespace regcache::api