#include "cache/internal/key_ledger.h"

namespace regcache::cache {

void KeyLedger::Destroyed(hca::Key key) {
  const uint32_t index = hca::KeyIndex(key);
  base::MutexLock l(&mu_);
  if (index >= last_.size()) last_.resize(index + 1, 0);
  last_[index] = static_cast<uint16_t>(hca::KeyVariant(key) + 1);
}

hca::Key KeyLedger::Resume(hca::Key created) {
  const uint32_t index = hca::KeyIndex(created);
  base::MutexLock l(&mu_);
  if (index >= last_.size() || last_[index] == 0) return created;
  return hca::MakeKey(index, static_cast<uint8_t>(last_[index] - 1));
}

}  // namespace regcache::cache
