#include "cache/backing_set.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

BackingRecord Rec(BackingId id, uint64_t va, uint64_t len, hca::Key key, uint64_t dev,
                  hca::AccessFlags access = hca::kAllAccess) {
  BackingRecord r;
  r.id = id;
  r.va = va;
  r.length = len;
  r.device_addr = dev;
  r.device.key = key;
  r.access = access;
  return r;
}

TEST(BackingSetTest, LayoutWithinOneBackingTranslatesToDeviceAddress) {
  BackingSet set;
  ASSERT_TRUE(set.Add(Rec(1, 0x10000, 0x10000, 0x100, 0x7f0000)).ok());
  BackingIds used;
  auto layout = set.Layout(0x11000, 0x2000, hca::kLocalRead, &used);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->size(), 1u);
  EXPECT_EQ((*layout)[0], (hca::KlmEntry{0x100, 0x7f1000, 0x2000}));
  EXPECT_EQ(used, BackingIds{1});
}

TEST(BackingSetTest, RangeSpanningTwoAdjacentBackingsGetsTwoEntries) {
  BackingSet set;
  ASSERT_TRUE(set.Add(Rec(1, 0x10000, 0x1000, 0x100, 0xa000)).ok());
  ASSERT_TRUE(set.Add(Rec(2, 0x11000, 0x1000, 0x200, 0x50000)).ok());
  BackingIds used;
  auto layout = set.Layout(0x10800, 0x1000, hca::kLocalRead, &used);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->size(), 2u);
  EXPECT_EQ((*layout)[0], (hca::KlmEntry{0x100, 0xa800, 0x800}));
  EXPECT_EQ((*layout)[1], (hca::KlmEntry{0x200, 0x50000, 0x800}));
  EXPECT_EQ(used, (BackingIds{1, 2}));
}

TEST(BackingSetTest, PiecesLargerThanTwoGiBAreSplit) {
  BackingSet set;
  const uint64_t gib = uint64_t{1} << 30;
  ASSERT_TRUE(set.Add(Rec(1, 0, 5 * gib, 0x100, 0x1000000000)).ok());
  BackingIds used;
  auto layout = set.Layout(0, 5 * gib, hca::kLocalRead, &used);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->size(), 3u);
  EXPECT_EQ((*layout)[0].length, 2 * gib);
  EXPECT_EQ((*layout)[1].addr, 0x1000000000 + 2 * gib);
  EXPECT_EQ((*layout)[2].length, gib);
}

TEST(BackingSetTest, GapsAndUncoveredRangesAreOutOfRange) {
  BackingSet set;
  ASSERT_TRUE(set.Add(Rec(1, 0x10000, 0x1000, 0x100, 0xa000)).ok());
  ASSERT_TRUE(set.Add(Rec(2, 0x12000, 0x1000, 0x200, 0xb000)).ok());
  BackingIds used;
  EXPECT_EQ(set.Layout(0x10800, 0x2000, hca::kLocalRead, &used).status().code(),
            absl::StatusCode::kOutOfRange);  // gap at 0x11000
  EXPECT_EQ(set.Layout(0x1000, 0x10, hca::kLocalRead, &used).status().code(),
            absl::StatusCode::kOutOfRange);  // before everything
  EXPECT_EQ(set.Layout(0x12800, 0x1000, hca::kLocalRead, &used).status().code(),
            absl::StatusCode::kOutOfRange);  // runs off the end
}

TEST(BackingSetTest, OverlapsAreRefusedAndRightsEnforced) {
  BackingSet set;
  ASSERT_TRUE(set.Add(Rec(1, 0x10000, 0x2000, 0x100, 0xa000, hca::kLocalRead)).ok());
  EXPECT_THAT(set.Add(Rec(2, 0x11000, 0x2000, 0x200, 0)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(set.Add(Rec(3, 0xf000, 0x1001, 0x200, 0)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_TRUE(set.Add(Rec(4, 0x12000, 0x1000, 0x300, 0)).ok());  // adjacent is fine
  BackingIds used;
  EXPECT_EQ(set.Layout(0x10000, 0x100, hca::kLocalRead | hca::kLocalWrite, &used).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(set.total_bytes(), 0x3000u);
  ASSERT_TRUE(set.Remove(1).ok());
  EXPECT_THAT(set.Remove(1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(set.total_bytes(), 0x1000u);
}

// A run of layouts sharing `last` answers exactly as layouts without it: every range below, in
// this order, so that the hint is missing, right, wrong, or names a backing that must refuse.
TEST(BackingSetTest, LayoutsWithTheLastBackingAnswerAsLayoutsWithout) {
  BackingSet set;
  const uint64_t gib = uint64_t{1} << 30;
  ASSERT_TRUE(set.Add(Rec(1, 0x10000, 0x2000, 0x100, 0xa000)).ok());
  ASSERT_TRUE(set.Add(Rec(2, 0x12000, 0x1000, 0x200, 0x50000, hca::kLocalRead)).ok());
  ASSERT_TRUE(set.Add(Rec(3, 0x20000, 0x1000, 0x300, 0x60000)).ok());
  ASSERT_TRUE(set.Add(Rec(4, 4 * gib, 3 * gib, 0x400, 0x1000000000)).ok());
  struct Range {
    uint64_t va, length;
    hca::AccessFlags access;
    bool detach_3_first = false;
  };
  constexpr hca::AccessFlags kR = hca::kLocalRead, kRW = hca::kLocalRead | hca::kLocalWrite;
  const Range ranges[] = {
      {0x10000, 0x1000, kR},                // in 1 (no hint yet)
      {0x11000, 0x1000, kR},                // in 1 again (hint right)
      {0x11800, 0x1000, kR},                // from 1 into 2 (hint on 1: the range leaves it)
      {0x12000, 0x100, kR},                 // in 2
      {0x12000, 0x100, kRW},                // hint on 2, which lacks the rights
      {0x12800, 0x1000, kR},                // runs off 2's end
      {0x20000, 0x100, kR},                 // in 3
      {0x20000, 0x100, kR, true},           // hint on 3, now being detached
      {0x10000, 0x100, kR},                 // back to 1 (hint wrong)
      {4 * gib, 3 * gib, kR},               // in 4, split in two entries
      {4 * gib + 0x1000, 2 * gib + 1, kR},  // hint on 4, still split
      {0x1000, 0x10, kR},                   // before everything
  };
  const BackingRecord* last = nullptr;
  for (const Range& r : ranges) {
    SCOPED_TRACE(testing::Message() << std::hex << "0x" << r.va << " +0x" << r.length);
    if (r.detach_3_first) set.MarkRemoving(*set.Find(3));
    BackingIds plain_used, hinted_used;
    BackingRefs refs;
    auto plain = set.Layout(r.va, r.length, r.access, &plain_used);
    auto hinted = set.Layout(r.va, r.length, r.access, &hinted_used, &refs, &last);
    ASSERT_EQ(plain.ok(), hinted.ok()) << plain.status() << " / " << hinted.status();
    if (!plain.ok()) {
      EXPECT_EQ(plain.status(), hinted.status());
      continue;
    }
    EXPECT_EQ(*plain, *hinted);
    EXPECT_EQ(plain_used, hinted_used);
    ASSERT_EQ(refs.size(), hinted_used.size());
    for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(refs[i], set.Find(hinted_used[i]));
    EXPECT_EQ(last, refs.front()) << "the backing the range starts in";
  }
}

}  // namespace
}  // namespace regcache::cache