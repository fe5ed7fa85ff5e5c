// Per-tenant stats: summed by uid, the largest max_tenants labelled, the rest under "other".
#include "service/internal/tenant_stats.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace regcache::service::internal {
namespace {

int64_t Value(const std::vector<base::stats::Sample>& samples, const std::string& tenant,
              const std::string& name) {
  for (const auto& s : samples) {
    if (s.component == "tenant{tenant=\"" + tenant + "\"}" && s.name == name) return s.value;
  }
  return -1;
}

TEST(TenantStats, SummedByUidLargestLabelledRestOther) {
  const std::vector<TenantSession> sessions = {
      {1000, 10, 1}, {1000, 5, 2}, {2000, 100, 1}, {3000, 1, 9}, {4000, 0, 0}};
  const auto samples = TenantSamples(sessions, 2);
  EXPECT_EQ(Value(samples, "2000", "mapped_bytes"), 100);
  EXPECT_EQ(Value(samples, "1000", "mapped_bytes"), 15);
  EXPECT_EQ(Value(samples, "1000", "sessions"), 2);
  EXPECT_EQ(Value(samples, "1000", "memories"), 3);
  EXPECT_EQ(Value(samples, "3000", "sessions"), -1) << "past the cap";
  EXPECT_EQ(Value(samples, "other", "sessions"), 2);
  EXPECT_EQ(Value(samples, "other", "memories"), 9);
  EXPECT_EQ(Value(samples, "other", "mapped_bytes"), 1);
  EXPECT_EQ(samples.size(), 3u * 3u) << "three tenants' three gauges";
  EXPECT_EQ(samples[0].component, "tenant{tenant=\"2000\"}") << "largest first";
}

TEST(TenantStats, NoOtherWhenEveryTenantFitsAndNothingWithoutSessions) {
  EXPECT_TRUE(TenantSamples({}, 16).empty());
  const auto samples = TenantSamples({{7, 0, 0}}, 16);
  EXPECT_EQ(Value(samples, "7", "sessions"), 1);
  EXPECT_EQ(Value(samples, "other", "sessions"), -1);
  EXPECT_EQ(Value(TenantSamples({{7, 0, 0}}, 0), "other", "sessions"), 1);
}

}  // namespace
}  // namespace regcache::service::internal
