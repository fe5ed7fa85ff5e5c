// The status matchers of base/test_util.h: what they accept, what they refuse, and that a
// failure names the status.
#include "base/test_util.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace regcache::base {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusMatchers, StatusIsComparesTheCodeAndTheMessage) {
  const absl::Status s = absl::NotFoundError("no handle 0x7");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, HasSubstr("0x7")));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kInternal)));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("0x8"))));
  EXPECT_THAT(s, Not(IsOk()));
  EXPECT_THAT(absl::OkStatus(), IsOk());
}

TEST(StatusMatchers, AStatusOrIsMatchedByItsStatus) {
  const absl::StatusOr<int> bad = absl::OutOfRangeError("past the end");
  const absl::StatusOr<int> good = 7;
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(good, IsOk());
  EXPECT_THAT(good, IsOkAndHolds(7));
  EXPECT_THAT(good, Not(IsOkAndHolds(8)));
  EXPECT_THAT(bad, Not(IsOkAndHolds(7)));
}

TEST(StatusMatchers, AFailureNamesTheStatus) {
  const absl::Status s = absl::PermissionDeniedError("belongs to another tenant");
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(::testing::ExplainMatchResult(StatusIs(absl::StatusCode::kNotFound), s, &listener));
  EXPECT_THAT(listener.str(), HasSubstr("belongs to another tenant"));
  EXPECT_THAT(listener.str(), HasSubstr("PERMISSION_DENIED"));
}

}  // namespace
}  // namespace regcache::base
