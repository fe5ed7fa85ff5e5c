// Who may open a session and who is admin (root only when listed), and the refusal log's rate
// limit.
#include "service/internal/access_policy.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/log.h"
#include "gtest/gtest.h"

namespace regcache::service::internal {
namespace {

TEST(AccessPolicy, RootIsAdminOnlyWhenListed) {
  DaemonConfig config;
  EXPECT_FALSE(AccessPolicy(config, 0).IsAdmin({1, 0, 0}));
  EXPECT_FALSE(AccessPolicy(config, 1000).IsAdmin({1, 1000, 1000})) << "nor the daemon's uid";
  config.admin_uids = {0};
  EXPECT_TRUE(AccessPolicy(config, 1000).IsAdmin({1, 0, 0}));
  EXPECT_FALSE(AccessPolicy(config, 1000).IsAdmin({1, 1000, 0}));
  config.admin_uids = {};
  config.admin_gids = {50};
  EXPECT_TRUE(AccessPolicy(config, 0).IsAdmin({1, 1234, 50}));
  EXPECT_FALSE(AccessPolicy(config, 0).IsAdmin({1, 0, 0}));
}

TEST(AccessPolicy, SessionsByDefaultRootAndSelfElseTheLists) {
  DaemonConfig config;
  EXPECT_TRUE(AccessPolicy(config, 1000).MayOpenSession({1, 0, 0}));
  EXPECT_TRUE(AccessPolicy(config, 1000).MayOpenSession({1, 1000, 5}));
  EXPECT_FALSE(AccessPolicy(config, 1000).MayOpenSession({1, 1001, 5}));
  config.allow_gids = {5};
  EXPECT_TRUE(AccessPolicy(config, 1000).MayOpenSession({1, 1001, 5}));
  EXPECT_FALSE(AccessPolicy(config, 1000).MayOpenSession({1, 0, 0}));
}

TEST(RefusalLog, OneLinePerIntervalPerPeerAndWhatWithTheCountSkipped) {
  std::vector<std::string> lines;
  base::SetLogSinkForTest(
      [&](base::LogSeverity, absl::string_view line) { lines.emplace_back(line); });
  absl::Time now = absl::FromUnixSeconds(1000);
  RefusalLog log(absl::Seconds(10), [&now] { return now; });
  EXPECT_TRUE(log.Refused({41, 7, 8}, "session", "not on the allow-list"));
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(log.Refused({42 + i, 7, 8}, "session", "again"));
  EXPECT_TRUE(log.Refused({41, 7, 8}, "admin call", "Drain")) << "another refusal: its own line";
  EXPECT_TRUE(log.Refused({41, 9, 8}, "session", "another uid"));
  now += absl::Seconds(10);
  EXPECT_TRUE(log.Refused({300, 7, 8}, "session", "later"));
  base::SetLogSinkForTest(nullptr);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find("session refused: pid 41 uid 7 gid 8: not on the allow-list"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[3].find("pid 300 uid 7 gid 8: later (and 100 more"), std::string::npos)
      << lines[3];
}

}  // namespace
}  // namespace regcache::service::internal
