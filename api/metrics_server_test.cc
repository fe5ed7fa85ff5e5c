// /metrics on a daemon in this process (the sim): the daemon's stats in the Prometheus text
// format, served while many idle and half-sent connections stay open.
#include "api/metrics_server.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "api/internal/http_client_testing.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "service/daemon.h"

namespace regcache::api {
namespace {

using testing::BodyOf;
using testing::ConnectLoopback;
using testing::Exchange;
using testing::SendAll;
using testing::StillOpen;

TEST(MetricsServer, ScrapesSucceedWhileIdleConnectionsStayOpen) {
  hca::sim::RegisterBackend();
  service::DaemonConfig config;
  config.device = "sim";
  auto daemon = service::Daemon::Create(config, nullptr);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto metrics = MetricsServer::Start(daemon->get(), 0);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const uint16_t port = (*metrics)->port();
  ASSERT_NE(port, 0);
  // More than any thread count a server might have, idle or stuck mid-request.
  std::vector<int> held;
  for (int i = 0; i < 16; ++i) held.push_back(ConnectLoopback(port));
  for (int i = 0; i < 8; ++i) {
    held.push_back(ConnectLoopback(port));
    ASSERT_TRUE(SendAll(held.back(), "GET /metrics HTTP/1.1\r\nHost: "));
  }
  const std::string answer =
      Exchange(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer.substr(0, 200);
  EXPECT_NE(answer.find("\r\nContent-Type: text/plain; version=0.0.4\r\n"), std::string::npos);
  const std::string body = BodyOf(answer);
  EXPECT_NE(body.find("\nregcache_daemon_sessions_open 0\n"), std::string::npos) << body;
  for (int fd : held) EXPECT_TRUE(StillOpen(fd));
  EXPECT_TRUE(absl::StartsWith(Exchange(port, "POST /metrics HTTP/1.0\r\n\r\n"),
                               "HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_TRUE(
      absl::StartsWith(Exchange(port, "GET / HTTP/1.0\r\n\r\n"), "HTTP/1.1 404 Not Found\r\n"));
  for (int fd : held) close(fd);
  // The same port cannot be served twice.
  EXPECT_EQ(MetricsServer::Start(daemon->get(), port).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace regcache::api
