// regmr_bench's batch anchor, and the two sides of a batch case measured in pairs: one batch by
// regcache and one by ibv_reg_mr + ibv_dereg_mr of the same ranges, back to back in one loop,
// the order swapped every pair. In a guest whose speed drifts by half between the rows of one
// run (rxe under TCG), rows measured minutes apart compare two different machines; a pair's
// two halves run within milliseconds of each other, so the median of the pairs' ratios keeps
// the drift out of the ratio.
#ifndef REGCACHE_BENCH_BATCH_PAIRS_H_
#define REGCACHE_BENCH_BATCH_PAIRS_H_

#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench/batch_case.h"
#include "benchmark/benchmark.h"
#include "regcache/client.h"

namespace regcache::bench {

// One anchor batch: ibv_reg_mr of every item's range in `pd`, then ibv_dereg_mr of each (their
// time to `secs`). False (the error set on `state`, nothing left registered) on a failure.
inline bool AnchorBatch(benchmark::State& state, ibv_pd* pd,
                        const std::vector<api::RegisterItem>& items, int access, double* secs) {
  std::vector<ibv_mr*> mrs(items.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < items.size(); ++i) {
    mrs[i] = ::ibv_reg_mr(pd, const_cast<void*>(items[i].addr), items[i].length, access);
    if (mrs[i] == nullptr) {
      state.SkipWithError((std::string("ibv_reg_mr: ") + std::strerror(errno)).c_str());
      for (size_t j = 0; j < i; ++j) (void)::ibv_dereg_mr(mrs[j]);
      return false;
    }
  }
  bool ok = true;
  for (ibv_mr* mr : mrs) ok = ::ibv_dereg_mr(mr) == 0 && ok;
  *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ok) state.SkipWithError("ibv_dereg_mr failed");
  return ok;
}

// The pairs of a row: reported as the medians of each side (ours_p50_ns, anchor_p50_ns, ns a
// batch) and the median of the pairs' ratios, anchor over ours (ratio_p50).
class PairTimes {
 public:
  void Add(double ours_secs, double anchor_secs) {
    ours_.push_back(ours_secs);
    anchor_.push_back(anchor_secs);
    ratios_.push_back(anchor_secs / ours_secs);
  }
  void Report(benchmark::State& state) {
    if (ratios_.empty()) return;
    state.counters["ours_p50_ns"] = Median(ours_) * 1e9;
    state.counters["anchor_p50_ns"] = Median(anchor_) * 1e9;
    state.counters["ratio_p50"] = Median(ratios_);
  }

 private:
  std::vector<double> ours_, anchor_, ratios_;
};

}  // namespace regcache::bench

#endif  // REGCACHE_BENCH_BATCH_PAIRS_H_
