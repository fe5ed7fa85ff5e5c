#include "base/error_reason.h"

#include <iterator>
#include <set>

#include "base/status_macros.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

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
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted));
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

}  // namespace
}  // namespace regcache::base
