#include "umr/wqe_builder.h"

#include <array>
#include <cstring>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "umr/mkey.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

using Buf = std::array<uint8_t, 1024>;

std::vector<uint8_t> Slice(const Buf& b, size_t from, size_t to) {
  return std::vector<uint8_t>(b.begin() + from, b.begin() + to);
}

WqeHeader Header() {
  WqeHeader h;
  h.wqe_index = 0x0102;
  h.sqn = 0x000abc;
  h.fence = FenceMode::kInitiatorSmall;
  h.signaled = true;
  return h;
}

MapKeyRequest Klm4() {
  MapKeyRequest r;
  r.key = MakeKey(0x000123, 0x07);
  r.mode = AccessMode::kKlm;
  r.access = {true, true, true, true, false};
  r.start_addr = 0x7f0000000000;
  r.length = 4 * 4096;
  for (uint32_t i = 0; i < 4; ++i) r.klm.push_back({4096, 0x500 + i, 0x10000 + i * 0x1000});
  return r;
}

// docs/prm.md, UMR WQE: a 4-KLM map is DS 12 = 3 WQEBBs.
TEST(BuildMapKeyTest, GoldenKlm4) {
  Buf b;
  b.fill(0xee);
  auto size = BuildMapKey(Header(), Klm4(), 4, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, (WqeSize{12, 3}));
  // ctrl: opmod 0, index 0x0102, opcode 0x25; qpn 0xabc, ds 12; fence small | signalled; imm key.
  EXPECT_EQ(Slice(b, 0, 16), (std::vector<uint8_t>{0x00, 0x01, 0x02, 0x25, 0x00, 0x0a, 0xbc, 12, 0,
                                                   0, 0, 0x28, 0x00, 0x01, 0x23, 0x07}));
  // UMR ctrl: INLINE | must-be-free; 16 octowords; mask FREE|KEY|LEN|START|EN_RINVAL|LR..A.
  EXPECT_EQ(b[16], 0xa0);
  EXPECT_EQ(Slice(b, 20, 24), (std::vector<uint8_t>{0x00, 0x04, 0x00, 0x00}));
  const uint64_t mask = kMaskFree | kMaskKey | kMaskLen | kMaskStartAddr | kMaskEnRinval | kMaskLr |
                        kMaskLw | kMaskRr | kMaskRw | kMaskA;
  EXPECT_EQ(mask, 0x203e2141u);
  EXPECT_EQ(Slice(b, 24, 32), (std::vector<uint8_t>{0, 0, 0, 0, 0x20, 0x3e, 0x21, 0x41}));
  for (size_t i = 32; i < 64; ++i) ASSERT_EQ(b[i], 0) << i;
  // mkey context: free 0, umr_en | rw rr lw lr | KLM (2); qpn unbound, variant 7.
  EXPECT_EQ(Slice(b, 64, 72),
            (std::vector<uint8_t>{0x00, 0x00, 0x80 | 0x3c | 0x02, 0x00, 0xff, 0xff, 0xff, 0x07}));
  EXPECT_EQ(Slice(b, 80, 96),
            (std::vector<uint8_t>{0, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0}));
  // KLM 0 at byte 128, KLM 3 at 176.
  EXPECT_EQ(Slice(b, 128, 144),
            (std::vector<uint8_t>{0, 0, 0x10, 0, 0, 0, 0x05, 0x00, 0, 0, 0, 0, 0, 0x01, 0, 0}));
  EXPECT_EQ(Slice(b, 176, 192),
            (std::vector<uint8_t>{0, 0, 0x10, 0, 0, 0, 0x05, 0x03, 0, 0, 0, 0, 0, 0x01, 0x30, 0}));
  EXPECT_EQ(b[192], 0xee);  // nothing written past DS
}

TEST(BuildMapKeyTest, KlmPaddingAndMttPageSizeMask) {
  Buf b;
  MapKeyRequest r = Klm4();
  r.klm.resize(5);
  r.klm[4] = {4096, 0x600, 0};
  r.length = 5 * 4096;
  auto size = BuildMapKey(Header(), r, 8, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->ds, 16);  // 5 KLMs pad to 8
  for (size_t i = 128 + 80; i < 256; ++i) ASSERT_EQ(b[i], 0) << i;

  MapKeyRequest m;
  m.key = 0x200;
  m.mode = AccessMode::kMtt;
  m.log_entity_size = 12;
  m.start_addr = 0x1800;  // half-way into the first page
  m.length = 0x1000;      // crosses into the second page
  m.mtt = {{0x1000, true, true}, {0x3000, true, false}};
  size = BuildMapKey(Header(), m, 8, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->ds, 12);      // 2 MTTs pad to 8 = 64 B
  EXPECT_EQ(b[16 + 15], 0x43);  // mask low byte: LEN | PAGE_SIZE | START_ADDR
  EXPECT_EQ(b[64 + 59], 12);
  EXPECT_EQ(Slice(b, 128, 144),
            (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0x10, 0x03, 0, 0, 0, 0, 0, 0, 0x30, 0x01}));
}

// docs/prm.md, HCA capabilities: a device reporting umr_modify_atomic_disabled or
// umr_modify_entity_size_disabled refuses a UMR selecting A (bit 21) or PAGE_SIZE (bit 1), so
// the map's mask leaves them out there, and atomic access cannot be granted by a map at all.
TEST(BuildMapKeyTest, MaskFollowsWhatTheDeviceLetsAUmrChange) {
  const uint64_t base = kMaskFree | kMaskKey | kMaskLen | kMaskStartAddr | kMaskEnRinval | kMaskLr |
                        kMaskLw | kMaskRr | kMaskRw;
  EXPECT_EQ(MapKeyMask(AccessMode::kKlm, {}), base | kMaskA);
  EXPECT_EQ(MapKeyMask(AccessMode::kKlm, {.atomic = false}), base);
  EXPECT_EQ(MapKeyMask(AccessMode::kMtt, {}), base | kMaskA | kMaskPageSize);
  EXPECT_EQ(MapKeyMask(AccessMode::kKsm, {.atomic = true, .entity_size = false}), base | kMaskA);
  EXPECT_EQ(MapKeyMask(AccessMode::kKsm, {.atomic = false, .entity_size = false}), base);

  Buf b;
  MapKeyRequest r = Klm4();  // no atomic right asked for
  r.modify.atomic = false;
  auto size = BuildMapKey(Header(), r, 4, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(Slice(b, 24, 32), (std::vector<uint8_t>{0, 0, 0, 0, 0x20, 0x1e, 0x21, 0x41}));
  r.access.remote_atomic = true;
  size = BuildMapKey(Header(), r, 4, absl::MakeSpan(b));
  EXPECT_THAT(size, StatusIs(absl::StatusCode::kFailedPrecondition)) << size.status();
  EXPECT_NE(size.status().message().find("umr_modify_atomic_disabled"), std::string::npos);
}

TEST(BuildMapKeyTest, RejectsInvalidRequests) {
  Buf b;
  auto code = [&](const MapKeyRequest& r, uint32_t cap) {
    return BuildMapKey(Header(), r, cap, absl::MakeSpan(b)).status();
  };
  // More entries than capacity.
  auto s = code(Klm4(), 3);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_NE(s.message().find("capacity"), absl::string_view::npos) << s;
  // KLM byte count over 2 GiB (exactly 2 GiB is allowed).
  MapKeyRequest r = Klm4();
  r.klm[1].byte_count = 0x80000001;
  s = code(r, 4);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_NE(s.message().find("KLM entry 1 byte_count=2147483649"), absl::string_view::npos) << s;
  r.klm[1].byte_count = 0x80000000;
  EXPECT_TRUE(code(r, 4).ok());
  // log_entity_size outside 12..31.
  MapKeyRequest m;
  m.mode = AccessMode::kKsm;
  m.ksm = {{0x100, 0}};
  m.log_entity_size = 11;
  EXPECT_THAT(code(m, 4), StatusIs(absl::StatusCode::kOutOfRange));
  m.log_entity_size = 32;
  EXPECT_THAT(code(m, 4), StatusIs(absl::StatusCode::kOutOfRange));
  m.log_entity_size = 30;
  m.length = uint64_t{1} << 30;
  EXPECT_TRUE(code(m, 4).ok());
  m.length += 1;  // beyond what one 1 GiB entity covers
  EXPECT_THAT(code(m, 4), StatusIs(absl::StatusCode::kOutOfRange));
  // Unsupported access mode.
  r = Klm4();
  r.mode = AccessMode::kMemic;
  EXPECT_THAT(code(r, 4), StatusIs(absl::StatusCode::kUnimplemented));
  // Wrong list for the mode, empty list.
  r = Klm4();
  r.mode = AccessMode::kKsm;
  EXPECT_THAT(code(r, 4), StatusIs(absl::StatusCode::kInvalidArgument));
  r = Klm4();
  r.klm.clear();
  EXPECT_THAT(code(r, 4), StatusIs(absl::StatusCode::kInvalidArgument));
  // Length beyond the KLMs.
  r = Klm4();
  r.length += 1;
  EXPECT_THAT(code(r, 4), StatusIs(absl::StatusCode::kOutOfRange));
  // Over the DS limit: 53 KLMs need DS 8 + 56 = 64.
  r = Klm4();
  r.klm.assign(53, KlmEntry{64, 1, 0});
  r.length = 64;
  s = code(r, 100);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_NE(s.message().find("DS=64"), absl::string_view::npos) << s;
  r.klm.resize(kMaxInlineKlms);
  EXPECT_TRUE(code(r, 100).ok());
  // Output smaller than the WQE.
  EXPECT_EQ(BuildMapKey(Header(), Klm4(), 4, absl::MakeSpan(b.data(), 191)).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(BuildLocalInvalidateTest, GoldenBytes) {
  Buf b;
  b.fill(0xee);
  auto size =
      BuildLocalInvalidate(Header(), {MakeKey(0x42, 0x09), FreeCheck::kNone}, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, (WqeSize{8, 2}));
  EXPECT_EQ(Slice(b, 0, 16), (std::vector<uint8_t>{0, 0x01, 0x02, 0x25, 0, 0x0a, 0xbc, 8, 0, 0, 0,
                                                   0x28, 0, 0, 0x42, 0x09}));
  EXPECT_EQ(b[16], 0x80);
  EXPECT_EQ(Slice(b, 24, 32), (std::vector<uint8_t>{0, 0, 0, 0, 0x20, 0, 0, 0}));
  EXPECT_EQ(b[64], 0x40);  // free
  for (size_t i = 65; i < 128; ++i) {
    if (i >= 68 && i < 71) {
      ASSERT_EQ(b[i], 0xff) << i;  // qpn unbound in the (unmasked) image
    } else {
      ASSERT_EQ(b[i], 0) << i;
    }
  }
  EXPECT_EQ(b[128], 0xee);
}

TEST(BuildRewriteTranslationTest, OffsetSplitAndAlignment) {
  Buf b;
  RewriteTranslationRequest r;
  r.key = 0x300;
  r.mode = AccessMode::kMtt;
  r.first_entry = uint64_t{0x123456788} * 2;  // octoword offset 0x123456788 (64-B aligned)
  r.mtt.assign(8, MttEntry{0x5000, true, false});
  auto size = BuildRewriteTranslation(Header(), r, true, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->ds, 12);
  EXPECT_EQ(b[64 + 2], 0);               // the image is empty: nothing is masked
  EXPECT_EQ(b[16], 0x80 | 0x40 | 0x10);  // INLINE | must-not-be-free | TRANSLATION_OFFSET
  EXPECT_EQ(Slice(b, 20, 24), (std::vector<uint8_t>{0x00, 0x04, 0x67, 0x88}));
  EXPECT_EQ(Slice(b, 24, 32), std::vector<uint8_t>(8, 0));  // no mkc field changes
  EXPECT_EQ(Slice(b, 32, 36), (std::vector<uint8_t>{0x00, 0x01, 0x23, 0x45}));
  EXPECT_EQ(BuildRewriteTranslation(Header(), r, false, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kOutOfRange);  // needs the extended offset
  r.first_entry = 4;                         // not a multiple of 8 MTTs
  auto s = BuildRewriteTranslation(Header(), r, true, absl::MakeSpan(b)).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(s.message().find("first_entry=4"), absl::string_view::npos) << s;
  r.first_entry = 8;
  r.mtt.resize(7);
  EXPECT_EQ(BuildRewriteTranslation(Header(), r, true, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Pointer mode: DS 9 (kernel XLT shape), klm_octowords from byte_count.
  r.mtt.clear();
  r.pointer = DataSegDesc{4096, 0x77, 0x200000};
  size = BuildRewriteTranslation(Header(), r, true, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, (WqeSize{9, 3}));
  EXPECT_EQ(b[16], 0x40 | 0x10);
  EXPECT_EQ(Slice(b, 20, 22), (std::vector<uint8_t>{0x01, 0x00}));
  EXPECT_EQ(Slice(b, 128, 136), (std::vector<uint8_t>{0, 0, 0x10, 0, 0, 0, 0, 0x77}));
  r.pointer->byte_count = 100;
  EXPECT_EQ(BuildRewriteTranslation(Header(), r, true, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BuildUpdateKeyTest, MaskValidation) {
  Buf b;
  UpdateKeyRequest r;
  r.key = 0x400;
  r.mask = kMaskPd | kMaskAccess;
  r.fields.pd = 7;
  ASSERT_TRUE(BuildUpdateKey(Header(), r, absl::MakeSpan(b)).ok());
  EXPECT_EQ(b[16], 0x80 | 0x40);
  EXPECT_EQ(b[64 + 15], 7);
  r.mask = 0;
  EXPECT_EQ(BuildUpdateKey(Header(), r, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.mask = 1ull << 2;
  EXPECT_EQ(BuildUpdateKey(Header(), r, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.mask = kMaskBsfEn;
  EXPECT_EQ(BuildUpdateKey(Header(), r, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(BuildSendInvalidateTest, GoldenBytes) {
  Buf b;
  SendInvalidateRequest r;
  r.invalidate_key = 0xa1b2c3d4;
  r.sgl = {{16, 0x11, 0x2000}};
  WqeHeader h = Header();
  h.fence = FenceMode::kNone;
  auto size = BuildSendInvalidate(h, r, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, (WqeSize{2, 1}));
  EXPECT_EQ(Slice(b, 0, 16), (std::vector<uint8_t>{0, 0x01, 0x02, 0x01, 0, 0x0a, 0xbc, 2, 0, 0, 0,
                                                   0x08, 0xa1, 0xb2, 0xc3, 0xd4}));
  EXPECT_EQ(Slice(b, 16, 24), (std::vector<uint8_t>{0, 0, 0, 16, 0, 0, 0, 0x11}));
  r.sgl.assign(63, DataSegDesc{1, 1, 1});
  EXPECT_EQ(BuildSendInvalidate(h, r, absl::MakeSpan(b)).status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace regcache::umr