// The control socket never waits on one tenant (a real regcached process): a session whose
// connection drops while its large attach is still running is closed off the accepting thread,
// so another client is welcomed while that attach is still in flight. Asserted by order (the
// newcomer's Welcome before the attach's end), not by a time. The sim's backing_delay_ms makes
// the attach slow; every wait is bounded.
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/control_protocol.h"
#include "api/internal/client_testing.h"
#include "api/regcache.grpc.pb.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;
namespace pb = regcache::v1;

// Polls `pred` every 5 ms for at most 10 s.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(ControlPlaneE2e, ANewcomerIsWelcomedWhileAClosingSessionsAttachRuns) {
  if (regcache::testing::TestDevice() != "sim") GTEST_SKIP() << "the slow attach is the sim's";
  regcache::testing::Regcached daemon({"--device=sim:backing_delay_ms=3000"});
  rc::ClientOptions o;
  o.fast_path = false;
  o.client_cache = false;
  auto a = rc::Client::Connect(daemon.dir(), o);
  ASSERT_TRUE(a.ok()) << a.status();
  auto observer = rc::Client::Connect(daemon.dir(), o);
  ASSERT_TRUE(observer.ok()) << observer.status();
  auto stub = pb::RegCache::NewStub(
      grpc::CreateChannel(absl::StrCat("unix:", daemon.dir(), "/", rc::kGrpcSocketName),
                          grpc::InsecureChannelCredentials()));
  const std::string token = rc::testing::Token(**a);
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.AddMetadata(rc::kSessionMetadataKey, token);
    return ((*stub).*method)(&ctx, req, resp);
  };
  // A's memory: created by the daemon (its fd goes to A's control socket, unread), then attached
  // by a call that takes the sim's 3 s backing delay.
  pb::AllocateMemoryRequest alloc;
  alloc.set_length(1 << 20);
  pb::AllocateMemoryResponse mem;
  ASSERT_TRUE(call(&pb::RegCache::Stub::AllocateMemory, alloc, &mem).ok());
  std::atomic<bool> attach_done{false};
  std::thread attach([&] {
    pb::AttachMemoryRequest req;
    req.set_memory_id(mem.memory_id());
    req.set_client_va(0x7f0000000000);
    pb::AttachMemoryResponse resp;
    (void)call(&pb::RegCache::Stub::AttachMemory, req, &resp);  // fails or not: A is going
    attach_done = true;
  });
  // The attach is inside the device now.
  ASSERT_TRUE(Eventually([&] {
    auto st = (*observer)->Stats();
    return st.ok() && st->Get("hca_sim", "backings_delayed").value_or(0) == 1;
  }));
  // A's connection drops: its session must close, which waits for the attach...
  ASSERT_EQ(::shutdown(rc::testing::ControlFd(**a), SHUT_RDWR), 0);
  // ...but not on the thread that welcomes everyone else.
  auto b = rc::Client::Connect(daemon.dir(), o);
  const bool attach_running_at_welcome = !attach_done.load();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(attach_running_at_welcome)
      << "the newcomer was welcomed only after the closing session's attach ended";
  attach.join();
  // A's session does close, once its attach is over.
  EXPECT_TRUE(Eventually([&] {
    auto info = (*observer)->Status();
    return info.ok() && info->sessions == 2;  // the observer and B
  }));
}

}  // namespace
