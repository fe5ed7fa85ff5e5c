#include "odp/internal/mtt_range.h"

#include "gtest/gtest.h"

namespace regcache::odp::internal {
namespace {

hca::Backing Make(uint64_t addr, uint64_t length, uint32_t log) {
  hca::Backing b;
  b.addr = addr;
  b.length = length;
  b.log_page_size = log;
  const uint64_t page = uint64_t{1} << log;
  b.num_entries = static_cast<uint32_t>(((addr & (page - 1)) + length + page - 1) / page);
  return b;
}

TEST(MttRangeTest, AlignedBacking) {
  const hca::Backing b = Make(0x100000, 20 * 4096, 12);
  EXPECT_EQ(TableEntries(b), 24u);
  EXPECT_EQ(EntriesCovering(b, 0x100000 + 3 * 4096 + 10, 100), (EntryRange{3, 4}));
  EXPECT_EQ(EntriesCovering(b, 0x100000 + 4095, 2), (EntryRange{0, 2}));
  EXPECT_TRUE(EntriesCovering(b, 0x100000 + 20 * 4096, 1).empty());  // just past the end
  EXPECT_TRUE(EntriesCovering(b, 0x100000, 0).empty());
  // Clamped to the backing.
  EXPECT_EQ(EntriesCovering(b, 0x100000 - 4096, 2 * 4096), (EntryRange{0, 1}));
  EXPECT_EQ(AlignToBlocks(b, EntryRange{3, 4}), (EntryRange{0, 8}));
  EXPECT_EQ(AlignToBlocks(b, EntryRange{7, 9}), (EntryRange{0, 16}));
  EXPECT_EQ(AlignToBlocks(b, EntryRange{17, 20}), (EntryRange{16, 24}));  // the table's end
  EXPECT_EQ(EntryDmaAddr(b, 5), 0x100000u + 5 * 4096);
}

TEST(MttRangeTest, UnalignedStartAndLargePages) {
  // 2 MiB pages, backing starting 4 KiB into a page: entry 0 covers the page before addr.
  const uint64_t mb2 = uint64_t{1} << 21;
  const hca::Backing b = Make(0x40000000 + 4096, 3 * mb2, 21);
  EXPECT_EQ(b.num_entries, 4u);
  EXPECT_EQ(EntriesCovering(b, b.addr, 1), (EntryRange{0, 1}));
  EXPECT_EQ(EntriesCovering(b, 0x40000000 + mb2, 1), (EntryRange{1, 2}));
  uint64_t a, n;
  EntryBytes(b, 0, &a, &n);  // clamped to the backing's first byte
  EXPECT_EQ(a, b.addr);
  EXPECT_EQ(n, mb2 - 4096);
  EntryBytes(b, 3, &a, &n);  // and to its last
  EXPECT_EQ(a, 0x40000000 + 3 * mb2);
  EXPECT_EQ(n, 4096u);
  EXPECT_EQ(EntryDmaAddr(b, 0), 0x40000000u);
}

}  // namespace
}  // namespace regcache::odp::internal