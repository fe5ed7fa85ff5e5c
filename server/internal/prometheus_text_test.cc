// The /metrics renderer: one HELP/TYPE per family whatever the order of its instances, names by
// the conventions (_total, seconds), fixed histogram buckets, escaping.
#include "server/internal/prometheus_text.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "gtest/gtest.h"

namespace regcache::server::internal {
namespace {

using base::stats::Kind;
using base::stats::Sample;

#define TEST_STATS(COUNTER, GAUGE, HISTOGRAM) \
  COUNTER(requests, "requests served")        \
  GAUGE(in_flight, "requests in flight")      \
  GAUGE(backed_bytes, "bytes backed")         \
  HISTOGRAM(latency_ns, "latency")            \
  HISTOGRAM(sizes, "sizes of things")
RC_DEFINE_STATS(TestStats, TEST_STATS);

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::vector<std::string> LinesStartingWith(const std::string& text, absl::string_view prefix) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.substr(0, prefix.size()) == prefix) out.emplace_back(line);
  }
  return out;
}

TEST(PrometheusText, NamesFollowTheConventions) {
  Sample s{"cache{device=\"d0\"}", "register_hits", "", Kind::kCounter, 0, {}};
  EXPECT_EQ(PrometheusText::FamilyName(s), "regcache_cache_register_hits_total");
  s = {"daemon", "session_close_ns", "", Kind::kHistogram, 0, {}};
  EXPECT_EQ(PrometheusText::FamilyName(s), "regcache_daemon_session_close_seconds");
  s = {"cache", "backed_bytes", "", Kind::kGauge, 0, {}};
  EXPECT_EQ(PrometheusText::FamilyName(s), "regcache_cache_backed_bytes");
  s = {"x", "already_total", "", Kind::kCounter, 0, {}};
  EXPECT_EQ(PrometheusText::FamilyName(s), "regcache_x_already_total");
}

TEST(PrometheusText, OneHelpAndTypePerFamilyWithItsSeriesTogether) {
  // Two devices and two tenants: the registry interleaves families (d0's all, then d1's all).
  base::stats::Registry registry;
  TestStats d0, d1, t7, t9;
  d0.requests.Inc(3);
  d1.requests.Inc(4);
  t9.in_flight.Set(-2);
  base::stats::Registration r0(registry, "cache{device=\"d0\"}", &d0);
  base::stats::Registration r1(registry, "cache{device=\"d1\"}", &d1);
  base::stats::Registration r7(registry, "tenant{tenant=\"7\"}", &t7);
  base::stats::Registration r9(registry, "tenant{tenant=\"9\"}", &t9);
  PrometheusText text;
  text.AddStats(registry.Snapshot());
  const std::string out = text.Render();
  for (const char* family :
       {"regcache_cache_requests_total", "regcache_cache_in_flight", "regcache_cache_backed_bytes",
        "regcache_cache_latency_seconds", "regcache_cache_sizes", "regcache_tenant_requests_total",
        "regcache_tenant_in_flight"}) {
    EXPECT_EQ(Count(out, absl::StrCat("# HELP ", family, " ")), 1) << family << "\n" << out;
    EXPECT_EQ(Count(out, absl::StrCat("# TYPE ", family, " ")), 1) << family;
  }
  // Each family's series follow its TYPE line, before any other family's HELP.
  const size_t type = out.find("# TYPE regcache_cache_requests_total counter\n");
  ASSERT_NE(type, std::string::npos) << out;
  const size_t next_help = out.find("# HELP", type);
  const size_t d0_at = out.find("regcache_cache_requests_total{device=\"d0\"} 3\n");
  const size_t d1_at = out.find("regcache_cache_requests_total{device=\"d1\"} 4\n");
  EXPECT_TRUE(d0_at > type && d0_at < next_help) << out;
  EXPECT_TRUE(d1_at > type && d1_at < next_help) << out;
  EXPECT_NE(out.find("regcache_tenant_in_flight{tenant=\"9\"} -2\n"), std::string::npos);
}

TEST(PrometheusText, HistogramBucketsAreTheSameWhateverWasRecorded) {
  TestStats empty, full;
  full.latency_ns.Record(700);             // below 1 µs
  full.latency_ns.Record(3'000);           // 2.5 µs < v <= 5 µs
  full.latency_ns.Record(3'000'000'000);   // 3 s
  full.latency_ns.Record(60'000'000'000);  // past the last bound
  full.sizes.Record(3);
  auto les = [](const TestStats& stats, absl::string_view family) {
    PrometheusText text;
    text.AddStats(base::stats::SnapshotOf("c", stats));
    std::vector<std::string> out;
    for (const std::string& line : LinesStartingWith(text.Render(), family)) {
      const size_t le = line.find("le=\"");
      if (le != std::string::npos) out.push_back(line.substr(le, line.find('"', le + 4) - le + 1));
    }
    return out;
  };
  const std::vector<std::string> bounds = les(empty, "regcache_c_latency_seconds_bucket");
  ASSERT_EQ(bounds.size(), kSecondsBoundsNs.size() + 1);
  EXPECT_EQ(bounds.front(), "le=\"0.000001\"");
  EXPECT_EQ(bounds[1], "le=\"0.0000025\"");
  EXPECT_EQ(bounds[kSecondsBoundsNs.size() - 1], "le=\"10\"");
  EXPECT_EQ(bounds.back(), "le=\"+Inf\"");
  EXPECT_EQ(les(full, "regcache_c_latency_seconds_bucket"), bounds);
  EXPECT_EQ(les(empty, "regcache_c_sizes_bucket").size(), kPlainBuckets + 1);
  EXPECT_EQ(les(full, "regcache_c_sizes_bucket"), les(empty, "regcache_c_sizes_bucket"));

  PrometheusText text;
  text.AddStats(base::stats::SnapshotOf("c", full));
  const std::string out = text.Render();
  EXPECT_NE(out.find("regcache_c_latency_seconds_bucket{le=\"0.000001\"} 1\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("regcache_c_latency_seconds_bucket{le=\"0.000005\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("regcache_c_latency_seconds_bucket{le=\"5\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("regcache_c_latency_seconds_bucket{le=\"10\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("regcache_c_latency_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(out.find("regcache_c_latency_seconds_sum 63.0000037\n"), std::string::npos) << out;
  EXPECT_NE(out.find("regcache_c_latency_seconds_count 4\n"), std::string::npos);
  EXPECT_NE(out.find("regcache_c_sizes_bucket{le=\"4\"} 1\n"), std::string::npos);
}

TEST(PrometheusText, DuplicateSeriesAndConflictingTypesAreDropped) {
  PrometheusText text;
  text.AddGauge("a_thing", "help", "x=\"1\"", 1);
  text.AddGauge("a_thing", "help", "x=\"1\"", 2);    // same series again
  text.AddCounter("a_thing", "help", "x=\"2\"", 3);  // another type
  text.AddGauge("a_thing", "help", "x=\"3\"", 0.25);
  EXPECT_EQ(
      text.Render(),
      "# HELP a_thing help\n# TYPE a_thing gauge\na_thing{x=\"1\"} 1\na_thing{x=\"3\"} 0.25\n");
}

TEST(PrometheusText, EscapesHelpAndLabelValues) {
  EXPECT_EQ(PrometheusText::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  PrometheusText text;
  text.AddGauge("g", "line\\one\ntwo", "", 1);
  EXPECT_EQ(text.Render(), "# HELP g line\\\\one\\ntwo\n# TYPE g gauge\ng 1\n");
  EXPECT_EQ(PrometheusText::FormatValue(1718000000.25), "1718000000.25");
  EXPECT_EQ(PrometheusText::FormatValue(42), "42");
}

}  // namespace
}  // namespace regcache::server::internal
