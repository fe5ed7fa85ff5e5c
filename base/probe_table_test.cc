// ProbeTable (base/probe_table.h): insert, find, backward-shift erase, clear, growth, and
// readers that probe while a writer churns.
#include "base/probe_table.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

// A hash whose bucket tag (the high 32 bits, which also pick the home bucket) is `tag`.
uint64_t HashWithTag(uint32_t tag, uint32_t low = 0) { return (uint64_t{tag} << 32) | low; }

// Every slot Find visits for `hash`, in probe order.
std::vector<uint32_t> AllFound(const ProbeTable& index, uint64_t hash,
                               uint64_t max_probe = ProbeTable::kUnbounded) {
  std::vector<uint32_t> found;
  index.Find(
      hash,
      [&](uint32_t slot) {
        found.push_back(slot);
        return false;
      },
      max_probe);
  return found;
}

bool Has(const ProbeTable& index, uint64_t hash, uint32_t slot) {
  return index.Find(hash, [&](uint32_t s) { return s == slot; });
}

TEST(ProbeTableTest, EmptyFindsNothing) {
  ProbeTable index;
  EXPECT_FALSE(Has(index, ProbeTable::Mix(0x1000), 0));
  EXPECT_TRUE(AllFound(index, 0).empty());
}

TEST(ProbeTableTest, InsertFindErase) {
  ProbeTable index;
  const uint64_t a = ProbeTable::Mix(0x10000);
  const uint64_t b = ProbeTable::Mix(0x20000);
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

TEST(ProbeTableTest, FindStopsAtTheFirstAcceptedEntry) {
  ProbeTable index;
  const uint64_t h = HashWithTag(11);
  for (uint32_t slot : {4u, 5u, 6u}) index.Insert(h, slot);
  int visits = 0;
  EXPECT_TRUE(index.Find(h, [&](uint32_t slot) {
    ++visits;
    return slot == 5;
  }));
  EXPECT_EQ(visits, 2);  // 4, then 5 (inserted in order into one probe run)
}

TEST(ProbeTableTest, SameHashHoldsManyRecords) {
  // Several registrations of one range (different rights) share the full hash.
  ProbeTable index;
  const uint64_t h = ProbeTable::Mix(0x5000);
  for (uint32_t slot = 10; slot < 20; ++slot) index.Insert(h, slot);
  std::vector<uint32_t> found = AllFound(index, h);
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, (std::vector<uint32_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  index.Erase(h, 14);
  found = AllFound(index, h);
  EXPECT_EQ(found.size(), 9u);
  EXPECT_EQ(std::count(found.begin(), found.end(), 14u), 0);
}

TEST(ProbeTableTest, CollidingHomesWithDifferentTagsAreNotVisited) {
  // Tags 5 and 5 + 64 share a home bucket in the first table (64 buckets) but differ: a probe
  // for one walks past the other's entries without visiting them.
  ProbeTable index;
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

TEST(ProbeTableTest, BackwardShiftKeepsTheClusterFindable) {
  // One cluster from bucket 5: A(home 5) B(5) C(6) D(5) E(7), then erase from its front.
  ProbeTable index;
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

TEST(ProbeTableTest, BackwardShiftAcrossTheEndOfTheTable) {
  // A cluster that starts at the last bucket (63 of the first table) and wraps to 0 and 1.
  ProbeTable index;
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

TEST(ProbeTableTest, RandomInsertsAndErasesMatchAModel) {
  // Few tags near the end of the first table: long clusters that wrap, many shifts. The index
  // stays below 32 entries, so it never grows and every erase shifts within one table.
  ProbeTable index;
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

TEST(ProbeTableTest, GrowthKeepsEverythingFindable) {
  ProbeTable index;
  constexpr uint32_t kCount = 20000;  // many doublings from 64 buckets
  auto hash_of = [](uint32_t i) { return ProbeTable::Mix(uint64_t{i} << 12); };
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

TEST(ProbeTableTest, ClearEmptiesTheTableAndItFillsAgain) {
  ProbeTable index(2);
  for (uint32_t v = 0; v < 100; ++v) index.Insert(ProbeTable::Mix(v), v);
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  for (uint32_t v = 0; v < 100; ++v) EXPECT_TRUE(AllFound(index, ProbeTable::Mix(v)).empty());
  index.Insert(ProbeTable::Mix(7), 7);
  EXPECT_TRUE(Has(index, ProbeTable::Mix(7), 7));
  EXPECT_EQ(index.size(), 1u);
}

TEST(ProbeTableTest, ErasingAnAbsentEntrySaysSo) {
  ProbeTable index;
  index.Insert(HashWithTag(3), 1);
  EXPECT_FALSE(index.Erase(HashWithTag(3), 2));
  EXPECT_FALSE(index.Erase(HashWithTag(4), 1));
  EXPECT_EQ(index.size(), 1u);
  EXPECT_TRUE(index.Erase(HashWithTag(3), 1));
  EXPECT_EQ(index.size(), 0u);
}

TEST(ProbeTableTest, FindLooksAtMostMaxProbeBuckets) {
  ProbeTable index;
  const uint64_t h = HashWithTag(20);
  for (uint32_t v = 0; v < 5; ++v) index.Insert(h, v);  // buckets 20..24, in order
  EXPECT_EQ(AllFound(index, h, 3), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(AllFound(index, h).size(), 5u);
}

TEST(ProbeTableTest, MixSpreadsNeighbouringKeysOverTheTags) {
  // Page-aligned addresses and consecutive handles, the keys the client probes by, land on
  // distinct tags (the home bucket comes from the tag).
  std::set<uint32_t> tags;
  for (uint64_t i = 0; i < 4096; ++i)
    tags.insert(static_cast<uint32_t>(ProbeTable::Mix(i << 12) >> 32));
  EXPECT_EQ(tags.size(), 4096u);
}

// Readers probe while a writer inserts, erases and grows the table: a reader is offered only
// values inserted under its tag (a miss is allowed, a wrong value never), and once the writer
// stops every entry left is found. Bounded in time.
TEST(ProbeTableStressTest, ReadersNeverSeeAWrongValueWhileTheWriterChurns) {
  ProbeTable index(2);
  constexpr uint32_t kKeys = 4096;
  // Value v is always inserted under key v % kKeys, so a reader of key k may be offered only
  // values v with Tag(v % kKeys) == Tag(k).
  auto hash_of = [](uint32_t key) { return ProbeTable::Mix(uint64_t{key} * 4096 + 7); };
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0};
  std::atomic<uint64_t> probes{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(r + 1);
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint32_t key = rng() % kKeys;
        const uint32_t tag = static_cast<uint32_t>(hash_of(key) >> 32);
        index.Find(hash_of(key), [&](uint32_t v) {
          if (static_cast<uint32_t>(hash_of(v % kKeys) >> 32) != tag) wrong.fetch_add(1);
          return false;
        });
        ++n;
      }
      probes.fetch_add(n);
    });
  }
  std::mt19937 rng(99);
  std::multimap<uint32_t, uint32_t> model;  // key -> value
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  uint32_t round = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const uint32_t key = rng() % kKeys;
    if (rng() % 4096 == 0) {  // now and then everything at once, under the readers
      index.Clear();
      model.clear();
    } else if (model.size() < 3000 && rng() % 3 != 0) {
      const uint32_t v = key + kKeys * (++round % 1000);
      index.Insert(hash_of(key), v);
      model.emplace(key, v);
    } else if (!model.empty()) {
      auto it = model.lower_bound(key);
      if (it == model.end()) it = model.begin();
      ASSERT_TRUE(index.Erase(hash_of(it->first), it->second));
      model.erase(it);
    }
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(probes.load(), 0u);
  EXPECT_EQ(index.size(), model.size());
  for (const auto& [key, v] : model) {
    ASSERT_TRUE(Has(index, hash_of(key), v)) << key << " " << v;
  }
}

}  // namespace
}  // namespace regcache::base
