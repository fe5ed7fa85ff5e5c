// The registered allocator (include/regcache/regcache_alloc.h) against a real regcached on the
// simulated device, started here in a temp socket dir. Through the C ABI only, as its users do.
//
//   BeforeInit                 malloc: NULL + EINVAL; key/info/fini: FAILED_PRECONDITION
//   ManySizesRegisterWithoutNewBacking
//                              every allocation registers as a pure key map (the session's
//                              backings stay at the one region); the memory holds its bytes
//   FreedMemoryIsReused        free + the same sizes again: jemalloc takes nothing new
//   OutOfRegionIsEnomem        a request above the region: NULL + ENOMEM; the arena still works
//   OutsideTheRegionIsRefused  regcache_malloc_key of process memory: OUT_OF_RANGE
//   ThreadsAllocateConcurrently  four threads, disjoint allocations, bounded iterations
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "regcache/regcache.h"
#include "regcache/regcache_alloc.h"

extern char** environ;

namespace {

constexpr uint64_t kArenaBytes = uint64_t{64} << 20;
constexpr uint32_t kRw =
    REGCACHE_LOCAL_READ | REGCACHE_LOCAL_WRITE | REGCACHE_REMOTE_READ | REGCACHE_REMOTE_WRITE;

// regcached and one session for the whole suite (the allocator is one per process).
class AllocatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/regcache-alloc-XXXXXX";
    dir_ = new std::string(mkdtemp(tmpl));
    std::string flag = "--socket_dir=" + *dir_;
    char* argv[] = {const_cast<char*>(REGCACHED_PATH), const_cast<char*>("--device=sim"),
                    flag.data(), const_cast<char*>("--log_level=warning"), nullptr};
    ASSERT_EQ(posix_spawn(&pid_, REGCACHED_PATH, nullptr, nullptr, argv, environ), 0);
    for (int i = 0; i < 1000; ++i) {  // at most 10 s
      if (std::filesystem::exists(*dir_ + "/control.sock") &&
          std::filesystem::exists(*dir_ + "/grpc.sock")) {
        break;
      }
      usleep(10000);
    }
    ASSERT_EQ(regcache_connect(dir_->c_str(), nullptr, &client_), REGCACHE_OK)
        << regcache_last_error();
  }

  static void TearDownTestSuite() {
    regcache_close(client_);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);  // regcached drains and exits on SIGTERM
    }
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static uint64_t Backings() {
    regcache_usage_t u;
    EXPECT_EQ(regcache_usage(client_, &u), REGCACHE_OK) << regcache_last_error();
    return u.backings;
  }

  static regcache_alloc_info_t Info() {
    regcache_alloc_info_t info{};
    EXPECT_EQ(regcache_alloc_info(&info), REGCACHE_OK) << regcache_last_error();
    return info;
  }

  static bool InRegion(const void* p, size_t n) {
    regcache_alloc_info_t info = Info();
    auto b = reinterpret_cast<uintptr_t>(info.base);
    auto q = reinterpret_cast<uintptr_t>(p);
    return q >= b && q + n <= b + info.length;
  }

  static std::string* dir_;
  static pid_t pid_;
  static regcache_client_t* client_;
};

std::string* AllocatorTest::dir_ = nullptr;
pid_t AllocatorTest::pid_ = -1;
regcache_client_t* AllocatorTest::client_ = nullptr;

// Sizes from 1 byte to 2 MiB: small classes, large ones, odd sizes.
std::vector<size_t> Sizes() {
  std::vector<size_t> out;
  for (size_t s = 1; s <= (size_t{2} << 20); s = s * 3 / 2 + 7) out.push_back(s);
  return out;
}

// Runs first (gtest keeps the order of one file): nothing is set up yet.
TEST_F(AllocatorTest, BeforeInit) {
  errno = 0;
  EXPECT_EQ(regcache_malloc(64), nullptr);
  EXPECT_EQ(errno, EINVAL);
  regcache_key_t key;
  char byte = 0;
  EXPECT_EQ(regcache_malloc_key(&byte, 1, kRw, &key), REGCACHE_FAILED_PRECONDITION);
  regcache_alloc_info_t info;
  EXPECT_EQ(regcache_alloc_info(&info), REGCACHE_FAILED_PRECONDITION);
  EXPECT_EQ(regcache_alloc_fini(), REGCACHE_FAILED_PRECONDITION);
  EXPECT_EQ(regcache_alloc_init(nullptr, kArenaBytes), REGCACHE_INVALID_ARGUMENT);
  EXPECT_EQ(regcache_alloc_init(client_, 4096), REGCACHE_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(regcache_last_error(), "MiB"), nullptr) << regcache_last_error();
  regcache_free(nullptr);  // a no-op

  ASSERT_EQ(regcache_alloc_init(client_, kArenaBytes), REGCACHE_OK) << regcache_last_error();
  EXPECT_EQ(regcache_alloc_init(client_, kArenaBytes), REGCACHE_FAILED_PRECONDITION);
  EXPECT_EQ(Info().length, kArenaBytes);
  EXPECT_EQ(Backings(), 1u);
}

TEST_F(AllocatorTest, ManySizesRegisterWithoutNewBacking) {
  const uint64_t backings = Backings();
  std::vector<void*> ptrs;
  std::vector<regcache_key_t> keys;
  for (size_t size : Sizes()) {
    void* p = regcache_malloc(size);
    ASSERT_NE(p, nullptr) << size;
    ASSERT_TRUE(InRegion(p, size)) << size;
    std::memset(p, static_cast<int>(size & 0xff), size);
    regcache_key_t key;
    ASSERT_EQ(regcache_malloc_key(p, size, kRw, &key), REGCACHE_OK) << regcache_last_error();
    EXPECT_LE(key.va, reinterpret_cast<uintptr_t>(p));
    EXPECT_GE(key.va + key.length, reinterpret_cast<uintptr_t>(p) + size);
    EXPECT_EQ(key.access & kRw, kRw);
    ptrs.push_back(p);
    keys.push_back(key);
  }
  // Registering needed no new attach: the region is still the session's only new backing.
  EXPECT_EQ(Backings(), backings);
  std::vector<size_t> sizes = Sizes();
  for (size_t i = 0; i < ptrs.size(); ++i) {
    auto* bytes = static_cast<unsigned char*>(ptrs[i]);
    EXPECT_EQ(bytes[0], sizes[i] & 0xff);
    EXPECT_EQ(bytes[sizes[i] - 1], sizes[i] & 0xff);
    EXPECT_EQ(regcache_release(client_, keys[i].handle), REGCACHE_OK) << regcache_last_error();
    regcache_free(ptrs[i]);
  }
}

TEST_F(AllocatorTest, FreedMemoryIsReused) {
  auto round = [] {
    std::vector<void*> ptrs;
    for (size_t size : Sizes()) ptrs.push_back(regcache_malloc(size));
    for (void* p : ptrs) {
      EXPECT_NE(p, nullptr);
      regcache_free(p);
    }
  };
  round();
  const uint64_t first = Info().carved;
  // Sixty rounds allocate several times the region's size: only reuse lets them all succeed.
  // jemalloc may take a little more while its caches settle, never a round's worth each time.
  for (int i = 0; i < 60; ++i) round();
  uint64_t per_round = 0;
  for (size_t size : Sizes()) per_round += size;
  EXPECT_GE(60 * per_round, 4 * kArenaBytes);
  EXPECT_LE(Info().carved, 2 * first);
  const uint64_t settled = Info().carved;
  for (int i = 0; i < 10; ++i) round();
  EXPECT_EQ(Info().carved, settled) << "the same sizes again took new memory from the region";
}

TEST_F(AllocatorTest, OutOfRegionIsEnomem) {
  errno = 0;
  EXPECT_EQ(regcache_malloc(kArenaBytes + 4096), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  // Fill the region with 1 MiB blocks until it refuses (bounded by its size).
  std::vector<void*> ptrs;
  for (uint64_t i = 0; i < kArenaBytes >> 20; ++i) {
    void* p = regcache_malloc(1 << 20);
    if (p == nullptr) {
      EXPECT_EQ(errno, ENOMEM);
      break;
    }
    ptrs.push_back(p);
  }
  EXPECT_GT(ptrs.size(), 0u);
  EXPECT_LT(ptrs.size(), kArenaBytes >> 20) << "metadata lives in the region too";
  for (void* p : ptrs) regcache_free(p);
  void* p = regcache_malloc(1 << 20);  // the arena still works
  EXPECT_NE(p, nullptr);
  regcache_free(p);
}

TEST_F(AllocatorTest, OutsideTheRegionIsRefused) {
  std::vector<char> outside(8192);
  regcache_key_t key;
  EXPECT_EQ(regcache_malloc_key(outside.data(), outside.size(), kRw, &key), REGCACHE_OUT_OF_RANGE);
  EXPECT_EQ(regcache_malloc_key(nullptr, 1, kRw, &key), REGCACHE_INVALID_ARGUMENT);
  void* p = regcache_malloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(regcache_malloc_key(p, 100, kRw, nullptr), REGCACHE_INVALID_ARGUMENT);
  EXPECT_EQ(regcache_malloc_key(p, kArenaBytes, kRw, &key), REGCACHE_OUT_OF_RANGE);
  regcache_free(p);
}

TEST_F(AllocatorTest, ThreadsAllocateConcurrently) {
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &bad] {
      std::vector<std::pair<unsigned char*, size_t>> held;
      for (int i = 0; i < 2000; ++i) {
        size_t size = 16 + static_cast<size_t>((i * 7919 + t * 104729) % 65536);
        auto* p = static_cast<unsigned char*>(regcache_malloc(size));
        if (p == nullptr || !InRegion(p, size)) {
          ++bad[t];
          continue;
        }
        std::memset(p, t + 1, size);
        held.emplace_back(p, size);
        if (held.size() > 16) {  // free the oldest after checking nobody wrote over it
          auto [q, n] = held.front();
          if (q[0] != t + 1 || q[n - 1] != t + 1) ++bad[t];
          regcache_free(q);
          held.erase(held.begin());
        }
      }
      for (auto [q, n] : held) regcache_free(q);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

// Runs last: the arena goes, the region is detached.
TEST_F(AllocatorTest, Fini) {
  const uint64_t backings = Backings();
  EXPECT_EQ(regcache_alloc_fini(), REGCACHE_OK) << regcache_last_error();
  EXPECT_EQ(Backings(), backings - 1);
  errno = 0;
  EXPECT_EQ(regcache_malloc(64), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
