// The Prometheus text exposition (format 0.0.4) of /metrics (server/metrics_server.h), written so
// that `promtool check metrics` finds nothing to report: docs/metrics.md lists what it gives.
//
// What it guarantees, whatever the samples:
//   - one `# HELP` and one `# TYPE` per metric family, followed by all of that family's series,
//     even when the family's instances arrive apart (several devices' `cache{device="..."}`,
//     several tenants) — Prometheus rejects a family whose lines are split or repeated;
//   - a series (family and labels) at most once: a later duplicate is dropped, as is a sample
//     whose family was already given another type;
//   - names by the conventions: a daemon stat `name` of component `comp` is
//     `regcache_<comp>_<name>`, a counter gets `_total`, a histogram of nanoseconds (a stat
//     named `..._ns`) becomes `..._seconds` with its sum and bounds in seconds;
//   - fixed histogram buckets: every histogram of seconds has the bounds of kSecondsBoundsNs,
//     every other histogram those of kPlainBounds, at every scrape whatever was recorded (an
//     empty bucket is written too).
// base::stats keeps finer log-linear buckets (four per power of two); an exposition bucket
// `le=X` counts the values of the internal buckets whose upper bound is at most X, so a value
// within 25% below X may be counted in the next bucket up (never in a lower one).
//
// Why a renderer of our own rather than prometheus-cpp: the hot counters are base::stats
// counters (per-thread slots, no locked instruction; see base/stats.h) that prometheus-cpp's
// atomic counters would replace or copy on every scrape, and the format's rules that matter
// here (families, names, buckets) are the ones this file checks; a promtool test of a real
// daemon's scrape with two tenants (E2E.MetricsOfTwoTenantsPassPromtool in tests/e2e/e2e_test.cc)
// keeps it honest. docs/metrics.md says more.
//
// Thread safety: none (build one per scrape).
#ifndef REGCACHE_SERVER_INTERNAL_PROMETHEUS_TEXT_H_
#define REGCACHE_SERVER_INTERNAL_PROMETHEUS_TEXT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"

namespace regcache::server::internal {

// Bucket bounds of histograms of seconds, in nanoseconds: 1 µs to 10 s in 1-2.5-5 steps.
inline constexpr std::array<uint64_t, 22> kSecondsBoundsNs = {
    1'000,         2'500,         5'000,         10'000,        25'000,      50'000,
    100'000,       250'000,       500'000,       1'000'000,     2'500'000,   5'000'000,
    10'000'000,    25'000'000,    50'000'000,    100'000'000,   250'000'000, 500'000'000,
    1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
// Bucket bounds of any other histogram: powers of 4 from 1 to 4^16.
inline constexpr size_t kPlainBuckets = 17;

class PrometheusText {
 public:
  // Adds the daemon's stats (base::stats::Registry::Snapshot), named as above. A component's
  // labels (`cache{device="mlx5_1"}`) are carried onto its series.
  void AddStats(const std::vector<base::stats::Sample>& samples);
  // Adds one series of a family named in full (`process_open_fds`); `labels` is empty or
  // `a="x",b="y"` with values escaped (EscapeLabelValue). A counter's family must end in
  // `_total`.
  void AddGauge(absl::string_view family, absl::string_view help, absl::string_view labels,
                double value);
  void AddCounter(absl::string_view family, absl::string_view help, absl::string_view labels,
                  double value);

  // The exposition: families in the order they were first added.
  std::string Render() const;

  // The family a daemon stat is exported as (`regcache_cache_register_hits_total`).
  static std::string FamilyName(const base::stats::Sample& sample);
  // A label value with `\`, `"` and newline escaped.
  static std::string EscapeLabelValue(absl::string_view value);
  // A number as the exposition writes it: integers exactly, others with 15 significant digits.
  static std::string FormatValue(double value);

 private:
  struct Family {
    std::string name;
    std::string help;
    std::string type;  // counter, gauge, histogram
    std::string lines;
    absl::flat_hash_set<std::string> label_sets;
  };
  // The family to add a series with `labels` to; nullptr (the series is dropped) when the
  // family has another type or already has that series.
  Family* SeriesOf(absl::string_view name, absl::string_view help, absl::string_view type,
                   absl::string_view labels);
  void AddSeries(absl::string_view family, absl::string_view help, absl::string_view type,
                 absl::string_view labels, absl::string_view value);
  void AddHistogram(const std::string& family, absl::string_view help, absl::string_view labels,
                    const base::stats::HistogramSnapshot& h, bool nanoseconds);

  std::vector<Family> families_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_PROMETHEUS_TEXT_H_
