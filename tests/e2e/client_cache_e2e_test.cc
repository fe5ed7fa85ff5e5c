// The client library's own cache of held grants against the real regcached (a separate
// process): hits answered without IPC, revocations that come from outside the library seen
// through the daemon's state words (never a revoked grant handed out again), the revocation
// callback, reclaim under quota pressure, batches and re-registration over the ring, KeyRef.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/test_util.h"
#include "client/internal/client_testing.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.pb.h"
#include "tests/e2e/regcached_process.h"

using ::regcache::base::StatusIs;

namespace {

namespace rc = regcache::api;
using regcache::testing::Regcached;
using regcache::testing::TestDevice;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;
constexpr uint64_t kPage = 4096;

std::unique_ptr<rc::Client> Connect(const Regcached& d, bool client_cache = true) {
  rc::ClientOptions options;
  options.client_cache = client_cache;
  auto c = rc::Client::Connect(d.dir(), options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

int64_t Stat(rc::Client& c, const std::string& component, const std::string& name) {
  auto stats = c.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  auto v = stats.ok() ? stats->Get(component, name) : absl::StatusOr<int64_t>(-1);
  return v.ok() ? *v : -1;
}

// Invalidates `handle` with a raw gRPC call: the daemon revokes it without the library knowing.
absl::Status InvalidateBehindTheLibrary(rc::Client& c, uint64_t handle) {
  regcache::v1::InvalidateRequest req;
  req.set_handle(handle);
  return rc::testing::RawCall(c, "/regcache.v1.RegCacheService/Invalidate",
                              req.SerializeAsString());
}

// Waits (bounded) until `cond` holds.
template <typename Cond>
bool Eventually(Cond cond) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(ClientCacheE2e, HitsOfHeldGrantsStayInTheProcess) {
  Regcached d;
  auto c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);
  auto first = c->Register(base, 8 * kPage, kRw);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->hit);
  ASSERT_TRUE(c->Release(first->handle).ok());
  const int64_t before = Stat(*c, "ring", "requests");
  for (int i = 0; i < 1000; ++i) {
    auto k = c->Register(base + (i % 8) * kPage, kPage, rc::kLocalRead | rc::kRemoteRead);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_TRUE(k->hit);
    EXPECT_EQ(k->rkey, first->rkey);
    ASSERT_TRUE(c->Release(k->handle).ok());
  }
  EXPECT_EQ(Stat(*c, "ring", "requests"), before) << "no hit or release crossed the ring";
  // More rights than the held grant has: the daemon answers.
  auto more = c->Register(base, kPage, kRw | rc::kRemoteAtomic);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_NE(more->handle, first->handle);
  EXPECT_GT(Stat(*c, "ring", "requests"), before);
  // A release with no reference left in the process is refused, as the daemon would.
  EXPECT_THAT(c->Release(first->handle), StatusIs(absl::StatusCode::kFailedPrecondition));
  {
    auto ref = c->Acquire(base, kPage, kRw);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(ref->key().handle, first->handle);
    rc::KeyRef moved = std::move(*ref);
    EXPECT_TRUE(moved);
  }  // released here
  EXPECT_THAT(c->Release(first->handle), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ClientCacheE2e, AGrantRevokedBehindTheLibraryIsNeverHandedOutAgain) {
  Regcached d;
  auto c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);
  regcache::base::Mutex mu;
  std::vector<rc::Revocation> seen;
  c->SetRevocationCallback([&](const rc::Revocation& r) {
    regcache::base::MutexLock l(&mu);
    seen.push_back(r);
  });
  auto k = c->Register(base, kPage, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_TRUE(c->Release(k->handle).ok());  // cached, unreferenced

  // Threads keep hitting it while the daemon revokes it behind the library's back.
  std::atomic<bool> revoked{false}, stop{false};
  std::atomic<int> stale_hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        const bool after = revoked.load();
        auto h = c->Register(base, kPage, kRw);
        if (!h.ok()) continue;
        if (after && h->handle == k->handle) ++stale_hits;
        (void)c->Release(h->handle);
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(InvalidateBehindTheLibrary(*c, k->handle).ok());
  revoked.store(true);
  absl::SleepFor(absl::Milliseconds(50));
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_EQ(stale_hits.load(), 0);
  auto fresh = c->Register(base, kPage, kRw);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(fresh->handle, k->handle);
  EXPECT_NE(fresh->rkey, k->rkey);
  ASSERT_TRUE(Eventually([&] {
    regcache::base::MutexLock l(&mu);
    return !seen.empty();
  }));
  {
    regcache::base::MutexLock l(&mu);
    EXPECT_EQ(seen[0].handle, k->handle);
    EXPECT_EQ(seen[0].reason, rc::RevocationReason::kInvalidated);
  }
  // The library gave the revoked grant's hold back: only the fresh grant is held.
  EXPECT_TRUE(Eventually([&] {
    auto q = c->Query(k->handle);
    return !q.ok() && q.status().code() == absl::StatusCode::kNotFound;
  }));
}

TEST(ClientCacheE2e, DetachRevokesCachedGrants) {
  Regcached d;
  auto c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  std::atomic<int> detached{0};
  c->SetRevocationCallback([&](const rc::Revocation& r) {
    if (r.reason == rc::RevocationReason::kMemoryDetached) ++detached;
  });
  auto* base = static_cast<uint8_t*>(mem->data);
  for (int i = 0; i < 4; ++i) {
    auto k = c->Register(base + i * kPage, kPage, kRw);
    ASSERT_TRUE(k.ok()) << k.status();
    ASSERT_TRUE(c->Release(k->handle).ok());
  }
  const uint8_t* old = base;
  ASSERT_TRUE(c->DetachMemory(*mem).ok());
  // The range is no longer attached: the daemon answers, and says so.
  auto k = c->Register(old, kPage, kRw);
  EXPECT_THAT(k, StatusIs(absl::StatusCode::kOutOfRange)) << k.status();
  EXPECT_TRUE(Eventually([&] { return detached.load() == 4; })) << detached.load();
}

TEST(ClientCacheE2e, ReclaimGivesUnreferencedGrantsBackUnderQuotaPressure) {
  Regcached d({"--max_keys_per_session=4"});
  auto c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);
  // Eight distinct ranges through a quota of four: the library's unreferenced grants are given
  // back when the daemon says the quota is full.
  for (int i = 0; i < 8; ++i) {
    auto k = c->Register(base + i * 4 * kPage, kPage, kRw);
    ASSERT_TRUE(k.ok()) << "range " << i << ": " << k.status();
    ASSERT_TRUE(c->Release(k->handle).ok());
  }
  // Held grants are never given back: four held, the fifth is refused.
  std::vector<uint64_t> held;
  for (int i = 0; i < 4; ++i) {
    auto k = c->Register(base + (16 + i) * 4 * kPage, kPage, kRw);
    ASSERT_TRUE(k.ok()) << k.status();
    held.push_back(k->handle);
  }
  EXPECT_EQ(c->Register(base + 40 * 4 * kPage, kPage, kRw).status().code(),
            absl::StatusCode::kResourceExhausted);
  for (uint64_t h : held) EXPECT_TRUE(c->Release(h).ok());
}

TEST(ClientCacheE2e, BatchesAndReregistrationOverTheRing) {
  Regcached d;
  auto c = Connect(d);
  ASSERT_NE(c, nullptr);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);
  std::vector<rc::RegisterItem> items;
  for (int i = 0; i < 100; ++i) items.push_back({base + i * kPage, kPage, kRw});
  items.push_back({base, 0, kRw});  // a bad item fails alone
  const int64_t before = Stat(*c, "ring", "requests");
  auto got = c->RegisterBatch(items);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), items.size());
  std::vector<uint64_t> handles;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE((*got)[i].ok()) << (*got)[i].status();
    handles.push_back((*got)[i]->handle);
  }
  EXPECT_THAT(got->back(), StatusIs(absl::StatusCode::kInvalidArgument));
  // 100 served; the bad one is counted apart.
  EXPECT_EQ(Stat(*c, "ring", "requests") - before, 100);
  auto released = c->ReleaseBatch(handles);
  ASSERT_TRUE(released.ok()) << released.status();
  for (const absl::Status& s : *released) EXPECT_TRUE(s.ok()) << s;
  // All cached now: the same batch again is answered in the process.
  const int64_t mid = Stat(*c, "ring", "requests");
  items.pop_back();
  auto again = c->RegisterBatch(items);
  ASSERT_TRUE(again.ok()) << again.status();
  for (const auto& k : *again) EXPECT_TRUE(k.ok() && k->hit);
  EXPECT_EQ(Stat(*c, "ring", "requests"), mid);
  ASSERT_TRUE(c->ReleaseBatch(handles).ok());

  // Re-register a grant this thread alone holds to more rights: in place, same rkey, where a
  // UMR rewrites the key; a memory window (verbs) can only be rebound, which changes its rkey.
  auto k = c->Register(base + 200 * kPage, kPage, rc::kLocalWrite | rc::kRemoteRead);
  ASSERT_TRUE(k.ok()) << k.status();
  auto grown = c->Reregister(k->handle, base + 200 * kPage, 2 * kPage, kRw);
  ASSERT_TRUE(grown.ok()) << grown.status();
  const bool windows = TestDevice().rfind("verbs", 0) == 0;
  EXPECT_EQ(grown->same_key, !windows);
  EXPECT_EQ(grown->rkey == k->rkey, !windows);
  // Shared by two references in this process: never changed under the other one.
  auto other = c->Register(base + 200 * kPage, kPage, kRw);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->handle, grown->handle);
  EXPECT_TRUE(other->hit);
  auto moved = c->Reregister(grown->handle, base + 250 * kPage, kPage, kRw);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(moved->same_key);
  auto q = c->Query(grown->handle);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FALSE(q->revoked) << "the other reference still works";
  EXPECT_TRUE(c->Release(other->handle).ok());
  EXPECT_TRUE(c->Release(moved->handle).ok());
}

}  // namespace
