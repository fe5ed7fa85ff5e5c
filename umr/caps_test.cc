#include "umr/caps.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

TEST(CapsTest, GoldenOffsets) {
  HcaCaps c;
  c.max_indirection = 0x05;                  // DW8[31:24] -> cap byte 32
  c.log_max_klm_list_size = 0x10;            // DW8[5:0] -> cap byte 35
  c.umr_extended_translation_offset = true;  // DW8[7]
  c.umr_fence = 2;                           // DW16[21:20] -> cap byte 65 bits 5:4
  c.pg = true;                               // DW17[24] -> cap byte 68 bit 0
  c.max_wqe_sz_sq = 0x0400;                  // DW20[15:0] -> cap bytes 82..83
  auto out = EncodeQueryHcaCapOut({}, c);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), kQueryHcaCapOutBytes);
  const uint8_t* cap = out->data() + 16;
  EXPECT_EQ(cap[32], 0x05);
  EXPECT_EQ(cap[35], 0x80 | 0x10);
  EXPECT_EQ(cap[65], 0x20);
  EXPECT_EQ(cap[68], 0x01);
  EXPECT_EQ(cap[82], 0x04);
  EXPECT_EQ(cap[83], 0x00);
  EXPECT_EQ(*DecodeHcaCaps(*out), c);
  c.log_max_klm_list_size = 64;
  EXPECT_THAT(EncodeQueryHcaCapOut({}, c), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_FALSE(DecodeHcaCaps(absl::MakeConstSpan(out->data(), 100)).ok());
}

// docs/prm.md, QUERY_HCA_CAP: umr_modify_entity_size_disabled is DW16[24] (cap byte 64, 0x01),
// umr_modify_atomic_disabled DW16[23] (cap byte 65, 0x80); they decide a map's mkey_mask.
TEST(CapsTest, UmrModifyBitsFromAGoldenOutbox) {
  auto out = EncodeQueryHcaCapOut({}, HcaCaps{});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(UmrModifyCapsOf(*DecodeHcaCaps(*out)), (UmrModifyCaps{true, true}));
  uint8_t* cap = out->data() + 16;
  cap[64] |= 0x01;
  auto d = DecodeHcaCaps(*out);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->umr_modify_entity_size_disabled);
  EXPECT_EQ(UmrModifyCapsOf(*d), (UmrModifyCaps{true, false}));
  cap[65] |= 0x80;
  d = DecodeHcaCaps(*out);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->umr_modify_atomic_disabled);
  EXPECT_EQ(UmrModifyCapsOf(*d), (UmrModifyCaps{false, false}));
}

TEST(CapsTest, AllFieldsRoundTrip) {
  HcaCaps c{true, true, true, true, 63,   true, true, true, 255,  true, 127,    63,   true, true,
            63,   true, true, true, true, 3,    true, true, true, true, 0xffff, true, true, true};
  auto out = EncodeQueryHcaCapOut({}, c);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*DecodeHcaCaps(*out), c);
}

TEST(CapsTest, OdpCapsAndQueryInput) {
  OdpCaps o;
  o.sig = true;
  o.rc = {true, true, true, true, true, false};
  o.ud = {true, false, false, false, false, true};
  auto out = EncodeQueryOdpCapOut({}, o);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[16 + 8], 0x80);
  EXPECT_EQ((*out)[16 + 16], 0xf8);  // rc: send receive write read atomic
  EXPECT_EQ((*out)[16 + 24], 0x84);  // ud: send, srq_receive
  EXPECT_EQ(*DecodeOdpCaps(*out), o);
  QueryHcaCapIn in{kCapTypeOdp, true, false, 0};
  auto ib = EncodeQueryHcaCapIn(in);
  ASSERT_TRUE(ib.ok());
  EXPECT_EQ(*ib, (Mailbox16{0x01, 0x00, 0, 0, 0, 0, 0, 0x05, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(*DecodeQueryHcaCapIn(*ib), in);
}

}  // namespace
}  // namespace regcache::umr