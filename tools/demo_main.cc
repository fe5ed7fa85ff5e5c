// regcache_demo — what `make run` shows against a running regcached (device sim): allocate
// shared memory, register, a peer write landing in this process's own mapping, invalidate, the
// same write refused, and measured latencies — over the shared-memory fast path with the
// client's own cache (the default), the fast path alone, and gRPC alone. Exit 0 when every
// step behaved as it should.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "regcache/client.h"
#include "regcache/sim_peer.h"

ABSL_FLAG(std::string, socket_dir, "/run/regcache", "regcached's socket directory");
ABSL_FLAG(int, rounds, 200, "samples per latency figure");

namespace {

int Fail(const char* step, const absl::Status& s) {
  std::printf("FAILED at %s: %s\n", step, s.ToString().c_str());
  return 1;
}

double MedianUs(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double TimeUs(Fn&& fn) {
  absl::Time t0 = absl::Now();
  fn();
  return absl::ToDoubleMicroseconds(absl::Now() - t0);
}

struct Figures {
  double miss = 0, hit = 0, invalidate = 0, ping = 0;
};

// Misses on distinct ranges, hits of one held registration, invalidations, empty RPCs (when
// `ping_too`: a gRPC call between ring calls lets the daemon's ring worker fall asleep).
Figures Measure(regcache::api::Client& c, uint8_t* base, int rounds, uint32_t rw, bool ping_too) {
  std::vector<double> miss, hit, inval, ping;
  for (int i = 0; i < rounds; ++i) {
    uint8_t* p = base + 65536 + static_cast<uint64_t>(i % 48) * 65536;
    regcache::api::Key k;
    miss.push_back(TimeUs([&] {
      auto r = c.Register(p, 4096, rw);
      if (r.ok()) k = *r;
    }));
    constexpr int kHits =
        100;  // many per sample: a hit in the process is shorter than a clock read
    hit.push_back(TimeUs([&] {
                    for (int j = 0; j < kHits; ++j) {
                      auto r = c.Register(p, 4096, rw);
                      if (r.ok()) (void)c.Release(r->handle);
                    }
                  }) /
                  kHits);
    inval.push_back(TimeUs([&] { (void)c.Invalidate(k.handle); }));
    (void)c.Release(k.handle);
    if (ping_too) ping.push_back(TimeUs([&] { (void)c.Ping(); }));
  }
  return Figures{MedianUs(miss), MedianUs(hit), MedianUs(inval), MedianUs(ping)};
}

void Print(const char* how, const Figures& f) {
  std::printf("   %-38s miss %7.2f us  hit %7.3f us  invalidate %7.2f us\n", how, f.miss, f.hit,
              f.invalidate);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const uint32_t rw = regcache::api::kLocalRead | regcache::api::kLocalWrite |
                      regcache::api::kRemoteRead | regcache::api::kRemoteWrite;

  auto client = regcache::api::Client::Connect(absl::GetFlag(FLAGS_socket_dir));
  if (!client.ok()) return Fail("connect", client.status());
  regcache::api::Client& c = **client;
  auto info = c.Status();
  if (!info.ok()) return Fail("status", info.status());
  std::printf("1. connected: session %" PRIu64 " on device %s\n", c.session_id(),
              info->device.c_str());

  constexpr uint64_t kArena = 4 << 20;
  auto mem = c.AllocateMemory(kArena);
  if (!mem.ok()) return Fail("allocate", mem.status());
  auto* base = static_cast<uint8_t*>(mem->data);
  std::printf("2. allocated %" PRIu64
              " bytes of shared memory (memfd from the daemon), mapped "
              "here at %p\n",
              mem->length, mem->data);

  uint8_t* buf = base + 8192;
  regcache::api::Key key;
  double miss_us = TimeUs([&] {
    auto k = c.Register(buf, 64 << 10, rw);
    if (k.ok()) key = *k;
  });
  if (key.handle == 0) return Fail("register", c.Register(buf, 64 << 10, rw).status());
  std::printf("3. registered [%p, +64 KiB): lkey=0x%08x rkey=0x%08x handle=0x%" PRIx64
              " (miss, %.1f us)\n",
              buf, key.lkey, key.rkey, key.handle, miss_us);

  const std::string text = "hello from the remote peer";
  absl::Status w = SimPeerWrite(c, key.rkey, reinterpret_cast<uint64_t>(buf + 100), text);
  if (!w.ok()) return Fail("peer write", w);
  bool landed = std::memcmp(buf + 100, text.data(), text.size()) == 0;
  std::printf("4. peer RDMA WRITE through rkey 0x%08x -> this process reads \"%.*s\" at %p: %s\n",
              key.rkey, static_cast<int>(text.size()), reinterpret_cast<char*>(buf + 100),
              buf + 100, landed ? "landed" : "MISSING");
  if (!landed) return 1;

  double inval_us = TimeUs([&] { w = c.Invalidate(key.handle); });
  if (!w.ok()) return Fail("invalidate", w);
  std::printf("5. invalidated handle 0x%" PRIx64 " (%.1f us)\n", key.handle, inval_us);
  std::memset(buf + 100, 0, text.size());
  absl::Status refused = SimPeerWrite(c, key.rkey, reinterpret_cast<uint64_t>(buf + 100), text);
  bool untouched = buf[100] == 0;
  std::printf("6. the same write again: %s; memory %s\n", refused.ToString().c_str(),
              untouched ? "untouched" : "CHANGED");
  if (refused.ok() || !untouched) return 1;
  (void)c.Release(key.handle);

  // Latencies of the same calls three ways: the fast path with the client's own cache (the
  // default), the fast path alone, and gRPC alone.
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  std::printf("7. latencies, median of %d (hit: Register + Release of a held range):\n", rounds);
  Figures fast = Measure(c, base, rounds, rw, false);
  Print("shared-memory rings + client cache", fast);
  for (bool fast_path : {true, false}) {
    regcache::api::ClientOptions o;
    o.fast_path = fast_path;
    o.client_cache = false;
    auto other = regcache::api::Client::Connect(absl::GetFlag(FLAGS_socket_dir), o);
    if (!other.ok()) return Fail("connect", other.status());
    auto m = (*other)->AllocateMemory(kArena);
    if (!m.ok()) return Fail("allocate", m.status());
    Figures f = Measure(**other, static_cast<uint8_t*>(m->data), rounds, rw, !fast_path);
    Print(fast_path ? "shared-memory rings, no client cache" : "gRPC over the unix socket", f);
    if (!fast_path) std::printf("   an empty gRPC call (Ping) takes %.1f us here\n", f.ping);
  }
  std::printf(
      "   reference: ibv_reg_mr of a 4 MB region 456-486 us on real hardware "
      "(docs/benchmarks.md)\n");
  c.Close();
  std::printf("8. closed the session: the daemon ran every key through the lifecycle\n");
  return 0;
}
