// A session whose calls all go over gRPC (no fast path, no client cache), next to a raw stub on
// the same daemon, for tests that check what crosses the wire itself: codes, details, deadlines.
#ifndef REGCACHE_TESTS_E2E_RAW_GRPC_SESSION_H_
#define REGCACHE_TESTS_E2E_RAW_GRPC_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/internal/client_testing.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.grpc.pb.h"

namespace regcache::testing {

struct RawGrpcSession {
  std::unique_ptr<api::Client> client;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::regcache::v1::RegCacheService::Stub> stub;

  // Connects to the daemon whose sockets are in `dir`.
  static absl::StatusOr<RawGrpcSession> Connect(const std::string& dir) {
    api::ClientOptions o;
    o.fast_path = false;
    o.client_cache = false;
    absl::StatusOr<std::unique_ptr<api::Client>> c = api::Client::Connect(dir, o);
    if (!c.ok()) return c.status();
    RawGrpcSession s;
    s.client = std::move(*c);
    s.channel = grpc::CreateChannel(absl::StrCat("unix:", dir, "/", protocol::kGrpcSocketName),
                                    grpc::InsecureChannelCredentials());
    s.stub = ::regcache::v1::RegCacheService::NewStub(s.channel);
    return s;
  }

  // A raw call on the client's session whose deadline is `left` from now.
  template <typename Method, typename Req, typename Resp>
  grpc::Status Call(Method method, const Req& req, Resp* resp,
                    std::chrono::microseconds left = std::chrono::seconds(10)) const {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + left);
    ctx.AddMetadata(protocol::kSessionMetadataKey, api::testing::Token(*client));
    return ((*stub).*method)(&ctx, req, resp);
  }
};

}  // namespace regcache::testing
#endif  // REGCACHE_TESTS_E2E_RAW_GRPC_SESSION_H_
