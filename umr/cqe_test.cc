#include "umr/cqe.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

TEST(CqeTest, GoodCqeGolden) {
  Cqe c;
  c.opcode = kCqeOpRespSendInv;
  c.owner = true;
  c.wqe_counter = 0xbeef;
  c.qpn = 0x123456;
  c.wqe_opcode = 0;
  c.byte_cnt = 0x40;
  c.imm_inval_pkey = 0xaabbccdd;
  auto b = EncodeCqe(c);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[63], 0x41);
  EXPECT_EQ((*b)[60], 0xbe);
  EXPECT_EQ((*b)[61], 0xef);
  EXPECT_EQ((std::vector<uint8_t>(b->begin() + 56, b->begin() + 60)),
            (std::vector<uint8_t>{0, 0x12, 0x34, 0x56}));
  EXPECT_EQ((*b)[47], 0x40);
  EXPECT_EQ((*b)[36], 0xaa);
  EXPECT_EQ(*DecodeCqe(*b), c);
}

TEST(CqeTest, ErrorCqeGolden) {
  Cqe c;
  c.opcode = kCqeOpReqErr;
  c.qpn = 7;
  c.wqe_opcode = kOpcodeUmr;
  c.wqe_counter = 3;
  c.syndrome = kCqeSyndLocalProt;
  c.vendor_err_synd = kCqeVendorSyndOdpPfault;
  auto b = EncodeCqe(c);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[55], 0x04);
  EXPECT_EQ((*b)[54], 0x93);
  EXPECT_EQ((*b)[56], 0x25);
  EXPECT_EQ((*b)[63], 0xd0);
  EXPECT_EQ(*DecodeCqe(*b), c);
  EXPECT_STREQ(CqeSyndromeName(c.syndrome), "LOCAL_PROT_ERR");
  c.byte_cnt = 1;
  EXPECT_THAT(EncodeCqe(c), StatusIs(absl::StatusCode::kInvalidArgument));
  c = {};
  c.syndrome = 1;
  EXPECT_THAT(EncodeCqe(c), StatusIs(absl::StatusCode::kInvalidArgument));
  c.syndrome = 0;
  c.opcode = 16;
  EXPECT_THAT(EncodeCqe(c), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_FALSE(DecodeCqe(absl::MakeConstSpan(b->data(), 63)).ok());
}

}  // namespace
}  // namespace regcache::umr