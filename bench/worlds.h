// The worlds the cache benchmarks share: the registration cache with N live registrations on
// the sim, and its anchor, UCX's ucs_rcache with the same N regions — so that cache_bench and
// shm_bench measure hits over exactly the same layouts — and a reporter that keeps each run's
// rate for the summaries.
#ifndef REGCACHE_BENCH_WORLDS_H_
#define REGCACHE_BENCH_WORLDS_H_

#include <malloc.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include <ucs/memory/rcache.h>
}

#include "base/log.h"
#include "benchmark/benchmark.h"
#include "cache/reg_cache.h"
#include "hca/sim/sim_device.h"

namespace regcache::bench {

inline constexpr uint64_t kRegionBytes = 4096;
inline constexpr regcache::hca::AccessFlags kRw =
    regcache::hca::kLocalWrite | regcache::hca::kRemoteWrite | regcache::hca::kRemoteRead;

inline uint64_t NextRandom(uint64_t& x) {  // xorshift64*: cheap, per thread
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  return x * 0x2545F4914F6CDD1Dull;
}

// A sim device, a cache and one tenant with `regions` live (released, cached) registrations of
// 4 KiB each over one attachment. Built once per region count and kept for the whole run.
struct CacheWorld {
  std::unique_ptr<regcache::hca::sim::SimDevice> device;
  std::unique_ptr<regcache::cache::RegCache> cache;
  regcache::cache::TenantId tenant = 0;
  uint8_t* mem = nullptr;
  uint64_t regions = 0;
  uint64_t bytes_per_registration = 0;
  std::atomic<uint64_t> next_miss{0};  // index of the next never-registered range
  uint64_t capacity = 0;               // ranges the attachment holds
  uint64_t spacing = kRegionBytes;     // bytes from one region's start to the next

  static CacheWorld* Get(uint64_t regions, uint64_t spacing = kRegionBytes) {
    static std::mutex* mu = new std::mutex;
    static std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<CacheWorld>>* worlds =
        new std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<CacheWorld>>;
    std::lock_guard<std::mutex> lock(*mu);  // benchmark threads race to the first Get
    auto& w = (*worlds)[{regions, spacing}];
    if (w == nullptr) w = Build(regions, spacing);
    return w.get();
  }

  static std::unique_ptr<CacheWorld> Build(uint64_t regions, uint64_t spacing) {
    auto w = std::make_unique<CacheWorld>();
    w->regions = regions;
    w->spacing = spacing;
    // Dense worlds keep room for misses and invalidations; scattered ones only serve hits.
    w->capacity = spacing == kRegionBytes ? regions + (1u << 19) : regions;
    regcache::hca::sim::SimOptions sim;
    sim.max_keys = static_cast<uint32_t>(regions + (1u << 18));
    w->device = std::move(*regcache::hca::sim::NewSimDevice(sim));
    regcache::cache::CacheOptions o;
    // One class (every range here is one KLM entry), pre-filled with a key for every region so
    // that the memory measured below is the cache's, not the device model's key table.
    o.pool.capacity_classes = {4};
    o.pool.low_watermark = static_cast<uint32_t>(regions + 8192);
    o.pool.high_watermark = o.pool.low_watermark;
    o.background_maintenance = false;
    w->cache = std::move(*regcache::cache::RegCache::Create(w->device.get(), o));
    w->tenant = *w->cache->OpenTenant({});
    const uint64_t bytes = w->capacity * spacing;
    w->mem = static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    RC_CHECK(w->mem != MAP_FAILED);
    regcache::cache::BackingSpec spec;
    spec.va = reinterpret_cast<uint64_t>(w->mem);
    spec.local_addr = w->mem;
    spec.length = bytes;
    // 100 GiB of scattered layout is attached on demand: the sim then keeps no page list for
    // it. Hits never touch the backing either way.
    spec.on_demand = spacing != kRegionBytes;
    absl::StatusOr<regcache::cache::BackingId> attached = w->cache->AddBacking(w->tenant, spec);
    RC_CHECK(attached.ok()) << attached.status();
    w->cache->Maintain();  // creates the pool's keys
    const size_t before = ::mallinfo2().uordblks;
    for (uint64_t i = 0; i < regions; ++i) {
      auto g = w->cache->Register(w->tenant, w->va(i), kRegionBytes, kRw);
      RC_CHECK(g.ok()) << g.status();
      RC_CHECK(w->cache->Release(w->tenant, g->handle).ok());
    }
    const size_t after = ::mallinfo2().uordblks;
    w->bytes_per_registration = (after - before) / regions;
    w->next_miss.store(regions);
    return w;
  }

  uint64_t va(uint64_t i) const { return reinterpret_cast<uint64_t>(mem) + i * spacing; }
};

// --- The anchor: ucs_rcache with no-op callbacks ---

inline ucs_status_t NoopReg(void*, ucs_rcache_t*, void*, ucs_rcache_region_t*, uint16_t) {
  return UCS_OK;
}
inline void NoopDereg(void*, ucs_rcache_t*, ucs_rcache_region_t*) {}
inline void NoopDump(void*, ucs_rcache_t*, ucs_rcache_region_t*, char* buf, size_t max) {
  if (max > 0) buf[0] = '\0';
}

struct UcsWorld {
  ucs_rcache_t* rcache = nullptr;
  uint8_t* mem = nullptr;
  uint64_t regions = 0;
  uint64_t spacing = kRegionBytes;

  static UcsWorld* Get(uint64_t regions, uint64_t spacing) {
    static std::mutex* mu = new std::mutex;
    static std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<UcsWorld>>* worlds =
        new std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<UcsWorld>>;
    std::lock_guard<std::mutex> lock(*mu);
    auto& w = (*worlds)[{regions, spacing}];
    if (w == nullptr) {
      w = std::make_unique<UcsWorld>();
      w->regions = regions;
      w->spacing = spacing;
      static const ucs_rcache_ops_t ops = {NoopReg, NoopDereg, NoopDump};
      ucs_rcache_params_t p = {};
      p.region_struct_size = sizeof(ucs_rcache_region_t);
      p.alignment = 64;
      p.max_alignment = 4096;
      p.ucm_events = 0;  // no memory hooks: the anchor measures lookups only
      p.ops = &ops;
      p.flags = UCS_RCACHE_FLAG_NO_PFN_CHECK;
      p.max_regions = static_cast<unsigned long>(-1);
      p.max_size = static_cast<size_t>(-1);
      p.max_unreleased = static_cast<size_t>(-1);
      RC_CHECK(ucs_rcache_create(&p, "cache_bench", nullptr, &w->rcache) == UCS_OK);
      w->mem = static_cast<uint8_t*>(::mmap(nullptr, regions * spacing, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
      RC_CHECK(w->mem != MAP_FAILED);
      for (uint64_t i = 0; i < regions; ++i) {
        ucs_rcache_region_t* r;
        RC_CHECK(ucs_rcache_get(w->rcache, w->mem + i * spacing, kRegionBytes,
                                PROT_READ | PROT_WRITE, nullptr, &r) == UCS_OK);
        ucs_rcache_region_put(w->rcache, r);
      }
    }
    return w.get();
  }
};

// Collects items/s per run name for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      auto it = r.counters.find("items_per_second");
      if (it != r.counters.end()) rates_[r.benchmark_name()] = it->second;
      auto b = r.counters.find("bytes_per_registration");
      if (b != r.counters.end()) bytes_per_registration_ = b->second;
    }
  }
  double Rate(const std::string& name) const {
    auto it = rates_.find(name);
    return it == rates_.end() ? 0 : it->second;
  }
  double bytes_per_registration() const { return bytes_per_registration_; }

 private:
  std::map<std::string, double> rates_;
  double bytes_per_registration_ = 0;
};

// The timed loops of a hit, shared so that every benchmark measures the same thing: a random one
// of the world's regions each iteration, taken and given back.
inline void RunCacheHits(benchmark::State& state, CacheWorld* w) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    const uint64_t i = NextRandom(x) % w->regions;
    auto g = w->cache->Register(w->tenant, w->va(i), kRegionBytes, kRw);
    if (!g.ok() || !g->hit) {
      state.SkipWithError("expected a hit");
      break;
    }
    benchmark::DoNotOptimize(g->rkey);
    (void)w->cache->Release(w->tenant, g->handle);
  }
  state.SetItemsProcessed(state.iterations());
}

inline void RunUcsHits(benchmark::State& state, UcsWorld* w) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    const uint64_t i = NextRandom(x) % w->regions;
    ucs_rcache_region_t* r;
    if (ucs_rcache_get(w->rcache, w->mem + i * w->spacing, kRegionBytes, PROT_READ | PROT_WRITE,
                       nullptr, &r) != UCS_OK) {
      state.SkipWithError("ucs_rcache_get failed");
      break;
    }
    benchmark::DoNotOptimize(r);
    ucs_rcache_region_put(w->rcache, r);
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace regcache::bench
#endif  // REGCACHE_BENCH_WORLDS_H_
