// regmr_bench — the headline comparison: a key from regcache against plain ibv_reg_mr +
// ibv_dereg_mr of the same memory on the same device, in one run, at 4 KiB, 64 KiB, 1 MiB,
// 16 MiB and 256 MiB. Two processes: this one (the client, and the anchor) and the built
// regcached, started here on the device given (or an already running daemon).
//
//   miss/bytes:N              Register of a range with no registration (the daemon maps a new
//                             key: one UMR on the sim, one memory-window bind on verbs) + its
//                             Release (the client cache's: no IPC). The next iteration must
//                             miss again: each key is invalidated after the timed region (the
//                             daemon's hold given back with it), so every iteration registers
//                             the same warm range the anchor registers. p50/p99/max counters.
//   hit_client_cache/bytes:N  Register + Release of a range the client library already holds
//                             a grant for: the fast path's hit, no IPC.
//   hit_ring/bytes:N          the same with the client cache off: two ring round trips, the
//                             Register a hit in the daemon's cache.
//   batch/keys:K/bytes:N      RegisterBatch of K ranges of N bytes that all miss (range i
//                             starts i + 1 pages into the memory: K different registrations
//                             over little memory), then ReleaseBatch of the K grants; K = 64, 1024
//                             at 4 KiB and 1 MiB. Every key invalidated after the timed region.
//                             After an untimed warm-up (the pool at its steady size). Per key.
//   ibv_reg_mr_batch/keys:K/bytes:N  its anchor: K ibv_reg_mr of the same ranges, then their K
//                             ibv_dereg_mr, per key.
//   pairs/keys:K/bytes:N      the two, alternating in one loop (bench/batch_pairs.h): the
//                             median of the pairs' ratios, which a drifting guest leaves alone.
//   bind_floor/keys:K/bytes:N the device's floor on verbs devices (bench/bind_floor.h): K
//                             type-1 windows bound by one ibv_post_send list and its one
//                             completion awaited, in this process, with nothing else; per key.
//   bind_queue/..., cache_layer/...  on verbs devices, the same keys made in this process by
//                             the backend's queue alone, then by the cache alone
//                             (bench/batch_layers.h): where a batch's key goes, layer by layer.
//                             Each batch row and its anchor also report the median of their
//                             batches (p50_ns), which the summary prints beside the mean.
//   ibv_reg_mr/bytes:N        the anchor: ibv_reg_mr + ibv_dereg_mr of the same range of the
//                             same mapping (already touched), in this process, on the same
//                             device opened by name (verbs:<name> / mlx5:<name>; no name: the
//                             first device). The sim has no ibv_reg_mr side: these rows are
//                             left out there, and the summary says so.
//
// Every figure is the time of one key (a register and its release). The summary prints, per
// size, the anchor over each regcache figure and the aims (docs/benchmarks.md): a hit 50x faster
// than the anchor or more at every size; a miss 2x faster or more at 4 KiB, 100x at 256 MiB.
//
// Flags, before Google Benchmark's own (each also from the environment):
//   --device=<spec>         regcached's --device (REGMR_BENCH_DEVICE; default sim)
//   --regcached=<path>      the daemon binary (REGMR_BENCH_REGCACHED; default this build's)
//   --regcached_flags=a,b   more flags for the daemon, comma-separated (REGMR_BENCH_FLAGS)
//   --socket_dir=<dir>      use a daemon already serving <dir> (its device must be --device)
// Plot: bench/plot_regmr.py reads --benchmark_out=<file> --benchmark_out_format=json.
#include <infiniband/verbs.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "bench/batch_case.h"
#include "bench/batch_layers.h"
#include "bench/batch_pairs.h"
#include "bench/bind_floor.h"
#include "bench/regcached_process.h"
#include "benchmark/benchmark.h"
#include "regcache/client.h"

namespace {

namespace rc = ::regcache::api;
using regcache::bench::AnchorBatch;
using regcache::bench::Daemon;
using regcache::bench::DaemonOptions;
using regcache::bench::Die;
using regcache::bench::IbvAnchor;
using regcache::bench::IterationTimes;
using regcache::bench::PairTimes;
using regcache::bench::RunBatch;
using regcache::bench::WarmUp;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kAccess = rc::kLocalRead | rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite;
constexpr int kIbvAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB;
constexpr int kMissIterations = 1000;
constexpr double kHitMinTime = 0.2;  // seconds

// The sizes, and how many ibv_reg_mr + ibv_dereg_mr pairs each gets: a fixed, small count, so
// that the run stays bounded where a 256 MiB registration takes a second (rxe under emulation).
struct Size {
  uint64_t bytes;
  const char* label;
  int anchor_iterations;
};
constexpr Size kSizes[] = {{4 * kKiB, "4 KiB", 1000},
                           {64 * kKiB, "64 KiB", 300},
                           {1 * kMiB, "1 MiB", 100},
                           {16 * kMiB, "16 MiB", 10},
                           {256 * kMiB, "256 MiB", 3}};

// The batch cases: K keys of N bytes each.
struct BatchCase {
  int keys;
  uint64_t bytes;
  const char* label;
  int iterations;
};
constexpr BatchCase kBatches[] = {{64, 4 * kKiB, "64 x 4 KiB", 50},
                                  {1024, 4 * kKiB, "1024 x 4 KiB", 5},
                                  {64, 1 * kMiB, "64 x 1 MiB", 20},
                                  {1024, 1 * kMiB, "1024 x 1 MiB", 3}};
constexpr uint64_t kPage = 4 * kKiB;
// Room past a size's bytes, so that a batch's ranges (one page apart, from the second page on:
// the first is the other benchmarks' range, which stays cached) stay in the memory.
constexpr uint64_t kBatchSlack = 1025 * kPage;

// Everything the benchmarks share: the daemon, two sessions (client cache on, and off), the
// anchor's device, and the memory of the size being measured (one size at a time: the
// benchmarks run size by size, and 256 MiB twice is enough).
struct Bench {
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<rc::Client> cached;    // default options: fast path + client cache
  std::unique_ptr<rc::Client> uncached;  // fast path, client cache off
  std::unique_ptr<IbvAnchor> anchor;
  std::unique_ptr<regcache::bench::BindFloor> floor;     // verbs devices only
  std::unique_ptr<regcache::bench::BatchLayers> layers;  // verbs devices only
  uint64_t bytes = 0;
  rc::Memory cached_memory, uncached_memory;

  static Bench& Get() {
    static Bench* b = new Bench;
    return *b;
  }

  // Allocates (through the daemon: it registers only memory attached to the session) and
  // touches `n` bytes for each session, giving back the previous size's.
  void UseSize(uint64_t n) {
    if (bytes == n) return;
    FreeMemory();
    cached_memory = Allocate(*cached, n + kBatchSlack);
    uncached_memory = Allocate(*uncached, n);
    bytes = n;
  }

  void FreeMemory() {
    if (bytes == 0) return;
    (void)cached->DetachMemory(cached_memory);
    (void)uncached->DetachMemory(uncached_memory);
    bytes = 0;
  }

  static rc::Memory Allocate(rc::Client& c, uint64_t n) {
    absl::StatusOr<rc::Memory> m = c.AllocateMemory(n);
    if (!m.ok()) Die(absl::StrFormat("allocate %d bytes: %s", n, m.status().ToString()));
    std::memset(m->data, 0x5a, n);  // warm: every page present before anything registers it
    return *m;
  }
};

// The size travels with each run (bench/plot_regmr.py reads it from the JSON).
void SetBytes(benchmark::State& state, uint64_t bytes) {
  state.counters["bytes"] = static_cast<double>(bytes);
}

constexpr int kWarmupMisses = 200;

void BM_Miss(benchmark::State& state, uint64_t bytes) {
  Bench& b = Bench::Get();
  b.UseSize(bytes);
  rc::Client& c = *b.cached;
  std::vector<double> ns;
  ns.reserve(kMissIterations);
  // Misses before the loop, not timed: the first key over new memory may pay for setting up
  // the attachment (once per memory, not per key), and the daemon's key pool grows to its steady
  // size (invalidated keys wait in quarantine before reuse) — neither is what a miss costs.
  for (int i = 0; i < kWarmupMisses; ++i) {
    absl::StatusOr<rc::Key> first = c.Register(b.cached_memory.data, bytes, kAccess);
    if (!first.ok() || !c.Release(first->handle).ok() || !c.Invalidate(first->handle).ok()) {
      state.SkipWithError("a warm-up register failed");
      return;
    }
  }
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<rc::Key> k = c.Register(b.cached_memory.data, bytes, kAccess);
    const absl::Status released = k.ok() ? c.Release(k->handle) : k.status();
    const Clock::time_point t1 = Clock::now();
    if (!k.ok() || k->hit || !released.ok()) {
      state.SkipWithError(k.ok() && k->hit ? "expected a miss" : released.ToString().c_str());
      break;
    }
    const double t = std::chrono::duration<double, std::nano>(t1 - t0).count();
    state.SetIterationTime(t / 1e9);
    ns.push_back(t);
    // Not timed: the key is invalidated, so the same range misses next time.
    if (absl::Status s = c.Invalidate(k->handle); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  SetBytes(state, bytes);
  if (!ns.empty()) {
    std::sort(ns.begin(), ns.end());
    state.counters["p50_ns"] = ns[ns.size() / 2];
    state.counters["p99_ns"] = ns[ns.size() * 99 / 100];
    state.counters["max_ns"] = ns.back();
  }
}

// Register + Release of a range `c` registered once before the loop (a miss, not timed).
void RunHits(benchmark::State& state, rc::Client& c, const rc::Memory& m, uint64_t bytes) {
  absl::StatusOr<rc::Key> first = c.Register(m.data, bytes, kAccess);
  if (!first.ok() || !c.Release(first->handle).ok()) {
    state.SkipWithError("the first register failed");
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<rc::Key> k = c.Register(m.data, bytes, kAccess);
    if (!k.ok() || !k->hit) {
      state.SkipWithError(k.ok() ? "expected a hit" : k.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(k->rkey);
    (void)c.Release(k->handle);
  }
  SetBytes(state, bytes);
}

void BM_HitClientCache(benchmark::State& state, uint64_t bytes) {
  Bench& b = Bench::Get();
  b.UseSize(bytes);
  RunHits(state, *b.cached, b.cached_memory, bytes);
}

void BM_HitRing(benchmark::State& state, uint64_t bytes) {
  Bench& b = Bench::Get();
  b.UseSize(bytes);
  RunHits(state, *b.uncached, b.uncached_memory, bytes);
}

void BM_IbvRegMr(benchmark::State& state, uint64_t bytes) {
  Bench& b = Bench::Get();
  b.UseSize(bytes);
  ibv_pd* pd = b.anchor->pd();
  void* addr = b.cached_memory.data;  // the very range the miss registers
  for (auto _ : state) {
    ibv_mr* mr = ::ibv_reg_mr(pd, addr, bytes, kIbvAccess);
    if (mr == nullptr) {
      const std::string why = std::string("ibv_reg_mr: ") + std::strerror(errno) +
                              (errno == ENOMEM ? " (locked-memory limit? ulimit -l)" : "");
      state.SkipWithError(why.c_str());
      break;
    }
    if (::ibv_dereg_mr(mr) != 0) {
      state.SkipWithError("ibv_dereg_mr failed");
      break;
    }
  }
  SetBytes(state, bytes);
}

std::vector<rc::RegisterItem> BatchItems(const Bench& b, const BatchCase& bc) {
  std::vector<rc::RegisterItem> items(bc.keys);
  for (int i = 0; i < bc.keys; ++i) {
    items[i].addr = static_cast<uint8_t*>(b.cached_memory.data) + (i + 1) * kPage;
    items[i].length = bc.bytes;
    items[i].access = kAccess;
  }
  return items;
}

void BM_Batch(benchmark::State& state, BatchCase bc) {
  Bench& b = Bench::Get();
  b.UseSize(bc.bytes);
  rc::Client& c = *b.cached;
  const std::vector<rc::RegisterItem> items = BatchItems(b, bc);
  double secs = 0;
  if (!WarmUp([&] { return RunBatch(state, c, items, &secs); })) return;
  IterationTimes times;
  for (auto _ : state) {
    if (!RunBatch(state, c, items, &secs)) break;
    state.SetIterationTime(secs);
    times.Add(secs);
  }
  times.Report(state);
  SetBytes(state, bc.bytes);
  state.counters["keys"] = bc.keys;
}

void BM_IbvRegMrBatch(benchmark::State& state, BatchCase bc) {
  Bench& b = Bench::Get();
  b.UseSize(bc.bytes);
  const std::vector<rc::RegisterItem> items = BatchItems(b, bc);
  IterationTimes times;  // the framework times the mean; these, the median
  double secs = 0;
  for (auto _ : state) {
    if (!AnchorBatch(state, b.anchor->pd(), items, kIbvAccess, &secs)) return;
    times.Add(secs);
  }
  times.Report(state);
  SetBytes(state, bc.bytes);
  state.counters["keys"] = bc.keys;
}

// A batch by regcache and one by the anchor, back to back, the order swapped every pair
// (bench/batch_pairs.h); the iteration's time is both together.
void BM_Pairs(benchmark::State& state, BatchCase bc) {
  Bench& b = Bench::Get();
  b.UseSize(bc.bytes);
  rc::Client& c = *b.cached;
  const std::vector<rc::RegisterItem> items = BatchItems(b, bc);
  double ours = 0, anchor = 0;
  if (!WarmUp([&] { return RunBatch(state, c, items, &ours); })) return;
  PairTimes pairs;
  bool anchor_first = false;
  for (auto _ : state) {
    if (anchor_first && !AnchorBatch(state, b.anchor->pd(), items, kIbvAccess, &anchor)) return;
    if (!RunBatch(state, c, items, &ours)) return;
    if (!anchor_first && !AnchorBatch(state, b.anchor->pd(), items, kIbvAccess, &anchor)) return;
    anchor_first = !anchor_first;
    state.SetIterationTime(ours + anchor);
    pairs.Add(ours, anchor);
  }
  pairs.Report(state);
  state.counters["keys"] = bc.keys;
}

// The batch's keys made by one layer below regcache's whole path (verbs devices): the device
// alone (bind_floor), the backend's queue, the cache; per key, after the same warm-up.
enum class Layer { kFloor, kQueue, kCache };

void BM_Layer(benchmark::State& state, BatchCase bc, Layer layer) {
  Bench& b = Bench::Get();
  const absl::Status prepared = layer == Layer::kFloor ? b.floor->Prepare(bc.keys, bc.bytes)
                                                       : b.layers->Prepare(bc.keys, bc.bytes);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.ToString().c_str());
    return;
  }
  auto run = [&]() -> absl::StatusOr<double> {
    if (layer == Layer::kFloor) return b.floor->Run();
    return layer == Layer::kQueue ? b.layers->RunQueue() : b.layers->RunCache();
  };
  (void)WarmUp([&] { return run().ok(); });  // a failure shows in the timed loop
  IterationTimes times;
  for (auto _ : state) {
    absl::StatusOr<double> secs = run();
    if (!secs.ok()) {
      state.SkipWithError(secs.status().ToString().c_str());
      break;
    }
    state.SetIterationTime(*secs);
    times.Add(*secs);
  }
  times.Report(state);
  SetBytes(state, bc.bytes);
  state.counters["keys"] = bc.keys;
}

std::string BatchArg(const BatchCase& bc) {
  return absl::StrFormat("/keys:%d/bytes:%d", bc.keys, bc.bytes);
}

// Size by size, so that each size's memory is allocated once and freed before the next.
void RegisterBenchmarks(bool with_anchor) {
  for (const Size& s : kSizes) {
    const std::string arg = absl::StrFormat("/bytes:%d", s.bytes);
    benchmark::RegisterBenchmark(("miss" + arg).c_str(), BM_Miss, s.bytes)
        ->Iterations(kMissIterations)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("hit_client_cache" + arg).c_str(), BM_HitClientCache, s.bytes)
        ->MinTime(kHitMinTime)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("hit_ring" + arg).c_str(), BM_HitRing, s.bytes)
        ->MinTime(kHitMinTime)
        ->UseRealTime();
    if (with_anchor) {
      benchmark::RegisterBenchmark(("ibv_reg_mr" + arg).c_str(), BM_IbvRegMr, s.bytes)
          ->Iterations(s.anchor_iterations)
          ->UseRealTime();
    }
    for (const BatchCase& bc : kBatches) {
      if (bc.bytes != s.bytes) continue;
      benchmark::RegisterBenchmark(("batch" + BatchArg(bc)).c_str(), BM_Batch, bc)
          ->Iterations(bc.iterations)
          ->UseManualTime();
      if (with_anchor) {
        benchmark::RegisterBenchmark(("ibv_reg_mr_batch" + BatchArg(bc)).c_str(), BM_IbvRegMrBatch,
                                     bc)
            ->Iterations(bc.iterations)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("pairs" + BatchArg(bc)).c_str(), BM_Pairs, bc)
            ->Iterations(bc.iterations)
            ->UseManualTime();
      }
      for (auto [name, layer] :
           {std::pair{"bind_floor", Layer::kFloor}, std::pair{"bind_queue", Layer::kQueue},
            std::pair{"cache_layer", Layer::kCache}}) {
        const bool here =
            layer == Layer::kFloor ? Bench::Get().floor != nullptr : Bench::Get().layers != nullptr;
        if (!here) continue;
        benchmark::RegisterBenchmark((name + BatchArg(bc)).c_str(), BM_Layer, bc, layer)
            ->Iterations(bc.iterations)
            ->UseManualTime();
      }
    }
  }
}

// Keeps the mean time per key (ns) of each run and its p50 counter where it has one, by the
// registered name ("miss/bytes:4096"); repetitions are averaged.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration || r.iterations == 0) continue;
      Sum& s = sums_[r.run_name.function_name];
      s.ns += r.real_accumulated_time * 1e9 / static_cast<double>(r.iterations);
      for (const auto& [name, counter] : r.counters) s.counters[name] += counter.value;
      s.runs += 1;
    }
  }
  // A row's mean time, and its counters (p50_ns, ratio_p50, ...); 0: did not run.
  double Ns(const std::string& name) const {
    auto it = sums_.find(name);
    return it == sums_.end() ? 0 : it->second.ns / it->second.runs;
  }
  double Counter(const std::string& name, const std::string& counter) const {
    auto it = sums_.find(name);
    if (it == sums_.end()) return 0;
    auto c = it->second.counters.find(counter);
    return c == it->second.counters.end() ? 0 : c->second / it->second.runs;
  }
  double P50Ns(const std::string& name) const { return Counter(name, "p50_ns"); }

 private:
  struct Sum {
    double ns = 0;
    std::map<std::string, double> counters;
    int runs = 0;
  };
  std::map<std::string, Sum> sums_;
};

std::string Time(double ns) {
  if (ns <= 0) return "-";
  if (ns < 1e4) return absl::StrFormat("%.0f ns", ns);
  if (ns < 1e7) return absl::StrFormat("%.1f us", ns / 1e3);
  return absl::StrFormat("%.1f ms", ns / 1e6);
}

// "anchor / regcache" with the aim it must meet (0: none at this size).
std::string Ratio(double anchor, double ours, double aim) {
  if (anchor <= 0 || ours <= 0) return "-";
  const double r = anchor / ours;
  if (aim <= 0) return absl::StrFormat("%.1fx", r);
  return absl::StrFormat("%.1fx (aim >= %.0fx: %s)", r, aim, r >= aim ? "met" : "MISSED");
}

void PrintTable(const TableReporter& r, const std::string& device, const IbvAnchor* anchor,
                const rc::DeviceInfo& info) {
  std::printf("\n=== regmr_bench: regcache on --device=%s against ibv_reg_mr + ibv_dereg_mr\n",
              device.c_str());
  // A miss under --strict_key_bounds registers the key's pages (docs/key_bounds.md).
  std::printf("key bounds: %s\n", rc::KeyBoundsName(info.key_bounds));
  if (anchor == nullptr) {
    std::printf("(the sim has no ibv_reg_mr side: no anchor rows, no ratios)\n");
  } else {
    std::printf("anchor: ibv_reg_mr + ibv_dereg_mr on %s, same warm memory, this process\n",
                anchor->name().c_str());
  }
  std::printf("time per key (register + release):\n");
  std::printf("%-8s %10s %10s %10s %10s %12s\n", "size", "miss", "(p50)", "hit", "ring hit",
              "ibv_reg_mr");
  for (const Size& s : kSizes) {
    const std::string arg = absl::StrFormat("/bytes:%d", s.bytes);
    std::printf("%-8s %10s %10s %10s %10s %12s\n", s.label, Time(r.Ns("miss" + arg)).c_str(),
                Time(r.P50Ns("miss" + arg)).c_str(), Time(r.Ns("hit_client_cache" + arg)).c_str(),
                Time(r.Ns("hit_ring" + arg)).c_str(), Time(r.Ns("ibv_reg_mr" + arg)).c_str());
  }
  std::printf(
      "miss: mean (p50); hit: through the client cache (no IPC); ring hit: client cache "
      "off, two ring round trips\n");
  std::printf(
      "aims (ibv_reg_mr / regcache): hit >= 50x at every size; miss >= 2x at 4 KiB, "
      ">= 100x at 256 MiB%s\n",
      anchor == nullptr ? " (not measurable here: no anchor)" : "");
  std::printf(
      "batches, mean time per key (RegisterBatch + ReleaseBatch; anchor: ibv_reg_mr, then "
      "ibv_dereg_mr, of the same ranges), and the median batch's:\n");
  for (const BatchCase& bc : kBatches) {
    // A row's mean (or median) time per key (0: the row did not run).
    const auto per_key = [&](const char* row) { return r.Ns(row + BatchArg(bc)) / bc.keys; };
    const auto median = [&](const char* row) { return r.P50Ns(row + BatchArg(bc)) / bc.keys; };
    const double ours = per_key("batch");
    const double reg = per_key("ibv_reg_mr_batch");
    const double aim = bc.bytes == 4 * kKiB ? 5 : 0;
    std::printf("%-14s %10s %12s   %s\n", bc.label, Time(ours).c_str(), Time(reg).c_str(),
                anchor == nullptr ? "" : Ratio(reg, ours, aim).c_str());
    std::printf("  median: regcache %s", Time(median("batch")).c_str());
    if (anchor != nullptr) {
      std::printf(", ibv_reg_mr %s, %s", Time(median("ibv_reg_mr_batch")).c_str(),
                  Ratio(median("ibv_reg_mr_batch"), median("batch"), 0).c_str());
    }
    std::printf("\n");
    if (const double ratio = r.Counter("pairs" + BatchArg(bc), "ratio_p50"); ratio > 0) {
      const auto pair = [&](const char* c) { return r.Counter("pairs" + BatchArg(bc), c); };
      std::printf("  pairs (alternating in one loop; medians): regcache %s, ibv_reg_mr %s, %s\n",
                  Time(pair("ours_p50_ns") / bc.keys).c_str(),
                  Time(pair("anchor_p50_ns") / bc.keys).c_str(), Ratio(ratio, 1, aim).c_str());
    }
    const double floor = per_key("bind_floor");
    const double queue = per_key("bind_queue");
    if (queue > 0) {
      std::printf(
          "  device floor %s, bind queue %s, cache %s, regcache %s; regcache / floor %s; "
          "ibv_reg_mr / floor %s\n",
          Time(floor).c_str(), Time(queue).c_str(), Time(per_key("cache_layer")).c_str(),
          Time(ours).c_str(), Ratio(ours, floor, 0).c_str(), Ratio(reg, floor, 0).c_str());
      std::printf("  median: device floor %s, bind queue %s, cache %s\n",
                  Time(median("bind_floor")).c_str(), Time(median("bind_queue")).c_str(),
                  Time(median("cache_layer")).c_str());
    }
  }
  if (Bench::Get().layers != nullptr) {
    std::printf(
        "layers, each with everything below it: device floor (verbs: the windows bound by one "
        "ibv_post_send list, nothing else), bind queue (the backend's queue), cache "
        "(RegisterBatch in process), regcache (client, ring, daemon); ibv_reg_mr / floor is "
        "the most a window per key can reach here\n");
  }
  if (anchor == nullptr) return;
  std::printf("ratio ibv_reg_mr / regcache:\n");
  for (const Size& s : kSizes) {
    const std::string arg = absl::StrFormat("/bytes:%d", s.bytes);
    const double reg = r.Ns("ibv_reg_mr" + arg);
    const double miss_aim = s.bytes == 4 * kKiB ? 2 : s.bytes == 256 * kMiB ? 100 : 0;
    std::printf("%-8s miss %s; hit %s; ring hit %s\n", s.label,
                Ratio(reg, r.Ns("miss" + arg), miss_aim).c_str(),
                Ratio(reg, r.Ns("hit_client_cache" + arg), 50).c_str(),
                Ratio(reg, r.Ns("hit_ring" + arg), 0).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  regcache::base::SetMinLogSeverity(regcache::base::LogSeverity::kWarning);
  const DaemonOptions options = regcache::bench::ParseDaemonOptions(&argc, argv, "REGMR_BENCH");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("regmr_device", options.device);

  Bench& b = Bench::Get();
  b.anchor = IbvAnchor::Open(options.device);
  if (b.anchor != nullptr) benchmark::AddCustomContext("regmr_ibv_device", b.anchor->name());
  absl::StatusOr<std::unique_ptr<regcache::bench::BindFloor>> floor =
      regcache::bench::BindFloor::Open(options.device);
  if (!floor.ok()) Die("the bind floor's device: " + floor.status().ToString());
  b.floor = std::move(*floor);
  absl::StatusOr<std::unique_ptr<regcache::bench::BatchLayers>> layers =
      regcache::bench::BatchLayers::Open(options.device);
  if (!layers.ok()) Die("the batch layers' device: " + layers.status().ToString());
  b.layers = std::move(*layers);
  b.daemon = std::make_unique<Daemon>(options);
  b.cached = b.daemon->Connect(true);
  b.uncached = b.daemon->Connect(false);
  RegisterBenchmarks(b.anchor != nullptr);

  TableReporter reporter;
  benchmark::AddCustomContext("regmr_key_bounds", rc::KeyBoundsName(b.cached->device().key_bounds));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintTable(reporter, options.device, b.anchor.get(), b.cached->device());

  b.FreeMemory();
  b.cached->Close();
  b.uncached->Close();
  b.daemon.reset();
  b.floor.reset();
  b.layers.reset();
  benchmark::Shutdown();
  return 0;
}
