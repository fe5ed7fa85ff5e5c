#include "umr/mailbox.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

// docs/prm.md, Command mailboxes: the pool's KLM key as rdma-core's mlx5dv_create_mkey writes it.
TEST(CreateMkeyTest, FreeKlmKeyGoldenBytes) {
  FreeMkeyParams p;
  p.mode = AccessMode::kKlm;
  p.capacity_entries = 5;  // rounds to 8
  p.variant = 0x3c;
  p.pd = 0x000102;
  p.en_rinval = true;
  auto in = BuildCreateFreeMkey(p);
  ASSERT_TRUE(in.ok()) << in.status();
  auto bytes = EncodeCreateMkeyIn(*in);
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->size(), 272u);
  const auto& b = *bytes;
  EXPECT_EQ((std::vector<uint8_t>(b.begin(), b.begin() + 8)),
            (std::vector<uint8_t>{0x02, 0x00, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(b[16 + 0], 0x40);                // free
  EXPECT_EQ(b[16 + 2], 0x80 | 0x04 | 0x02);  // umr_en | lr | KLM
  EXPECT_EQ((std::vector<uint8_t>(b.begin() + 20, b.begin() + 24)),
            (std::vector<uint8_t>{0xff, 0xff, 0xff, 0x3c}));
  EXPECT_EQ((std::vector<uint8_t>(b.begin() + 28, b.begin() + 32)),
            (std::vector<uint8_t>{0x01, 0x00, 0x01, 0x02}));  // en_rinval | pd
  EXPECT_EQ(b[16 + 55], 8);                                   // translations_octword_size
  EXPECT_EQ(b[99], 0);                                        // actual size
  auto back = DecodeCreateMkeyIn(b);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *in);
  auto params = DecodeCreateFreeMkey(*back);
  ASSERT_TRUE(params.ok());
  p.capacity_entries = 8;
  EXPECT_EQ(*params, p);
}

TEST(CreateMkeyTest, AnyAccessModeAndErrors) {
  FreeMkeyParams p;
  p.mode = AccessMode::kMtt;
  p.capacity_entries = 9;  // 16 MTTs = 8 octowords
  p.log_entity_size = 21;
  p.pg_access = true;
  auto in = BuildCreateFreeMkey(p);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->mkc.translations_octword_size, 8u);
  EXPECT_EQ((*EncodeCreateMkeyIn(*in))[12], 0x80);  // pg_access
  p.mode = AccessMode::kMemic;
  p.log_entity_size = 0;
  ASSERT_TRUE(BuildCreateFreeMkey(p).ok());
  EXPECT_EQ(BuildCreateFreeMkey(p)->mkc.access_mode, kAccessModeMemic);
  p.mode = AccessMode::kKsm;
  p.log_entity_size = 11;
  EXPECT_THAT(BuildCreateFreeMkey(p), StatusIs(absl::StatusCode::kOutOfRange));
  p.log_entity_size = 30;
  p.capacity_entries = 0;
  EXPECT_THAT(BuildCreateFreeMkey(p), StatusIs(absl::StatusCode::kInvalidArgument));
  p.capacity_entries = 4;
  p.pd = 1 << 24;
  EXPECT_THAT(BuildCreateFreeMkey(p), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(CreateMkeyTest, TranslationAndShortInputs) {
  CreateMkeyIn in;
  in.mkc.access_mode = kAccessModeKlm;
  in.translation.assign(32, 0xab);
  in.mkey_umem_id = 9;
  in.mkey_umem_offset = 0x123456789;
  auto b = EncodeCreateMkeyIn(in);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 304u);
  EXPECT_EQ((*b)[99], 2);
  EXPECT_EQ((*b)[103], 9);
  EXPECT_EQ(*DecodeCreateMkeyIn(*b), in);
  EXPECT_EQ(DecodeCreateMkeyIn(absl::MakeConstSpan(b->data(), 300)).status().code(),
            absl::StatusCode::kInvalidArgument);
  (*b)[1] = 0x01;  // opcode 0x201
  EXPECT_THAT(DecodeCreateMkeyIn(*b), StatusIs(absl::StatusCode::kInvalidArgument));
  in.translation.resize(20);
  EXPECT_THAT(EncodeCreateMkeyIn(in), StatusIs(absl::StatusCode::kInvalidArgument));
  auto out = EncodeCreateMkeyOut({{0, 0}, 0x00abcd});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((std::vector<uint8_t>(out->begin() + 8, out->begin() + 12)),
            (std::vector<uint8_t>{0, 0, 0xab, 0xcd}));
  EXPECT_EQ(DecodeCreateMkeyOut(*out)->mkey_index, 0xabcdu);
  EXPECT_FALSE(EncodeCreateMkeyOut({{}, 1 << 24}).ok());
}

TEST(QueryDestroyResumeTest, GoldenAndRoundTrip) {
  auto q = EncodeQueryMkeyIn({0, 0, 0x123456, false});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, (Mailbox16{0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0}));
  EXPECT_EQ(*DecodeQueryMkeyIn(*q), (QueryMkeyIn{0, 0, 0x123456, false}));
  auto d = EncodeDestroyMkeyIn({7, 0, 0x42});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (Mailbox16{0x02, 0x02, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0x42, 0, 0, 0, 0}));
  EXPECT_EQ(*DecodeDestroyMkeyIn(*d), (DestroyMkeyIn{7, 0, 0x42}));
  EXPECT_FALSE(DecodeDestroyMkeyIn(*q).ok());  // wrong opcode
  EXPECT_EQ(*PeekCommandOpcode(*d), kCmdDestroyMkey);

  PageFaultResumeIn r{0, 0, true, 5, 0x000777, 0x00abcd};
  auto rb = EncodePageFaultResumeIn(r);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(*rb,
            (Mailbox16{0x02, 0x04, 0, 0, 0, 0, 0, 0, 0x85, 0x00, 0x07, 0x77, 0, 0x00, 0xab, 0xcd}));
  EXPECT_EQ(*DecodePageFaultResumeIn(*rb), r);
  r.page_fault_type = 8;
  EXPECT_THAT(EncodePageFaultResumeIn(r), StatusIs(absl::StatusCode::kOutOfRange));

  QueryMkeyOut out;
  out.status = {0, 0};
  out.mkc.free = true;
  out.mkc.pd = 3;
  auto ob = EncodeQueryMkeyOut(out);
  ASSERT_TRUE(ob.ok());
  EXPECT_EQ(ob->size(), kQueryMkeyOutMinBytes);
  EXPECT_EQ((*ob)[16], 0x40);
  out.translation.assign(32, 0);  // the minimum outbox carries two octowords
  EXPECT_EQ(*DecodeQueryMkeyOut(*ob), out);
  out.translation.assign(64, 0x11);
  ob = EncodeQueryMkeyOut(out);
  EXPECT_EQ(ob->size(), 336u);
  EXPECT_EQ(*DecodeQueryMkeyOut(*ob), out);
  const Mailbox16 st = EncodeCmdStatusOut({0x04, 0xdeadbeef});
  EXPECT_EQ(st[0], 0x04);
  EXPECT_EQ(*DecodeCmdStatusOut(st), (CmdStatus{0x04, 0xdeadbeef}));
}

}  // namespace
}  // namespace regcache::umr