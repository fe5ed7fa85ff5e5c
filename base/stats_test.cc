#include "base/stats.h"

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace regcache::base::stats {
namespace {

#define TEST_COMPONENT_STATS(COUNTER, GAUGE, HISTOGRAM) \
  COUNTER(requests, "requests seen")                    \
  GAUGE(in_flight, "requests in flight")                \
  HISTOGRAM(latency_ns, "latency in ns")
RC_DEFINE_STATS(TestStats, TEST_COMPONENT_STATS);
RC_DEFINE_HOT_STATS(TestHotStats, TEST_COMPONENT_STATS);

TEST(StatsTest, DeclaredStatsAreMembersAndSnapshotInOrder) {
  TestStats s;
  s.requests.Inc();
  s.requests.Inc(2);
  s.in_flight.Add(5);
  s.in_flight.Sub(2);
  s.latency_ns.Record(100);
  std::vector<Sample> snap = SnapshotOf("umr", s);
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].name, "requests");
  EXPECT_EQ(snap[0].kind, Kind::kCounter);
  EXPECT_EQ(snap[0].value, 3);
  EXPECT_EQ(snap[0].help, "requests seen");
  EXPECT_EQ(snap[1].kind, Kind::kGauge);
  EXPECT_EQ(snap[1].value, 3);
  EXPECT_EQ(snap[2].kind, Kind::kHistogram);
  EXPECT_EQ(snap[2].histogram.count, 1u);
  EXPECT_EQ(snap[2].component, "umr");
}

TEST(StatsTest, ChildRegistryLabelsEveryComponent) {
  TestStats a, b;
  a.requests.Inc(4);
  Registry child;
  Registration plain(child, "cache", &a);
  Registration labelled(child, "cache{tenant=\"7\"}", &b);
  Registry parent;
  {
    Registration dev(parent, "device=\"sim1\"", &child);
    std::vector<Sample> snap = parent.Snapshot();
    ASSERT_EQ(snap.size(), 6u);
    EXPECT_EQ(snap[0].component, "cache{device=\"sim1\"}");
    EXPECT_EQ(snap[0].value, 4);
    EXPECT_EQ(snap[3].component, "cache{device=\"sim1\",tenant=\"7\"}");
  }
  EXPECT_TRUE(parent.Snapshot().empty()) << "unregistered with its Registration";
}

TEST(StatsTest, HotCounterSumsAcrossThreads) {
  TestHotStats s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s] {
      for (int i = 0; i < 10000; ++i) s.requests.Inc();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(s.requests.value(), 40000u);
}

TEST(StatsTest, HotCounterKeepsCountsOfExitedThreadsAndStartsAtZeroOnReuse) {
  {
    auto c = std::make_unique<HotCounter>();
    c->Inc(5);
    std::thread([&c] { c->Inc(7); }).join();  // its block is gone; its count is not
    EXPECT_EQ(c->value(), 12u);
  }
  // A new counter may take the same slot: it starts from zero, in this thread and others.
  HotCounter fresh;
  EXPECT_EQ(fresh.value(), 0u);
  fresh.Inc();
  std::thread([&fresh] { fresh.Inc(2); }).join();
  EXPECT_EQ(fresh.value(), 3u);
}

TEST(StatsTest, HotCountersBeyondTheSlotsStillCount) {
  std::vector<std::unique_ptr<HotCounter>> many;
  for (int i = 0; i < HotCounter::kSlots + 8; ++i) many.push_back(std::make_unique<HotCounter>());
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&many] {
      for (auto& c : many) c->Inc(2);
    });
  }
  for (auto& th : threads) th.join();
  for (auto& c : many) EXPECT_EQ(c->value(), 6u);
}

TEST(StatsTest, HistogramBucketsAreMonotoneAndTight) {
  for (uint64_t v : {0ull, 1ull, 3ull, 4ull, 7ull, 8ull, 9ull, 100ull, 1000000ull, ~0ull}) {
    const int b = HistogramSnapshot::BucketOf(v);
    ASSERT_LT(b, HistogramSnapshot::kBuckets);
    EXPECT_GE(HistogramSnapshot::BucketUpperBound(b), v) << v;
    if (b > 0) {
      EXPECT_LT(HistogramSnapshot::BucketUpperBound(b - 1), v) << v;
    }
  }
  for (int b = 1; b < HistogramSnapshot::kBuckets; ++b) {
    EXPECT_GT(HistogramSnapshot::BucketUpperBound(b), HistogramSnapshot::BucketUpperBound(b - 1));
    EXPECT_EQ(HistogramSnapshot::BucketOf(HistogramSnapshot::BucketUpperBound(b)), b);
  }
}

TEST(StatsTest, PercentilesWithinBucketError) {
  Histogram h;
  for (uint64_t v = 1; v <= 1000; ++v) h.Record(v);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, 1000u);
  EXPECT_EQ(s.sum, 500500u);
  EXPECT_EQ(s.max, 1000u);
  const uint64_t p50 = s.Percentile(50);
  const uint64_t p99 = s.Percentile(99);
  EXPECT_GE(p50, 500u);
  EXPECT_LE(p50, 500u * 5 / 4);
  EXPECT_GE(p99, 990u);
  EXPECT_LE(p99, 1000u);  // clamped to max
  EXPECT_EQ(Histogram().Snapshot().Percentile(50), 0u);
}

TEST(StatsTest, RecordingAValueManyTimesIsRecordingItThatOften) {
  Histogram once_each, batched;
  for (int i = 0; i < 5; ++i) once_each.Record(3000);
  once_each.Record(7);
  batched.Record(3000, 5);
  batched.Record(7, 1);
  batched.Record(1 << 20, 0);  // nothing
  const HistogramSnapshot a = once_each.Snapshot(), b = batched.Snapshot();
  EXPECT_EQ(b.count, 6u);
  EXPECT_EQ(b.sum, 15007u);
  EXPECT_EQ(b.max, 3000u);
  EXPECT_EQ(a.buckets, b.buckets);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(a.max, b.max);
}

TEST(StatsTest, RegistryFollowsRegistrationLifetime) {
  Registry registry;
  TestStats a, b;
  a.requests.Inc(7);
  {
    Registration ra(registry, "alpha", &a);
    Registration rb(registry, "beta{tenant=\"3\"}", &b);
    EXPECT_EQ(registry.Snapshot().size(), 6u);
  }
  EXPECT_TRUE(registry.Snapshot().empty());
}

TEST(StatsTest, CollectorSamplesAreMadeOnEverySnapshotUntilUnregistered) {
  Registry registry;
  int64_t value = 1;
  {
    Registration r(registry, [&value] {
      Sample s;
      s.component = "tenant{tenant=\"7\"}";
      s.name = "sessions";
      s.kind = Kind::kGauge;
      s.value = value;
      return std::vector<Sample>{s};
    });
    std::vector<Sample> snap = registry.Snapshot();
    ASSERT_EQ(snap.size(), 1u);
    EXPECT_EQ(snap[0].component, "tenant{tenant=\"7\"}");
    EXPECT_EQ(snap[0].value, 1);
    value = 5;
    EXPECT_EQ(registry.Snapshot()[0].value, 5) << "read again on every snapshot";
  }
  EXPECT_TRUE(registry.Snapshot().empty());
}

}  // namespace
}  // namespace regcache::base::stats