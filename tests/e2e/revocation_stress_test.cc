// The revocation invariant under load (docs/fast_path.md, "The revocation invariant"): two
// threads register one range through the client library's cache in a loop while a third
// revokes the key behind the library's back — the daemon's own Invalidate, as another
// transport or an operator would — at least 100,000 times. After an Invalidate returned (its
// state word and event are published by then), no Register that starts may return the revoked
// key. The daemon, control socket and client run in this process on the sim, so a revocation
// costs microseconds; the run is bounded in time.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "regcache/client.h"
#include "server/control_server.h"
#include "server/grpc_service.h"
#include "service/daemon.h"

namespace regcache::api {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint32_t kRw = kLocalWrite | kRemoteRead | kRemoteWrite;
constexpr int kHitters = 2;
constexpr int kRevocations = 100'000;
constexpr absl::Duration kTimeLimit = absl::Seconds(240);

// What one hitting thread saw, compressed: one entry per run of Registers that returned the same
// handle, with the highest revocation count read before any of them started.
struct HitRun {
  uint64_t handle;
  uint64_t revoked_before;  // Invalidates that had returned before the Register started
};

TEST(RevocationStress, NoHitAfterARevocationReturnsTheRevokedKey) {
  hca::sim::RegisterBackend();
  service::DaemonConfig config;
  config.device = "sim";
  auto d = service::Daemon::Create(config, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  std::unique_ptr<service::Daemon> daemon = std::move(*d);
  char tmpl[] = "/tmp/regcache-revoke-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto control = server::ControlServer::Start(daemon.get(), dir);
  ASSERT_TRUE(control.ok()) << control.status();
  server::GrpcServerOptions go;
  go.socket_dir = dir;
  auto grpc = server::GrpcServer::Start(daemon.get(), control->get(), go);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  auto connected = Client::Connect(dir);
  ASSERT_TRUE(connected.ok()) << connected.status();
  std::unique_ptr<Client> c = std::move(*connected);
  auto mem = c->AllocateMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto* base = static_cast<uint8_t*>(mem->data);

  // revoked[i]: the handle the (i+1)-th Invalidate revoked; published by `revocations`.
  std::vector<uint64_t> revoked(kRevocations);
  std::atomic<uint64_t> revocations{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> hits{0}, failures{0};
  std::vector<std::vector<HitRun>> runs(kHitters);
  std::vector<std::thread> hitters;
  for (int t = 0; t < kHitters; ++t) {
    hitters.emplace_back([&, t] {
      std::vector<HitRun>& mine = runs[t];
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t before = revocations.load(std::memory_order_acquire);
        auto k = c->Register(base, kPage, kRw);
        if (!k.ok()) {
          if (failures.fetch_add(1, std::memory_order_relaxed) == 0) {
            std::printf("first failed register: %s\n", k.status().ToString().c_str());
          }
          continue;
        }
        ++n;
        if (mine.empty() || mine.back().handle != k->handle) {
          mine.push_back({k->handle, before});
        } else {
          mine.back().revoked_before = std::max(mine.back().revoked_before, before);
        }
        (void)c->Release(k->handle);
        // Two cores may serve this test: leave the revoker and the daemon's worker their turn.
        std::this_thread::yield();
      }
      hits.fetch_add(n, std::memory_order_relaxed);
    });
  }

  // The revoker: the range's current key (a hit through the library, or the daemon's answer),
  // revoked by the daemon without the library being told.
  const absl::Time deadline = absl::Now() + kTimeLimit;
  uint64_t done = 0;
  std::vector<uint64_t> revoker_stale;
  while (done < kRevocations && absl::Now() < deadline) {
    auto k = c->Register(base, kPage, kRw);
    ASSERT_TRUE(k.ok()) << k.status();
    if (done > 0 && k->handle == revoked[done - 1]) revoker_stale.push_back(done);
    ASSERT_TRUE(c->Release(k->handle).ok());
    const absl::Status s = daemon->Invalidate(c->session_id(), k->handle);
    if (!s.ok()) continue;  // the same key again, revoked already: not a new revocation
    revoked[done++] = k->handle;
    revocations.store(done, std::memory_order_release);
  }
  stop.store(true);
  for (auto& th : hitters) th.join();

  // Offline: a run whose handle was revoked before one of its Registers started is a stale hit.
  absl::flat_hash_map<uint64_t, uint64_t> revoked_at;  // handle -> its revocation's number (1..)
  for (uint64_t i = 0; i < done; ++i) revoked_at.emplace(revoked[i], i + 1);
  uint64_t stale = 0, runs_seen = 0;
  for (const auto& mine : runs) {
    for (const HitRun& r : mine) {
      ++runs_seen;
      auto it = revoked_at.find(r.handle);
      if (it != revoked_at.end() && it->second <= r.revoked_before) {
        if (++stale <= 5) {
          ADD_FAILURE() << "handle " << r.handle << " (revocation " << it->second
                        << ") returned by a Register that started after " << r.revoked_before
                        << " revocations";
        }
      }
    }
  }
  std::printf("revocations %llu, hits %llu, distinct grants seen %llu, failed registers %llu\n",
              static_cast<unsigned long long>(done), static_cast<unsigned long long>(hits.load()),
              static_cast<unsigned long long>(runs_seen),
              static_cast<unsigned long long>(failures.load()));
  EXPECT_EQ(stale, 0u);
  EXPECT_TRUE(revoker_stale.empty()) << revoker_stale.size() << " stale keys seen by the revoker";
  EXPECT_EQ(done, static_cast<uint64_t>(kRevocations))
      << "only " << done << " revocations within " << kTimeLimit;

  c.reset();
  (*grpc)->Shutdown(absl::Seconds(1));
  grpc->reset();
  control->reset();
  daemon.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace regcache::api
