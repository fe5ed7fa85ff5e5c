// The control socket never waits on one tenant (a real regcached process): a session whose
// connection drops while its large attach is still running is closed off the accepting thread,
// and an fd import of a session whose attach runs does not wait for that attach, so another
// client is welcomed while the attach is still in flight. Asserted by order (the
// newcomer's Welcome before the attach's end), not by a time. The sim's backing_delay_ms makes
// the attach slow; every wait is bounded.
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/internal/client_testing.h"
#include "gtest/gtest.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.grpc.pb.h"
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

// A daemon whose attaches take 3 s (the sim's backing_delay_ms), a session A with one attach
// of its memory in flight, and an observer session.
class SlowAttach : public ::testing::Test {
 protected:
  void SetUp() override {
    if (regcache::testing::TestDevice() != "sim") GTEST_SKIP() << "the slow attach is the sim's";
    daemon_ = std::make_unique<regcache::testing::Regcached>(
        std::vector<std::string>{"--device=sim:backing_delay_ms=3000"});
    options_.fast_path = false;
    options_.client_cache = false;
    auto a = rc::Client::Connect(daemon_->dir(), options_);
    ASSERT_TRUE(a.ok()) << a.status();
    a_ = std::move(*a);
    auto observer = rc::Client::Connect(daemon_->dir(), options_);
    ASSERT_TRUE(observer.ok()) << observer.status();
    observer_ = std::move(*observer);
    stub_ = pb::RegCacheService::NewStub(grpc::CreateChannel(
        absl::StrCat("unix:", daemon_->dir(), "/", regcache::protocol::kGrpcSocketName),
        grpc::InsecureChannelCredentials()));
    // A's memory: created by the daemon (its fd goes to A's control socket, unread), then
    // attached by a call that takes the backing delay.
    pb::AllocateMemoryRequest alloc;
    alloc.set_length(1 << 20);
    pb::AllocateMemoryResponse mem;
    ASSERT_TRUE(Call(&pb::RegCacheService::Stub::AllocateMemory, alloc, &mem).ok());
    attach_ = std::thread([this, id = mem.memory_id()] {
      pb::AttachMemoryRequest req;
      req.set_memory_id(id);
      req.set_client_va(0x7f0000000000);
      pb::AttachMemoryResponse resp;
      (void)Call(&pb::RegCacheService::Stub::AttachMemory, req, &resp);  // fails or not: A may go
      attach_done_ = true;
    });
    // The attach is inside the device now.
    ASSERT_TRUE(Eventually([&] {
      auto st = observer_->Stats();
      return st.ok() && st->Get("hca_sim", "backings_delayed").value_or(0) == 1;
    }));
  }
  void TearDown() override {
    if (attach_.joinable()) attach_.join();
  }

  template <typename Method, typename Req, typename Resp>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.AddMetadata(regcache::protocol::kSessionMetadataKey, rc::testing::Token(*a_));
    return ((*stub_).*method)(&ctx, req, resp);
  }

  // Connects a newcomer; true when it was welcomed while A's attach was still running.
  bool WelcomedDuringTheAttach() {
    auto b = rc::Client::Connect(daemon_->dir(), options_);
    const bool running = !attach_done_.load();
    EXPECT_TRUE(b.ok()) << b.status();
    return running;
  }

  std::unique_ptr<regcache::testing::Regcached> daemon_;
  rc::ClientOptions options_;
  std::unique_ptr<rc::Client> a_;
  std::unique_ptr<rc::Client> observer_;
  std::unique_ptr<pb::RegCacheService::Stub> stub_;
  std::thread attach_;
  std::atomic<bool> attach_done_{false};
};

TEST_F(SlowAttach, ANewcomerIsWelcomedWhileAClosingSessionsAttachRuns) {
  // A's connection drops: its session must close, which waits for the attach...
  ASSERT_EQ(::shutdown(rc::testing::ControlFd(*a_), SHUT_RDWR), 0);
  // ...but not on the thread that welcomes everyone else.
  EXPECT_TRUE(WelcomedDuringTheAttach())
      << "the newcomer was welcomed only after the closing session's attach ended";
  attach_.join();
  // A's session does close, once its attach is over.
  EXPECT_TRUE(Eventually([&] {
    auto info = observer_->Status();
    return info.ok() && info->sessions == 1;  // the observer (B went with its check)
  }));
}

TEST_F(SlowAttach, AnImportOfTheAttachingSessionHoldsNobodyUp) {
  // A imports another memfd on its control socket while its attach runs: the control socket's
  // thread serves that import (the attach does not hold the session's lock)...
  const int memfd = memfd_create("regcache-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, 1 << 16), 0);
  regcache::protocol::ImportFdMsg msg =
      regcache::protocol::MakeControlMessage<regcache::protocol::ImportFdMsg>(
          regcache::protocol::ControlType::kImportFd);
  msg.nonce = 77;
  msg.length = 1 << 16;
  ASSERT_TRUE(
      regcache::protocol::SendControlMessage(rc::testing::ControlFd(*a_), &msg, sizeof(msg), memfd)
          .ok());
  close(memfd);
  // ...and goes on to welcome the next client while the attach still runs.
  EXPECT_TRUE(WelcomedDuringTheAttach())
      << "the newcomer was welcomed only after the importing session's attach ended";
}

}  // namespace
