// Device-free tests of the verbs backend: the spec grammar, the status mapping, and a clear
// refusal where there is no usable device. What needs a device is in verbs_rxe_test.cc.
#include "hca/verbs/verbs_device.h"

#include <infiniband/verbs.h>

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/backend.h"
#include "hca/verbs/context.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

using ::testing::HasSubstr;

TEST(VerbsSpec, ParsesDeviceAndParameters) {
  auto spec = ParseBackendSpec("verbs:rxe0,port=2,gid_index=1,max_queue_depth=64,bind_lists=0");
  ASSERT_TRUE(spec.ok());
  auto o = VerbsOptionsFromSpec(*spec);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->device_name, "rxe0");
  EXPECT_EQ(o->port, 2);
  EXPECT_EQ(o->gid_index, 1);
  EXPECT_EQ(o->max_queue_depth, 64u);
  EXPECT_FALSE(o->bind_lists);
  EXPECT_TRUE(VerbsOptions{}.bind_lists) << "lists where the self-test allows them, by default";
}

TEST(VerbsSpec, RefusesUnknownAndBadParameters) {
  for (const char* bad :
       {"verbs:speed=9", "verbs:port=0", "verbs:port=x", "verbs:port=300",
        "verbs:max_queue_depth=0", "verbs:bind_lists=2", "verbs:bind_lists=yes"}) {
    auto spec = ParseBackendSpec(bad);
    ASSERT_TRUE(spec.ok()) << bad;
    auto o = VerbsOptionsFromSpec(*spec);
    EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << bad << ": " << o.status();
  }
}

TEST(VerbsStatus, WorkCompletionsMapToTheDevicesSyndromes) {
  EXPECT_TRUE(StatusForWc(IBV_WC_SUCCESS, "x").ok());
  absl::Status s = StatusForWc(IBV_WC_MW_BIND_ERR, "bind of window 0x00000101");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("bind of window 0x00000101"));
  ASSERT_TRUE(ErrorOf(s).has_value());
  EXPECT_EQ(ErrorOf(s)->syndrome, Syndrome::kMwBind);
  EXPECT_TRUE(absl::IsPermissionDenied(StatusForWc(IBV_WC_REM_ACCESS_ERR, "w")));
  EXPECT_TRUE(absl::IsAborted(StatusForWc(IBV_WC_WR_FLUSH_ERR, "w")));
  EXPECT_TRUE(absl::IsInvalidArgument(StatusForWc(IBV_WC_REM_INV_REQ_ERR, "w")));
  EXPECT_EQ(SyndromeForWc(IBV_WC_RETRY_EXC_ERR), static_cast<Syndrome>(0x15));
}

TEST(VerbsStatus, ErrnosMapToCanonicalCodes) {
  EXPECT_TRUE(absl::IsInvalidArgument(ErrnoStatus(EINVAL, "v")));
  EXPECT_TRUE(absl::IsResourceExhausted(ErrnoStatus(ENOMEM, "v")));
  EXPECT_TRUE(absl::IsUnimplemented(ErrnoStatus(EOPNOTSUPP, "v")));
  EXPECT_TRUE(absl::IsFailedPrecondition(ErrnoStatus(EBUSY, "v")));
  EXPECT_THAT(ErrnoStatus(EACCES, "ibv_reg_mr").message(), HasSubstr("ibv_reg_mr"));
}

TEST(VerbsMtu, BytesAndEnumsRoundTrip) {
  for (uint32_t b : {256u, 512u, 1024u, 2048u, 4096u}) {
    ASSERT_TRUE(MtuFromBytes(b).has_value()) << b;
    EXPECT_EQ(MtuBytes(*MtuFromBytes(b)), b);
  }
  EXPECT_FALSE(MtuFromBytes(1500).has_value());
  EXPECT_FALSE(MtuFromBytes(0).has_value());
}

TEST(VerbsOpen, ANameThatDoesNotExistIsUnavailableWithTheDevicesSeen) {
  VerbsOptions o;
  o.device_name = "no-such-rdma-device";
  auto d = NewVerbsDevice(o);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), HasSubstr("no-such-rdma-device"));
}

TEST(VerbsOpen, RegisteredUnderItsName) {
  RegisterBackend();
  RegisterBackend();  // idempotent
  auto names = RegisteredBackends();
  EXPECT_THAT(names, ::testing::Contains("verbs"));
  auto d = OpenDevice("verbs:no-such-rdma-device");
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
}

}  // namespace
}  // namespace regcache::hca::verbs
