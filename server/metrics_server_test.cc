// /metrics on a daemon in this process (the sim): the daemon's stats in the Prometheus text
// format, served while many idle and half-sent connections stay open.
#include "server/metrics_server.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "server/internal/http_client_testing.h"
#include "service/daemon.h"

namespace regcache::server {
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
  auto metrics = MetricsServer::Start(daemon->get(), MetricsServerOptions{});
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
  EXPECT_NE(answer.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos);
  const std::string body = BodyOf(answer);
  EXPECT_NE(body.find("\nregcache_daemon_sessions_open 0\n"), std::string::npos) << body;
  EXPECT_NE(body.find("\nregcache_daemon_sessions_opened_total 0\n"), std::string::npos);
  EXPECT_NE(body.find("\nregcache_build_info{version=\"unknown\",build_type=\"unknown\"} 1\n"),
            std::string::npos);
  EXPECT_NE(body.find("\n# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
  EXPECT_NE(body.find("\nprocess_open_fds "), std::string::npos);
  for (int fd : held) EXPECT_TRUE(StillOpen(fd));
  EXPECT_TRUE(absl::StartsWith(Exchange(port, "POST /metrics HTTP/1.0\r\n\r\n"),
                               "HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_TRUE(
      absl::StartsWith(Exchange(port, "GET / HTTP/1.0\r\n\r\n"), "HTTP/1.1 404 Not Found\r\n"));
  for (int fd : held) close(fd);
  // The same port cannot be served twice.
  MetricsServerOptions again;
  again.address = "127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(MetricsServer::Start(daemon->get(), again).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(MetricsServer, AddressIsHostColonPort) {
  std::string host;
  uint16_t port = 1;
  ASSERT_TRUE(MetricsServer::ParseAddress("0.0.0.0:9464", &host, &port).ok());
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_EQ(port, 9464);
  ASSERT_TRUE(MetricsServer::ParseAddress("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  for (const char* bad :
       {"9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", ":9464", "127.0.0.1:x"}) {
    EXPECT_EQ(MetricsServer::ParseAddress(bad, &host, &port).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(MetricsServer, ListensOnTheAddressGiven) {
  hca::sim::RegisterBackend();
  service::DaemonConfig config;
  config.device = "sim";
  auto daemon = service::Daemon::Create(config, nullptr);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  MetricsServerOptions options;
  options.address = "0.0.0.0:0";  // every address, 127.0.0.1 among them
  options.version = "1.2.3";
  options.build_type = "Release";
  auto metrics = MetricsServer::Start(daemon->get(), options);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string body = BodyOf(Exchange((*metrics)->port(), "GET /metrics HTTP/1.0\r\n\r\n"));
  EXPECT_NE(body.find("regcache_build_info{version=\"1.2.3\",build_type=\"Release\"} 1\n"),
            std::string::npos)
      << body;
  options.address = "192.0.2.1:0";  // TEST-NET-1: no interface here has it
  EXPECT_EQ(MetricsServer::Start(daemon->get(), options).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace regcache::server
