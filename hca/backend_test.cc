#include "hca/backend.h"

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::hca {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseBackendSpecTest, NameOnly) {
  absl::StatusOr<BackendSpec> s = ParseBackendSpec("sim");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backend, "sim");
  EXPECT_EQ(s->device, "");
  EXPECT_TRUE(s->params.empty());
}

TEST(ParseBackendSpecTest, DeviceAndParams) {
  absl::StatusOr<BackendSpec> s = ParseBackendSpec("mlx5:mlx5_0,port=1,odp=");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backend, "mlx5");
  EXPECT_EQ(s->device, "mlx5_0");
  EXPECT_EQ(s->params.at("port"), "1");
  EXPECT_EQ(s->params.at("odp"), "");
}

TEST(ParseBackendSpecTest, Rejects) {
  EXPECT_THAT(ParseBackendSpec(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackendSpec(":x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackendSpec("sim:"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackendSpec("sim:a,,b=1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackendSpec("verbs:a,b"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackendSpec("sim:k=1,k=2"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackendSpec("sim:=1"), StatusIs(absl::StatusCode::kInvalidArgument));
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearBackendsForTest(); }
  void TearDown() override { ClearBackendsForTest(); }
};

TEST_F(RegistryTest, UnknownNameIsNotFoundWithHint) {
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice("sim");
  EXPECT_THAT(d, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(d.status().message(), HasSubstr("hca::sim::RegisterBackend()"));
}

TEST_F(RegistryTest, FactoryGetsParsedSpecAndItsErrorIsReturned) {
  BackendSpec seen;
  ASSERT_TRUE(RegisterBackend("fake",
                              [&seen](const BackendSpec& spec, const OpenOptions&)
                                  -> absl::StatusOr<std::unique_ptr<Device>> {
                                seen = spec;
                                return absl::UnavailableError("no NIC here");
                              })
                  .ok());
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice("fake:dev0,x=1");
  EXPECT_THAT(d, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(seen.device, "dev0");
  EXPECT_EQ(seen.params.at("x"), "1");
  EXPECT_THAT(RegisteredBackends(), ElementsAre("fake"));
}

TEST_F(RegistryTest, DuplicateRegistrationIsAlreadyExists) {
  auto factory = [](const BackendSpec&,
                    const OpenOptions&) -> absl::StatusOr<std::unique_ptr<Device>> {
    return absl::UnavailableError("x");
  };
  ASSERT_TRUE(RegisterBackend("fake", factory).ok());
  EXPECT_THAT(RegisterBackend("fake", factory), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(AccessToStringTest, Renders) {
  EXPECT_EQ(AccessToString(kLocalRead | kRemoteWrite), "lr|rw");
  EXPECT_EQ(AccessToString(0), "none");
  EXPECT_EQ(AccessToString(kAllAccess), "lr|lw|rr|rw|a");
}

}  // namespace
}  // namespace regcache::hca