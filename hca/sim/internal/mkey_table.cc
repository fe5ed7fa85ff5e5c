#include "hca/sim/internal/mkey_table.h"

#include "absl/strings/str_cat.h"

namespace regcache::hca::sim {

void MkeySlot::RecomputeKlmEnds() {
  klm_end.resize(klm.size());
  uint64_t end = 0;
  for (size_t j = 0; j < klm.size(); ++j) {
    end += klm[j].byte_count;
    klm_end[j] = end;
  }
}

uint32_t MkeySlot::CapacityEntries(const MkeyState& s) {
  // MTT: two 8-byte entries per octoword; KLM/KSM: one 16-byte entry (docs/prm.md, Mkey context
  // (MKC)).
  const auto mode = static_cast<umr::AccessMode>(s.access_mode);
  return s.translations_octword_size * static_cast<uint32_t>(umr::EntriesPerOctoword(mode));
}

MkeyTable::MkeyTable(uint32_t size) : size_(size), slots_(new MkeySlot[size]) {}

absl::StatusOr<uint32_t> MkeyTable::Allocate() {
  base::MutexLock lock(&mu_);
  if (freed_head_ < freed_.size()) {
    const uint32_t index = freed_[freed_head_++];
    if (freed_head_ == freed_.size()) {
      freed_.clear();
      freed_head_ = 0;
    }
    ++live_;
    return index;
  }
  if (next_unused_ >= size_) {
    return absl::ResourceExhaustedError(absl::StrCat("sim key table full (", size_, " keys)"));
  }
  ++live_;
  return next_unused_++;
}

void MkeyTable::Release(uint32_t index) {
  base::MutexLock lock(&mu_);
  freed_.push_back(index);
  --live_;
}

uint32_t MkeyTable::live_count() const {
  base::MutexLock lock(&mu_);
  return live_;
}

}  // namespace regcache::hca::sim