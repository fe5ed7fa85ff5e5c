#include "base/clock.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(ClockTest, MonotonicNowNeverGoesBackAndMeasuresSleeps) {
  absl::Time last = MonotonicNow();
  for (int i = 0; i < 1000; ++i) {
    const absl::Time now = MonotonicNow();
    ASSERT_GE(now, last);
    last = now;
  }
  const absl::Time before = MonotonicNow();
  absl::SleepFor(absl::Milliseconds(5));
  const absl::Duration slept = MonotonicNow() - before;
  EXPECT_GE(slept, absl::Milliseconds(5));
  EXPECT_LT(slept, absl::Seconds(5));
}

}  // namespace
}  // namespace regcache::base