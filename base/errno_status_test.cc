#include "base/errno_status.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

TEST(ErrnoStatusTest, MapsCodeAndNamesErrno) {
  absl::Status s = ErrnoToStatus(ENOMEM, "ibv_reg_mr len=4096");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "ibv_reg_mr len=4096: ENOMEM (Cannot allocate memory)");

  EXPECT_EQ(ErrnoToStatus(EINVAL, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus(ENOENT, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EPERM, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(EOPNOTSUPP, "x").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ErrnoToStatus(EAGAIN, "x").code(), absl::StatusCode::kUnavailable);
}

TEST(ErrnoStatusTest, ZeroErrnoIsAnInternalErrorNotOk) {
  absl::Status s = ErrnoToStatus(0, "mmap");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("errno is 0"), absl::string_view::npos);
}

TEST(ErrnoStatusTest, UnknownErrnoHasNumericName) {
  EXPECT_EQ(ErrnoName(EREMOTEIO), "EREMOTEIO");
  EXPECT_EQ(ErrnoName(99999), "errno=99999");
}

}  // namespace
}  // namespace regcache::base