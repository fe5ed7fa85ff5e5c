// Direct tests of the tenant's index pieces (cache/internal/index.h): the handle layout, the
// state-word helpers, the exact-range hash index, the slab and the per-thread hold tables.
// The lock-free protocol built on them is exercised end to end by cache/holds_test.cc.
#include "cache/internal/index.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace regcache::cache::internal {
namespace {

// --- Handles ---

TEST(HandleTest, RoundTripsEveryField) {
  const Handle h = MakeHandle(7, 12345, 678);
  EXPECT_EQ(HandleTenantSlot(h), 7u);
  EXPECT_EQ(HandleGen(h), 12345u);
  EXPECT_EQ(HandleSlot(h), 678u);
}

TEST(HandleTest, FieldsAtTheirLimitsStaySeparate) {
  const Handle h = MakeHandle(0xffff, kGenMask, kSlotMask);
  EXPECT_EQ(HandleTenantSlot(h), 0xffffu);
  EXPECT_EQ(HandleGen(h), kGenMask);
  EXPECT_EQ(HandleSlot(h), kSlotMask);
  EXPECT_EQ(h, ~Handle{0});

  const Handle only_slot = MakeHandle(0, 0, kSlotMask);
  EXPECT_EQ(HandleTenantSlot(only_slot), 0u);
  EXPECT_EQ(HandleGen(only_slot), 0u);
  const Handle only_gen = MakeHandle(0, kGenMask, 0);
  EXPECT_EQ(HandleTenantSlot(only_gen), 0u);
  EXPECT_EQ(HandleSlot(only_gen), 0u);
  const Handle only_tenant = MakeHandle(0xffff, 0, 0);
  EXPECT_EQ(HandleGen(only_tenant), 0u);
  EXPECT_EQ(HandleSlot(only_tenant), 0u);
}

TEST(HandleTest, GenerationWrapsAtItsWidth) {
  // A generation past 2^24 keeps its low bits only and never spills into the tenant slot.
  const Handle h = MakeHandle(3, (1u << kGenBits) + 5, 9);
  EXPECT_EQ(HandleGen(h), 5u);
  EXPECT_EQ(HandleTenantSlot(h), 3u);
  EXPECT_EQ(HandleSlot(h), 9u);
}

// --- The state word ---

uint64_t StateWith(uint32_t gen, uint64_t flags, int32_t shared = 0) {
  return state::WithShared((uint64_t{gen} << state::kGenShift) | flags, shared);
}

TEST(StateWordTest, GenerationReadsBack) {
  EXPECT_EQ(state::Gen(StateWith(0, 0)), 0u);
  EXPECT_EQ(state::Gen(StateWith(42, state::kPublished | state::kReferenced, 3)), 42u);
  EXPECT_EQ(state::Gen(StateWith(kGenMask, state::kDead)), kGenMask);
}

TEST(StateWordTest, SharedHoldersAreSignedAndLeaveTheRestAlone) {
  const uint64_t base = StateWith(77, state::kPublished | state::kWindow);
  for (int32_t n : {0, 1, 2, 1000, -1, -2, -1000, INT32_MAX, INT32_MIN}) {
    const uint64_t s = state::WithShared(base, n);
    EXPECT_EQ(state::SharedHolders(s), n) << n;
    EXPECT_EQ(s & ~state::kShared, base & ~state::kShared) << n;
    EXPECT_EQ(state::Gen(s), 77u) << n;
  }
  // A negative count replaced by a positive one (and back) clears every low bit it set.
  const uint64_t neg = state::WithShared(base, -1);
  EXPECT_EQ(state::SharedHolders(state::WithShared(neg, 2)), 2);
  EXPECT_EQ(state::SharedHolders(state::WithShared(state::WithShared(neg, 2), -3)), -3);
  EXPECT_EQ(state::WithShared(neg, 0), base);
}

TEST(StateWordTest, LiveMeansPublishedAndNotDead) {
  EXPECT_FALSE(state::Live(StateWith(1, 0)));
  EXPECT_TRUE(state::Live(StateWith(1, state::kPublished)));
  EXPECT_TRUE(
      state::Live(StateWith(1, state::kPublished | state::kReferenced | state::kWindow, -4)));
  EXPECT_FALSE(state::Live(StateWith(1, state::kPublished | state::kDead)));
  EXPECT_FALSE(state::Live(StateWith(1, state::kPublished | state::kDead | state::kRevoked)));
  EXPECT_FALSE(state::Live(StateWith(1, state::kDead)));
}

TEST(StateWordTest, PublishedAsNamesOnePublication) {
  EXPECT_TRUE(state::PublishedAs(StateWith(9, state::kPublished), 9));
  EXPECT_FALSE(state::PublishedAs(StateWith(9, state::kPublished), 10));
  EXPECT_FALSE(state::PublishedAs(StateWith(9, 0), 9));
  // Dead but still published: the handle still resolves (a release finds its record).
  EXPECT_TRUE(
      state::PublishedAs(StateWith(9, state::kPublished | state::kDead | state::kRevoked), 9));
}

TEST(StateWordTest, SameLiveToleratesCountsAndReferenceBitOnly) {
  const uint64_t before = StateWith(5, state::kPublished, 1);
  EXPECT_TRUE(state::SameLive(before, before));
  // Holder counts and the CLOCK bit change under a hit without changing its identity.
  EXPECT_TRUE(state::SameLive(before, StateWith(5, state::kPublished, 4)));
  EXPECT_TRUE(state::SameLive(before, StateWith(5, state::kPublished, -2)));
  EXPECT_TRUE(state::SameLive(before, StateWith(5, state::kPublished | state::kReferenced, 1)));
  // A stop, a new generation, a different kind of record, or no publication: not the same.
  EXPECT_FALSE(state::SameLive(before, StateWith(5, state::kPublished | state::kDead, 1)));
  EXPECT_FALSE(state::SameLive(before, StateWith(6, state::kPublished, 1)));
  EXPECT_FALSE(state::SameLive(before, StateWith(5, state::kPublished | state::kWindow, 1)));
  EXPECT_FALSE(state::SameLive(before, StateWith(5, 0, 1)));
  // The generation wraps: the same low 24 bits with another value is a different identity only
  // through the bits the state word keeps.
  EXPECT_FALSE(
      state::SameLive(StateWith(kGenMask, state::kPublished), StateWith(0, state::kPublished)));
}

// --- Hold table entries ---

TEST(HoldTableTest, EntryFieldsRoundTrip) {
  const uint64_t key = HoldTable::KeyOf(kSlotMask, kGenMask);
  EXPECT_EQ(HoldTable::SlotOf(key), kSlotMask);
  EXPECT_EQ(HoldTable::GenOf(key), kGenMask);
  EXPECT_EQ(HoldTable::CountOf(key), 0u);
  const uint64_t e = HoldTable::KeyOf(300, 17) | 9;
  EXPECT_EQ(HoldTable::KeyOfEntry(e), HoldTable::KeyOf(300, 17));
  EXPECT_EQ(HoldTable::SlotOf(e), 300u);
  EXPECT_EQ(HoldTable::GenOf(e), 17u);
  EXPECT_EQ(HoldTable::CountOf(e), 9u);
  // Direct mapped: slots kEntries apart share an entry.
  HoldTable t;
  EXPECT_EQ(&t.At(5), &t.At(5 + HoldTable::kEntries));
  EXPECT_NE(&t.At(5), &t.At(6));
}

// --- The range index's hash ---

TEST(RangeHashTest, IsOfTheExactRange) {
  EXPECT_EQ(RangeHash(0x1000, 4096), RangeHash(0x1000, 4096));
  EXPECT_NE(RangeHash(0x1000, 4096), RangeHash(0x1000, 8192));
  EXPECT_NE(RangeHash(0x1000, 4096), RangeHash(0x2000, 4096));
}

// --- Slab ---

TEST(SlabTest, EmptySlabHasNoRecords) {
  Slab slab;
  EXPECT_EQ(slab.size(), 0u);
  EXPECT_EQ(slab.At(0), nullptr);
  EXPECT_EQ(slab.Hot(0), nullptr);
  // The last slot a handle can name locates inside the segment table (and is absent).
  EXPECT_EQ(slab.At(Slab::kMaxSlots - 1), nullptr);
  EXPECT_EQ(slab.Hot(Slab::kMaxSlots - 1), nullptr);
}

TEST(SlabTest, AllocatesSlotsInOrderWithTheirHotHalves) {
  Slab slab;
  for (uint32_t i = 0; i < 10; ++i) {
    Record* r = slab.Allocate();
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->slot, i);
    EXPECT_EQ(slab.At(i), r);
    EXPECT_EQ(slab.Hot(i), r->hot);
    EXPECT_EQ(r->hot->state.load(), 0u);
    EXPECT_EQ(slab.size(), i + 1);
  }
  // The first segment (64 records) exists whole; the next does not yet.
  EXPECT_NE(slab.At(63), nullptr);
  EXPECT_EQ(slab.At(63)->slot, 63u);
  EXPECT_EQ(slab.At(64), nullptr);
  EXPECT_EQ(slab.Hot(64), nullptr);
}

TEST(SlabTest, FreedSlotsComeBackOldestFirst) {
  Slab slab;
  std::vector<Record*> r;
  for (int i = 0; i < 6; ++i) r.push_back(slab.Allocate());
  slab.Free(r[3]);
  slab.Free(r[1]);
  slab.Free(r[4]);
  EXPECT_EQ(slab.Allocate(), r[3]);
  EXPECT_EQ(slab.Allocate(), r[1]);
  EXPECT_EQ(slab.Allocate(), r[4]);
  // The free list is empty again: the next one is new.
  Record* fresh = slab.Allocate();
  EXPECT_EQ(fresh->slot, 6u);
  EXPECT_EQ(slab.size(), 7u);
}

TEST(SlabTest, ReuseKeepsTheRecordsGeneration) {
  // Allocate hands a recycled record back as it was left: its generation carries on, so the
  // next publication's generation differs from every earlier handle's.
  Slab slab;
  Record* r = slab.Allocate();
  r->hot->state.store(uint64_t{41} << state::kGenShift);
  slab.Free(r);
  Record* again = slab.Allocate();
  ASSERT_EQ(again, r);
  EXPECT_EQ(state::Gen(again->hot->state.load()), 41u);
  EXPECT_FALSE(state::Live(again->hot->state.load()));
}

TEST(SlabTest, GrowthNeverMovesARecord) {
  Slab slab;
  constexpr uint32_t kCount = 5000;  // segments of 64, 128, ..., 4096
  std::vector<Record*> cold;
  std::vector<HotRecord*> hot;
  for (uint32_t i = 0; i < kCount; ++i) {
    Record* r = slab.Allocate();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->slot, i);
    r->hot->va.store(0x1000 + i);
    cold.push_back(r);
    hot.push_back(r->hot);
  }
  for (uint32_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(slab.At(i), cold[i]) << i;
    ASSERT_EQ(slab.Hot(i), hot[i]) << i;
    ASSERT_EQ(slab.Hot(i)->va.load(), 0x1000 + i) << i;
    ASSERT_EQ(slab.At(i)->hot, hot[i]) << i;
  }
  // Hot halves of neighbours are packed densely (the cache-footprint claim of HotRecord).
  EXPECT_EQ(reinterpret_cast<char*>(hot[1]) - reinterpret_cast<char*>(hot[0]),
            static_cast<ptrdiff_t>(sizeof(HotRecord)));
}

TEST(SlabTest, SlotLimitMatchesTheHandleLayout) {
  // Allocating all 2^24 records to reach the limit would take gigabytes; what the limit must
  // agree with is the handle: every slot the slab can hand out is one a handle can name.
  EXPECT_EQ(Slab::kMaxSlots, 1u << kSlotBits);
  EXPECT_EQ(Slab::kMaxSlots - 1, kSlotMask);
  EXPECT_EQ(HandleSlot(MakeHandle(0, 0, Slab::kMaxSlots - 1)), Slab::kMaxSlots - 1);
}

// --- HoldTables ---

TEST(HoldTablesTest, MineIsMadeOnceAndKeptPerThread) {
  HoldTables tables;
  EXPECT_EQ(tables.MineIfAny(), nullptr);  // release needs no table: none made
  HoldTable* mine = tables.Mine();
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(tables.Mine(), mine);
  EXPECT_EQ(tables.MineIfAny(), mine);

  HoldTable* theirs = nullptr;
  HoldTable* theirs_before = mine;
  std::thread other([&] {
    theirs_before = tables.MineIfAny();
    theirs = tables.Mine();
  });
  other.join();
  EXPECT_EQ(theirs_before, nullptr);
  ASSERT_NE(theirs, nullptr);
  EXPECT_NE(theirs, mine);
}

TEST(HoldTablesTest, CountSumsEveryThreadsEntryForOnePublication) {
  HoldTables tables;
  constexpr uint32_t kSlot = 300, kGen = 17;
  tables.Mine()->At(kSlot).store(HoldTable::KeyOf(kSlot, kGen) | 3);
  std::thread other([&] { tables.Mine()->At(kSlot).store(HoldTable::KeyOf(kSlot, kGen) | 2); });
  other.join();  // the thread's table outlives it: its holds still count
  EXPECT_EQ(tables.Count(kSlot, kGen), 5);
  // Another generation of the record, or another record sharing the entry, has none.
  EXPECT_EQ(tables.Count(kSlot, kGen + 1), 0);
  EXPECT_EQ(tables.Count(kSlot + HoldTable::kEntries, kGen), 0);
  EXPECT_EQ(tables.Count(kSlot + 1, kGen), 0);
}

TEST(HoldTablesTest, ForEachHoldVisitsEveryCountingEntry) {
  HoldTables tables;
  HoldTable* mine = tables.Mine();
  mine->At(1).store(HoldTable::KeyOf(1, 10) | 1);
  mine->At(2).store(HoldTable::KeyOf(2, 20) | 0);  // taken once, released: not a hold
  mine->At(3).store(HoldTable::KeyOf(3 + HoldTable::kEntries, 30) | 4);
  std::thread other([&] { tables.Mine()->At(1).store(HoldTable::KeyOf(1, 11) | 2); });
  other.join();

  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;
  tables.ForEachHold([&](uint32_t slot, uint32_t gen, uint32_t count) {
    EXPECT_TRUE(seen.emplace(slot, gen, count).second) << slot;
  });
  const std::set<std::tuple<uint32_t, uint32_t, uint32_t>> want = {
      {1, 10, 1}, {3 + HoldTable::kEntries, 30, 4}, {1, 11, 2}};
  EXPECT_EQ(seen, want);
}

}  // namespace
}  // namespace regcache::cache::internal