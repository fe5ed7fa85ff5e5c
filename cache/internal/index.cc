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

}  // namespace regcache::cache::internal