// The fault service's planner, on its own: no device, only a backing's geometry and odp/'s copy
// of its MTT.
#include "odp/internal/fault_plan.h"

#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::odp::internal {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kBase = 0x100000;
constexpr uint32_t kMax = 104;  // entries per rewrite, as one inline WQE carries

hca::Backing Make(uint64_t pages) {
  hca::Backing b;
  b.key = 0x1200;
  b.addr = kBase;
  b.length = pages * kPage;
  b.log_page_size = 12;
  b.num_entries = static_cast<uint32_t>(pages);
  return b;
}

MttState Empty(const hca::Backing& b) {
  MttState s;
  s.entries.assign(TableEntries(b), kAbsent);
  return s;
}

Need NeedOf(uint64_t page, uint64_t pages, bool write) {
  Need n;
  n.addr = kBase + page * kPage;
  n.length = pages * kPage;
  n.write = write;
  return n;
}

// Checks the needs and plans their service in one go.
ServicePlan Plan(const hca::Backing& b, const MttState& s, std::vector<Need>& needs,
                 uint32_t max_entries = kMax) {
  CheckNeeds(b, /*writable=*/true, absl::MakeSpan(needs));
  FinishSatisfied(s, absl::MakeSpan(needs));
  return PlanService(b, s, needs, max_entries);
}

hca::MttEntry Present(uint32_t i, bool write) {
  return hca::MttEntry{kBase + i * kPage, true, write};
}

TEST(FaultPlanTest, SinglePageRewritesItsBlock) {
  const hca::Backing b = Make(16);
  const MttState s = Empty(b);
  std::vector<Need> needs = {NeedOf(3, 1, /*write=*/true)};
  const ServicePlan p = Plan(b, s, needs);
  EXPECT_EQ(needs[0].range, (EntryRange{3, 4}));
  EXPECT_FALSE(needs[0].done);
  EXPECT_EQ(ResidentBytes(b, needs[0]), (ByteRange{kBase + 3 * kPage, kPage}));
  ASSERT_EQ(p.rewrites.size(), 1u);
  EXPECT_EQ(p.rewrites[0].first, 0u);
  ASSERT_EQ(p.rewrites[0].entries.size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(p.rewrites[0].entries[i], i == 3 ? Present(3, true) : hca::MttEntry{}) << i;
  }
}

TEST(FaultPlanTest, RangeSpanningBlocksIsOneRewriteOfBothBlocks) {
  const hca::Backing b = Make(32);
  const MttState s = Empty(b);
  // Pages 6..9: the last two of block 0, the first two of block 1.
  std::vector<Need> needs = {NeedOf(6, 4, /*write=*/false)};
  const ServicePlan p = Plan(b, s, needs);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0], (EntryRange{0, 16}));
  ASSERT_EQ(p.rewrites.size(), 1u);
  EXPECT_EQ(p.rewrites[0].first, 0u);
  ASSERT_EQ(p.rewrites[0].entries.size(), 16u);
  for (uint32_t i = 0; i < 16; ++i) {
    const bool in = i >= 6 && i < 10;
    EXPECT_EQ(p.rewrites[0].entries[i], in ? Present(i, false) : hca::MttEntry{}) << i;
  }
  // An unaligned range is widened to whole pages for the populate, clamped to the backing.
  Need n;
  n.addr = kBase + 7 * kPage - 1;
  n.length = 2;
  std::vector<Need> edge = {n};
  CheckNeeds(b, true, absl::MakeSpan(edge));
  EXPECT_EQ(edge[0].range, (EntryRange{6, 8}));
  EXPECT_EQ(ResidentBytes(b, edge[0]), (ByteRange{kBase + 6 * kPage, 2 * kPage}));
}

TEST(FaultPlanTest, PresentPagesAreSkippedAndKeptInTheirBlock) {
  const hca::Backing b = Make(16);
  MttState s = Empty(b);
  s.entries[2] = kReadWrite;
  s.entries[3] = kRead;
  // Already present with the rights needed: finished before any plan.
  std::vector<Need> needs = {NeedOf(2, 2, /*write=*/false), NeedOf(2, 1, /*write=*/true)};
  CheckNeeds(b, true, absl::MakeSpan(needs));
  EXPECT_EQ(FinishSatisfied(s, absl::MakeSpan(needs)), 2u);
  EXPECT_TRUE(needs[0].done && needs[0].result.ok());
  EXPECT_TRUE(needs[1].done && needs[1].result.ok());
  EXPECT_TRUE(PlanService(b, s, needs, kMax).rewrites.empty());
  // A need next to them rewrites the block and keeps the neighbours as they are.
  std::vector<Need> more = {NeedOf(4, 1, /*write=*/true)};
  const ServicePlan p = Plan(b, s, more);
  ASSERT_EQ(p.rewrites.size(), 1u);
  EXPECT_EQ(p.rewrites[0].entries[2], Present(2, true));
  EXPECT_EQ(p.rewrites[0].entries[3], Present(3, false));
  EXPECT_EQ(p.rewrites[0].entries[4], Present(4, true));
  // A block whose state does not change is not rewritten, unless the state is uncertain.
  MttState all = Empty(b);
  for (uint32_t i = 0; i < 8; ++i) all.entries[i] = kReadWrite;
  std::vector<Need> inside = {NeedOf(1, 1, false)};
  CheckNeeds(b, true, absl::MakeSpan(inside));
  EXPECT_TRUE(PlanService(b, all, inside, kMax).rewrites.empty());
  all.uncertain = true;
  EXPECT_FALSE(Satisfied(all, inside[0]));
  EXPECT_EQ(PlanService(b, all, inside, kMax).rewrites.size(), 1u);
}

TEST(FaultPlanTest, WriteAndReadNeeds) {
  const hca::Backing b = Make(16);
  MttState s = Empty(b);
  s.entries[5] = kRead;
  Need read = NeedOf(5, 1, /*write=*/false);
  Need write = NeedOf(5, 1, /*write=*/true);
  CheckNeeds(b, true, absl::MakeSpan(&read, 1));
  CheckNeeds(b, true, absl::MakeSpan(&write, 1));
  EXPECT_TRUE(Satisfied(s, read));
  EXPECT_FALSE(Satisfied(s, write));  // read-only entry: a write needs a rewrite
  std::vector<Need> needs = {write};
  const ServicePlan p = PlanService(b, s, needs, kMax);
  ASSERT_EQ(p.rewrites.size(), 1u);
  EXPECT_EQ(p.rewrites[0].entries[5], Present(5, true));
  // A read and a write need on one page: the page becomes writable.
  std::vector<Need> both = {NeedOf(9, 1, false), NeedOf(9, 1, true), NeedOf(10, 1, false)};
  const ServicePlan q = Plan(b, Empty(b), both);
  ASSERT_EQ(q.rewrites.size(), 1u);
  EXPECT_EQ(q.rewrites[0].first, 8u);
  EXPECT_EQ(q.rewrites[0].entries[1], Present(9, true));
  EXPECT_EQ(q.rewrites[0].entries[2], Present(10, false));
  // A write need on a backing without write rights fails; reads pass.
  std::vector<Need> ro = {NeedOf(1, 1, true), NeedOf(1, 1, false)};
  EXPECT_EQ(CheckNeeds(b, /*writable=*/false, absl::MakeSpan(ro)), 1u);
  EXPECT_THAT(ro[0].result, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(ro[1].done);
}

TEST(FaultPlanTest, AdjacentAndOverlappingNeedsCoalesceIntoOneRewrite) {
  const hca::Backing b = Make(64);
  // Blocks 0 and 1 (adjacent), block 1 again (overlapping), block 4 (apart).
  std::vector<Need> needs = {NeedOf(4, 1, true), NeedOf(8, 1, true), NeedOf(12, 2, false),
                             NeedOf(33, 1, false)};
  const ServicePlan p = Plan(b, Empty(b), needs);
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0], (EntryRange{0, 16}));
  EXPECT_EQ(p.runs[1], (EntryRange{32, 40}));
  ASSERT_EQ(p.rewrites.size(), 2u);
  EXPECT_EQ(p.rewrites[0].first, 0u);
  EXPECT_EQ(p.rewrites[0].entries.size(), 16u);
  EXPECT_EQ(p.rewrites[1].first, 32u);
  EXPECT_EQ(p.rewrites[1].entries.size(), 8u);
  // Order of the needs does not matter.
  std::vector<Need> reversed(needs.rbegin(), needs.rend());
  const ServicePlan r = Plan(b, Empty(b), reversed);
  ASSERT_EQ(r.rewrites.size(), 2u);
  EXPECT_EQ(r.rewrites[0].entries, p.rewrites[0].entries);
  EXPECT_EQ(r.rewrites[1].entries, p.rewrites[1].entries);
}

TEST(FaultPlanTest, RewritesAreLimitedToMaxEntries) {
  const hca::Backing b = Make(512);
  std::vector<Need> needs = {NeedOf(0, 512, true)};
  const ServicePlan p = Plan(b, Empty(b), needs);
  // 512 entries in rewrites of 104: 4 full ones and one of 96, contiguous, whole blocks.
  ASSERT_EQ(p.rewrites.size(), 5u);
  uint32_t at = 0;
  for (const MttRewrite& r : p.rewrites) {
    EXPECT_EQ(r.first, at);
    EXPECT_EQ(r.first % kEntriesPerBlock, 0u);
    EXPECT_EQ(r.entries.size() % kEntriesPerBlock, 0u);
    EXPECT_LE(r.entries.size(), kMax);
    for (size_t i = 0; i < r.entries.size(); ++i) {
      EXPECT_EQ(r.entries[i], Present(static_cast<uint32_t>(r.first + i), true));
    }
    at += static_cast<uint32_t>(r.entries.size());
  }
  EXPECT_EQ(at, 512u);
  // A smaller limit: one block per rewrite.
  std::vector<Need> again = {NeedOf(0, 24, true)};
  EXPECT_EQ(Plan(b, Empty(b), again, /*max_entries=*/8).rewrites.size(), 3u);
}

TEST(FaultPlanTest, EmptyAndInvalidInput) {
  const hca::Backing b = Make(16);
  const MttState s = Empty(b);
  std::vector<Need> none;
  EXPECT_EQ(CheckNeeds(b, true, absl::MakeSpan(none)), 0u);
  const ServicePlan p = PlanService(b, s, none, kMax);
  EXPECT_TRUE(p.runs.empty());
  EXPECT_TRUE(p.rewrites.empty());
  // Zero length, outside, partly outside: finished with kInvalidArgument, nothing planned.
  std::vector<Need> bad = {NeedOf(2, 0, false), NeedOf(16, 1, false), NeedOf(15, 2, false)};
  EXPECT_EQ(CheckNeeds(b, true, absl::MakeSpan(bad)), 0u);
  for (const Need& n : bad) EXPECT_THAT(n.result, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(PlanService(b, s, bad, kMax).rewrites.empty());
  // A zap of absent entries plans nothing.
  const ZapPlan z = PlanZap(b, s, EntryRange{0, 16}, kMax);
  EXPECT_TRUE(z.rewrites.empty());
  EXPECT_EQ(z.present, 0u);
}

TEST(FaultPlanTest, FinishPendingLeavesFinishedNeedsAlone) {
  std::vector<Need> needs(2);
  needs[0].done = true;
  needs[0].result = absl::OkStatus();
  FinishPending(absl::MakeSpan(needs), absl::AbortedError("x"));
  EXPECT_TRUE(needs[0].result.ok());
  EXPECT_TRUE(needs[1].done);
  EXPECT_THAT(needs[1].result, StatusIs(absl::StatusCode::kAborted));
}

TEST(FaultPlanTest, CommitService) {
  const hca::Backing b = Make(16);
  MttState s = Empty(b);
  s.entries[1] = kRead;
  std::vector<Need> needs = {NeedOf(2, 1, true)};
  const ServicePlan p = Plan(b, s, needs);
  MttState ok = s;
  CommitService(p, /*ok=*/true, &ok);
  EXPECT_EQ(ok.entries[1], kRead);
  EXPECT_EQ(ok.entries[2], kReadWrite);
  EXPECT_FALSE(ok.uncertain);
  // Failed: the new entries count as present too (a zap must clear them), and uncertain.
  MttState failed = s;
  CommitService(p, /*ok=*/false, &failed);
  EXPECT_EQ(failed.entries[2], kReadWrite);
  EXPECT_TRUE(failed.uncertain);
}

TEST(FaultPlanTest, ZapClearsTheRangeAndKeepsTheNeighbours) {
  const hca::Backing b = Make(32);
  MttState s = Empty(b);
  for (uint32_t i = 0; i < 8; ++i) s.entries[i] = kReadWrite;
  s.entries[20] = kRead;
  // Page 3 only: block 0 rewritten with 3 absent, the others as they are.
  ZapPlan z = PlanZap(b, s, EntryRange{3, 4}, kMax);
  EXPECT_EQ(z.present, 1u);
  ASSERT_EQ(z.rewrites.size(), 1u);
  EXPECT_EQ(z.rewrites[0].first, 0u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(z.rewrites[0].entries[i], i == 3 ? hca::MttEntry{} : Present(i, true)) << i;
  }
  MttState after = s;
  CommitZap(z, /*ok=*/true, &after);
  EXPECT_EQ(after.entries[3], kAbsent);
  EXPECT_EQ(after.entries[2], kReadWrite);
  // Everything: blocks 0 and 2 hold present entries (not adjacent: two rewrites), block 1 and 3
  // none.
  z = PlanZap(b, s, EntryRange{0, 32}, kMax);
  EXPECT_EQ(z.present, 9u);
  ASSERT_EQ(z.rewrites.size(), 2u);
  EXPECT_EQ(z.rewrites[0].first, 0u);
  EXPECT_EQ(z.rewrites[1].first, 16u);
  for (const MttRewrite& r : z.rewrites) {
    for (const hca::MttEntry& e : r.entries) EXPECT_EQ(e, hca::MttEntry{});
  }
  // A failed zap keeps the state (so a retry clears the blocks again) and makes it uncertain.
  MttState failed = s;
  CommitZap(z, /*ok=*/false, &failed);
  EXPECT_EQ(failed.entries[20], kRead);
  EXPECT_TRUE(failed.uncertain);
  // Uncertain: every block of the range is rewritten, adjacent ones together.
  z = PlanZap(b, failed, EntryRange{0, 32}, kMax);
  ASSERT_EQ(z.rewrites.size(), 1u);
  EXPECT_EQ(z.rewrites[0].entries.size(), 32u);
  EXPECT_EQ(z.present, 9u);
  // Split at the limit.
  EXPECT_EQ(PlanZap(b, failed, EntryRange{0, 32}, /*max_entries=*/16).rewrites.size(), 2u);
}

}  // namespace
}  // namespace regcache::odp::internal