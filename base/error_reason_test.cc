#include "base/error_reason.h"

#include <iterator>
#include <set>

#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(ErrorReason, RoundTripsThroughAnnotate) {
  absl::Status s = WithReason(absl::ResourceExhaustedError("key quota: 3 keys live, limit 3"),
                              reason::kKeyQuotaExceeded, {{"limit", "3"}, {"used", "3"}});
  s = Annotate(s, "Register");
  std::optional<ErrorReason> r = GetErrorReason(s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "KEY_QUOTA_EXCEEDED");
  ASSERT_EQ(r->metadata.size(), 2u);
  EXPECT_EQ(r->metadata[0], (std::pair<std::string, std::string>("limit", "3")));
  EXPECT_EQ(r->metadata[1], (std::pair<std::string, std::string>("used", "3")));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
}

TEST(ErrorReason, OkAndPlainErrorsHaveNone) {
  EXPECT_TRUE(WithReason(absl::OkStatus(), reason::kKeyRevoked).ok());
  EXPECT_FALSE(GetErrorReason(absl::OkStatus()).has_value());
  EXPECT_FALSE(GetErrorReason(absl::InternalError("x")).has_value());
}

TEST(ErrorReason, NewlinesInValuesCannotForgeEntries) {
  absl::Status s =
      WithReason(absl::NotFoundError("x"), reason::kSessionUnknown, {{"name", "a\nforged=1"}});
  std::optional<ErrorReason> r = GetErrorReason(s);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->metadata.size(), 1u);
  EXPECT_EQ(r->metadata[0].second, "a forged=1");
}

TEST(ErrorReason, MalformedPayloadIsIgnored) {
  absl::Status s = absl::InternalError("x");
  s.SetPayload(kErrorReasonTypeUrl, absl::Cord("R\nno-equals-sign"));
  EXPECT_FALSE(GetErrorReason(s).has_value());
}

TEST(ErrorReason, EveryReasonHasANumberAndBack) {
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
}  // namespace regcache::base
