// regmr_bench's batch case, from the client's side: one batch of RegisterBatch and
// ReleaseBatch, timed, with its keys invalidated after; the check of every answer; and the
// untimed warm-up that the batch case and the rows below it (bench/batch_layers.h,
// bench/bind_floor.h) share.
#ifndef REGCACHE_BENCH_BATCH_CASE_H_
#define REGCACHE_BENCH_BATCH_CASE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "regcache/client.h"

namespace regcache::bench {

// Fails the run and returns false unless every result is OK (and, for grants, a miss).
template <typename T>
bool AllOk(benchmark::State& state, const absl::StatusOr<std::vector<T>>& got, size_t n) {
  std::string why;
  if (!got.ok()) {
    why = got.status().ToString();
  } else if (got->size() != n) {
    why = "a batch answered the wrong number of items";
  } else {
    for (const T& one : *got) {
      if constexpr (std::is_same_v<T, absl::Status>) {
        if (!one.ok()) why = one.ToString();
      } else {
        if (!one.ok())
          why = one.status().ToString();
        else if (one->hit)
          why = "expected a miss";
      }
      if (!why.empty()) break;
    }
  }
  if (why.empty()) return true;
  state.SkipWithError(why.c_str());
  return false;
}

// One batch: RegisterBatch and ReleaseBatch (their time to `secs`), then, untimed, every key
// invalidated so that the next batch misses again. False (the error set on `state`) on a failure.
bool RunBatch(benchmark::State& state, api::Client& c, const std::vector<api::RegisterItem>& items,
              double* secs) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<absl::StatusOr<api::Key>>> keys = c.RegisterBatch(items);
  if (!AllOk(state, keys, items.size())) return false;
  std::vector<uint64_t> handles;
  for (const auto& k : *keys) handles.push_back(k->handle);
  absl::StatusOr<std::vector<absl::Status>> released = c.ReleaseBatch(handles);
  *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!AllOk(state, released, handles.size())) return false;
  for (uint64_t h : handles) {
    if (absl::Status s = c.Invalidate(h); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return false;
    }
  }
  return true;
}

// The median of `v` (reorders it). REQUIRES: v is not empty.
inline double Median(std::vector<double>& v) {
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// A row's iteration times, reported as its median (the p50_ns counter, ns a batch), which the
// summary prints beside the mean: in the TCG guest one slow batch moves the mean of a handful of
// batches by a third, and the median hardly.
class IterationTimes {
 public:
  void Add(double secs) { secs_.push_back(secs); }
  void Report(benchmark::State& state) {
    if (secs_.empty()) return;
    state.counters["p50_ns"] = Median(secs_) * 1e9;
  }

 private:
  std::vector<double> secs_;
};

// Untimed warm-up, at least two batches and 100 ms: the pool grows to what a steady stream of
// such batches keeps (an invalidated key waits out its quarantine before it is handed out
// again), as a running daemon's pool has; otherwise the first case measured also pays for
// creating keys. False where a batch failed.
template <typename OneBatch>
bool WarmUp(OneBatch one) {
  const absl::Time until = absl::Now() + absl::Milliseconds(100);
  for (int i = 0; i < 2 || absl::Now() < until; ++i) {
    if (!one()) return false;
  }
  return true;
}

}  // namespace regcache::bench

#endif  // REGCACHE_BENCH_BATCH_CASE_H_
