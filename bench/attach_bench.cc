// Attaching large memory: time and daemon memory of Daemon::AttachMemory for 1, 16 and 64 GiB
// on the sim, with 4 KiB translation pages (the anchor: every backing before large pages, and
// still what --max_backing_page_log=12 gives) and with the largest page the memory allows
// (2 MiB: the daemon's memfd mappings of 2 MiB multiples are 2 MiB aligned). Same run, same
// daemon code, same sizes; the summary prints both and their ratio.
//
// The memory is a sparse memfd the attach never touches (the sim translates the daemon's
// virtual addresses; a pinning backend would fault it in), so 64 GiB fits a small machine.
// Daemon memory is measured in this process around each attach: peak RSS growth (VmHWM after
// clear_refs), RSS kept while attached, and heap growth (mallinfo2).
//
// BM_BringMemory puts memory a client brings by descriptor (its own memfd) next to memory the
// daemon allocates, same sizes, same run.
//
//   attach_bench [--benchmark_filter=...]
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "hca/sim/sim_device.h"
#include "service/daemon.h"

namespace {

using regcache::service::Daemon;
using regcache::service::DaemonConfig;
using regcache::service::MemoryInfo;
using regcache::service::PeerCredentials;

constexpr double kMiB = 1024.0 * 1024.0;

uint64_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}
uint64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }
uint64_t HeapBytes() {
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A session of this process on `daemon`, its fast-path files closed (unused here).
absl::StatusOr<regcache::service::SessionGrant> OpenSession(Daemon& daemon) {
  auto grant = daemon.OpenSession(PeerCredentials{::getpid(), ::getuid(), ::getgid()});
  if (grant.ok()) {
    ::close(grant->channel_fd);
    ::close(grant->state_fd);
  }
  return grant;
}

// Args: GiB attached, largest translation page (log2; 12 = 4 KiB only).
void BM_Attach(benchmark::State& state) {
  const uint64_t bytes = static_cast<uint64_t>(state.range(0)) << 30;
  regcache::hca::sim::RegisterBackend();
  DaemonConfig config;
  config.cache.background_maintenance = false;
  config.max_backing_page_log = static_cast<uint32_t>(state.range(1));
  auto daemon = Daemon::Create(config, nullptr);
  if (!daemon.ok()) return state.SkipWithError(daemon.status().ToString().c_str());
  auto grant = OpenSession(**daemon);
  if (!grant.ok()) return state.SkipWithError(grant.status().ToString().c_str());
  double peak = 0, kept = 0, heap = 0;
  uint32_t page_log = 0;
  constexpr uint64_t kClientVa = uint64_t{1} << 44;  // where the client would map it
  for (auto _ : state) {
    auto mem = (*daemon)->AllocateMemory(grant->id, bytes, false);
    if (!mem.ok()) return state.SkipWithError(mem.status().ToString().c_str());
    ::close(mem->fd);
    ::malloc_trim(0);
    ResetPeakRss();
    const uint64_t rss0 = RssBytes(), heap0 = HeapBytes();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status attached = (*daemon)->AttachMemory(grant->id, mem->id, kClientVa, false);
    const auto t1 = std::chrono::steady_clock::now();
    if (!attached.ok()) return state.SkipWithError(attached.ToString().c_str());
    peak += static_cast<double>(PeakRssBytes() - rss0);
    kept += static_cast<double>(RssBytes()) - static_cast<double>(rss0);
    heap += static_cast<double>(HeapBytes()) - static_cast<double>(heap0);
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    absl::StatusOr<std::vector<MemoryInfo>> listed = (*daemon)->ListMemory(grant->id);
    if (!listed.ok()) return state.SkipWithError(listed.status().ToString().c_str());
    for (const MemoryInfo& m : *listed) page_log = m.log_page_size;
    if (absl::Status d = (*daemon)->DetachMemory(grant->id, mem->id); !d.ok()) {
      return state.SkipWithError(d.ToString().c_str());
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["peak_rss_MiB"] = peak / n / kMiB;
  state.counters["kept_rss_MiB"] = kept / n / kMiB;
  state.counters["heap_MiB"] = heap / n / kMiB;
  state.counters["page_log"] = page_log;
}
BENCHMARK(BM_Attach)
    ->ArgNames({"GiB", "max_page_log"})
    ->Args({1, 12})
    ->Args({1, 30})
    ->Args({16, 12})
    ->Args({16, 30})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attach)
    ->ArgNames({"GiB", "max_page_log"})
    ->Args({64, 12})
    ->Args({64, 30})
    ->Iterations(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Memory the client brings by descriptor next to memory the daemon allocates, same sizes, largest
// page: ImportMemory of the client's sealable memfd (the daemon seals and maps it) plus its
// AttachMemory, against AllocateMemory plus AttachMemory. Args: GiB, 1 = by descriptor (0: the
// daemon allocates: the anchor).
void BM_BringMemory(benchmark::State& state) {
  const uint64_t bytes = static_cast<uint64_t>(state.range(0)) << 30;
  const bool by_fd = state.range(1) != 0;
  regcache::hca::sim::RegisterBackend();
  DaemonConfig config;
  config.cache.background_maintenance = false;
  auto daemon = Daemon::Create(config, nullptr);
  if (!daemon.ok()) return state.SkipWithError(daemon.status().ToString().c_str());
  auto grant = OpenSession(**daemon);
  if (!grant.ok()) return state.SkipWithError(grant.status().ToString().c_str());
  double peak = 0, heap = 0;
  constexpr uint64_t kClientVa = uint64_t{1} << 44;
  for (auto _ : state) {
    int client_fd = -1;
    if (by_fd) {  // the client's own memfd, made before the clock starts, as a client would
      client_fd = ::memfd_create("attach_bench", MFD_ALLOW_SEALING | MFD_CLOEXEC);
      if (client_fd < 0 || ::ftruncate(client_fd, static_cast<off_t>(bytes)) != 0) {
        return state.SkipWithError("memfd_create / ftruncate");
      }
    }
    ::malloc_trim(0);
    ResetPeakRss();
    const uint64_t rss0 = RssBytes(), heap0 = HeapBytes();
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t id = 0;
    if (by_fd) {
      auto m = (*daemon)->ImportMemory(grant->id, client_fd, 0, bytes);  // takes the fd
      if (!m.ok()) return state.SkipWithError(m.status().ToString().c_str());
      id = *m;
    } else {
      auto m = (*daemon)->AllocateMemory(grant->id, bytes, false);
      if (!m.ok()) return state.SkipWithError(m.status().ToString().c_str());
      ::close(m->fd);  // the client's copy, which it would map
      id = m->id;
    }
    absl::Status attached = (*daemon)->AttachMemory(grant->id, id, kClientVa, false);
    const auto t1 = std::chrono::steady_clock::now();
    if (!attached.ok()) return state.SkipWithError(attached.ToString().c_str());
    peak += static_cast<double>(PeakRssBytes() - rss0);
    heap += static_cast<double>(HeapBytes()) - static_cast<double>(heap0);
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (absl::Status d = (*daemon)->DetachMemory(grant->id, id); !d.ok()) {
      return state.SkipWithError(d.ToString().c_str());
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["peak_rss_MiB"] = peak / n / kMiB;
  state.counters["heap_MiB"] = heap / n / kMiB;
}
BENCHMARK(BM_BringMemory)
    ->ArgNames({"GiB", "by_fd"})
    ->ArgsProduct({{1, 16, 64}, {0, 1}})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

class Collector : public benchmark::ConsoleReporter {
 public:
  struct Result {
    double ms = 0;
    std::map<std::string, double> counters;
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      Result& out = results[r.benchmark_name()];
      out.ms = r.GetAdjustedRealTime();  // kMillisecond
      for (const auto& [name, c] : r.counters) out.counters[name] = c.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  const Result* Find(const std::string& prefix) const {
    for (const auto& [name, r] : results) {
      if (name.rfind(prefix, 0) == 0) return &r;
    }
    return nullptr;
  }
  std::map<std::string, Result> results;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  Collector c;
  benchmark::RunSpecifiedBenchmarks(&c);
  std::printf(
      "\n== attach_bench summary (sim device; anchor: 4 KiB pages, same size, same run) ==\n");
  for (int gib : {1, 16, 64}) {
    const std::string base = "BM_Attach/GiB:" + std::to_string(gib) + "/max_page_log:";
    const auto* before = c.Find(base + "12/");
    const auto* after = c.Find(base + "30/");
    if (before == nullptr || after == nullptr || after->ms <= 0) continue;
    auto line = [gib](const char* what, const Collector::Result* r) {
      std::printf(
          "%2d GiB %-13s page 2^%-2.0f attach %9.2f ms  peak RSS +%8.2f MiB (%7.3f MiB/GiB)"
          "  kept +%7.2f MiB  heap +%7.2f MiB\n",
          gib, what, r->counters.at("page_log"), r->ms, r->counters.at("peak_rss_MiB"),
          r->counters.at("peak_rss_MiB") / gib, r->counters.at("kept_rss_MiB"),
          r->counters.at("heap_MiB"));
    };
    line("anchor 4 KiB", before);
    line("largest page", after);
    std::printf(
        "%2d GiB ratio anchor/largest: time %.1fx, peak RSS %.1fx\n", gib, before->ms / after->ms,
        before->counters.at("peak_rss_MiB") / std::max(after->counters.at("peak_rss_MiB"), 0.001));
  }
  std::printf("\n== memory brought by descriptor vs allocated by the daemon (largest page) ==\n");
  for (int gib : {1, 16, 64}) {
    const std::string base = "BM_BringMemory/GiB:" + std::to_string(gib) + "/by_fd:";
    const auto* alloc = c.Find(base + "0/");
    const auto* by_fd = c.Find(base + "1/");
    if (alloc == nullptr || by_fd == nullptr || alloc->ms <= 0) continue;
    std::printf(
        "%2d GiB  AllocateMemory+Attach %8.3f ms peak RSS +%7.2f MiB | ImportMemory(fd)+Attach "
        "%8.3f ms peak RSS +%7.2f MiB | ratio fd/allocate: time %.2fx\n",
        gib, alloc->ms, alloc->counters.at("peak_rss_MiB"), by_fd->ms,
        by_fd->counters.at("peak_rss_MiB"), by_fd->ms / alloc->ms);
  }
  return 0;
}
