// Stats declared as data.
//
// Each component lists its counters, gauges and histograms once, in an X-macro, and gets a
// plain struct of them plus a description the registry can walk:
//
//   #define UMR_ENGINE_STATS(COUNTER, GAUGE, HISTOGRAM)                  (one macro:)
//     COUNTER(posted, "UMR work requests posted")                        (each line but
//     COUNTER(failed, "UMR completions with an error status")             the last ends
//     GAUGE(in_flight, "UMRs posted and not yet completed")               in a backslash)
//     HISTOGRAM(latency_ns, "post-to-completion latency, nanoseconds")
//   RC_DEFINE_STATS(UmrEngineStats, UMR_ENGINE_STATS);
//
//   UmrEngineStats stats;             // members: stats.posted, stats.in_flight, ...
//   stats.posted.Inc();
//   registry.Register("umr_engine", &stats);   // shows up in every snapshot while registered
//
// A snapshot is a list of samples (component, name, help, kind, value or histogram) that the
// /metrics endpoint (server/metrics_server.h, which names them by Prometheus's conventions: see
// docs/metrics.md) and the gRPC Stats call render. Tests assert on members directly or on
// snapshots. A stat's name carries its unit: `_bytes` for bytes, `_ns` for a histogram of
// nanoseconds (the endpoint converts it to seconds); a counter's name has no `_total` (the
// endpoint adds it).
//
// Thread safety: updates are lock-free atomics (relaxed: stats order nothing). Counter is a
// single atomic; HotCounter gives every counting thread its own slot, written with no locked
// instruction, for paths that several threads hit at once (a shared line would serialize
// them). Registry is internally synchronized; a registered struct must outlive its
// registration (use StatsRegistration).
#ifndef REGCACHE_BASE_STATS_H_
#define REGCACHE_BASE_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"

namespace regcache::base::stats {

enum class Kind { kCounter, kGauge, kHistogram };

class Counter {
 public:
  void Inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// A counter that threads bump without a locked instruction and without sharing a line: each
// thread that counts owns a block of slots (one per live HotCounter) and adds with a plain
// load and store (it is the only writer of its slot). value() sums the live threads' slots
// and what exited threads left behind. If more HotCounters are alive than there are slots,
// the rest count on a shared atomic instead (correct, only slower).
class HotCounter {
 public:
  HotCounter();
  ~HotCounter();
  HotCounter(const HotCounter&) = delete;
  HotCounter& operator=(const HotCounter&) = delete;

  void Inc(uint64_t n = 1) {
    if (slot_ < 0) {
      fallback_.fetch_add(n, std::memory_order_relaxed);
      return;
    }
    std::atomic<uint64_t>* block = tls_block_ != nullptr ? tls_block_ : AttachThread();
    if (block == nullptr) {  // this thread is exiting: its block is gone
      fallback_.fetch_add(n, std::memory_order_relaxed);
      return;
    }
    std::atomic<uint64_t>& v = block[slot_];
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t value() const;

  static constexpr int kSlots = 512;  // live HotCounters with a per-thread slot

 private:
  // Makes and registers this thread's block of kSlots counters; nullptr once the thread's
  // thread-local destructors have run.
  static std::atomic<uint64_t>* AttachThread();

 public:
  // At thread exit (internal): folds the thread's counts into the totals.
  static void DetachThread(std::atomic<uint64_t>* block);

 private:
  // constinit: other translation units read it directly, without a TLS wrapper call.
  static constinit thread_local std::atomic<uint64_t>* tls_block_;
  int slot_ = -1;
  std::atomic<uint64_t> fallback_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void Add(int64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  void Sub(int64_t n = 1) { v_.fetch_sub(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// A read-only copy of a histogram. Buckets are log-linear: four sub-buckets per power of two,
// so a percentile is within 19% of the true value (and exact for values below 8).
struct HistogramSnapshot {
  static constexpr int kSubBits = 2;
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;  // index of 2^64-1 is the last

  uint64_t count = 0;
  uint64_t sum = 0;
  uint64_t max = 0;
  std::array<uint64_t, kBuckets> buckets{};

  // Bucket index of a value, and the largest value a bucket holds.
  static int BucketOf(uint64_t v);
  static uint64_t BucketUpperBound(int bucket);

  // Upper bound of the bucket holding the p-th percentile (0 < p <= 100), clamped to max;
  // 0 when empty.
  uint64_t Percentile(double p) const;
  double Mean() const { return count == 0 ? 0.0 : static_cast<double>(sum) / count; }
};

class Histogram {
 public:
  void Record(uint64_t v) { Record(v, 1); }
  // `v`, `times` times over (a batch whose items all took the same time): one update.
  void Record(uint64_t v, uint64_t times);
  HistogramSnapshot Snapshot() const;

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
  std::array<std::atomic<uint64_t>, HistogramSnapshot::kBuckets> buckets_{};
};

// One stat as seen through a snapshot.
struct Sample {
  std::string component;
  std::string name;
  std::string help;
  Kind kind = Kind::kCounter;
  int64_t value = 0;            // counters and gauges
  HistogramSnapshot histogram;  // histograms
};

// Walks the stats of one struct; generated by RC_DEFINE_STATS.
class Visitor {
 public:
  virtual ~Visitor() = default;
  virtual void Visit(absl::string_view name, absl::string_view help, const Counter& c) = 0;
  virtual void Visit(absl::string_view name, absl::string_view help, const HotCounter& c) = 0;
  virtual void Visit(absl::string_view name, absl::string_view help, const Gauge& g) = 0;
  virtual void Visit(absl::string_view name, absl::string_view help, const Histogram& h) = 0;
};

// Copies every stat of `stats` (a struct made by RC_DEFINE_STATS) into samples.
template <typename StatsStruct>
std::vector<Sample> SnapshotOf(absl::string_view component, const StatsStruct& stats);

// The value of stat `name` of `component` in `samples`: the series whose component is exactly
// `component` (labels included, if given), else the one series whose component is `component`
// with labels (`cache` finds `cache{device="sim0"}`). kFailedPrecondition when several labelled
// series match (name one with its labels); kNotFound when none does.
absl::StatusOr<int64_t> FindValue(const std::vector<Sample>& samples, absl::string_view component,
                                  absl::string_view name);

class Registry {
 public:
  using Id = uint64_t;

  // Adds a component. `component` is a Prometheus-safe name ([a-z0-9_]); labels may follow in
  // braces, e.g. `cache{tenant="7"}`. The struct must stay alive until Unregister(id).
  template <typename StatsStruct>
  Id Register(std::string component, const StatsStruct* stats) {
    return Add(std::move(component),
               [stats](absl::string_view c) { return SnapshotOf(c, *stats); });
  }
  // Adds a child registry: every sample of its snapshot, with `labels` (`device="mlx5_1"`)
  // added to its component's labels (`cache` -> `cache{device="mlx5_1"}`, `cache{tenant="7"}`
  // -> `cache{device="mlx5_1",tenant="7"}`). A daemon with several devices gives each its own
  // registry this way, so their components keep their names and differ by label. The child must
  // stay alive until Unregister(id), and must never contain this registry.
  Id Register(std::string labels, const Registry* child);
  // Adds a collector: samples made by `collect` on every snapshot, each with its own component
  // (labels included, e.g. `tenant{tenant="1000"}`), for stats that are not counters kept in a
  // struct but read from state when asked (per-tenant usage). `collect` runs with this
  // registry's lock held: it must not call back into this registry; it must stay callable until
  // Unregister(id).
  Id RegisterCollector(std::function<std::vector<Sample>()> collect);
  void Unregister(Id id);

  std::vector<Sample> Snapshot() const;

  // The process-wide registry the daemon exports.
  static Registry& Global();

 private:
  using SnapshotFn = std::function<std::vector<Sample>(absl::string_view component)>;
  struct Entry {
    Id id;
    std::string component;
    SnapshotFn fn;
  };
  Id Add(std::string component, SnapshotFn fn);

  mutable base::Mutex mu_;
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Registers for its lifetime (RAII).
class Registration {
 public:
  Registration() = default;
  template <typename StatsStruct>
  Registration(Registry& registry, std::string component, const StatsStruct* stats)
      : registry_(&registry), id_(registry.Register(std::move(component), stats)) {}
  Registration(Registry& registry, std::function<std::vector<Sample>()> collect)
      : registry_(&registry), id_(registry.RegisterCollector(std::move(collect))) {}
  Registration(Registration&& other) noexcept { *this = std::move(other); }
  Registration& operator=(Registration&& other) noexcept;
  ~Registration();

 private:
  Registry* registry_ = nullptr;
  Registry::Id id_ = 0;
};

namespace internal {
class Collector final : public Visitor {
 public:
  explicit Collector(absl::string_view component) : component_(component) {}
  void Visit(absl::string_view name, absl::string_view help, const Counter& c) override;
  void Visit(absl::string_view name, absl::string_view help, const HotCounter& c) override;
  void Visit(absl::string_view name, absl::string_view help, const Gauge& g) override;
  void Visit(absl::string_view name, absl::string_view help, const Histogram& h) override;
  std::vector<Sample> Take() { return std::move(samples_); }

 private:
  std::string component_;
  std::vector<Sample> samples_;
};
}  // namespace internal

template <typename StatsStruct>
std::vector<Sample> SnapshotOf(absl::string_view component, const StatsStruct& stats) {
  internal::Collector collector(component);
  stats.VisitStats(collector);
  return collector.Take();
}

}  // namespace regcache::base::stats
// --- Declaration macros ---
#define RC_STATS_MEMBER_COUNTER_(name, help) ::regcache::base::stats::Counter name;
#define RC_STATS_MEMBER_HOT_COUNTER_(name, help) ::regcache::base::stats::HotCounter name;
#define RC_STATS_MEMBER_GAUGE_(name, help) ::regcache::base::stats::Gauge name;
#define RC_STATS_MEMBER_HISTOGRAM_(name, help) ::regcache::base::stats::Histogram name;
#define RC_STATS_VISIT_(name, help) visitor.Visit(#name, help, name);

// RC_DEFINE_STATS(Type, LIST): LIST(COUNTER, GAUGE, HISTOGRAM) names each stat once.
#define RC_DEFINE_STATS(Type, LIST)                                                    \
  struct Type {                                                                        \
    LIST(RC_STATS_MEMBER_COUNTER_, RC_STATS_MEMBER_GAUGE_, RC_STATS_MEMBER_HISTOGRAM_) \
    void VisitStats(::regcache::base::stats::Visitor& visitor) const {                 \
      LIST(RC_STATS_VISIT_, RC_STATS_VISIT_, RC_STATS_VISIT_)                          \
    }                                                                                  \
  }

// Same, with counters that several threads bump on a hot path (sharded).
#define RC_DEFINE_HOT_STATS(Type, LIST)                                                    \
  struct Type {                                                                            \
    LIST(RC_STATS_MEMBER_HOT_COUNTER_, RC_STATS_MEMBER_GAUGE_, RC_STATS_MEMBER_HISTOGRAM_) \
    void VisitStats(::regcache::base::stats::Visitor& visitor) const {                     \
      LIST(RC_STATS_VISIT_, RC_STATS_VISIT_, RC_STATS_VISIT_)                              \
    }                                                                                      \
  }

#endif  // REGCACHE_BASE_STATS_H_
