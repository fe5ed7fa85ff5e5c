#include "hca/status.h"

#include "base/status_macros.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::hca {
namespace {

TEST(DeviceErrorTest, CarriesCodeMessageAndSyndrome) {
  absl::Status s = DeviceError(Syndrome::kRemoteAccess, "rkey 0x100 lacks rw");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(s.message(), "REMOTE_ACCESS (syndrome 0x13): rkey 0x100 lacks rw");
  ASSERT_TRUE(ErrorOf(s).has_value());
  EXPECT_EQ(ErrorOf(s)->syndrome, Syndrome::kRemoteAccess);
  EXPECT_EQ(ErrorOf(s)->vendor_syndrome, 0);
}

TEST(DeviceErrorTest, VendorOdpSyndromeIsUnavailable) {
  absl::Status s =
      DeviceError(Syndrome::kRemoteAccess, "fault resumed with error", kVendorSyndromeOdpFault);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_NE(s.message().find("vendor 0x93"), absl::string_view::npos);
  EXPECT_EQ(ErrorOf(s)->vendor_syndrome, kVendorSyndromeOdpFault);
}

TEST(DeviceErrorTest, SurvivesAnnotate) {
  absl::Status s = base::Annotate(DeviceError(Syndrome::kMwBind, "key not free"), "map");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(ErrorOf(s).has_value());
  EXPECT_EQ(ErrorOf(s)->syndrome, Syndrome::kMwBind);
}

TEST(DeviceErrorTest, PlainStatusHasNoErrorInfo) {
  EXPECT_FALSE(ErrorOf(absl::OkStatus()).has_value());
  EXPECT_FALSE(ErrorOf(absl::InternalError("x")).has_value());
}

TEST(CodeForSyndromeTest, Table) {
  EXPECT_EQ(CodeForSyndrome(Syndrome::kLocalProt, 0), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForSyndrome(Syndrome::kLocalQpOp, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeForSyndrome(Syndrome::kRemoteInvalReq, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeForSyndrome(Syndrome::kWrFlush, 0), absl::StatusCode::kAborted);
  EXPECT_EQ(CodeForSyndrome(Syndrome::kBadResp, 0), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace regcache::hca