// The client library's key calls over the shared-memory fast path against the real regcached
// (a separate process): Register, Window, Query, Invalidate, Release and Prefetch answer as
// they do over gRPC, with the same codes, and the daemon's ring counters show they came over
// the ring. Sockets live in a temp dir; every wait is bounded.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/internal/client_testing.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;

using regcache::testing::Regcached;

// The client's own cache off: these tests are about what crosses the ring
// (client_cache_e2e_test covers the cache).
std::unique_ptr<rc::Client> Connect(const Regcached& d, bool fast_path) {
  rc::ClientOptions options;
  options.fast_path = fast_path;
  options.client_cache = false;
  auto c = rc::Client::Connect(d.dir(), options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

int64_t RingRequests(rc::Client& c) {
  auto stats = c.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  auto v = stats.ok() ? stats->Get("ring", "requests") : absl::StatusOr<int64_t>(-1);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : -1;
}

TEST(FastPathE2e, KeyCallsTravelOverTheRing) {
  Regcached d;
  std::unique_ptr<rc::Client> c = Connect(d, true);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(rc::testing::UsesFastPath(*c));
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  const int64_t before = RingRequests(*c);
  auto* base = static_cast<uint8_t*>(mem->data);
  auto k = c->Register(base, 8192, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE(k->hit);
  auto again = c->Register(base, 4096, kRw);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->hit);
  EXPECT_EQ(again->handle, k->handle);
  auto w = c->Window(k->handle, 0, 4096, rc::kRemoteRead);
  ASSERT_TRUE(w.ok()) << w.status();
  auto q = c->Query(w->handle);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->is_window);
  EXPECT_EQ(q->parent, k->handle);
  ASSERT_TRUE(c->Invalidate(k->handle).ok());
  auto revoked = c->Query(k->handle);
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_TRUE(revoked->revoked);
  EXPECT_TRUE(c->Release(w->handle).ok());
  EXPECT_TRUE(c->Release(k->handle).ok());
  EXPECT_TRUE(c->Release(k->handle).ok());
  EXPECT_TRUE(rc::testing::RingNop(*c).ok());
  EXPECT_GE(RingRequests(*c) - before, 10) << "every key call above came over the ring";
}

TEST(FastPathE2e, ErrorsAreTheSameOverBothTransports) {
  Regcached d;
  std::unique_ptr<rc::Client> fast = Connect(d, true);
  std::unique_ptr<rc::Client> slow = Connect(d, false);
  ASSERT_TRUE(fast != nullptr && slow != nullptr);
  EXPECT_FALSE(rc::testing::UsesFastPath(*slow));
  auto fm = fast->AllocateMemory(1 << 16);
  auto sm = slow->AllocateMemory(1 << 16);
  ASSERT_TRUE(fm.ok()) << fm.status();
  ASSERT_TRUE(sm.ok()) << sm.status();
  struct Case {
    const char* what;
    absl::Status fast, slow;
  };
  const Case cases[] = {
      {"length 0", fast->Register(fm->data, 0, kRw).status(),
       slow->Register(sm->data, 0, kRw).status()},
      {"outside memory", fast->Register(reinterpret_cast<void*>(0x1000), 4096, kRw).status(),
       slow->Register(reinterpret_cast<void*>(0x1000), 4096, kRw).status()},
      {"unknown handle", fast->Release(1 << 30), slow->Release(1 << 30)},
      {"made-up handle (a long message)", fast->Query(0x7fff000012345678).status(),
       slow->Query(0x7fff000012345678).status()},
      {"bad access", fast->Register(fm->data, 4096, 1u << 9).status(),
       slow->Register(sm->data, 4096, 1u << 9).status()},
      {"window of nothing", fast->Window(0, 0, 10, kRw).status(),
       slow->Window(0, 0, 10, kRw).status()},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.fast.ok()) << c.what;
    EXPECT_EQ(c.fast.code(), c.slow.code()) << c.what << ": " << c.fast << " vs " << c.slow;
    EXPECT_FALSE(c.fast.message().empty()) << c.what;
    // Whole on the ring too: a message longer than a completion holds travels in the channel.
    EXPECT_EQ(c.fast.message(), c.slow.message()) << c.what;
    EXPECT_EQ(rc::ErrorReason(c.fast), rc::ErrorReason(c.slow)) << c.what;
  }
  EXPECT_EQ(rc::ErrorReason(cases[1].fast), "RANGE_NOT_ATTACHED");
  EXPECT_EQ(cases[1].fast.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(rc::ErrorReason(cases[2].fast), "HANDLE_NOT_OWNED");
  EXPECT_EQ(cases[2].fast.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(rc::ErrorReason(cases[3].fast), "HANDLE_NOT_OWNED");
  EXPECT_GT(cases[3].fast.message().size(), 47u) << "the long-message path went untested";
}

// The refusals an integrator meets outside a call's own arguments, with their reasons, on both
// transports: a range past the attached memory's end, a daemon that is draining, and (at
// connect, on the control socket) credentials the daemon does not allow.
TEST(FastPathE2e, ReasonsReachTheCallerOnEveryTransport) {
  // The admin Drain ends the process; it answers DRAINING while these clients stay connected
  // (--drain_linger_ms), however slow the machine, and exits once they are gone.
  Regcached d({absl::StrCat("--admin_uids=", getuid()), "--drain_linger_ms=600000"});
  std::unique_ptr<rc::Client> fast = Connect(d, true);
  std::unique_ptr<rc::Client> slow = Connect(d, false);
  ASSERT_TRUE(fast != nullptr && slow != nullptr);
  auto fm = fast->AllocateMemory(1 << 16);
  auto sm = slow->AllocateMemory(1 << 16);
  ASSERT_TRUE(fm.ok() && sm.ok());
  // Starts inside, ends past the end: the reason names the first address outside.
  absl::Status f = fast->Register(static_cast<char*>(fm->data) + 4096, 1 << 16, kRw).status();
  absl::Status g = slow->Register(static_cast<char*>(sm->data) + 4096, 1 << 16, kRw).status();
  for (const absl::Status& s : {f, g}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_EQ(rc::ErrorReason(s), "RANGE_NOT_ATTACHED") << s;
    EXPECT_NE(s.message().find("not covered by attached memory"), std::string::npos) << s;
  }
  EXPECT_EQ(rc::ErrorMetadata(g).count("first_outside"), 1u) << "gRPC carries the numbers";

  ASSERT_TRUE(slow->Drain().ok());
  f = fast->Register(fm->data, 4096, kRw).status();
  g = slow->Register(sm->data, 4096, kRw).status();
  for (const absl::Status& s : {f, g}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_EQ(rc::ErrorReason(s), "DRAINING") << s;
  }

  Regcached strict({"--allow_uids=65534", "--allow_gids=65534"});
  if (getuid() == 65534 || getgid() == 65534) GTEST_SKIP() << "this test runs as uid/gid 65534";
  for (bool fast_path : {true, false}) {
    rc::ClientOptions o;
    o.fast_path = fast_path;
    absl::StatusOr<std::unique_ptr<rc::Client>> c = rc::Client::Connect(strict.dir(), o);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied) << c.status();
    EXPECT_EQ(rc::ErrorReason(c.status()), "PEER_NOT_ALLOWED") << c.status();
  }
}

TEST(FastPathE2e, ManyThreadsShareOneClient) {
  Regcached d;
  std::unique_ptr<rc::Client> c = Connect(d, true);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto* base = static_cast<uint8_t*>(mem->data) + t * 65536;
      for (int i = 0; i < 100; ++i) {
        auto k = c->Register(base + (i % 8) * 4096, 4096, kRw);
        if (!k.ok() || !c->Release(k->handle).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
