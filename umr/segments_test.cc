#include "umr/segments.h"

#include <cstring>
#include <random>

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

template <typename T>
std::vector<uint8_t> Bytes(const T& v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

// docs/prm.md, Mkey context (MKC): byte-level view of the mkey context.
TEST(MkeyContextTest, GoldenBytesFromFactsTable) {
  MkeyContextDesc d;
  d.free = true;                               // byte 0 0x40
  d.access_mode = kAccessModeKsm;              // 0b00011: 4_2 = 0, 1_0 = 3
  d.umr_en = true;                             // byte 2 0x80
  d.access = {true, true, true, true, true};   // byte 2 0x7c
  d.relaxed_ordering_write = true;             // byte 1 0x04
  d.small_fence_on_rdma_read_response = true;  // byte 1 0x01
  d.ma_translation_mode = 1;                   // byte 3 bits 5:4
  d.qpn = 0xffffff;
  d.mkey_7_0 = 0xab;
  d.length64 = true;
  d.en_rinval = true;
  d.pd = 0x123456;
  d.start_addr = 0x1122334455667788;
  d.len = 0x0000000100000000;
  d.translations_octword_size = 0x40;
  d.relaxed_ordering_read = true;
  d.log_entity_size = 30;
  MkeyContext m;
  ASSERT_TRUE(EncodeMkeyContext(d, &m).ok());
  const std::vector<uint8_t> b = Bytes(m);
  EXPECT_EQ(b[0], 0x40);
  EXPECT_EQ(b[1], 0x05);
  EXPECT_EQ(b[2], 0x80 | 0x7c | 0x03);
  EXPECT_EQ(b[3], 0x10);
  EXPECT_EQ((std::vector<uint8_t>(b.begin() + 4, b.begin() + 8)),
            (std::vector<uint8_t>{0xff, 0xff, 0xff, 0xab}));
  EXPECT_EQ((std::vector<uint8_t>(b.begin() + 12, b.begin() + 16)),
            (std::vector<uint8_t>{0x81, 0x12, 0x34, 0x56}));  // length64 | en_rinval | pd
  EXPECT_EQ(b[16], 0x11);
  EXPECT_EQ(b[23], 0x88);
  EXPECT_EQ(b[27], 0x01);
  EXPECT_EQ(b[55], 0x40);
  EXPECT_EQ(b[59], 0x40 | 30);
  for (int i : {8, 9, 10, 11, 36, 47, 56, 57, 58, 60, 61, 62, 63}) EXPECT_EQ(b[i], 0) << i;
  EXPECT_EQ(DecodeMkeyContext(m), d);
}

TEST(MkeyContextTest, AccessModeSplitAcrossBytes) {
  // docs/prm.md, Access modes: SW_ICM -> 4_2 = 1, 1_0 = 0; MEMIC -> 1, 1; CROSSING -> 1, 2.
  for (auto [mode, b0, b2] :
       {std::tuple{kAccessModeSwIcm, 0x04, 0x00}, std::tuple{kAccessModeMemic, 0x04, 0x01},
        std::tuple{kAccessModeCrossing, 0x04, 0x02}, std::tuple{uint8_t{31}, 0x1c, 0x03}}) {
    MkeyContextDesc d;
    d.access = {false, false, false, false, false};
    d.access_mode = mode;
    MkeyContext m;
    ASSERT_TRUE(EncodeMkeyContext(d, &m).ok());
    const auto b = Bytes(m);
    EXPECT_EQ(b[0], b0) << int(mode);
    EXPECT_EQ(b[2], b2) << int(mode);
    EXPECT_EQ(DecodeMkeyContext(m).access_mode, mode);
  }
}

TEST(MkeyContextTest, RejectsTooWideFields) {
  MkeyContext m;
  MkeyContextDesc d;
  d.qpn = 1 << 24;
  EXPECT_THAT(EncodeMkeyContext(d, &m), StatusIs(absl::StatusCode::kOutOfRange));
  d = {};
  d.pd = 1 << 24;
  EXPECT_THAT(EncodeMkeyContext(d, &m), StatusIs(absl::StatusCode::kOutOfRange));
  d = {};
  d.log_entity_size = 32;
  EXPECT_THAT(EncodeMkeyContext(d, &m), StatusIs(absl::StatusCode::kOutOfRange));
  d = {};
  d.access_mode = 32;
  auto s = EncodeMkeyContext(d, &m);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_NE(s.message().find("access_mode=32"), absl::string_view::npos) << s;
}

MkeyContextDesc RandomMkc(std::mt19937_64& rng) {
  auto bit = [&] { return (rng() & 1) != 0; };
  MkeyContextDesc d;
  d.free = bit();
  d.access_mode = rng() % 32;
  d.relaxed_ordering_write = bit();
  d.small_fence_on_rdma_read_response = bit();
  d.umr_en = bit();
  d.access = {bit(), bit(), bit(), bit(), bit()};
  d.ma_translation_mode = rng() % 4;
  d.qpn = rng() & 0xffffff;
  d.mkey_7_0 = rng() & 0xff;
  d.length64 = bit();
  d.bsf_en = bit();
  d.sync_umr = bit();
  d.expected_sigerr_count = bit();
  d.en_rinval = bit();
  d.pd = rng() & 0xffffff;
  d.start_addr = rng();
  d.len = rng();
  d.bsf_octword_size = static_cast<uint32_t>(rng());
  d.crossing_target_vhca_id = rng() & 0xffff;
  d.translations_octword_size = static_cast<uint32_t>(rng());
  d.relaxed_ordering_read = bit();
  d.log_entity_size = rng() % 32;
  d.crypto_en = rng() % 4;
  return d;
}

TEST(MkeyContextTest, RandomRoundTrip) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    const MkeyContextDesc d = RandomMkc(rng);
    MkeyContext m;
    ASSERT_TRUE(EncodeMkeyContext(d, &m).ok());
    ASSERT_EQ(DecodeMkeyContext(m), d) << i;
  }
}

TEST(CtrlSegTest, GoldenBytes) {
  CtrlSegDesc d;
  d.opmod = 0;
  d.wqe_index = 0x1234;
  d.opcode = kOpcodeUmr;
  d.qpn = 0xabcdef;
  d.ds = 12;
  d.fence = FenceMode::kInitiatorSmall;
  d.completion_mode = kCeCqUpdate;
  d.solicited = true;
  d.imm = 0x00112233;
  CtrlSegLayout s;
  ASSERT_TRUE(EncodeCtrlSeg(d, &s).ok());
  EXPECT_EQ(Bytes(s), (std::vector<uint8_t>{0x00, 0x12, 0x34, 0x25, 0xab, 0xcd, 0xef, 12, 0, 0, 0,
                                            0x20 | 0x08 | 0x02, 0x00, 0x11, 0x22, 0x33}));
  EXPECT_EQ(*DecodeCtrlSeg(s), d);
  d.ds = 64;
  EXPECT_THAT(EncodeCtrlSeg(d, &s), StatusIs(absl::StatusCode::kOutOfRange));
  d.ds = 1;
  d.fence = static_cast<FenceMode>(5);
  EXPECT_THAT(EncodeCtrlSeg(d, &s), StatusIs(absl::StatusCode::kOutOfRange));
  s.fm_ce_se = 0xa0;  // fence 5
  EXPECT_THAT(DecodeCtrlSeg(s), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(UmrCtrlSegTest, GoldenFlagsAndOffsetSplit) {
  // docs/prm.md, UMR WQE: 48-bit offset, low 16 bits at bytes 6-7, high 32 at 16-19.
  UmrCtrlSegDesc d;
  d.inline_translation = true;
  d.check_free = FreeCheck::kMustBeFree;
  d.translation_offset_en = true;
  d.check_qpn = true;
  d.klm_octowords = 0x0104;
  d.translation_offset = 0x123456789abc;
  d.mkey_mask = kMaskFree | kMaskKey | kMaskRelaxedOrderingRead;
  UmrCtrlSegLayout s;
  ASSERT_TRUE(EncodeUmrCtrlSeg(d, &s).ok());
  const auto b = Bytes(s);
  EXPECT_EQ(b[0], 0x80 | 0x20 | 0x10 | 0x08);
  EXPECT_EQ(b[4], 0x01);
  EXPECT_EQ(b[5], 0x04);
  EXPECT_EQ(b[6], 0x9a);
  EXPECT_EQ(b[7], 0xbc);
  EXPECT_EQ((std::vector<uint8_t>(b.begin() + 8, b.begin() + 16)),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x00, 0x20, 0x00, 0x20, 0x00}));
  EXPECT_EQ((std::vector<uint8_t>(b.begin() + 16, b.begin() + 20)),
            (std::vector<uint8_t>{0x12, 0x34, 0x56, 0x78}));
  for (size_t i = 20; i < 48; ++i) EXPECT_EQ(b[i], 0);
  EXPECT_EQ(*DecodeUmrCtrlSeg(s), d);

  d.check_free = FreeCheck::kMustNotBeFree;
  ASSERT_TRUE(EncodeUmrCtrlSeg(d, &s).ok());
  EXPECT_EQ(s.flags & kUmrCheckFreeMask, 0x40);
  s.flags |= kUmrCheckFreeMask;  // value 3
  EXPECT_THAT(DecodeUmrCtrlSeg(s), StatusIs(absl::StatusCode::kInvalidArgument));

  d.translation_offset = kMaxTranslationOffset + 1;
  EXPECT_THAT(EncodeUmrCtrlSeg(d, &s), StatusIs(absl::StatusCode::kOutOfRange));
  d.translation_offset_en = false;
  d.translation_offset = 64;
  EXPECT_THAT(EncodeUmrCtrlSeg(d, &s), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TranslationEntryTest, GoldenMttKlmKsm) {
  uint8_t buf[16];
  ASSERT_TRUE(EncodeMttEntries({MttEntry{0x0000123456789a00, true, true}}, buf).ok());
  EXPECT_EQ((std::vector<uint8_t>(buf, buf + 8)),
            (std::vector<uint8_t>{0x00, 0x00, 0x12, 0x34, 0x56, 0x78, 0x9a, 0x03}));
  EXPECT_EQ(EncodeMttEntries({MttEntry{0x1001, true, false}}, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EncodeKlmEntries({KlmEntry{0x80000000, 0x00000102, 0x1122334455667788}}, buf);
  EXPECT_EQ((std::vector<uint8_t>(buf, buf + 16)),
            (std::vector<uint8_t>{0x80, 0, 0, 0, 0, 0, 0x01, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
                                  0x66, 0x77, 0x88}));
  std::memset(buf, 0xee, sizeof(buf));
  EncodeKsmEntries({KsmEntry{0xaabbccdd, 0x40000000}}, buf);
  EXPECT_EQ((std::vector<uint8_t>(buf, buf + 16)),
            (std::vector<uint8_t>{0, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 0, 0x40, 0, 0, 0}));
  auto ksm = DecodeKsmEntries(absl::MakeConstSpan(buf, 16));
  ASSERT_TRUE(ksm.ok());
  EXPECT_EQ((*ksm)[0], (KsmEntry{0xaabbccdd, 0x40000000}));
  EXPECT_EQ(DecodeKlmEntries(absl::MakeConstSpan(buf, 12)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TranslationEntryTest, RepeatBlockGoldenAndRoundTrip) {
  RepeatBlock b;
  b.repeat_count = 3;
  b.entries = {{0x100, 0x40, 0x1234, 0x1000}, {0x200, 0x80, 0x5678, 0x2000}};
  std::vector<uint8_t> buf(RepeatBlockBytes(b));
  ASSERT_TRUE(EncodeRepeatBlock(b, buf.data()).ok());
  EXPECT_EQ((std::vector<uint8_t>(buf.begin(), buf.begin() + 16)),
            (std::vector<uint8_t>{0, 0, 0, 0xc0, 0, 0, 0x04, 0x00, 0, 0, 0, 3, 0, 0, 0, 2}));
  EXPECT_EQ((std::vector<uint8_t>(buf.begin() + 16, buf.begin() + 24)),
            (std::vector<uint8_t>{0x01, 0x00, 0x00, 0x40, 0, 0, 0x12, 0x34}));
  EXPECT_EQ(*DecodeRepeatBlock(buf), b);
  buf[3] = 0xc1;  // byte_count no longer the sum
  EXPECT_THAT(DecodeRepeatBlock(buf), StatusIs(absl::StatusCode::kInvalidArgument));
  b.entries[0].stride = 0x10;  // < byte_count
  EXPECT_THAT(EncodeRepeatBlock(b, buf.data()), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DataSegTest, RoundTripAndInlineRejected) {
  DataSegLayout l;
  ASSERT_TRUE(EncodeDataSeg({64, 0x1234, 0xdeadbeef000}, &l).ok());
  EXPECT_EQ(*DecodeDataSeg(l), (DataSegDesc{64, 0x1234, 0xdeadbeef000}));
  EXPECT_EQ(EncodeDataSeg({kInlineSegBit | 4, 0, 0}, &l).code(),
            absl::StatusCode::kInvalidArgument);
  l.byte_count = be32::FromHost(kInlineSegBit | 4);
  EXPECT_THAT(DecodeDataSeg(l), StatusIs(absl::StatusCode::kUnimplemented));
}

}  // namespace
}  // namespace regcache::umr