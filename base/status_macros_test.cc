#include "base/status_macros.h"

#include <memory>

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::base {
namespace {

int g_evaluations = 0;

absl::Status Fails() {
  ++g_evaluations;
  return absl::InvalidArgumentError("bad");
}
absl::Status Succeeds() {
  ++g_evaluations;
  return absl::OkStatus();
}
absl::StatusOr<std::unique_ptr<int>> MakeInt(bool ok) {
  ++g_evaluations;
  if (!ok) return absl::NotFoundError("no int");
  return std::make_unique<int>(42);
}

absl::Status ReturnIfError(bool fail, bool* reached_end) {
  RETURN_IF_ERROR(fail ? Fails() : Succeeds());
  *reached_end = true;
  return absl::OkStatus();
}

absl::StatusOr<int> AssignOrReturn(bool ok) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> p, MakeInt(ok));  // move-only value
  int existing = 0;
  ASSIGN_OR_RETURN(existing, absl::StatusOr<int>(*p + 1));  // assign to an lvalue
  return existing;
}

TEST(StatusMacrosTest, ReturnIfErrorPropagatesAndEvaluatesOnce) {
  g_evaluations = 0;
  bool reached = false;
  absl::Status s = ReturnIfError(/*fail=*/true, &reached);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(s.message(), "bad");
  EXPECT_FALSE(reached);
  EXPECT_EQ(g_evaluations, 1);

  g_evaluations = 0;
  EXPECT_TRUE(ReturnIfError(/*fail=*/false, &reached).ok());
  EXPECT_TRUE(reached);
  EXPECT_EQ(g_evaluations, 1);
}

TEST(StatusMacrosTest, AssignOrReturnMovesValueOrReturnsStatus) {
  g_evaluations = 0;
  absl::StatusOr<int> v = AssignOrReturn(true);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 43);
  EXPECT_EQ(g_evaluations, 1);

  absl::StatusOr<int> e = AssignOrReturn(false);
  EXPECT_THAT(e, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(e.status().message(), "no int");
}

TEST(StatusMacrosTest, AnnotatePrependsContextAndKeepsCodeAndPayload) {
  absl::Status s = absl::UnavailableError("queue full");
  s.SetPayload("regcache/syndrome", absl::Cord("0x13"));
  absl::Status a = Annotate(s, "post UMR");
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(a.message(), "post UMR: queue full");
  EXPECT_EQ(a.GetPayload("regcache/syndrome").value_or(absl::Cord()), "0x13");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

}  // namespace
}  // namespace regcache::base