#include "umr/wqe_decoder.h"

#include <array>
#include <random>

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

using Buf = std::array<uint8_t, 1024>;

WqeHeader RandomHeader(std::mt19937_64& rng) {
  WqeHeader h;
  h.wqe_index = rng() & 0xffff;
  h.sqn = rng() & 0xffffff;
  h.fence = static_cast<FenceMode>(rng() % 5);
  h.signaled = rng() & 1;
  h.solicited = rng() & 1;
  return h;
}
MkeyAccess RandomAccess(std::mt19937_64& rng) {
  return {(rng() & 1) != 0, (rng() & 1) != 0, (rng() & 1) != 0, (rng() & 1) != 0, (rng() & 1) != 0};
}

MapKeyRequest RandomMap(std::mt19937_64& rng) {
  MapKeyRequest r;
  r.key = static_cast<uint32_t>(rng());
  r.mode = static_cast<AccessMode>(1 + rng() % 3);
  r.access = RandomAccess(rng);
  r.en_rinval = rng() & 1;
  r.check_free = static_cast<FreeCheck>(rng() % 3);
  // Both device settings of the optional mask bits (a KLM map has no PAGE_SIZE bit either way).
  r.modify.atomic = (rng() & 1) != 0;
  if (!r.modify.atomic) r.access.remote_atomic = false;
  r.modify.entity_size = r.mode == AccessMode::kKlm || (rng() & 1) != 0;
  const size_t n = 1 + rng() % (r.mode == AccessMode::kMtt ? kMaxInlineMtts : kMaxInlineKlms);
  uint64_t covered = 0;
  if (r.mode == AccessMode::kKlm) {
    for (size_t i = 0; i < n; ++i) {
      r.klm.push_back(
          {1 + static_cast<uint32_t>(rng() % 0x80000000u), static_cast<uint32_t>(rng()), rng()});
      covered += r.klm.back().byte_count;
    }
  } else {
    r.log_entity_size = 12 + rng() % 20;
    for (size_t i = 0; i < n; ++i) {
      if (r.mode == AccessMode::kMtt) {
        r.mtt.push_back({(rng() & kMttAddrMask) | 0x100, (rng() & 1) != 0, (rng() & 1) != 0});
      } else {
        r.ksm.push_back({static_cast<uint32_t>(rng()) | 1, rng()});
      }
    }
    covered = uint64_t{n} << r.log_entity_size;
  }
  r.start_addr = rng();
  if (r.mode == AccessMode::kMtt) {
    covered -= r.start_addr & ((uint64_t{1} << r.log_entity_size) - 1);
  }
  if (rng() % 8 == 0) {
    r.length64 = true;
  } else {
    r.length = rng() % (covered + 1);
  }
  return r;
}

TEST(DecodeWqeTest, MapKeyRoundTripRandomized) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const WqeHeader h = RandomHeader(rng);
    const MapKeyRequest r = RandomMap(rng);
    Buf b;
    auto size = BuildMapKey(h, r, 1000, absl::MakeSpan(b));
    ASSERT_TRUE(size.ok()) << i << " " << size.status();
    auto d = DecodeWqe(absl::MakeConstSpan(b.data(), size->bytes()));
    ASSERT_TRUE(d.ok()) << i << " " << d.status();
    EXPECT_EQ(d->ctrl.ds, size->ds);
    EXPECT_EQ(DecodeWqeHeader(d->ctrl), h);
    auto back = DecodeMapKey(*d);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, r) << i;
    // The generic encoder reproduces the same bytes from the description.
    Buf again;
    auto size2 = EncodeWqe(*d, absl::MakeSpan(again));
    ASSERT_TRUE(size2.ok()) << size2.status();
    ASSERT_EQ(*size2, *size);
    ASSERT_TRUE(std::equal(b.begin(), b.begin() + size->bytes(), again.begin()));
  }
}

TEST(DecodeWqeTest, OtherBuildersRoundTripRandomized) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const WqeHeader h = RandomHeader(rng);
    Buf b;
    // Local invalidate.
    LocalInvalidateRequest li{static_cast<uint32_t>(rng()), static_cast<FreeCheck>(rng() % 3)};
    auto size = BuildLocalInvalidate(h, li, absl::MakeSpan(b));
    ASSERT_TRUE(size.ok());
    auto d = DecodeWqe(absl::MakeConstSpan(b.data(), size->bytes()));
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(*DecodeLocalInvalidate(*d), li);
    EXPECT_FALSE(DecodeMapKey(*d).ok());
    // Update.
    UpdateKeyRequest up;
    up.key = static_cast<uint32_t>(rng());
    up.mask = (rng() & (kMaskKnown & ~(kMaskBsfEn | kMaskEnSigerr | kMaskAccessMode))) | kMaskPd;
    up.fields.pd = rng() & 0xffffff;
    up.fields.access = RandomAccess(rng);
    up.fields.start_addr = rng();
    up.fields.mkey_7_0 = rng() & 0xff;
    up.check_free = static_cast<FreeCheck>(rng() % 3);
    size = BuildUpdateKey(h, up, absl::MakeSpan(b));
    ASSERT_TRUE(size.ok()) << size.status();
    d = DecodeWqe(absl::MakeConstSpan(b.data(), size->bytes()));
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(*DecodeUpdateKey(*d), up);
    // Rewrite (inline or pointer).
    RewriteTranslationRequest rw;
    rw.key = static_cast<uint32_t>(rng());
    rw.mode = static_cast<AccessMode>(1 + rng() % 3);
    const size_t per64 = EntriesPer64B(rw.mode);
    rw.first_entry = (rng() % (uint64_t{1} << 40)) * per64;
    rw.check_free = static_cast<FreeCheck>(rng() % 3);
    if (rng() & 1) {
      rw.pointer = DataSegDesc{static_cast<uint32_t>(64 * (1 + rng() % 1000)),
                               static_cast<uint32_t>(rng()), rng()};
    } else {
      const size_t n = per64 * (1 + rng() % (rw.mode == AccessMode::kMtt ? 13 : 13));
      for (size_t k = 0; k < n; ++k) {
        if (rw.mode == AccessMode::kMtt) rw.mtt.push_back({rng() & kMttAddrMask, true, false});
        if (rw.mode == AccessMode::kKlm)
          rw.klm.push_back({static_cast<uint32_t>(rng() % 4096), 1, rng()});
        if (rw.mode == AccessMode::kKsm) rw.ksm.push_back({static_cast<uint32_t>(rng()), rng()});
      }
    }
    size = BuildRewriteTranslation(h, rw, true, absl::MakeSpan(b));
    ASSERT_TRUE(size.ok()) << size.status();
    d = DecodeWqe(absl::MakeConstSpan(b.data(), size->bytes()));
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(*DecodeRewriteTranslation(*d, rw.mode), rw);
    // Send with invalidate.
    SendInvalidateRequest si;
    si.invalidate_key = static_cast<uint32_t>(rng());
    for (size_t k = rng() % 10; k > 0; --k) {
      si.sgl.push_back(
          {static_cast<uint32_t>(rng() & 0x7fffffff), static_cast<uint32_t>(rng()), rng()});
    }
    size = BuildSendInvalidate(h, si, absl::MakeSpan(b));
    ASSERT_TRUE(size.ok());
    d = DecodeWqe(absl::MakeConstSpan(b.data(), size->bytes()));
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(*DecodeSendInvalidate(*d), si);
    ASSERT_EQ(DecodeWqeHeader(d->ctrl), h);
  }
}

TEST(DecodeWqeTest, TypedTranslationForTheSim) {
  Buf b;
  MapKeyRequest r;
  r.key = 0x100;
  r.klm = {{100, 1, 2}, {200, 3, 4}};
  r.length = 300;
  auto size = BuildMapKey({}, r, 4, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok());
  auto d = DecodeWqe(absl::MakeConstSpan(b.data(), size->bytes()));
  ASSERT_TRUE(d.ok());
  auto t = DecodeTranslation(AccessMode::kKlm, d->inline_translation);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->klm.size(), 4u);  // padding entries included: the device writes 64 B
  EXPECT_EQ(t->klm[1], (KlmEntry{200, 3, 4}));
  EXPECT_EQ(t->klm[3], KlmEntry{});
  EXPECT_EQ(DecodeTranslation(AccessMode::kPa, d->inline_translation).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(DecodeWqeTest, MalformedBytesArePreciseErrors) {
  Buf b{};
  auto size = BuildLocalInvalidate({}, {0x100}, absl::MakeSpan(b));
  ASSERT_TRUE(size.ok());
  auto code = [&](size_t n) { return DecodeWqe(absl::MakeConstSpan(b.data(), n)).status(); };
  EXPECT_TRUE(code(128).ok());
  EXPECT_THAT(code(8), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(code(127), StatusIs(absl::StatusCode::kInvalidArgument));  // DS beyond the bytes
  b[7] = 0;                                                              // DS 0
  EXPECT_THAT(code(128), StatusIs(absl::StatusCode::kInvalidArgument));
  b[7] = 4;  // DS too small for a UMR
  EXPECT_THAT(code(128), StatusIs(absl::StatusCode::kInvalidArgument));
  b[7] = 8;
  b[21] = 4;  // klm_octowords 4 but DS 8
  auto s = code(1024);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(s.message().find("klm_octowords=4 exceeds"), absl::string_view::npos) << s;
  b[21] = 0;
  b[3] = kOpcodeRdmaWrite;
  EXPECT_THAT(code(128), StatusIs(absl::StatusCode::kUnimplemented));
  b[3] = 0x7e;
  EXPECT_THAT(code(128), StatusIs(absl::StatusCode::kUnimplemented));
  b[3] = kOpcodeUmr;
  b[24] = 0x80;  // unknown mkey_mask bit 63
  EXPECT_THAT(code(128), StatusIs(absl::StatusCode::kInvalidArgument));
  b[24] = 0;
  b[16] |= 0x60;  // check-free value 3
  EXPECT_THAT(code(128), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Fuzz-like: random bytes (and mutated valid WQEs) never crash the decoder; every result is
// either an error or a description that re-encodes to the same bytes.
TEST(DecodeWqeTest, GarbageNeverCrashes) {
  std::mt19937_64 rng(3);
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    Buf b;
    size_t n;
    if (i % 2 == 0) {
      for (auto& x : b) x = rng() & 0xff;
      b[3] = std::array<uint8_t, 4>{kOpcodeUmr, kOpcodeSendInval, kOpcodeNop, 0x33}[rng() % 4];
      n = rng() % b.size();
    } else {
      auto size = BuildMapKey(RandomHeader(rng), RandomMap(rng), 1000, absl::MakeSpan(b));
      ASSERT_TRUE(size.ok());
      n = size->bytes();
      for (int k = 0; k < 3; ++k) b[rng() % n] ^= 1 << (rng() % 8);
    }
    auto d = DecodeWqe(absl::MakeConstSpan(b.data(), n));
    if (!d.ok()) continue;
    ++ok;
    Buf again;
    auto size = EncodeWqe(*d, absl::MakeSpan(again));
    if (!size.ok()) continue;  // e.g. a data segment with a huge byte_count is valid to decode
    ASSERT_EQ(size->ds, d->ctrl.ds);
    auto d2 = DecodeWqe(absl::MakeConstSpan(again.data(), size->bytes()));
    ASSERT_TRUE(d2.ok());
    ASSERT_EQ(*d2, *d);
  }
  EXPECT_GT(ok, 1000);
}

// A map whose list travels by pointer: 3 WQEBBs whatever its length, the list in the staging
// buffer byte for byte as it would be inline, and the same request decoded back.
TEST(MapByPointerTest, RoundTripsThroughTheStagingBytes) {
  for (size_t n : {49, 64, 1000, 4096}) {
    MapKeyRequest r;
    r.key = (0x42u << 8) | 3;
    r.mode = AccessMode::kKlm;
    r.access = {true, true, true, true, false};
    r.start_addr = 0x10000;
    for (size_t i = 0; i < n; ++i) {
      r.klm.push_back({4096, static_cast<uint32_t>(0x500 + i % 7), 0x1000 * i});
    }
    r.length = 4096 * n;
    std::vector<uint8_t> staging(PaddedTranslationBytes(r.mode, n), 0xee);
    TranslationStaging st{absl::MakeSpan(staging), 0x7f0000001000, 0x1234};
    std::vector<uint8_t> wqe(256);
    auto size = BuildMapKeyByPointer({}, r, 1u << 16, st, absl::MakeSpan(wqe));
    ASSERT_TRUE(size.ok()) << n << ": " << size.status();
    EXPECT_EQ(size->ds, 9);
    EXPECT_EQ(size->wqebbs, 3);
    auto d = DecodeWqe(absl::MakeConstSpan(wqe.data(), size->bytes()));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_FALSE(d->umr.inline_translation);
    ASSERT_TRUE(d->translation_pointer.has_value());
    EXPECT_EQ(d->translation_pointer->addr, 0x7f0000001000u);
    EXPECT_EQ(d->translation_pointer->lkey, 0x1234u);
    EXPECT_EQ(d->translation_pointer->byte_count, staging.size());
    EXPECT_EQ(d->umr.klm_octowords * kOctoword, staging.size());
    auto back = DecodeMapKey(*d, staging);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, r) << n;
  }
  // Too little staging is refused, before anything is written.
  MapKeyRequest r;
  r.key = 0x100;
  r.mode = AccessMode::kKlm;
  r.klm.assign(60, KlmEntry{4096, 0x500, 0});
  r.length = 60 * 4096;
  std::vector<uint8_t> small(PaddedTranslationBytes(AccessMode::kKlm, 60) - 64);
  std::vector<uint8_t> wqe(256);
  EXPECT_EQ(
      BuildMapKeyByPointer({}, r, 1u << 16, {absl::MakeSpan(small), 0, 0}, absl::MakeSpan(wqe))
          .status()
          .code(),
      absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace regcache::umr