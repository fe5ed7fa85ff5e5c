// Key values are never re-issued across sessions (a real regcached process): 10,000
// register/invalidate cycles over 50 sessions in turn, each a client process's session whose
// keys the device gives to the next one when it closes. Every rkey handed out is collected;
// none may come back within the cache's quarantine window (10 ms) — in fact none comes back at
// all, since no index is handed out 256 times here. The loop is bounded by its counts.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "regcache/client.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;

constexpr uint32_t kRw = rc::kLocalWrite | rc::kRemoteWrite | rc::kRemoteRead;
constexpr int kSessions = 50;
constexpr int kCyclesPerSession = 200;

TEST(VariantsE2e, NoKeyValueComesBackAcrossTenThousandCyclesAndFiftySessions) {
  if (regcache::testing::TestDevice().rfind("verbs", 0) == 0) {
    GTEST_SKIP() << "memory windows pick their own rkeys (the device's variant, not ours)";
  }
  regcache::testing::Regcached daemon;
  std::map<uint32_t, std::chrono::steady_clock::time_point> issued;  // rkey -> when
  std::set<uint32_t> indices_seen_before;
  int reused_indices = 0;
  for (int s = 0; s < kSessions; ++s) {
    rc::ClientOptions o;
    o.client_cache = false;  // every Register reaches the daemon
    auto c = rc::Client::Connect(daemon.dir(), o);
    ASSERT_TRUE(c.ok()) << "session " << s << ": " << c.status();
    auto mem = (*c)->AllocateMemory(1 << 20);
    ASSERT_TRUE(mem.ok()) << mem.status();
    std::set<uint32_t> indices;
    for (int i = 0; i < kCyclesPerSession; ++i) {
      const auto* addr = static_cast<const uint8_t*>(mem->data) + (i % 64) * 4096;
      auto k = (*c)->Register(addr, 4096, kRw);
      ASSERT_TRUE(k.ok()) << "session " << s << " cycle " << i << ": " << k.status();
      const auto now = std::chrono::steady_clock::now();
      auto [it, fresh] = issued.emplace(k->rkey, now);
      if (!fresh) {
        const auto apart = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second);
        ADD_FAILURE() << "rkey 0x" << std::hex << k->rkey << std::dec << " issued again after "
                      << apart.count() << " ms (session " << s << ", cycle " << i << ")";
        EXPECT_GE(apart.count(), 10) << "within the quarantine window";
        it->second = now;
      }
      indices.insert(k->rkey >> 8);
      ASSERT_TRUE((*c)->Release(k->handle).ok());
      ASSERT_TRUE((*c)->Invalidate(k->handle).ok());
    }
    for (uint32_t i : indices) reused_indices += indices_seen_before.count(i);
    indices_seen_before.insert(indices.begin(), indices.end());
  }  // each client closes its session here; the next one gets its indices
  EXPECT_EQ(issued.size(), size_t{kSessions} * kCyclesPerSession);
  EXPECT_GT(reused_indices, 0) << "no index reached a second session: nothing was tested";
}

}  // namespace
