// grpc_bench — what the gRPC API adds to a key: one Register RPC against one empty RPC on the
// same channel, in the same run.
//
//   BM_GrpcEmptyUnary   Ping: an empty unary call (the floor of any RPC on this channel)
//   BM_GrpcRegister     one Register RPC that hits a cached registration (the common case of a
//                       registration cache). Only Register RPCs are timed: each hit takes one
//                       holder, and the holders are given back by Release RPCs after the timed
//                       loop, outside the measurement.
//   BM_GrpcRegisterMiss one Register RPC that maps a new key (UMR on the sim device); the
//                       Invalidate + Release that free it again are timed too, so it is reported
//                       per Register+Invalidate pair (information, no aim).
//
// The server is in-process: a service::Daemon on the sim device, the control socket and the
// gRPC server on unix sockets in a temp dir, and an api::Client over them — the same code
// paths as regcached and its clients, minus process boundaries for the server.
// Aim: Register / EmptyUnary <= 1.5. Anchor: gRPC C++ unary ≈20 µs over a unix socket (2016
// figure; docs/benchmarks.md, Reference figures).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "base/log.h"
#include "benchmark/benchmark.h"
#include "hca/sim/sim_device.h"
#include "regcache/client.h"
#include "server/control_server.h"
#include "server/grpc_service.h"
#include "service/daemon.h"

namespace {

constexpr uint32_t kRw = regcache::api::kLocalRead | regcache::api::kLocalWrite |
                         regcache::api::kRemoteRead | regcache::api::kRemoteWrite;

struct Server {
  std::string dir;
  std::unique_ptr<regcache::service::Daemon> daemon;
  std::unique_ptr<regcache::server::ControlServer> control;
  std::unique_ptr<regcache::server::GrpcServer> grpc;
  std::unique_ptr<regcache::api::Client> client;
  regcache::api::Memory memory;
};

Server* g_server = nullptr;

void Die(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "grpc_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

void StartServer() {
  regcache::base::SetMinLogSeverity(regcache::base::LogSeverity::kWarning);
  regcache::hca::sim::RegisterBackend();
  auto* s = new Server;
  char tmpl[] = "/tmp/regcache-grpc-bench-XXXXXX";
  s->dir = mkdtemp(tmpl);
  regcache::service::DaemonConfig config;
  auto daemon = regcache::service::Daemon::Create(config, nullptr);
  if (!daemon.ok()) Die("daemon", daemon.status());
  s->daemon = std::move(*daemon);
  auto control = regcache::server::ControlServer::Start(s->daemon.get(), s->dir);
  if (!control.ok()) Die("control", control.status());
  s->control = std::move(*control);
  regcache::server::GrpcServerOptions options;
  options.socket_dir = s->dir;
  auto grpc = regcache::server::GrpcServer::Start(s->daemon.get(), s->control.get(), options);
  if (!grpc.ok()) Die("grpc", grpc.status());
  s->grpc = std::move(*grpc);
  regcache::api::ClientOptions client_options;
  client_options.fast_path = false;  // this benchmark measures gRPC (shm_bench the rings)
  auto client = regcache::api::Client::Connect(s->dir, client_options);
  if (!client.ok()) Die("connect", client.status());
  s->client = std::move(*client);
  auto memory = s->client->AllocateMemory(16 << 20);
  if (!memory.ok()) Die("allocate", memory.status());
  s->memory = *memory;
  g_server = s;
}

void StopServer() {
  Server* s = g_server;
  s->client->Close();
  (void)s->daemon->Drain();
  s->grpc->Shutdown(absl::Seconds(1));
  s->control->Stop();
  std::filesystem::remove_all(s->dir);
  delete s;
}

void BM_GrpcEmptyUnary(benchmark::State& state) {
  regcache::api::Client& c = *g_server->client;
  for (auto _ : state) {
    absl::Status s = c.Ping();
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GrpcEmptyUnary)->UseRealTime();

void BM_GrpcRegister(benchmark::State& state) {
  regcache::api::Client& c = *g_server->client;
  const void* p = g_server->memory.data;
  auto first = c.Register(p, 65536, kRw);  // the miss that makes later calls hits
  if (!first.ok()) Die("register", first.status());
  uint64_t holders = 0;
  for (auto _ : state) {
    auto k = c.Register(p, 65536, kRw);
    if (!k.ok() || !k->hit) {
      state.SkipWithError("register did not hit");
      break;
    }
    ++holders;
  }
  for (uint64_t i = 0; i <= holders; ++i) (void)c.Release(first->handle);  // untimed
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GrpcRegister)->UseRealTime();

void BM_GrpcRegisterMiss(benchmark::State& state) {
  regcache::api::Client& c = *g_server->client;
  auto* base = static_cast<uint8_t*>(g_server->memory.data) + (1 << 20);
  uint64_t i = 0;
  for (auto _ : state) {
    auto k = c.Register(base + (i++ % 1024) * 4096, 4096, kRw);
    if (!k.ok() || k->hit) {
      state.SkipWithError("register did not miss");
      break;
    }
    (void)c.Invalidate(k->handle);
    (void)c.Release(k->handle);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GrpcRegisterMiss)->UseRealTime();

// The same hit without gRPC: what the daemon itself spends (context for the ratio above).
void BM_DaemonRegisterHit(benchmark::State& state) {
  regcache::service::Daemon& d = *g_server->daemon;
  const uint64_t session = g_server->client->session_id();
  const uint64_t va = reinterpret_cast<uint64_t>(g_server->memory.data);
  auto first = d.Register(session, va, 65536, kRw);
  if (!first.ok()) Die("register", first.status());
  uint64_t holders = 0;
  for (auto _ : state) {
    auto k = d.Register(session, va, 65536, kRw);
    benchmark::DoNotOptimize(k);
    ++holders;
  }
  for (uint64_t i = 0; i <= holders; ++i) (void)d.Release(session, first->handle);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DaemonRegisterHit);

class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.iterations > 0) ns[r.benchmark_name()] = r.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> ns;  // per iteration, in the run's time unit (ns)
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  StartServer();
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  StopServer();
  auto get = [&](const char* n) { return collector.ns.count(n) ? collector.ns[n] : 0.0; };
  const double ping = get("BM_GrpcEmptyUnary/real_time"), reg = get("BM_GrpcRegister/real_time"),
               miss = get("BM_GrpcRegisterMiss/real_time");
  std::printf("\n== grpc_bench summary (same channel, same run) ==\n");
  if (ping > 0 && reg > 0) {
    std::printf("Register (hit) %8.1f us  vs empty unary %8.1f us  ratio %.2f  (aim <= 1.5)\n",
                reg / 1e3, ping / 1e3, reg / ping);
  }
  if (ping > 0 && miss > 0) {
    std::printf("Register miss + Invalidate + Release %8.1f us  = %.2f empty unaries\n", miss / 1e3,
                miss / ping);
  }
  std::printf(
      "empty unary %8.1f us  vs anchor: gRPC C++ unary ~20 us over a unix socket "
      "(2016)  ratio %.2f\n",
      ping / 1e3, ping / 1e3 / 20.0);
  return 0;
}
