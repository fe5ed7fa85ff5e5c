#include "umr/odp_event.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

TEST(PageFaultEqeTest, RdmaGoldenAndResume) {
  PageFaultEvent e;
  e.subtype = PageFaultSubtype::kRdma;
  e.bytes_committed = 0x10;
  e.rkey = 0x00012301;
  e.packet_length = 0x200;
  e.rdma_op_len = 0x1000;
  e.rdma_va = 0x00007f0012345000;
  e.type = kPageFaultRdma | kPageFaultWrite;
  e.wq_number = 0x000abc;
  auto b = EncodePageFaultEqe(e);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[1], 0x0c);
  EXPECT_EQ((*b)[3], 1);
  EXPECT_EQ((std::vector<uint8_t>(b->begin() + 36, b->begin() + 40)),
            (std::vector<uint8_t>{0, 0x01, 0x23, 0x01}));
  EXPECT_EQ((std::vector<uint8_t>(b->begin() + 48, b->begin() + 56)),
            (std::vector<uint8_t>{0, 0, 0x7f, 0, 0x12, 0x34, 0x50, 0}));
  EXPECT_EQ((std::vector<uint8_t>(b->begin() + 56, b->begin() + 60)),
            (std::vector<uint8_t>{0x06, 0x00, 0x0a, 0xbc}));
  EXPECT_EQ(*DecodePageFaultEqe(*b), e);
  const PageFaultResumeIn r = ResumeFor(e, false);
  EXPECT_EQ(r, (PageFaultResumeIn{0, 0, false, 6, 0xabc, 0xabc}));
}

TEST(PageFaultEqeTest, WqeSubtypeAndErrors) {
  PageFaultEvent e;
  e.subtype = PageFaultSubtype::kWqe;
  e.wqe_index = 0x1234;
  e.token = 0x55;
  e.type = 1;
  e.wq_number = 0x77;
  auto b = EncodePageFaultEqe(e);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[38], 0x12);
  EXPECT_EQ((*b)[39], 0x34);
  EXPECT_EQ(*DecodePageFaultEqe(*b), e);
  EXPECT_EQ(ResumeFor(e, true), (PageFaultResumeIn{0, 0, true, 1, 0x77, 0x55}));
  e.rkey = 1;
  EXPECT_THAT(EncodePageFaultEqe(e), StatusIs(absl::StatusCode::kInvalidArgument));
  (*b)[1] = 0x0d;
  EXPECT_THAT(DecodePageFaultEqe(*b), StatusIs(absl::StatusCode::kInvalidArgument));
  (*b)[1] = 0x0c;
  (*b)[3] = 2;
  EXPECT_THAT(DecodePageFaultEqe(*b), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace regcache::umr