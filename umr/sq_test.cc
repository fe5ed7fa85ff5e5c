#include "umr/sq.h"

#include <algorithm>
#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "umr/wqe_decoder.h"

using ::regcache::base::StatusIs;

namespace regcache::umr {
namespace {

TEST(SqRingTest, RejectsBadGeometry) {
  std::vector<uint8_t> ring(64 * 3);
  EXPECT_EQ(SqRing::Create(absl::MakeSpan(ring), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ring.resize(100);
  EXPECT_EQ(SqRing::Create(absl::MakeSpan(ring), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ring.resize(64 * 4);
  SqRing::Options o;
  o.sqn = 1 << 24;
  EXPECT_EQ(SqRing::Create(absl::MakeSpan(ring), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SqRingTest, FenceForUmrCap) {
  EXPECT_EQ(*FenceForUmrCap(0), FenceMode::kStrongOrdering);
  EXPECT_EQ(*FenceForUmrCap(1), FenceMode::kInitiatorSmall);
  EXPECT_EQ(*FenceForUmrCap(2), FenceMode::kNone);
  EXPECT_FALSE(FenceForUmrCap(3).ok());
}

// Posts 3-WQEBB map WQEs into an 8-WQEBB ring; every third one wraps. Each WQE gathered back
// from the ring decodes to what was built, the WQE index counts WQEBBs mod 2^16.
TEST(SqRingTest, WrapAroundPostAndGather) {
  std::vector<uint8_t> ring(8 * kWqebb);
  SqRing::Options o;
  o.sqn = 0x55;
  o.umr_fence = FenceMode::kNone;
  auto sq = SqRing::Create(absl::MakeSpan(ring), o);
  ASSERT_TRUE(sq.ok());
  uint32_t consumer = 0;
  int wrapped = 0;
  for (uint32_t i = 0; i < 30000; ++i) {  // enough to wrap the 16-bit WQE index
    MapKeyRequest r;
    r.key = (i << 8) | (i & 0xff);
    r.klm = {{64, i, i * 64ull}, {64, i + 1, 0}, {64, 2, 3}};
    r.length = 192;
    const WqeHeader h = sq->NextHeader(true, false, false, 3);
    EXPECT_EQ(h.wqe_index, static_cast<uint16_t>(i * 3));
    if (sq->FreeWqebbs(consumer) < 3) consumer = sq->producer();  // everything completed
    auto buf = sq->Begin(consumer, 3);
    ASSERT_TRUE(buf.ok()) << buf.status();
    const uint32_t slot = sq->Slot(sq->producer());
    wrapped += slot + 3 > 8;
    auto size = BuildMapKey(h, r, 4, *buf);
    ASSERT_TRUE(size.ok());
    auto posted = sq->Commit(*size, h, true);
    ASSERT_TRUE(posted.ok());
    EXPECT_EQ(*posted, i * 3);
    WqeScratch scratch;
    auto w = GatherWqe(ring, slot, &scratch);
    ASSERT_TRUE(w.ok()) << w.status();
    auto d = DecodeWqe(*w);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(*DecodeMapKey(*d), r);
    ASSERT_EQ(d->ctrl.wqe_index, static_cast<uint16_t>(i * 3));
    ASSERT_EQ(d->ctrl.qpn, 0x55u);
  }
  EXPECT_EQ(wrapped, 7500);  // slots 6 and 7 of every 8 wrap
}

TEST(SqRingTest, FullRingIsResourceExhausted) {
  std::vector<uint8_t> ring(4 * kWqebb);
  auto sq = SqRing::Create(absl::MakeSpan(ring), {});
  ASSERT_TRUE(sq.ok());
  ASSERT_TRUE(sq->Begin(0, 3).ok());
  ASSERT_TRUE(sq->Commit({12, 3}, {}, true).ok());
  EXPECT_THAT(sq->Begin(0, 2), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(sq->Begin(3, 2).ok());
  EXPECT_THAT(sq->Commit({12, 3}, {}, true), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(sq->Begin(3, 17), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SqRingTest, FencePolicyAndSelectiveSignalling) {
  std::vector<uint8_t> ring(16 * kWqebb);
  SqRing::Options o;
  o.umr_fence = FenceMode::kStrongOrdering;
  o.signal_wqebbs = 4;
  auto sq = SqRing::Create(absl::MakeSpan(ring), o);
  ASSERT_TRUE(sq.ok());
  auto post = [&](bool umr, bool sig, bool fence) {
    WqeHeader h = sq->NextHeader(umr, sig, fence, 1);
    EXPECT_TRUE(sq->Begin(sq->producer(), 1).ok());
    EXPECT_TRUE(sq->Commit({4, 1}, h, umr).ok());
    return h;
  };
  // A UMR carries the cap's fence; the next WQE gets a small fence; an explicit fence after a
  // UMR becomes SMALL_AND_FENCE, otherwise FENCE.
  EXPECT_EQ(post(true, false, false).fence, FenceMode::kStrongOrdering);
  EXPECT_EQ(post(false, false, false).fence, FenceMode::kInitiatorSmall);
  EXPECT_EQ(post(false, false, false).fence, FenceMode::kNone);
  WqeHeader h = post(false, false, false);  // 4th unsignalled in a row -> signalled
  EXPECT_TRUE(h.signaled);
  post(true, false, false);
  EXPECT_EQ(post(false, false, true).fence, FenceMode::kSmallAndFence);
  EXPECT_EQ(post(false, false, true).fence, FenceMode::kFence);
  EXPECT_TRUE(post(false, true, false).signaled);
  EXPECT_FALSE(post(false, false, false).signaled);
}

// Signalling follows ring space, not WQE count: a run of the largest WQEs (16 WQEBBs) in a ring
// of 32 has every WQE signalled (each reaches half the ring alone), small WQEs every 16th; at
// every point the WQEBBs since the last signalled WQE stay under half the ring, so a full ring
// always has a completion coming that frees it.
TEST(SqRingTest, SignallingFollowsRingSpace) {
  std::vector<uint8_t> ring(32 * kWqebb);
  auto sq = SqRing::Create(absl::MakeSpan(ring), {});
  ASSERT_TRUE(sq.ok());
  uint32_t run = 0;
  auto post = [&](unsigned wqebbs) {
    const WqeHeader h = sq->NextHeader(true, false, false, wqebbs);
    EXPECT_TRUE(sq->Begin(sq->producer(), wqebbs).ok());
    const WqeSize size{static_cast<uint8_t>(std::min(63u, 4 * wqebbs)),
                       static_cast<uint8_t>(wqebbs)};
    EXPECT_TRUE(sq->Commit(size, h, true).ok());
    run = h.signaled ? 0 : run + wqebbs;
    EXPECT_LT(run, 16u);
    return h.signaled;
  };
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(post(16)) << i;
  int signalled = 0;
  for (int i = 0; i < 64; ++i) signalled += post(1);
  EXPECT_EQ(signalled, 4);
  // Mixed sizes: whatever the mix, the run stays under half the ring (checked in post()).
  for (int i = 0; i < 200; ++i) post(1 + (i * 7) % 16);
}

TEST(GatherWqeTest, Errors) {
  std::vector<uint8_t> ring(4 * kWqebb, 0);
  WqeScratch s;
  EXPECT_THAT(GatherWqe(ring, 0, &s), StatusIs(absl::StatusCode::kInvalidArgument));  // DS 0
  EXPECT_THAT(GatherWqe(ring, 4, &s), StatusIs(absl::StatusCode::kInvalidArgument));
  ring[7] = 63;  // 16 WQEBBs > ring
  EXPECT_THAT(GatherWqe(ring, 0, &s), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(GatherWqe(absl::MakeConstSpan(ring.data(), 100), 0, &s).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace regcache::umr