#include "cache/internal/index.h"

#include "base/log.h"

namespace regcache::cache::internal {

// --- Slab ---

Slab::~Slab() {
  for (auto& seg : hot_) delete[] seg.load(std::memory_order_relaxed);
  for (auto& seg : cold_) delete[] seg.load(std::memory_order_relaxed);
}

Record* Slab::Allocate() {
  if (!free_.empty()) {
    Record* r = At(free_.front());
    free_.pop_front();
    return r;
  }
  if (next_ >= kMaxSlots) return nullptr;
  const uint32_t slot = next_;
  const auto [seg, offset] = Locate(slot);
  if (cold_[seg].load(std::memory_order_relaxed) == nullptr) {
    const uint32_t count = 64u << seg;
    auto* hot = new HotRecord[count];
    auto* cold = new Record[count];
    for (uint32_t i = 0; i < count; ++i) {
      cold[i].hot = &hot[i];
      cold[i].slot = slot - offset + i;
    }
    cold_[seg].store(cold, std::memory_order_release);
    hot_[seg].store(hot, std::memory_order_release);
  }
  ++next_;
  return At(slot);
}

void Slab::Free(Record* r) {
  RC_DCHECK((r->hot->state.load(std::memory_order_relaxed) & state::kPublished) == 0);
  free_.push_back(r->slot);
}

// --- RangeIndex ---

namespace {
constexpr uint64_t kInitialCapacity = 64;
uint64_t Home(uint64_t bucket, uint64_t mask) { return (bucket >> 32) & mask; }
}  // namespace

RangeIndex::RangeIndex() {
  tables_.push_back(NewTable(kInitialCapacity));
  table_.store(tables_.back().get(), std::memory_order_release);
}

std::unique_ptr<RangeIndex::Table> RangeIndex::NewTable(uint64_t capacity) {
  auto t = std::make_unique<Table>();
  t->mask = capacity - 1;
  t->buckets.reset(new std::atomic<uint64_t>[capacity]);
  for (uint64_t i = 0; i < capacity; ++i) t->buckets[i].store(0, std::memory_order_relaxed);
  return t;
}

void RangeIndex::Place(Table& t, uint64_t bucket) {
  for (uint64_t i = Home(bucket, t.mask);; i = (i + 1) & t.mask) {
    if (t.buckets[i].load(std::memory_order_relaxed) == 0) {
      t.buckets[i].store(bucket, std::memory_order_release);
      return;
    }
  }
}

void RangeIndex::Insert(uint64_t hash, uint32_t slot) {
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
  Place(*t, (hash & 0xffffffff00000000ull) | (uint64_t{slot} + 1));
  size_++;
}

void RangeIndex::Erase(uint64_t hash, uint32_t slot) {
  Table* t = table_.load(std::memory_order_relaxed);
  const uint64_t want = (hash & 0xffffffff00000000ull) | (uint64_t{slot} + 1);
  uint64_t i = Home(want, t->mask);
  for (;; i = (i + 1) & t->mask) {
    const uint64_t b = t->buckets[i].load(std::memory_order_relaxed);
    RC_CHECK(b != 0) << "range index: erasing an entry that is not there";
    if (b == want) break;
  }
  // Backward shift: pull later members of the cluster into the hole when their home allows,
  // so probes never need tombstones. An entry is copied before its old bucket is cleared, so a
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
  size_--;
}

}  // namespace regcache::cache::internal