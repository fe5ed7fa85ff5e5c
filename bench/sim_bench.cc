// sim_bench: how fast the software HCA translates and executes UMRs.
//
//   BM_TranslateMtt    a 64-byte peer RDMA READ through a backing (MTT) key: all key checks,
//                      MTT lookup, the copy. Anchor BM_MemcpyAnchor: memcpy of the same 64
//                      bytes — the cost floor of moving the data with no translation at all.
//   BM_TranslateKlm2   the same READ through a window -> parent -> backing chain (two KLM
//                      levels, every level checked). Same anchor.
//   BM_ExecuteUmr      one 4-KLM map posted into the ring (umr/ builder), doorbell, executed
//                      inline (gather, decode, check, commit), CQE polled every 16.
//                      Anchors: measured in-run, BM_WqeCopyAnchor copies the 192-byte WQE (what a
//                      UMR costs at least: moving its bytes); published, "fast registration per I/O
//                      up to ~5M/s inline" (Linux commit 064e5262; docs/benchmarks.md, Reference
//                      figures), a hardware figure not measurable here.
// A summary with the ratios is printed at the end.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "hca/sim/sim_device.h"

namespace {

using namespace regcache::hca;  // NOLINT: a benchmark program

constexpr uint64_t kPage = 4096;
constexpr size_t kBytes = 64;

struct Fixture {
  std::unique_ptr<sim::SimDevice> dev;
  Pd pd;
  std::unique_ptr<Queue> q;
  std::unique_ptr<Peer> peer;
  std::vector<uint8_t> mem;
  uint64_t base = 0;
  Backing backing;
  Key window = 0;

  Fixture() {
    dev = sim::NewSimDevice(sim::SimOptions{}).value();
    pd = dev->AllocPd().value();
    q = dev->CreateQueue(pd, QueueOptions{1024}).value();
    peer = dev->CreatePeer(pd).value();
    mem.assign(257 * kPage, 1);
    base = (reinterpret_cast<uint64_t>(mem.data()) + kPage - 1) & ~(kPage - 1);
    backing = dev->RegisterBacking(pd, base, 256 * kPage, kAllAccess, {}).value();
    std::vector<Key> keys = dev->CreateIndirectKeys(pd, 4, 2, {}).value();
    Map(keys[0], {{backing.key, base, 128 * kPage}}, 0);
    const Key parent = MakeKey(KeyIndex(keys[0]), 1);
    Map(keys[1], {{parent, 0, 64 * kPage}}, 0);
    window = MakeKey(KeyIndex(keys[1]), 1);
  }
  void Map(Key k, std::vector<KlmEntry> e, uint64_t start) {
    MapRequest r;
    r.key = k;
    r.new_variant = 1;
    r.klm = e;
    r.access = kAllAccess;
    r.start_addr = start;
    for (const auto& x : e) r.length += x.length;
    if (!q->PostMap(0, r).ok() || !q->Doorbell().ok()) abort();
    Completion c[1];
    if (q->Poll(absl::MakeSpan(c)) != 1 || !c[0].status.ok()) abort();
  }
};

Fixture& F() {
  static Fixture* f = new Fixture;
  return *f;
}

void BM_MemcpyAnchor(benchmark::State& state) {
  Fixture& f = F();
  uint8_t out[kBytes];
  uint64_t off = 0;
  for (auto _ : state) {
    std::memcpy(out, reinterpret_cast<const void*>(f.base + off), kBytes);
    benchmark::DoNotOptimize(out);
    off = (off + 4160) & (64 * kPage - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemcpyAnchor);

void BM_TranslateMtt(benchmark::State& state) {
  Fixture& f = F();
  uint8_t out[kBytes];
  uint64_t off = 0;
  for (auto _ : state) {
    if (!f.peer->Read(f.backing.key, f.base + off, absl::MakeSpan(out)).ok()) abort();
    benchmark::DoNotOptimize(out);
    off = (off + 4160) & (64 * kPage - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TranslateMtt);

void BM_TranslateKlm2(benchmark::State& state) {
  Fixture& f = F();
  uint8_t out[kBytes];
  uint64_t off = 0;
  for (auto _ : state) {
    if (!f.peer->Read(f.window, off, absl::MakeSpan(out)).ok()) abort();
    benchmark::DoNotOptimize(out);
    off = (off + 4160) & (32 * kPage - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TranslateKlm2);

void BM_WqeCopyAnchor(benchmark::State& state) {
  alignas(64) uint8_t ring[64 * 3 * 16];
  alignas(64) uint8_t wqe[192];
  std::memset(wqe, 0x25, sizeof(wqe));
  size_t slot = 0;
  for (auto _ : state) {
    std::memcpy(ring + slot * 192, wqe, 192);
    benchmark::ClobberMemory();
    slot = (slot + 1) & 15;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_WqeCopyAnchor);

void BM_ExecuteUmr(benchmark::State& state) {
  Fixture& f = F();
  std::vector<Key> keys = f.dev->CreateIndirectKeys(f.pd, 4, 64, {}).value();
  std::vector<KlmEntry> e;
  for (int i = 0; i < 4; ++i) e.push_back(KlmEntry{f.backing.key, f.base + i * kPage, kPage});
  MapRequest r;
  r.klm = e;
  r.access = kAllAccess;
  r.length = 4 * kPage;
  r.require_free = false;
  Completion c[16];
  uint64_t n = 0;
  for (auto _ : state) {
    r.key = keys[n % keys.size()];
    r.new_variant = static_cast<uint8_t>(n);
    r.options.signaled = (n % 16 == 15);
    if (!f.q->PostMap(n, r).ok() || !f.q->Doorbell().ok()) abort();
    if (n % 16 == 15) f.q->Poll(absl::MakeSpan(c));
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
  for (Key k : keys) (void)f.dev->DestroyKey(k);
}
BENCHMARK(BM_ExecuteUmr);

class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("items_per_second");
      if (it != r.counters.end()) rate[r.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> rate;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  auto get = [&](const char* n) { return collector.rate.count(n) ? collector.rate[n] : 0.0; };
  const double memcpy_rate = get("BM_MemcpyAnchor"), mtt = get("BM_TranslateMtt"),
               klm2 = get("BM_TranslateKlm2"), wqe = get("BM_WqeCopyAnchor"),
               umr = get("BM_ExecuteUmr");
  constexpr double kPublishedInlineUmr = 5e6;  // docs/benchmarks.md: inline fast registration
  std::printf("\n== sim_bench summary (items/s; ratio = measured / anchor) ==\n");
  if (memcpy_rate > 0) {
    std::printf("TranslateMtt   %12.0f/s  vs memcpy(64 B) %12.0f/s  ratio %.3f\n", mtt, memcpy_rate,
                mtt / memcpy_rate);
    std::printf("TranslateKlm2  %12.0f/s  vs memcpy(64 B) %12.0f/s  ratio %.3f\n", klm2,
                memcpy_rate, klm2 / memcpy_rate);
  }
  if (wqe > 0) {
    std::printf("ExecuteUmr     %12.0f/s  vs WQE copy(192 B) %9.0f/s  ratio %.3f\n", umr, wqe,
                umr / wqe);
  }
  std::printf(
      "ExecuteUmr     %12.0f/s  vs published ConnectX inline UMR ~%.0f/s (not measured "
      "here)  ratio %.2f\n",
      umr, kPublishedInlineUmr, umr / kPublishedInlineUmr);
  return 0;
}
