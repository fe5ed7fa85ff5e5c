#include "base/errno_status.h"

#include <cerrno>

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::base {
namespace {

TEST(ErrnoStatusTest, MapsCodeAndNamesErrno) {
  absl::Status s = ErrnoToStatus(ENOMEM, "ibv_reg_mr len=4096");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(s.message(), "ibv_reg_mr len=4096: ENOMEM (Cannot allocate memory)");

  EXPECT_THAT(ErrnoToStatus(EINVAL, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ErrnoToStatus(ENOENT, "x"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ErrnoToStatus(EPERM, "x"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(ErrnoToStatus(EOPNOTSUPP, "x"), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(ErrnoToStatus(EAGAIN, "x"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(ErrnoStatusTest, ZeroErrnoIsAnInternalErrorNotOk) {
  absl::Status s = ErrnoToStatus(0, "mmap");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal));
  EXPECT_NE(s.message().find("errno is 0"), absl::string_view::npos);
}

TEST(ErrnoStatusTest, UnknownErrnoHasNumericName) {
  EXPECT_EQ(ErrnoName(EREMOTEIO), "EREMOTEIO");
  EXPECT_EQ(ErrnoName(99999), "errno=99999");
}

}  // namespace
}  // namespace regcache::base