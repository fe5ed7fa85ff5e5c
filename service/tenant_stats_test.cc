// Per-tenant stats: summed by uid, the largest max_tenants labelled, the rest under "other".
#include "service/internal/tenant_stats.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace regcache::service::internal {
namespace {

SessionInfo Session(uint32_t uid, uint64_t backed, uint64_t live) {
  SessionInfo s;
  s.peer.uid = uid;
  s.usage.backed_bytes = backed;
  s.usage.live_registrations = live;
  return s;
}

int64_t Value(const std::vector<base::stats::Sample>& samples, const std::string& tenant,
              const std::string& name) {
  for (const auto& s : samples) {
    if (s.component == "tenant{tenant=\"" + tenant + "\"}" && s.name == name) return s.value;
  }
  return -1;
}

TEST(TenantStats, SummedByUidLargestLabelledRestOther) {
  const std::vector<SessionInfo> sessions = {Session(1000, 10, 1), Session(1000, 5, 2),
                                             Session(2000, 100, 0), Session(3000, 1, 9),
                                             Session(4000, 0, 0)};
  const auto samples = TenantSamples(sessions, 2);
  EXPECT_EQ(Value(samples, "2000", "backed_bytes"), 100);
  EXPECT_EQ(Value(samples, "1000", "backed_bytes"), 15);
  EXPECT_EQ(Value(samples, "1000", "sessions"), 2);
  EXPECT_EQ(Value(samples, "1000", "live_registrations"), 3);
  EXPECT_EQ(Value(samples, "3000", "sessions"), -1) << "past the cap";
  EXPECT_EQ(Value(samples, "other", "sessions"), 2);
  EXPECT_EQ(Value(samples, "other", "live_registrations"), 9);
  EXPECT_EQ(samples.size(), 3u * 5u) << "three tenants' five gauges";
  EXPECT_EQ(samples[0].component, "tenant{tenant=\"2000\"}") << "largest first";
}

TEST(TenantStats, NoOtherWhenEveryTenantFitsAndNothingWithoutSessions) {
  EXPECT_TRUE(TenantSamples({}, 16).empty());
  const auto samples = TenantSamples({Session(7, 0, 0)}, 16);
  EXPECT_EQ(Value(samples, "7", "sessions"), 1);
  EXPECT_EQ(Value(samples, "other", "sessions"), -1);
  EXPECT_EQ(Value(TenantSamples({Session(7, 0, 0)}, 0), "other", "sessions"), 1);
}

}  // namespace
}  // namespace regcache::service::internal
