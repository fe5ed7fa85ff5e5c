#include "base/probe_table.h"

#include "base/log.h"

namespace regcache::base {
namespace {
uint64_t Home(uint64_t bucket, uint64_t mask) { return (bucket >> 32) & mask; }
uint64_t BucketOf(uint64_t hash, uint32_t value) {
  return (hash & 0xffffffff00000000ull) | (uint64_t{value} + 1);
}
}  // namespace

ProbeTable::ProbeTable(uint64_t initial_capacity) {
  RC_CHECK(initial_capacity >= 2 && (initial_capacity & (initial_capacity - 1)) == 0)
      << "probe table capacity " << initial_capacity << " is not a power of two";
  tables_.push_back(NewTable(initial_capacity));
  table_.store(tables_.back().get(), std::memory_order_release);
}

std::unique_ptr<ProbeTable::Table> ProbeTable::NewTable(uint64_t capacity) {
  auto t = std::make_unique<Table>();
  t->mask = capacity - 1;
  t->buckets.reset(new std::atomic<uint64_t>[capacity]);
  for (uint64_t i = 0; i < capacity; ++i) t->buckets[i].store(0, std::memory_order_relaxed);
  return t;
}

void ProbeTable::Place(Table& t, uint64_t bucket) {
  for (uint64_t i = Home(bucket, t.mask);; i = (i + 1) & t.mask) {
    if (t.buckets[i].load(std::memory_order_relaxed) == 0) {
      t.buckets[i].store(bucket, std::memory_order_release);
      return;
    }
  }
}

void ProbeTable::Insert(uint64_t hash, uint32_t value) {
  RC_CHECK(value != UINT32_MAX) << "probe table: value out of range";
  Table* t = table_.load(std::memory_order_relaxed);
  if ((size_ + 1) * 2 > t->mask + 1) {  // grow: copy into a table twice the size, then switch
    auto bigger = NewTable((t->mask + 1) * 2);
    for (uint64_t i = 0; i <= t->mask; ++i) {
      const uint64_t b = t->buckets[i].load(std::memory_order_relaxed);
      if (b != 0) Place(*bigger, b);
    }
    t = bigger.get();
    tables_.push_back(std::move(bigger));
    table_.store(t, std::memory_order_release);
  }
  Place(*t, BucketOf(hash, value));
  ++size_;
}

void ProbeTable::Clear() {
  Table* t = table_.load(std::memory_order_relaxed);
  for (uint64_t i = 0; i <= t->mask; ++i) t->buckets[i].store(0, std::memory_order_release);
  size_ = 0;
}

bool ProbeTable::Erase(uint64_t hash, uint32_t value) {
  Table* t = table_.load(std::memory_order_relaxed);
  const uint64_t want = BucketOf(hash, value);
  uint64_t i = Home(want, t->mask);
  for (;; i = (i + 1) & t->mask) {
    const uint64_t b = t->buckets[i].load(std::memory_order_relaxed);
    if (b == 0) return false;
    if (b == want) break;
  }
  // Backward shift: pull later members of the cluster into the hole when their home allows, so
  // probes never need tombstones. An entry is copied before its old bucket is cleared, so a
  // reader sees it at one place or both, except in the moment it has passed the new place.
  for (;;) {
    uint64_t j = i;
    uint64_t moved = 0;
    for (;;) {
      j = (j + 1) & t->mask;
      const uint64_t b = t->buckets[j].load(std::memory_order_relaxed);
      if (b == 0) break;
      const uint64_t home = Home(b, t->mask);
      // b may move to i if its home is not cyclically within (i, j].
      const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        moved = b;
        break;
      }
    }
    if (moved == 0) {
      t->buckets[i].store(0, std::memory_order_release);
      break;
    }
    t->buckets[i].store(moved, std::memory_order_release);
    i = j;
  }
  --size_;
  return true;
}

}  // namespace regcache::base
