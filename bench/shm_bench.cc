// shm_bench — keys across processes: the shared-memory fast path and the client-side hit cache
// against their floors and anchors, two real processes (this one and the built regcached, on
// the sim), in one run.
//
//   BM_ShmFloor               a raw ping-pong over the same kind of ring (service/
//                             shm_protocol.h: same Channel layout, same spin-then-futex wake-up)
//                             between this process and a forked echo process: the physical
//                             floor of one round trip on this machine
//   BM_ShmNop                 a kNop request answered by the daemon's worker: the ring as the
//                             daemon serves it, nothing else
//   BM_ShmRoundTrip/threads:T a Register answered by the daemon's cache (a hit there; the
//                             client's own cache off), + its Release; aim <= 2x the floor
//                             (counted per Register round trip: the Release is a second one)
//   BM_ClientHit/grants:N/T   Register + Release of a grant the client already holds: no IPC.
//                             Aims, one thread: >= 2.5x faster than BM_UcsRcacheHit at 1k, and
//                             <= 1.5x BM_InProcessHit at 100k
//   BM_InProcessHit/grants:N  the cache's own hit, in this process, same layout (N regions of
//                             4 KiB, adjacent)
//   BM_UcsRcacheHit/grants:N  UCX ucs_rcache's hit, same layout (the anchor)
//   BM_ShmMiss                a Register the daemon must map (one UMR on the sim); p50 and p99
//                             per call; aim p50 <= 3 us
//   BM_ShmInvalidate/client_cache:C  Invalidate of a registration the client holds no more
//                             (registered and released before, untimed), client cache off (0)
//                             and on (1: the cache's holds go back with it); aim: on <= 2x off
//   BM_IdleDaemonCpu          the daemon's CPU time over 10 s with 64 idle sessions open;
//                             aim <= 1% of a core
//
// Quiet machine: run it with nothing else busy (two spinning processes share the CPUs: on a
// 2-core machine a third busy process shows up directly in the round trips).
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "bench/cpu_pinning.h"
#include "bench/worlds.h"
#include "benchmark/benchmark.h"
#include "client/internal/client_testing.h"
#include "protocol/shm_futex.h"
#include "protocol/shm_protocol.h"
#include "regcache/client.h"

namespace {

namespace shm = ::regcache::protocol::shm;
namespace rc = ::regcache::api;
using regcache::bench::NextRandom;

constexpr uint32_t kRw = rc::kLocalRead | rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite;
constexpr uint64_t kPage = 4096;

using regcache::bench::PinToLastCpu;

// For one client thread against the pinned server: keeps the thread off the server's CPU for
// the benchmark's length (the scheduler may otherwise put it there, and the two spinning ends
// then take turns on one CPU), and restores its affinity after.
class OffServerCpu {
 public:
  explicit OffServerCpu(const benchmark::State& state) {
    if (state.threads() == 1) active_ = regcache::bench::KeepOffLastCpu(&old_);
  }
  ~OffServerCpu() {
    if (active_) regcache::bench::RestoreCpus(old_);
  }

 private:
  cpu_set_t old_;
  bool active_ = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "shm_bench: %s\n", what.c_str());
  std::exit(1);
}

// --- The floor: a forked echo process on one Channel in shared anonymous memory ---

struct FloorShared {
  shm::ChannelFileHeader header;
  shm::Channel channel;
};

struct Floor {
  FloorShared* shared = nullptr;
  pid_t child = -1;
  uint32_t head = 0;  // requests posted (the parent's copy)

  static Floor& Get() {
    static Floor* f = [] {
      auto* fl = new Floor;
      void* p = ::mmap(nullptr, sizeof(FloorShared), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) Die("mmap");
      fl->shared = new (p) FloorShared{};
      fl->child = ::fork();
      if (fl->child == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        PinToLastCpu();
        Echo(fl->shared);
      }
      return fl;
    }();
    return *f;
  }

  // The child: the daemon worker's loop with nothing behind it — take a request, copy it out,
  // answer it, spin a while for the next one, then sleep on the doorbell.
  [[noreturn]] static void Echo(FloorShared* s) {
    shm::ChannelControl& c = s->channel.control;
    uint32_t tail = 0;
    for (;;) {
      uint32_t head;
      int spins = 0;
      while ((head = c.req_head.load(std::memory_order_acquire)) == tail) {
        if (++spins < 200000) continue;
        uint32_t bell = s->header.doorbell.load(std::memory_order_acquire);
        s->header.daemon_waiting.store(1, std::memory_order_seq_cst);
        if (c.req_head.load(std::memory_order_seq_cst) == tail)
          shm::FutexWait(&s->header.doorbell, bell, absl::InfiniteDuration());
        s->header.daemon_waiting.store(0, std::memory_order_relaxed);
        spins = 0;
      }
      shm::RingRequest r = s->channel.requests[tail % shm::kRingDepth];
      ++tail;
      c.req_tail.store(tail, std::memory_order_release);
      if (r.op == 0xffff) ::_exit(0);
      uint32_t cpl = c.cpl_head.load(std::memory_order_relaxed);
      shm::RingCompletion& out = s->channel.completions[cpl % shm::kRingDepth];
      out.seq = r.seq;
      out.op = r.op;
      out.code = 0;
      c.cpl_head.store(cpl + 1, std::memory_order_seq_cst);
      if (c.client_waiting.load(std::memory_order_seq_cst) != 0) shm::FutexWakeAll(&c.cpl_head);
    }
  }

  void RoundTrip(uint64_t seq) {
    shm::ChannelControl& c = shared->channel.control;
    shm::RingRequest& r = shared->channel.requests[head % shm::kRingDepth];
    r = shm::RingRequest{};
    r.seq = seq;
    r.op = static_cast<uint16_t>(shm::RingOp::kNop);
    const uint32_t want = c.cpl_head.load(std::memory_order_relaxed) + 1;
    c.req_head.store(++head, std::memory_order_seq_cst);
    if (shared->header.daemon_waiting.exchange(0, std::memory_order_seq_cst) != 0) {
      shared->header.doorbell.fetch_add(1, std::memory_order_seq_cst);
      shm::FutexWakeAll(&shared->header.doorbell);
    }
    while (c.cpl_head.load(std::memory_order_acquire) != want) {
    }
    benchmark::DoNotOptimize(shared->channel.completions[(want - 1) % shm::kRingDepth].seq);
  }

  void Stop() {
    shm::RingRequest& r = shared->channel.requests[head % shm::kRingDepth];
    r.op = 0xffff;
    shared->channel.control.req_head.store(++head, std::memory_order_seq_cst);
    shared->header.doorbell.fetch_add(1);
    shm::FutexWakeAll(&shared->header.doorbell);
    ::waitpid(child, nullptr, 0);
  }
};

void BM_ShmFloor(benchmark::State& state) {
  OffServerCpu off(state);
  Floor& f = Floor::Get();
  uint64_t seq = 0;
  for (auto _ : state) f.RoundTrip(++seq);
  state.SetItemsProcessed(state.iterations());
}

// --- The daemon: the built regcached in a temp dir, and clients of it ---

struct Daemon {
  std::string dir;
  pid_t pid = -1;

  static Daemon& Get() {
    static Daemon* d = [] {
      auto* dm = new Daemon;
      char tmpl[] = "/tmp/regcache-shm-bench-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp");
      dm->dir = tmpl;
      std::vector<std::string> args = {REGCACHED_PATH, "--device=sim:max_keys=1048576",
                                       "--socket_dir=" + dm->dir, "--log_level=warning",
                                       "--max_keys_per_session=0"};
      dm->pid = ::fork();
      if (dm->pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the benchmark, however it ends
        PinToLastCpu();
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
      }
      absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (!std::filesystem::exists(dm->dir + "/grpc.sock") && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      return dm;
    }();
    return *d;
  }

  std::unique_ptr<rc::Client> Connect(bool client_cache) {
    rc::ClientOptions o;
    o.client_cache = client_cache;
    for (int attempt = 0;; ++attempt) {
      auto c = rc::Client::Connect(dir, o);
      if (c.ok()) return std::move(*c);
      if (attempt == 100) Die("connect: " + c.status().ToString());
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  // User + system CPU of the daemon so far, in seconds.
  double CpuSeconds() const {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(in, line);
    // Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
    std::vector<std::string> f = absl::StrSplit(line.substr(line.rfind(')') + 2), ' ');
    return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }

  void Stop() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir);
  }
};

// One client with N registered 4 KiB regions of one allocation and `spare` pages after them that
// nothing registered, kept per (N, cache, spare): a benchmark that needs fresh ranges (misses)
// never shares a world with one that registered them already.
struct ClientWorld {
  std::unique_ptr<rc::Client> client;
  rc::Memory memory;
  uint64_t regions = 0;
  std::atomic<uint64_t> next_miss{0};

  static ClientWorld* Get(uint64_t regions, bool client_cache, uint64_t spare = 0) {
    static std::mutex* mu = new std::mutex;
    static auto* worlds =
        new std::map<std::tuple<uint64_t, bool, uint64_t>, std::unique_ptr<ClientWorld>>;
    std::lock_guard<std::mutex> lock(*mu);
    auto& w = (*worlds)[{regions, client_cache, spare}];
    if (w == nullptr) {
      w = std::make_unique<ClientWorld>();
      w->regions = regions;
      w->client = Daemon::Get().Connect(client_cache);
      auto m = w->client->AllocateMemory((regions + spare) * kPage);
      if (!m.ok()) Die("allocate: " + m.status().ToString());
      w->memory = *m;
      for (uint64_t i = 0; i < regions; ++i) {
        auto k = w->client->Register(w->va(i), kPage, kRw);
        if (!k.ok()) Die("register: " + k.status().ToString());
        if (!w->client->Release(k->handle).ok()) Die("release");
      }
      w->next_miss = regions;
    }
    return w.get();
  }
  const void* va(uint64_t i) const { return static_cast<const uint8_t*>(memory.data) + i * kPage; }
};

void BM_ShmNop(benchmark::State& state) {
  OffServerCpu off(state);
  ClientWorld* w = ClientWorld::Get(1, false);
  for (auto _ : state) {
    if (!rc::testing::RingNop(*w->client).ok()) {
      state.SkipWithError("nop failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ShmRoundTrip(benchmark::State& state) {
  OffServerCpu off(state);
  ClientWorld* w = ClientWorld::Get(1000, false);
  uint64_t x = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    auto k = w->client->Register(w->va(NextRandom(x) % w->regions), kPage, kRw);
    if (!k.ok() || !k->hit) {
      state.SkipWithError("expected a daemon-side hit");
      break;
    }
    (void)w->client->Release(k->handle);
  }
  state.SetItemsProcessed(state.iterations() * 2);  // two round trips per iteration
}

void BM_ClientHit(benchmark::State& state) {
  ClientWorld* w = ClientWorld::Get(state.range(0), true);
  uint64_t x = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    auto k = w->client->Register(w->va(NextRandom(x) % w->regions), kPage, kRw);
    if (!k.ok()) {
      state.SkipWithError("register failed");
      break;
    }
    benchmark::DoNotOptimize(k->rkey);
    (void)w->client->Release(k->handle);
  }
  state.SetItemsProcessed(state.iterations());
}

// The cache's own hit and UCX's over the same layout (N adjacent 4 KiB regions).
void BM_InProcessHit(benchmark::State& state) {
  regcache::bench::RunCacheHits(state, regcache::bench::CacheWorld::Get(state.range(0)));
}

void BM_UcsRcacheHit(benchmark::State& state) {
  regcache::bench::RunUcsHits(state, regcache::bench::UcsWorld::Get(state.range(0), kPage));
}

constexpr int kMissIterations = 20000;

void BM_ShmMiss(benchmark::State& state) {
  OffServerCpu off(state);
  ClientWorld* w = ClientWorld::Get(1, false, 2 * kMissIterations + 16);
  std::vector<uint64_t> ns;
  ns.reserve(kMissIterations);
  std::vector<uint64_t> made;
  made.reserve(kMissIterations);
  uint64_t i = w->next_miss.fetch_add(state.max_iterations);
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto k = w->client->Register(w->va(i++), kPage, kRw);
    auto t1 = std::chrono::steady_clock::now();
    if (!k.ok() || k->hit) {
      state.SkipWithError("expected a miss");
      break;
    }
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    made.push_back(k->handle);
  }
  state.SetItemsProcessed(state.iterations());
  for (uint64_t h : made) {  // after the timed loop
    (void)w->client->Invalidate(h);
    (void)w->client->Release(h);
  }
  if (!ns.empty()) {
    std::sort(ns.begin(), ns.end());
    state.counters["p50_ns"] = static_cast<double>(ns[ns.size() / 2]);
    state.counters["p99_ns"] = static_cast<double>(ns[ns.size() * 99 / 100]);
  }
}

void BM_ShmInvalidate(benchmark::State& state) {
  OffServerCpu off(state);
  const bool cached = state.range(0) != 0;
  ClientWorld* w = ClientWorld::Get(1, cached, kMissIterations + 16);
  uint64_t i = w->next_miss.fetch_add(state.max_iterations);
  std::vector<uint64_t> ns;
  ns.reserve(kMissIterations);
  for (auto _ : state) {
    // Untimed: a registration of a fresh range, its hold given back (to the client cache when
    // it is on: it keeps the daemon's hold for the next hit).
    auto k = w->client->Register(w->va(i++), kPage, kRw);
    if (!k.ok() || !w->client->Release(k->handle).ok()) {
      state.SkipWithError("register or release failed");
      break;
    }
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = w->client->Invalidate(k->handle);
    auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    const auto t = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    state.SetIterationTime(static_cast<double>(t) / 1e9);
    ns.push_back(static_cast<uint64_t>(t));
  }
  state.SetItemsProcessed(state.iterations());
  if (!ns.empty()) {
    std::sort(ns.begin(), ns.end());
    state.counters["p50_ns"] = static_cast<double>(ns[ns.size() / 2]);
  }
}

void BM_IdleDaemonCpu(benchmark::State& state) {
  Daemon& d = Daemon::Get();
  std::vector<std::unique_ptr<rc::Client>> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(d.Connect(false));
  absl::SleepFor(absl::Milliseconds(500));  // let every worker finish spinning and sleep
  double cpu = 0;
  for (auto _ : state) {
    const double before = d.CpuSeconds();
    absl::SleepFor(absl::Seconds(10));
    cpu = d.CpuSeconds() - before;
  }
  state.counters["cpu_percent"] = 100.0 * cpu / 10.0;
}

BENCHMARK(BM_ShmFloor)->UseRealTime();
BENCHMARK(BM_ShmNop)->UseRealTime();
BENCHMARK(BM_ShmRoundTrip)->UseRealTime()->Threads(1)->Threads(2)->Threads(4);
BENCHMARK(BM_InProcessHit)
    ->ArgName("grants")
    ->Arg(1000)
    ->Arg(100000)
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_UcsRcacheHit)
    ->ArgName("grants")
    ->Arg(1000)
    ->Arg(100000)
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_ClientHit)
    ->ArgName("grants")
    ->Arg(1000)
    ->Arg(100000)
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2)
    ->Threads(4);
BENCHMARK(BM_ShmMiss)->Iterations(kMissIterations)->UseRealTime();
BENCHMARK(BM_ShmInvalidate)
    ->ArgName("client_cache")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(kMissIterations)
    ->UseManualTime();
BENCHMARK(BM_IdleDaemonCpu)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

double NsPerOp(const regcache::bench::SummaryReporter& r, const std::string& name) {
  double rate = r.Rate(name);
  return rate > 0 ? 1e9 / rate : 0;
}

void PrintSummary(const regcache::bench::SummaryReporter& r) {
  std::printf("\n=== shm_bench summary (two processes: this one and regcached on the sim)\n");
  const double floor = NsPerOp(r, "BM_ShmFloor/real_time");
  const double nop = NsPerOp(r, "BM_ShmNop/real_time");
  const double rt = NsPerOp(r, "BM_ShmRoundTrip/real_time/threads:1");
  std::printf("floor   raw ring ping-pong          %8.0f ns\n", floor);
  if (floor > 0 && nop > 0)
    std::printf("nop     daemon worker round trip    %8.0f ns  %.2fx floor\n", nop, nop / floor);
  if (floor > 0 && rt > 0) {
    std::printf("round trip (register hit at daemon) %8.0f ns  %.2fx floor (aim <= 2x)\n", rt,
                rt / floor);
  }
  for (int threads : {1, 2, 4}) {
    double rate = r.Rate(absl::StrFormat("BM_ShmRoundTrip/real_time/threads:%d", threads));
    if (rate > 0)
      std::printf("ring throughput threads=%d  %.2f M round trips/s\n", threads, rate / 1e6);
  }
  for (int grants : {1000, 100000}) {
    for (int threads : {1, 2, 4}) {
      const std::string suffix =
          absl::StrFormat("/grants:%d/real_time/threads:%d", grants, threads);
      const double client = r.Rate("BM_ClientHit" + suffix);
      const double inproc = r.Rate("BM_InProcessHit" + suffix);
      const double ucs = r.Rate("BM_UcsRcacheHit" + suffix);
      if (client == 0) continue;
      std::printf("client hit grants=%-6d threads=%d  %7.1f ns", grants, threads,
                  1e9 * threads / client);
      // The aims hold for one thread: the in-process one at 100k, UCX's at 1k.
      const bool aim_inproc = threads == 1 && grants == 100000;
      const bool aim_ucs = threads == 1 && grants == 1000;
      if (inproc > 0) {
        std::printf("  in-process %6.1f ns (client/in-process %.2fx%s)", 1e9 * threads / inproc,
                    inproc / client,
                    !aim_inproc              ? ""
                    : inproc / client <= 1.5 ? ", aim <= 1.5x: met"
                                             : ", aim <= 1.5x: MISSED");
      }
      if (ucs > 0) {
        std::printf("  ucs_rcache %6.1f ns (ucs/client %.2fx%s)", 1e9 * threads / ucs, client / ucs,
                    !aim_ucs              ? ""
                    : client / ucs >= 2.5 ? ", aim >= 2.5x: met"
                                          : ", aim >= 2.5x: MISSED");
      }
      std::printf("\n");
    }
  }
  const double inval_off =
      NsPerOp(r, absl::StrFormat("BM_ShmInvalidate/client_cache:0/iterations:%d/manual_time",
                                 kMissIterations));
  const double inval_on =
      NsPerOp(r, absl::StrFormat("BM_ShmInvalidate/client_cache:1/iterations:%d/manual_time",
                                 kMissIterations));
  if (inval_off > 0 && inval_on > 0) {
    std::printf("invalidate  client cache off %8.0f ns  on %8.0f ns  (on/off %.2fx, aim <= 2x)\n",
                inval_off, inval_on, inval_on / inval_off);
  }
  std::printf("miss (UMR on the sim): see BM_ShmMiss p50_ns / p99_ns above (aim p50 <= 3000)\n");
  std::printf("idle: see BM_IdleDaemonCpu cpu_percent above (64 idle sessions, aim <= 1)\n");
}

}  // namespace

int main(int argc, char** argv) {
  regcache::base::SetMinLogSeverity(regcache::base::LogSeverity::kWarning);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  regcache::bench::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintSummary(reporter);
  Floor::Get().Stop();
  Daemon::Get().Stop();
  benchmark::Shutdown();
  return 0;
}
