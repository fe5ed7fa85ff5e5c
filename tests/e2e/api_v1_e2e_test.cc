// The v1 API's conventions against a real regcached process (docs/api.md): every List call
// pages in a stable order and the client library walks the pages by itself; a refused call
// carries a google.rpc.ErrorInfo (reason, domain, numbers) in its status details next to the
// canonical code. Unix sockets in a temp dir; every loop is bounded by its count.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "client/internal/client_testing.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.grpc.pb.h"
#include "tests/e2e/raw_grpc_session.h"
#include "tests/e2e/regcached_process.h"

using ::regcache::base::StatusIs;

namespace {

namespace rc = regcache::api;
namespace pb = ::regcache::v1;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;
constexpr uint64_t kPage = 4096;

class ApiV1E2e : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    daemon_ = std::make_unique<regcache::testing::Regcached>(std::move(flags));
    auto raw = regcache::testing::RawGrpcSession::Connect(daemon_->dir());
    ASSERT_TRUE(raw.ok()) << raw.status();
    raw_ = std::move(*raw);
  }

  // The ErrorInfo in a status's details (google.rpc.Status), as any gRPC client reads it.
  static google::rpc::ErrorInfo InfoOf(const grpc::Status& s) {
    google::rpc::Status details;
    google::rpc::ErrorInfo info;
    EXPECT_TRUE(details.ParseFromString(s.error_details())) << s.error_message();
    EXPECT_EQ(details.code(), static_cast<int>(s.error_code()));
    EXPECT_EQ(details.details_size(), 1);
    if (details.details_size() == 1) {
      EXPECT_TRUE(details.details(0).UnpackTo(&info));
    }
    EXPECT_EQ(info.domain(), "regcache.io");
    return info;
  }

  std::unique_ptr<regcache::testing::Regcached> daemon_;
  regcache::testing::RawGrpcSession raw_;
};

TEST_F(ApiV1E2e, ListKeysPagesInHandleOrderAndTheClientWalksEveryPage) {
  Start({});
  constexpr int kKeys = 1100;  // more than the default page of 1000
  auto mem = raw_.client->AllocateMemory(kKeys * kPage);
  ASSERT_TRUE(mem.ok()) << mem.status();
  for (int i = 0; i < kKeys; ++i) {
    auto k = raw_.client->Register(static_cast<uint8_t*>(mem->data) + i * kPage, kPage, kRw);
    ASSERT_TRUE(k.ok()) << "register " << i << ": " << k.status();
  }
  // The client library fetches every page.
  auto all = raw_.client->ListKeys();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), static_cast<size_t>(kKeys));

  // Raw pages of 97: each at most 97 keys, in ascending handle order across pages, each key
  // once, and the last page says so with an empty token.
  std::set<uint64_t> seen;
  uint64_t last = 0;
  std::string token;
  int pages = 0;
  for (; pages < 100; ++pages) {
    pb::ListKeysRequest req;
    req.set_page_size(97);
    req.set_page_token(token);
    pb::ListKeysResponse resp;
    grpc::Status s = raw_.Call(&pb::RegCacheService::Stub::ListKeys, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(resp.keys_size(), 97);
    for (const pb::KeyInfo& k : resp.keys()) {
      EXPECT_GT(k.handle(), last);
      last = k.handle();
      EXPECT_TRUE(seen.insert(k.handle()).second);
    }
    token = resp.next_page_token();
    if (token.empty()) break;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(pages + 1, (kKeys + 96) / 97);

  // A token that is not one, or one of another list, is INVALID_ARGUMENT with its reason.
  pb::ListKeysRequest bad;
  bad.set_page_token("not-a-token");
  pb::ListKeysResponse resp;
  grpc::Status s = raw_.Call(&pb::RegCacheService::Stub::ListKeys, bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(InfoOf(s).reason(), "INVALID_PAGE_TOKEN");
  pb::ListMemoryRequest mem_page;
  mem_page.set_page_size(1);
  pb::ListMemoryResponse mem_resp;
  ASSERT_TRUE(raw_.Call(&pb::RegCacheService::Stub::ListMemory, mem_page, &mem_resp).ok());
  EXPECT_EQ(mem_resp.memory_size(), 1);
  EXPECT_TRUE(mem_resp.next_page_token().empty());  // one memory: one page
  pb::ListEndpointsRequest wrong_list;
  wrong_list.set_page_token(
      // a keys token handed to another list
      [&] {
        pb::ListKeysRequest r;
        r.set_page_size(1);
        pb::ListKeysResponse p;
        EXPECT_TRUE(raw_.Call(&pb::RegCacheService::Stub::ListKeys, r, &p).ok());
        return p.next_page_token();
      }());
  pb::ListEndpointsResponse ep_resp;
  EXPECT_EQ(raw_.Call(&pb::RegCacheService::Stub::ListEndpoints, wrong_list, &ep_resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pb::ListKeysRequest negative;
  negative.set_page_size(-1);
  EXPECT_EQ(raw_.Call(&pb::RegCacheService::Stub::ListKeys, negative, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ApiV1E2e, QuotaErrorsCarryTheirReasonAndNumbers) {
  Start({"--max_keys_per_session=3", "--max_bytes_per_session=1048576"});
  auto mem = raw_.client->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        raw_.client->Register(static_cast<uint8_t*>(mem->data) + i * kPage, kPage, kRw).ok());
  }
  // Through the client library: the reason and the numbers.
  auto over = raw_.client->Register(static_cast<uint8_t*>(mem->data) + 3 * kPage, kPage, kRw);
  ASSERT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted)) << over.status();
  EXPECT_EQ(rc::ErrorReason(over.status()), "KEY_QUOTA_EXCEEDED");
  std::map<std::string, std::string> numbers = rc::ErrorMetadata(over.status());
  EXPECT_EQ(numbers["limit"], "3");
  EXPECT_EQ(numbers["used"], "3");
  // On the wire: the ErrorInfo in the status details.
  pb::RegisterRequest reg;
  reg.set_va(reinterpret_cast<uint64_t>(mem->data) + 4 * kPage);
  reg.set_length(kPage);
  reg.set_access(kRw);
  pb::RegisterResponse grant;
  grpc::Status s = raw_.Call(&pb::RegCacheService::Stub::Register, reg, &grant);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  google::rpc::ErrorInfo info = InfoOf(s);
  EXPECT_EQ(info.reason(), "KEY_QUOTA_EXCEEDED");
  EXPECT_EQ(info.metadata().at("limit"), "3");
  // The same code for memory, told apart by its reason.
  auto more = raw_.client->AllocateMemory(1 << 20);
  ASSERT_THAT(more, StatusIs(absl::StatusCode::kResourceExhausted)) << more.status();
  EXPECT_EQ(rc::ErrorReason(more.status()), "MEMORY_QUOTA_EXCEEDED");
  EXPECT_EQ(rc::ErrorMetadata(more.status())["limit_bytes"], "1048576");
  // Errors without a known cause carry no details; the token's absence has its own reason.
  EXPECT_TRUE(rc::ErrorReason(raw_.client->Release(0)).empty());
  grpc::ClientContext bare;
  pb::ListKeysResponse keys;
  grpc::Status unauth = raw_.stub->ListKeys(&bare, pb::ListKeysRequest(), &keys);
  EXPECT_EQ(unauth.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(InfoOf(unauth).reason(), "SESSION_TOKEN_MISSING");
}

TEST_F(ApiV1E2e, TheFastPathCarriesTheReasonToo) {
  Start({"--max_keys_per_session=2"});
  // A second session with the client's defaults: Register over the session's rings.
  auto fast = rc::Client::Connect(daemon_->dir());
  ASSERT_TRUE(fast.ok()) << fast.status();
  auto mem = (*fast)->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto ring_requests = [&]() -> int64_t {
    auto stats = (*fast)->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? stats->Get("ring", "requests").value_or(-1) : -1;
  };
  const int64_t before = ring_requests();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE((*fast)->Register(static_cast<uint8_t*>(mem->data) + i * kPage, kPage, kRw).ok());
  }
  auto over = (*fast)->Register(static_cast<uint8_t*>(mem->data) + 2 * kPage, kPage, kRw);
  EXPECT_GE(ring_requests(), before + 3) << "the calls went over the rings";
  ASSERT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted)) << over.status();
  EXPECT_EQ(rc::ErrorReason(over.status()), "KEY_QUOTA_EXCEEDED");
  EXPECT_TRUE(rc::ErrorMetadata(over.status()).empty()) << "the numbers travel over gRPC only";
}

}  // namespace
