// revoke_bench — how long a dead tenant's keys take to revoke. A child process opens a session
// on the built regcached, registers N keys (every one a miss: the ranges [va, +64·i) of one
// allocation, i = 1..N, each still held) and is killed with SIGKILL. One iteration is the time
// from the kill until the daemon has closed the session: every key refused by the device (on a
// UMR device by shutting the memory's gates, cache/internal/gates.h; else invalidated in
// batches, cache/internal/lifecycle.h RetireBatch), the device's session count back to zero. The
// observer asks (a Status call each) after pauses of a twentieth of the time so far (PollPause), so
// a figure is late by at most about 5%; asking without a pause would take CPU from the daemon on a
// small machine (it doubled the 100k figure on 2 cores). Then, untimed: the registration count is
// checked at zero, and the time until the daemon has also destroyed the dead tenant's pool keys,
// queues and PD, which it does after the close (cache/internal/reaper.h), is reported as reaped_ms.
//
//   revoke_on_death/keys:N  the above, N = 1k, 10k, 100k; p50/p99/max and reaped_ms counters
//   ibv_dereg_mr/keys:N     the anchor: deregistering N memory regions (4 KiB each, registered
//                           before the timed region) with ibv_dereg_mr on the same device, in
//                           this process; verbs and mlx5 only (the sim has no ibv_dereg_mr: the
//                           rows are left out there, and the summary says so)
//
// The summary prints, per N, regcache's p99 and the anchor over it, and the aim
// (docs/benchmarks.md): on the sim, 100k keys revoked within 20 ms at p99.
//
// Flags, before Google Benchmark's own (each also from the environment, REVOKE_BENCH_*):
//   --device=<spec>         regcached's --device (default sim:max_keys=262144)
//   --regcached=<path>      the daemon binary (default this build's)
//   --regcached_flags=a,b   more flags for the daemon, comma-separated
// The child is this program again, run with --revoke_bench_child=<socket dir>,<N>.
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "bench/regcached_process.h"
#include "benchmark/benchmark.h"
#include "regcache/client.h"

namespace {

namespace rc = ::regcache::api;
using regcache::bench::Daemon;
using regcache::bench::DaemonOptions;
using regcache::bench::Die;
using regcache::bench::IbvAnchor;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kAccess = rc::kLocalRead | rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite;
constexpr uint64_t kStep = 64;  // key i covers [va, +kStep·i): never covered by an earlier one
constexpr char kChildFlag[] = "--revoke_bench_child=";

struct Count {
  int keys;
  int iterations;
};
// How long the observer waits before asking again, `since` after the kill.
absl::Duration PollPause(absl::Duration since) {
  return std::clamp(since / 20, absl::Microseconds(50), absl::Milliseconds(5));
}
constexpr Count kCounts[] = {{1000, 20}, {10000, 10}, {100000, 5}};

// --- The child: a session with N held keys, then waiting to be killed ---

[[noreturn]] void RunChild(const std::string& arg) {
  const size_t comma = arg.find(',');
  const std::string dir = arg.substr(0, comma);
  const int keys = std::atoi(arg.c_str() + comma + 1);
  rc::ClientOptions o;
  auto c = rc::Client::Connect(dir, o);
  if (!c.ok()) Die("child: connect: " + c.status().ToString());
  const uint64_t bytes = (kStep * static_cast<uint64_t>(keys) + 4095) / 4096 * 4096;
  auto m = (*c)->AllocateMemory(bytes);
  if (!m.ok()) Die("child: allocate: " + m.status().ToString());
  std::memset(m->data, 0x5a, m->length);
  for (int i = 1; i <= keys; ++i) {
    auto k = (*c)->Register(m->data, kStep * static_cast<uint64_t>(i), kAccess);
    if (!k.ok()) Die(absl::StrFormat("child: key %d of %d: %s", i, keys, k.status().ToString()));
  }
  const char ready = 'r';
  if (::write(STDOUT_FILENO, &ready, 1) != 1) Die("child: write");
  for (;;) ::pause();  // until the SIGKILL
}

// --- The benchmarks ---

struct Bench {
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<rc::Client> observer;
  std::unique_ptr<IbvAnchor> anchor;
  std::map<int, std::vector<double>> revoke_ns, anchor_ns;  // by N, for the summary

  static Bench& Get() {
    static Bench* b = new Bench;
    return *b;
  }

  uint64_t DeviceSessions() const {
    auto st = observer->Status();
    if (!st.ok()) Die("status: " + st.status().ToString());
    uint64_t n = 0;
    for (const auto& d : st->devices) n += d.sessions;
    return n;
  }
};

// Starts the child with N keys; returns its pid once its keys are registered.
pid_t StartChild(const Bench& b, int keys) {
  int fds[2];
  if (::pipe(fds) != 0) Die("pipe");
  const std::string arg = std::string(kChildFlag) + b.daemon->dir() + "," + std::to_string(keys);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::string name = "revoke_bench";
    std::string flag = arg;
    char* argv[] = {name.data(), flag.data(), nullptr};
    ::execv("/proc/self/exe", argv);
    ::_exit(127);
  }
  ::close(fds[1]);
  char ready = 0;
  const ssize_t n = ::read(fds[0], &ready, 1);
  ::close(fds[0]);
  if (n != 1) {
    ::waitpid(pid, nullptr, 0);
    Die(absl::StrFormat("the child with %d keys died before it was ready", keys));
  }
  return pid;
}

void SetPercentiles(benchmark::State& state, std::vector<double> ns) {
  if (ns.empty()) return;
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double q) { return ns[std::min(ns.size() - 1, size_t(q * ns.size()))]; };
  state.counters["p50_ms"] = at(0.50) / 1e6;
  state.counters["p99_ms"] = at(0.99) / 1e6;
  state.counters["max_ms"] = ns.back() / 1e6;
}

void BM_RevokeOnDeath(benchmark::State& state, int keys) {
  Bench& b = Bench::Get();
  const uint64_t idle = b.DeviceSessions();
  std::vector<double>& ns = b.revoke_ns[keys];
  std::vector<double> reaped_ns;
  for (auto _ : state) {
    const pid_t child = StartChild(b, keys);
    const Clock::time_point t0 = Clock::now();
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    const absl::Time killed = absl::Now();
    const auto await = [killed](const char* what, const auto& done) {
      while (!done()) {
        if (absl::Now() > killed + absl::Seconds(60)) {
          Die(absl::StrFormat("the dead child's %s within 60 s", what));
        }
        absl::SleepFor(PollPause(absl::Now() - killed));
      }
    };
    await("session was not closed", [&] { return b.DeviceSessions() == idle; });
    const double t = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    state.SetIterationTime(t / 1e9);
    ns.push_back(t);
    // Untimed: every key of the dead session is gone from the daemon's counts, and then its
    // pool from the device.
    auto stats = b.observer->Stats();
    auto live = stats.ok() ? stats->Get("cache", "live_registrations") : stats.status();
    if (!live.ok() || *live != 0) {
      state.SkipWithError("registrations left after the session closed");
      break;
    }
    await("pool was not destroyed", [&] {
      stats = b.observer->Stats();
      auto reaping = stats.ok() ? stats->Get("cache", "tenants_reaping") : stats.status();
      if (!reaping.ok()) Die("stats: " + reaping.status().ToString());
      return *reaping == 0;
    });
    reaped_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  state.counters["keys"] = keys;
  SetPercentiles(state, ns);
  if (!reaped_ns.empty()) {
    std::sort(reaped_ns.begin(), reaped_ns.end());
    state.counters["reaped_ms"] = reaped_ns[reaped_ns.size() / 2] / 1e6;  // p50
  }
}

void BM_DeregMr(benchmark::State& state, int keys) {
  Bench& b = Bench::Get();
  std::vector<uint8_t> page(4096, 0x5a);
  std::vector<ibv_mr*> mrs(static_cast<size_t>(keys));
  std::vector<double>& ns = b.anchor_ns[keys];
  for (auto _ : state) {
    for (ibv_mr*& mr : mrs) {
      mr = ::ibv_reg_mr(b.anchor->pd(), page.data(), page.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
      if (mr == nullptr) Die(absl::StrFormat("ibv_reg_mr: %s", std::strerror(errno)));
    }
    const Clock::time_point t0 = Clock::now();
    for (ibv_mr* mr : mrs) {
      if (::ibv_dereg_mr(mr) != 0) Die(absl::StrFormat("ibv_dereg_mr: %s", std::strerror(errno)));
    }
    const double t = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    state.SetIterationTime(t / 1e9);
    ns.push_back(t);
  }
  state.counters["keys"] = keys;
  SetPercentiles(state, ns);
}

double P99Ms(std::vector<double> ns) {
  if (ns.empty()) return 0;
  std::sort(ns.begin(), ns.end());
  return ns[std::min(ns.size() - 1, size_t(0.99 * ns.size()))] / 1e6;
}

void PrintSummary(const Bench& b, const std::string& device) {
  std::printf("\nrevoke_bench on %s: a dead session's keys, until all are revoked (p99)\n",
              device.c_str());
  if (b.anchor == nullptr) {
    std::printf("(the anchor, ibv_dereg_mr, needs a verbs or mlx5 device: not run on %s)\n",
                device.c_str());
  }
  for (const Count& c : kCounts) {
    auto it = b.revoke_ns.find(c.keys);
    if (it == b.revoke_ns.end() || it->second.empty()) continue;
    const double mine = P99Ms(it->second);
    std::string line = absl::StrFormat("%7d keys: regcache %.2f ms", c.keys, mine);
    auto a = b.anchor_ns.find(c.keys);
    if (a != b.anchor_ns.end() && !a->second.empty()) {
      const double anchor = P99Ms(a->second);
      line += absl::StrFormat("; ibv_dereg_mr x%d %.2f ms; anchor / regcache %.2fx%s", c.keys,
                              anchor, anchor / mine, anchor >= mine ? "" : " (regcache slower)");
    }
    if (c.keys == 100000 && absl::StartsWith(device, "sim")) {
      line += absl::StrFormat(" (aim: 20 ms or less: %s)", mine <= 20 ? "met" : "NOT met");
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && absl::StartsWith(argv[1], kChildFlag)) {
    RunChild(argv[1] + std::strlen(kChildFlag));
  }
  regcache::base::SetMinLogSeverity(regcache::base::LogSeverity::kWarning);
  DaemonOptions options = regcache::bench::ParseDaemonOptions(&argc, argv, "REVOKE_BENCH");
  if (std::getenv("REVOKE_BENCH_DEVICE") == nullptr && options.device == "sim") {
    options.device = "sim:max_keys=262144";  // room for 100k keys and the pool around them
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("revoke_device", options.device);

  Bench& b = Bench::Get();
  b.anchor = IbvAnchor::Open(options.device);
  b.daemon = std::make_unique<Daemon>(options);
  rc::ClientOptions observer;
  observer.observer = true;
  b.observer = b.daemon->Connect(observer);
  for (const Count& c : kCounts) {
    benchmark::RegisterBenchmark(absl::StrFormat("revoke_on_death/keys:%d", c.keys).c_str(),
                                 BM_RevokeOnDeath, c.keys)
        ->Iterations(c.iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    if (b.anchor != nullptr) {
      benchmark::RegisterBenchmark(absl::StrFormat("ibv_dereg_mr/keys:%d", c.keys).c_str(),
                                   BM_DeregMr, c.keys)
          ->Iterations(std::max(1, c.iterations / 4))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  PrintSummary(b, options.device);

  b.observer->Close();
  b.daemon.reset();
  b.anchor.reset();
  benchmark::Shutdown();
  return 0;
}
