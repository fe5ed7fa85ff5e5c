#include "protocol/reason_numbers.h"

#include <iterator>
#include <set>

#include "gtest/gtest.h"

namespace regcache::protocol {
namespace {

namespace reason = base::reason;

TEST(ReasonNumbers, EveryReasonHasANumberAndBack) {
  std::set<absl::string_view> seen;
  for (absl::string_view r : kNumberedReasons) {
    EXPECT_TRUE(seen.insert(r).second) << r << " numbered twice";
    const uint32_t n = ReasonNumber(r);
    ASSERT_NE(n, 0u) << r;
    EXPECT_EQ(NumberedReason(n), r);
  }
  // The first numbers are published on the rings: they never move.
  EXPECT_EQ(ReasonNumber(reason::kKeyQuotaExceeded), 1u);
  EXPECT_EQ(ReasonNumber(reason::kMemoryQuotaExceeded), 2u);
  EXPECT_EQ(ReasonNumber("NO_SUCH_REASON"), 0u);
  EXPECT_EQ(NumberedReason(0), "");
  EXPECT_EQ(NumberedReason(static_cast<uint32_t>(std::size(kNumberedReasons)) + 1), "");
}

}  // namespace
}  // namespace regcache::protocol
