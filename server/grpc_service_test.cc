// The gRPC server in this process, on the sim: health per service (grpc.health.v1) is SERVING
// for "" and each service's name, and NOT_SERVING for all of them as soon as a drain starts —
// by GrpcServer::Draining (the daemon's SIGTERM path) or by an admin Drain call — while the
// server still answers; SimPeerService is served because the sim simulates a peer.
#include "server/grpc_service.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "protocol/control_protocol.h"
#include "regcache/v1/regcache.grpc.pb.h"
#include "service/daemon.h"

namespace regcache::server {
namespace {

namespace pb = ::regcache::v1;

// grpc.health.v1.HealthCheckResponse.ServingStatus.
constexpr int kServing = 1;
constexpr int kNotServing = 2;
constexpr int kServiceUnknown = -1;  // NOT_FOUND from Check

class GrpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hca::sim::RegisterBackend();
    service::DaemonConfig config;
    config.device = "sim";
    config.admin_uids = {static_cast<uint32_t>(getuid())};  // admin only when listed
    auto d = service::Daemon::Create(config, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    char tmpl[] = "/tmp/regcache-grpc-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    GrpcServerOptions options;
    options.socket_dir = dir_;
    auto server = GrpcServer::Start(daemon_.get(), nullptr, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->unix_target(), grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    server_.reset();
    daemon_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // grpc.health.v1.Health/Check for `service`, encoded by hand (HealthCheckRequest is
  // {string service = 1}, HealthCheckResponse {ServingStatus status = 1}): the status, or
  // kServiceUnknown when the server does not know the name.
  int Health(const std::string& service) {
    std::string request;
    if (!service.empty()) {
      request.push_back(0x0a);
      request.push_back(static_cast<char>(service.size()));  // names here are < 128 bytes
      request += service;
    }
    grpc::Slice slice(request);
    grpc::ByteBuffer req(&slice, 1);
    grpc::ByteBuffer resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                     grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), method, &ctx, req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) return kServiceUnknown;
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(resp.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& sl : slices) bytes.append(sl.begin(), sl.end());
    if (bytes.empty()) return 0;  // UNKNOWN, the default value
    EXPECT_EQ(bytes.size(), 2u);
    EXPECT_EQ(bytes[0], 0x08);
    return bytes.size() == 2 ? bytes[1] : -2;
  }

  std::unique_ptr<service::Daemon> daemon_;
  std::string dir_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcServiceTest, HealthPerServiceTurnsNotServingWhenADrainStarts) {
  EXPECT_EQ(Health(""), kServing);
  EXPECT_EQ(Health("regcache.v1.RegCacheService"), kServing);
  EXPECT_EQ(Health("regcache.v1.SimPeerService"), kServing);  // the sim simulates a peer
  EXPECT_EQ(Health("regcache.v1.NoSuchService"), kServiceUnknown);
  server_->Draining();
  EXPECT_EQ(Health(""), kNotServing);
  EXPECT_EQ(Health("regcache.v1.RegCacheService"), kNotServing);
  EXPECT_EQ(Health("regcache.v1.SimPeerService"), kNotServing);
  // The server still answers while the daemon drains.
  auto stub = pb::RegCacheService::NewStub(channel_);
  grpc::ClientContext ctx;
  pb::PingResponse pong;
  EXPECT_TRUE(stub->Ping(&ctx, pb::PingRequest(), &pong).ok());
}

TEST_F(GrpcServiceTest, AFailedDeviceTurnsHealthNotServingAndCallsStillWork) {
  EXPECT_EQ(Health(""), kServing);
  server_->DeviceFailed();
  EXPECT_EQ(Health(""), kNotServing);
  EXPECT_EQ(Health("regcache.v1.RegCacheService"), kNotServing);
  auto stub = pb::RegCacheService::NewStub(channel_);
  grpc::ClientContext ctx;
  pb::PingResponse pong;
  EXPECT_TRUE(stub->Ping(&ctx, pb::PingRequest(), &pong).ok());
}

TEST_F(GrpcServiceTest, AnAdminDrainCallTurnsHealthNotServing) {
  service::PeerCredentials me{getpid(), getuid(), getgid()};
  auto session = daemon_->OpenSession(me, "");
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE(session->admin);  // listed in admin_uids
  if (session->channel_fd >= 0) close(session->channel_fd);
  if (session->state_fd >= 0) close(session->state_fd);
  EXPECT_EQ(Health("regcache.v1.RegCacheService"), kServing);
  auto stub = pb::RegCacheService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.AddMetadata(protocol::kSessionMetadataKey, session->token);
  pb::DrainResponse drained;
  grpc::Status s = stub->Drain(&ctx, pb::DrainRequest(), &drained);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Health(""), kNotServing);
  EXPECT_EQ(Health("regcache.v1.RegCacheService"), kNotServing);
}

TEST_F(GrpcServiceTest, SimPeerCallsAreTheirOwnService) {
  // Without a session the sim peer's service answers UNAUTHENTICATED (it exists), and the
  // production service no longer has the calls.
  auto peer = pb::SimPeerService::NewStub(channel_);
  grpc::ClientContext ctx;
  pb::PeerReadResponse read;
  EXPECT_EQ(peer->PeerRead(&ctx, pb::PeerReadRequest(), &read).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::GenericStub generic(channel_);
  grpc::ClientContext old_ctx;
  old_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::internal::RpcMethod old_method("/regcache.v1.RegCacheService/PeerRead",
                                       grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ByteBuffer req;
  grpc::ByteBuffer resp;
  grpc::Slice empty("");
  req = grpc::ByteBuffer(&empty, 1);
  EXPECT_EQ((grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
                 channel_.get(), old_method, &old_ctx, req, &resp))
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace regcache::server
