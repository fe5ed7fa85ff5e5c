#include "cache/internal/key_pool.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace regcache::cache {

KeyPool::KeyPool(hca::Device* device, hca::Pd pd, const PoolOptions& options, CacheStats* stats,
                 KeyLedger* ledger, KeyBudget* budget)
    : device_(device), pd_(pd), options_(options), stats_(stats), ledger_(ledger), budget_(budget) {
  RC_CHECK(!options_.capacity_classes.empty());
  for (uint32_t c : options_.capacity_classes) {
    RC_CHECK(classes_.empty() || c > classes_.back().capacity) << "classes must ascend";
    Class cls;
    cls.capacity = c;
    classes_.push_back(std::move(cls));
  }
}

KeyPool::~KeyPool() {
  absl::Status s = DestroyAll();
  if (!s.ok()) RC_LOG(WARNING) << "key pool teardown: " << s;
}

absl::StatusOr<int> KeyPool::ClassFor(uint32_t entries) const {
  for (int i = 0; i < num_classes(); ++i) {
    if (classes_[i].capacity >= entries) return i;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("layout needs %d KLM entries; the largest key class holds %d", entries,
                      classes_.back().capacity));
}

uint32_t KeyPool::Reserve(Class& c, uint64_t want) {
  const uint64_t room =
      options_.max_keys_per_class - std::min<uint64_t>(c.total, options_.max_keys_per_class);
  uint64_t count = std::min(want, room);
  budget_refused_ = false;
  refused_first_ = false;
  if (budget_ != nullptr && count != 0) {
    refused_first_ = budget_->RefusedFirst(total_keys(), total_entries(), c.capacity);
    count = refused_first_ ? 0 : budget_->Take(count, c.capacity);
    budget_refused_ = count == 0;
  }
  c.total += count;  // reserved until AddCreated
  return static_cast<uint32_t>(count);
}

absl::Status KeyPool::AtLimit(int cls) const {
  if (budget_refused_) {
    std::string why = budget_->Describe(total_keys(), total_entries());
    if (refused_first_) {
      absl::StrAppend(&why,
                      ", at or over its fair share while a tenant under its share waits for "
                      "keys: refused first");
    }
    return base::WithReason(absl::ResourceExhaustedError(why),
                            base::reason::kDeviceKeyBudgetExhausted,
                            {{"limit", std::to_string(budget_->total())},
                             {"used", std::to_string(budget_->used())},
                             {"tenants", std::to_string(budget_->tenants())},
                             {"fair_share", std::to_string(budget_->FairShare())},
                             {"held", std::to_string(total_keys())},
                             {"entries_limit", std::to_string(budget_->total_entries())},
                             {"entries_used", std::to_string(budget_->used_entries())},
                             {"entries_fair_share", std::to_string(budget_->FairEntryShare())},
                             {"entries_held", std::to_string(total_entries())},
                             {"refused_first", refused_first_ ? "true" : "false"}});
  }
  return base::WithReason(
      absl::ResourceExhaustedError(
          absl::StrFormat("key class %d (%d entries) is at its limit of %d keys", cls,
                          classes_[cls].capacity, options_.max_keys_per_class)),
      base::reason::kKeyPoolExhausted,
      {{"limit", std::to_string(options_.max_keys_per_class)}, {"class", std::to_string(cls)}});
}

absl::Status KeyPool::Create(int cls, uint32_t count) {
  Class& c = classes_[cls];
  const uint32_t reserved = Reserve(c, count);
  if (reserved == 0) return AtLimit(cls);
  refilling_ += reserved;
  absl::StatusOr<std::vector<hca::Key>> keys =
      device_->CreateIndirectKeys(pd_, c.capacity, reserved, {});
  AddCreated(Refill{cls, c.capacity, reserved}, keys.ok() ? *keys : std::vector<hca::Key>{});
  return keys.status();
}

void KeyPool::ReleaseEligible(absl::Time now) {
  while (!quarantine_.empty()) {
    const Quarantined& q = quarantine_.front();
    const bool time_ok = now - q.entered >= options_.quarantine_time;
    const bool count_ok = quarantine_seq_ - q.seq >= options_.quarantine_count;
    if (!time_ok || !count_ok) break;  // FIFO: later entries are younger
    classes_[q.key.cls].free.push_back(q.key.key);
    quarantine_.pop_front();
    stats_->keys_released_from_quarantine.Inc();
    stats_->keys_quarantined_now.Sub();
    stats_->keys_free.Add();
    stats_->keys_in_use.Sub();
  }
}

absl::StatusOr<TakenKey> KeyPool::Take(int cls, absl::Time now) {
  RC_CHECK(cls >= 0 && cls < num_classes());
  Class& c = classes_[cls];
  if (c.free.empty()) ReleaseEligible(now);
  if (c.free.empty()) {
    // A large class is made on demand, one key at a time (PoolOptions::capacity_classes).
    const uint32_t batch =
        c.capacity > kEagerClassMaxEntries ? 1 : std::max<uint32_t>(1, options_.high_watermark);
    absl::Status s = Create(cls, batch);
    if (!s.ok() || c.free.empty()) {
      stats_->pool_exhausted.Inc();
      absl::Status out = absl::ResourceExhaustedError(absl::StrFormat(
          "key pool exhausted for class %d (%d entries): %s; %d keys wait in quarantine", cls,
          c.capacity, s.ok() ? "no key created" : s.message(), quarantine_.size()));
      // The budget's (or the class limit's) reason, when that is why no key was made.
      if (auto why = s.GetPayload(base::kErrorReasonTypeUrl)) {
        out.SetPayload(base::kErrorReasonTypeUrl, *why);
        return out;
      }
      return base::WithReason(
          out, base::reason::kKeyPoolExhausted,
          {{"class", std::to_string(cls)}, {"quarantined", std::to_string(quarantine_.size())}});
    }
  }
  c.used = true;
  c.last_take = now;
  TakenKey t;
  t.pooled.key = c.free.front();
  t.pooled.cls = cls;
  c.free.pop_front();
  t.new_variant = hca::KeyVariant(hca::NextVariant(t.pooled.key));
  stats_->keys_taken.Inc();
  stats_->keys_free.Sub();
  stats_->keys_in_use.Add();
  return t;
}

void KeyPool::Quarantine(PooledKey key, absl::Time now) { Quarantine({&key, 1}, now); }

void KeyPool::Quarantine(absl::Span<const PooledKey> keys, absl::Time now) {
  for (const PooledKey& k : keys) quarantine_.push_back({k, now, ++quarantine_seq_});
  stats_->keys_quarantined.Inc(keys.size());
  stats_->keys_quarantined_now.Add(static_cast<int64_t>(keys.size()));
}

void KeyPool::Doom(absl::Span<const PooledKey> keys) {
  doomed_.insert(doomed_.end(), keys.begin(), keys.end());
  stats_->keys_quarantined.Inc(keys.size());
  stats_->keys_quarantined_now.Add(static_cast<int64_t>(keys.size()));
}

void KeyPool::Forget(PooledKey key) {
  classes_[key.cls].total--;
  if (budget_ != nullptr) budget_->Give(1, classes_[key.cls].capacity);
  stats_->keys_in_use.Sub();
}

std::vector<KeyPool::Refill> KeyPool::PlanRefill(absl::Time now, absl::Status* at_limit) {
  ReleaseEligible(now);
  std::vector<Refill> plan;
  for (int i = 0; i < num_classes(); ++i) {
    Class& c = classes_[i];
    if (!c.used || c.free.size() >= options_.low_watermark || c.capacity > kEagerClassMaxEntries) {
      continue;
    }
    const uint32_t count = Reserve(c, options_.high_watermark - c.free.size());
    if (count == 0) {
      if (at_limit != nullptr && at_limit->ok()) *at_limit = AtLimit(i);
      continue;
    }
    refilling_ += count;
    plan.push_back(Refill{i, c.capacity, count});
  }
  return plan;
}

void KeyPool::AddCreated(const Refill& refill, const std::vector<hca::Key>& keys) {
  Class& c = classes_[refill.cls];
  refilling_ -= refill.count;
  const uint32_t made = static_cast<uint32_t>(std::min<size_t>(keys.size(), refill.count));
  c.total -= refill.count - made;
  if (budget_ != nullptr) budget_->Give(refill.count - made, c.capacity);
  for (uint32_t i = 0; i < made; ++i) {
    c.free.push_back(ledger_ != nullptr ? ledger_->Resume(keys[i]) : keys[i]);
  }
  stats_->keys_created.Inc(made);
  stats_->keys_free.Add(static_cast<int64_t>(made));
}

absl::Status KeyPool::Maintain(absl::Time now) {
  absl::Status first;
  for (const Refill& r : PlanRefill(now, &first)) {
    absl::StatusOr<std::vector<hca::Key>> keys =
        device_->CreateIndirectKeys(pd_, r.capacity, r.count, {});
    if (!keys.ok() && first.ok()) first = keys.status();
    AddCreated(r, keys.ok() ? *keys : std::vector<hca::Key>{});
  }
  return first;
}

absl::Status KeyPool::DestroyAll() {
  absl::Status first;
  auto destroy = [&](hca::Key k, int cls) {
    if (ledger_ != nullptr) ledger_->Destroyed(k);
    if (budget_ != nullptr) budget_->Give(1, classes_[cls].capacity);
    absl::Status s = device_->DestroyKey(k);
    if (!s.ok() && first.ok()) first = s;
    classes_[cls].total--;
    stats_->keys_destroyed.Inc();
  };
  for (int i = 0; i < num_classes(); ++i) {
    for (hca::Key k : classes_[i].free) {
      destroy(k, i);
      stats_->keys_free.Sub();
    }
    classes_[i].free.clear();
  }
  for (const Quarantined& q : quarantine_) {
    destroy(q.key.key, q.key.cls);
    stats_->keys_quarantined_now.Sub();
    stats_->keys_in_use.Sub();
  }
  quarantine_.clear();
  return first;
}

bool KeyPool::Idle() const {
  for (const Class& c : classes_) {
    if (c.capacity > kEagerClassMaxEntries || !c.used) continue;  // made on demand only
    if (c.free.size() < options_.low_watermark) return false;
  }
  return true;
}

uint64_t KeyPool::free_keys() const {
  uint64_t n = 0;
  for (const Class& c : classes_) n += c.free.size();
  return n;
}

uint64_t KeyPool::total_keys() const {
  uint64_t n = 0;
  for (const Class& c : classes_) n += c.total;
  return n;
}

uint64_t KeyPool::outstanding_keys() const {
  return total_keys() - free_keys() - quarantined_keys();
}

uint64_t KeyPool::total_entries() const {
  uint64_t n = 0;
  for (const Class& c : classes_) n += c.total * c.capacity;
  return n;
}

uint64_t KeyPool::outstanding_entries() const {
  uint64_t n = total_entries();
  for (const Class& c : classes_) n -= c.free.size() * c.capacity;
  for (const Quarantined& q : quarantine_) n -= classes_[q.key.cls].capacity;
  for (const PooledKey& k : doomed_) n -= classes_[k.cls].capacity;
  return n;
}

std::vector<PooledKey> KeyPool::Shrink(absl::Time now, uint64_t keep, uint64_t keep_entries) {
  std::vector<PooledKey> out;
  auto over = [&] { return total_keys() > keep || total_entries() > keep_entries; };
  auto take_free = [&](Class& c, size_t n) {
    for (size_t i = 0; i < n && !c.free.empty(); ++i) {
      out.push_back(PooledKey{c.free.front(), static_cast<int>(&c - classes_.data())});
      c.free.pop_front();
      c.total--;
      stats_->keys_free.Sub();
    }
  };
  for (Class& c : classes_) {
    if (c.used && !c.free.empty() && now - c.last_take >= options_.idle_release) {
      take_free(c, c.free.size());
      c.used = false;  // filled again on its next use
    }
  }
  // Largest classes first: they hold the most entries per key.
  for (auto c = classes_.rbegin(); c != classes_.rend(); ++c) {
    while (over() && !c->free.empty()) take_free(*c, 1);
  }
  while (over() && !quarantine_.empty()) {
    const Quarantined& q = quarantine_.front();
    out.push_back(q.key);
    classes_[q.key.cls].total--;
    quarantine_.pop_front();
    stats_->keys_quarantined_now.Sub();
    stats_->keys_in_use.Sub();
  }
  return out;
}

absl::Status KeyPool::DestroyKeys(const std::vector<PooledKey>& keys) {
  absl::Status first;
  for (const PooledKey& k : keys) {
    if (ledger_ != nullptr) ledger_->Destroyed(k.key);
    absl::Status s = device_->DestroyKey(k.key);
    if (!s.ok()) {
      RC_LOG(WARNING) << "key pool: destroying a key: " << s;
      if (first.ok()) first = s;
    }
    if (budget_ != nullptr) budget_->Give(1, classes_[k.cls].capacity);
    stats_->keys_destroyed.Inc();
  }
  return first;
}

std::vector<PooledKey> KeyPool::TakeForTeardown(size_t max) {
  std::vector<PooledKey> out;
  while (out.size() < max && !doomed_.empty()) {
    out.push_back(doomed_.back());
    classes_[doomed_.back().cls].total--;
    doomed_.pop_back();
    stats_->keys_quarantined_now.Sub();
    stats_->keys_in_use.Sub();
  }
  for (Class& c : classes_) {
    while (out.size() < max && !c.free.empty()) {
      out.push_back(PooledKey{c.free.front(), static_cast<int>(&c - classes_.data())});
      c.free.pop_front();
      c.total--;
      stats_->keys_free.Sub();
    }
  }
  while (out.size() < max && !quarantine_.empty()) {
    out.push_back(quarantine_.front().key);
    classes_[quarantine_.front().key.cls].total--;
    quarantine_.pop_front();
    stats_->keys_quarantined_now.Sub();
    stats_->keys_in_use.Sub();
  }
  return out;
}

}  // namespace regcache::cache
