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

// --- RangeIndex ---

// A hash whose bucket tag (the high 32 bits, which also pick the home bucket) is `tag`.
uint64_t HashWithTag(uint32_t tag, uint32_t low = 0) { return (uint64_t{tag} << 32) | low; }

// Every slot Find visits for `hash`, in probe order.
std::vector<uint32_t> AllFound(const RangeIndex& index, uint64_t hash) {
  std::vector<uint32_t> found;
  index.Find(hash, [&](uint32_t slot) {
    found.push_back(slot);
    return false;
  });
  return found;
}

bool Has(const RangeIndex& index, uint64_t hash, uint32_t slot) {
  return index.Find(hash, [&](uint32_t s) { return s == slot; });
}

TEST(RangeIndexTest, EmptyFindsNothing) {
  RangeIndex index;
  EXPECT_FALSE(Has(index, RangeIndex::Hash(0x1000, 4096), 0));
  EXPECT_TRUE(AllFound(index, 0).empty());
}

TEST(RangeIndexTest, InsertFindErase) {
  RangeIndex index;
  const uint64_t a = RangeIndex::Hash(0x10000, 4096);
  const uint64_t b = RangeIndex::Hash(0x20000, 8192);
  index.Insert(a, 3);
  index.Insert(b, 0);  // slot 0 is stored as 1: it must not read as an empty bucket
  EXPECT_TRUE(Has(index, a, 3));
  EXPECT_TRUE(Has(index, b, 0));
  EXPECT_FALSE(Has(index, a, 0));
  EXPECT_EQ(AllFound(index, a), std::vector<uint32_t>{3});

  index.Erase(a, 3);
  EXPECT_FALSE(Has(index, a, 3));
  EXPECT_TRUE(Has(index, b, 0));
  index.Erase(b, 0);
  EXPECT_FALSE(Has(index, b, 0));
}

TEST(RangeIndexTest, HashIsOfTheExactRange) {
  EXPECT_EQ(RangeIndex::Hash(0x1000, 4096), RangeIndex::Hash(0x1000, 4096));
  EXPECT_NE(RangeIndex::Hash(0x1000, 4096), RangeIndex::Hash(0x1000, 8192));
  EXPECT_NE(RangeIndex::Hash(0x1000, 4096), RangeIndex::Hash(0x2000, 4096));
}

TEST(RangeIndexTest, FindStopsAtTheFirstAcceptedEntry) {
  RangeIndex index;
  const uint64_t h = HashWithTag(11);
  for (uint32_t slot : {4u, 5u, 6u}) index.Insert(h, slot);
  int visits = 0;
  EXPECT_TRUE(index.Find(h, [&](uint32_t slot) {
    ++visits;
    return slot == 5;
  }));
  EXPECT_EQ(visits, 2);  // 4, then 5 (inserted in order into one probe run)
}

TEST(RangeIndexTest, SameHashHoldsManyRecords) {
  // Several registrations of one range (different rights) share the full hash.
  RangeIndex index;
  const uint64_t h = RangeIndex::Hash(0x5000, 4096);
  for (uint32_t slot = 10; slot < 20; ++slot) index.Insert(h, slot);
  std::vector<uint32_t> found = AllFound(index, h);
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, (std::vector<uint32_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  index.Erase(h, 14);
  found = AllFound(index, h);
  EXPECT_EQ(found.size(), 9u);
  EXPECT_EQ(std::count(found.begin(), found.end(), 14u), 0);
}

TEST(RangeIndexTest, CollidingHomesWithDifferentTagsAreNotVisited) {
  // Tags 5 and 5 + 64 share a home bucket in the first table (64 buckets) but differ: a probe
  // for one walks past the other's entries without visiting them.
  RangeIndex index;
  index.Insert(HashWithTag(5), 1);
  index.Insert(HashWithTag(5 + 64), 2);
  index.Insert(HashWithTag(5 + 128), 3);
  EXPECT_EQ(AllFound(index, HashWithTag(5)), std::vector<uint32_t>{1});
  EXPECT_EQ(AllFound(index, HashWithTag(5 + 64)), std::vector<uint32_t>{2});
  EXPECT_EQ(AllFound(index, HashWithTag(5 + 128)), std::vector<uint32_t>{3});
  // Only the low 32 bits differ: the index compares tags, so these are one key to it (the
  // caller checks the record's range before accepting it).
  index.Insert(HashWithTag(9, 1), 4);
  EXPECT_EQ(AllFound(index, HashWithTag(9, 2)), std::vector<uint32_t>{4});
}

TEST(RangeIndexTest, BackwardShiftKeepsTheClusterFindable) {
  // One cluster from bucket 5: A(home 5) B(5) C(6) D(5) E(7), then erase from its front.
  RangeIndex index;
  const uint64_t h5 = HashWithTag(5), h6 = HashWithTag(6), h7 = HashWithTag(7);
  index.Insert(h5, 100);  // A
  index.Insert(h5, 101);  // B
  index.Insert(h6, 102);  // C
  index.Insert(h5, 103);  // D
  index.Insert(h7, 104);  // E
  index.Erase(h5, 100);
  EXPECT_EQ(AllFound(index, h5), (std::vector<uint32_t>{101, 103}));
  EXPECT_EQ(AllFound(index, h6), std::vector<uint32_t>{102});
  EXPECT_EQ(AllFound(index, h7), std::vector<uint32_t>{104});
  index.Erase(h6, 102);
  EXPECT_EQ(AllFound(index, h5), (std::vector<uint32_t>{101, 103}));
  EXPECT_EQ(AllFound(index, h7), std::vector<uint32_t>{104});
  index.Erase(h5, 103);
  EXPECT_EQ(AllFound(index, h5), std::vector<uint32_t>{101});
  EXPECT_EQ(AllFound(index, h7), std::vector<uint32_t>{104});
  // An entry sitting at its own home is not pulled back past it.
  index.Insert(h6, 105);
  index.Erase(h5, 101);
  EXPECT_TRUE(AllFound(index, h5).empty());
  EXPECT_EQ(AllFound(index, h6), std::vector<uint32_t>{105});
  EXPECT_EQ(AllFound(index, h7), std::vector<uint32_t>{104});
}

TEST(RangeIndexTest, BackwardShiftAcrossTheEndOfTheTable) {
  // A cluster that starts at the last bucket (63 of the first table) and wraps to 0 and 1.
  RangeIndex index;
  const uint64_t h63 = HashWithTag(63), h0 = HashWithTag(0), h1 = HashWithTag(1);
  index.Insert(h63, 1);  // bucket 63
  index.Insert(h63, 2);  // bucket 0
  index.Insert(h0, 3);   // bucket 1
  index.Insert(h1, 4);   // bucket 2
  index.Insert(h63, 5);  // bucket 3
  index.Erase(h63, 1);
  EXPECT_EQ(AllFound(index, h63), (std::vector<uint32_t>{2, 5}));
  EXPECT_EQ(AllFound(index, h0), std::vector<uint32_t>{3});
  EXPECT_EQ(AllFound(index, h1), std::vector<uint32_t>{4});
  index.Erase(h63, 2);
  EXPECT_EQ(AllFound(index, h63), std::vector<uint32_t>{5});
  EXPECT_EQ(AllFound(index, h0), std::vector<uint32_t>{3});
  EXPECT_EQ(AllFound(index, h1), std::vector<uint32_t>{4});
}

TEST(RangeIndexTest, RandomInsertsAndErasesMatchAModel) {
  // Few tags near the end of the first table: long clusters that wrap, many shifts. The index
  // stays below 32 entries, so it never grows and every erase shifts within one table.
  RangeIndex index;
  std::mt19937 rng(12345);
  const std::vector<uint32_t> tags = {60, 61, 62, 63, 0, 1, 2, 60 + 64, 1 + 64};
  std::multimap<uint32_t, uint32_t> model;  // tag -> slot
  uint32_t next_slot = 0;
  for (int step = 0; step < 5000; ++step) {
    const bool insert = model.size() < 4 || (model.size() < 30 && rng() % 2 == 0);
    if (insert) {
      const uint32_t tag = tags[rng() % tags.size()];
      index.Insert(HashWithTag(tag), next_slot);
      model.emplace(tag, next_slot++);
    } else {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      index.Erase(HashWithTag(it->first), it->second);
      model.erase(it);
    }
    for (uint32_t tag : tags) {
      std::vector<uint32_t> want;
      for (auto [lo, hi] = model.equal_range(tag); lo != hi; ++lo) want.push_back(lo->second);
      std::vector<uint32_t> got = AllFound(index, HashWithTag(tag));
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, want) << "step " << step << " tag " << tag;
    }
  }
}

TEST(RangeIndexTest, GrowthKeepsEverythingFindable) {
  RangeIndex index;
  constexpr uint32_t kCount = 20000;  // many doublings from 64 buckets
  auto hash_of = [](uint32_t i) { return RangeIndex::Hash(uint64_t{i} << 12, 4096 * (i % 7 + 1)); };
  for (uint32_t i = 0; i < kCount; ++i) {
    index.Insert(hash_of(i), i);
    if ((i & (i - 1)) == 0) {  // after each power of two: everything inserted so far
      for (uint32_t j = 0; j <= i; ++j) ASSERT_TRUE(Has(index, hash_of(j), j)) << i << " " << j;
    }
  }
  for (uint32_t i = 0; i < kCount; ++i) ASSERT_TRUE(Has(index, hash_of(i), i)) << i;
  // Erase every other one from the grown table; the rest stay.
  for (uint32_t i = 0; i < kCount; i += 2) index.Erase(hash_of(i), i);
  for (uint32_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(Has(index, hash_of(i), i), i % 2 == 1) << i;
  }
  // And it takes new ones again.
  for (uint32_t i = 0; i < kCount; i += 2) index.Insert(hash_of(i), i);
  for (uint32_t i = 0; i < kCount; ++i) ASSERT_TRUE(Has(index, hash_of(i), i)) << i;
}

TEST(RangeIndexDeathTest, ErasingAnAbsentEntryIsABug) {
  RangeIndex index;
  index.Insert(HashWithTag(3), 1);
  EXPECT_DEATH(index.Erase(HashWithTag(3), 2), "erasing an entry that is not there");
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