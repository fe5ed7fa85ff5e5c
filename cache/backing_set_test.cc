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

}  // namespace
}  // namespace regcache::cache