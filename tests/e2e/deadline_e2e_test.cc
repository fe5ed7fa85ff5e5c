// Deadlines against a real regcached process: calls sent with no time left (gRPC rounds their
// deadline up to a whole millisecond, so they arrive with a little "left") make no key that
// outlives them, and an admin Drain with no time left is not carried out behind the admin's
// back. Unix sockets in a temp dir; every loop is bounded by its count.
#include <grpcpp/grpcpp.h>

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
#include "tests/e2e/raw_grpc_session.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;
namespace pb = regcache::v1;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;

class DeadlineE2e : public ::testing::Test {
 protected:
  virtual std::vector<std::string> Flags() { return {}; }

  void SetUp() override {
    std::vector<std::string> flags = Flags();
    flags.push_back(regcache::testing::AdminSelfFlag());  // the Drain below is refused for time
    daemon_ = std::make_unique<regcache::testing::Regcached>(flags);
    auto raw = regcache::testing::RawGrpcSession::Connect(daemon_->dir());
    ASSERT_TRUE(raw.ok()) << raw.status();
    raw_ = std::move(*raw);
    // Connected before the calls with no time: a connection attempt those calls cut short
    // would put the channel into back-off and fail the later calls that do have time.
    ASSERT_TRUE(raw_.channel->WaitForConnected(std::chrono::system_clock::now() +
                                               std::chrono::seconds(10)));
  }

  std::unique_ptr<regcache::testing::Regcached> daemon_;
  regcache::testing::RawGrpcSession raw_;
};

TEST_F(DeadlineE2e, CallsWithNoTimeLeftLeaveNoHeldKeys) {
  auto mem = raw_.client->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  const uint64_t base = reinterpret_cast<uint64_t>(mem->data);
  int made = 0;
  int refused = 0;
  pb::ForgetCallsRequest gave_up;  // what a client does after giving up on calls
  for (int i = 0; i < 100; ++i) {
    pb::RegisterRequest reg;
    reg.set_call_id(i + 1);
    reg.set_va(base + (i % 16) * 65536);
    reg.set_length(4096 * (1 + i % 4));
    reg.set_access(kRw);
    pb::RegisterResponse grant;
    // No time at all, and less than the daemon's 2 ms margin.
    const auto left = std::chrono::microseconds(i % 2 == 0 ? 0 : 500);
    grpc::Status s = raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, left);
    if (s.ok()) {
      // The reply arrived: the caller holds the key and releases it. gRPC sends a deadline in
      // whole milliseconds and its client enforces it by a timer, so even a call sent with no
      // time left is sometimes answered before the timer fires.
      ++made;
      EXPECT_TRUE(raw_.client->Release(grant.grant().handle()).ok());
    } else {
      ++refused;
      EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
      gave_up.add_call_ids(reg.call_id());
    }
  }
  EXPECT_EQ(made + refused, 100);
  // Batches: the same, item by item.
  pb::RegisterBatchRequest batch;
  for (int i = 0; i < 8; ++i) {
    pb::RegisterRequest* item = batch.add_items();
    item->set_call_id(1000 + i);
    gave_up.add_call_ids(item->call_id());
    item->set_va(base + i * 4096);
    item->set_length(4096);
    item->set_access(kRw);
  }
  pb::RegisterBatchResponse results;
  EXPECT_FALSE(raw_.Call(&pb::RegCacheService::Stub::RegisterBatch, batch, &results,
                         std::chrono::microseconds(0))
                   .ok());
  // Re-registrations: each trades a hold made with time for one made with none. A lost reply
  // must leave neither behind.
  std::vector<uint64_t> untraded;
  for (int i = 0; i < 20; ++i) {
    pb::RegisterRequest reg;
    reg.set_va(base + 512 * 1024 + (i % 4) * 65536);
    reg.set_length(4096);
    reg.set_access(kRw);
    pb::RegisterResponse grant;
    ASSERT_TRUE(
        raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, std::chrono::seconds(10))
            .ok());
    pb::ReregisterRequest rereg;
    rereg.set_call_id(2000 + i);
    rereg.set_handle(grant.grant().handle());
    rereg.set_va(reg.va());
    rereg.set_length(8192);
    // More range keeps the key in place; fewer rights make a new one.
    rereg.set_access(i % 2 == 0 ? kRw : uint32_t{rc::kLocalWrite | rc::kRemoteRead});
    pb::ReregisterResponse traded;
    grpc::Status s = raw_.Call(&pb::RegCacheService::Stub::Reregister, rereg, &traded,
                               std::chrono::microseconds(0));
    if (s.ok()) {
      EXPECT_TRUE(raw_.client->Release(traded.grant().handle()).ok());
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
      // A lost Reregister: the client forgets the call (the daemon then releases what it
      // made); the hold it was to trade in is still there only if the call never ran.
      gave_up.add_call_ids(rereg.call_id());
      untraded.push_back(rereg.handle());
    }
  }
  // The daemon cannot know whether a reply reached the client: gRPC hands it the deadline as a
  // relative timeout in whole milliseconds from clocks each side caches, and on a loaded host a
  // call sent with no time left can arrive with tens of ms to go. The client names the calls it
  // gave up on; whatever they made is released, now or when they end.
  pb::ForgetCallsResponse forgot;
  ASSERT_TRUE(
      raw_.Call(&pb::RegCacheService::Stub::ForgetCalls, gave_up, &forgot, std::chrono::seconds(10))
          .ok());
  // Re-registrations that never ran left the hold they were to trade: Query tells.
  for (uint64_t handle : untraded) {
    absl::StatusOr<rc::KeyInfo> k = raw_.client->Query(handle);
    if (k.ok() && k->holders > 0) {
      EXPECT_TRUE(raw_.client->Release(handle).ok());
    }
  }
  // Nothing of the session is held: every key that exists has no holder.
  auto keys = raw_.client->ListKeys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  for (const rc::KeyInfo& k : *keys) {
    EXPECT_EQ(k.holders, 0u) << "key " << k.handle << " over 0x" << std::hex << k.va;
  }
  // With time, the same call works.
  pb::RegisterRequest reg;
  reg.set_va(base);
  reg.set_length(4096);
  reg.set_access(kRw);
  pb::RegisterResponse grant;
  ASSERT_TRUE(
      raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, std::chrono::seconds(10)).ok());
  EXPECT_TRUE(raw_.client->Release(grant.grant().handle()).ok());
}

TEST_F(DeadlineE2e, ForgottenCallsGiveBackWhatTheyMade) {
  auto mem = raw_.client->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  const auto ten_s = std::chrono::seconds(10);
  pb::RegisterRequest reg;
  reg.set_va(reinterpret_cast<uint64_t>(mem->data));
  reg.set_length(4096);
  reg.set_access(kRw);
  auto holders = [&] {
    auto keys = raw_.client->ListKeys();
    EXPECT_TRUE(keys.ok()) << keys.status();
    uint64_t n = 0;
    for (const rc::KeyInfo& k : keys.value_or(std::vector<rc::KeyInfo>{})) n += k.holders;
    return n;
  };
  // A finished call, forgotten: its hold is released, once.
  reg.set_call_id(1);
  pb::RegisterResponse grant;
  ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, ten_s).ok());
  EXPECT_EQ(holders(), 1u);
  pb::ForgetCallsRequest forget;
  forget.add_call_ids(1);
  pb::ForgetCallsResponse forgot;
  ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::ForgetCalls, forget, &forgot, ten_s).ok());
  EXPECT_EQ(forgot.released(), 1u);
  ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::ForgetCalls, forget, &forgot, ten_s).ok());
  EXPECT_EQ(forgot.released(), 0u);
  EXPECT_EQ(holders(), 0u);
  // A call forgotten before it arrives (its request overtaken by the forget): it makes the key,
  // releases it again and answers CANCELLED.
  forget.set_call_ids(0, 2);
  ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::ForgetCalls, forget, &forgot, ten_s).ok());
  reg.set_call_id(2);
  grpc::Status late = raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, ten_s);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::CANCELLED) << late.error_message();
  EXPECT_EQ(holders(), 0u);
  // The same for a re-registration, in place and to a new key: the hold it traded in is gone
  // and the one it made is released again.
  reg.set_call_id(0);  // kept by this test itself
  uint64_t call = 4;
  // More range keeps the key; fewer rights make a new one.
  for (uint32_t access : {kRw, uint32_t{rc::kLocalWrite | rc::kRemoteRead}}) {
    ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, ten_s).ok());
    EXPECT_EQ(holders(), 1u);
    forget.set_call_ids(0, call);
    ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::ForgetCalls, forget, &forgot, ten_s).ok());
    pb::ReregisterRequest rereg;
    rereg.set_call_id(call++);
    rereg.set_handle(grant.grant().handle());
    rereg.set_va(reg.va());
    rereg.set_length(access == kRw ? 8192 : 4096);
    rereg.set_access(access);
    pb::ReregisterResponse traded;
    late = raw_.Call(&pb::RegCacheService::Stub::Reregister, rereg, &traded, ten_s);
    EXPECT_EQ(late.error_code(), grpc::StatusCode::CANCELLED) << late.error_message();
    EXPECT_EQ(holders(), 0u) << "a forgotten Reregister to access " << access << " left a hold";
  }
  // Call id 0 names no call.
  forget.set_call_ids(0, 0);
  EXPECT_EQ(raw_.Call(&pb::RegCacheService::Stub::ForgetCalls, forget, &forgot, ten_s).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DeadlineE2e, DrainWithNoTimeLeftIsNotCarriedOut) {
  pb::DrainResponse resp;
  grpc::Status s = raw_.Call(&pb::RegCacheService::Stub::Drain, pb::DrainRequest(), &resp,
                             std::chrono::microseconds(0));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  // The daemon still serves: the refusal was the truth.
  pb::StatusResponse st;
  EXPECT_TRUE(raw_.Call(&pb::RegCacheService::Stub::Status, pb::StatusRequest(), &st,
                        std::chrono::seconds(10))
                  .ok());
  EXPECT_FALSE(st.draining());
}

// A device whose completions take 30 ms: the call starts with time left (10 ms, over the
// margin), the key is made, and by then the deadline has passed. The daemon notices before it
// answers and releases the key again.
class SlowDeviceDeadlineE2e : public DeadlineE2e {
 protected:
  std::vector<std::string> Flags() override { return {"--device=sim:completion_delay_ms=30"}; }
};

TEST_F(SlowDeviceDeadlineE2e, AKeyMadeTooLateIsReleasedAgain) {
  if (regcache::testing::TestDevice() != "sim") GTEST_SKIP() << "the slow device is the sim's";
  auto mem = raw_.client->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  pb::RegisterRequest reg;
  reg.set_va(reinterpret_cast<uint64_t>(mem->data));
  reg.set_length(8192);
  reg.set_access(kRw);
  pb::RegisterResponse grant;
  grpc::Status s =
      raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant, std::chrono::milliseconds(10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  // The client gave up at 10 ms; the daemon finishes the map at about 30 ms, finds the deadline
  // gone and releases the key. Wait (bounded) until the miss was served, then nobody may hold
  // anything.
  auto served = [&] {
    auto stats = raw_.client->Stats();
    return stats.ok() && stats->Get("cache", "register_misses").value_or(0) == 1;
  };
  auto unheld = [&] {
    auto keys = raw_.client->ListKeys();
    if (!keys.ok()) return false;
    for (const rc::KeyInfo& k : *keys) {
      if (k.holders != 0) return false;
    }
    return true;
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!(served() && unheld()) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(served()) << "the daemon made the key (a miss) before noticing the deadline";
  EXPECT_TRUE(unheld()) << "the key made for the expired call is still held";
}

}  // namespace
