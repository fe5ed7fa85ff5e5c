#include "service/internal/grant_table.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "protocol/shm_futex.h"

namespace regcache::service::internal {
namespace {

template <typename T>
void Put(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_relaxed);
}

}  // namespace

GrantTable::GrantTable(SessionShm* shm) : shm_(shm) {}

uint32_t GrantTable::AllocateSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if (next_fresh_slot_ < shm_->slots()) return next_fresh_slot_++;
  return shm::kNoSlot;
}

void GrantTable::FreeSlot(uint32_t slot) {
  if (slot == shm::kNoSlot) return;
  std::atomic<uint32_t>& word = shm_->slot_words()[slot];
  const uint32_t generation = shm::SlotGeneration(word.load(std::memory_order_relaxed));
  // A new generation, not revoked: a client's cached (slot, old generation) no longer matches.
  word.store(shm::SlotWord(generation + 1, false), std::memory_order_release);
  free_slots_.push_back(slot);
}

absl::StatusOr<SlottedGrant> GrantTable::Granted(absl::StatusOr<cache::KeyGrant> grant,
                                                 cache::Handle parent,
                                                 absl::FunctionRef<bool(cache::Handle)> revoked) {
  if (!grant.ok()) {
    if (absl::IsResourceExhausted(grant.status())) RaiseReclaim();
    return grant.status();
  }
  base::MutexLock lock(&mu_);
  return RecordLocked(*grant, parent, revoked);
}

std::vector<absl::StatusOr<SlottedGrant>> GrantTable::GrantedBatch(
    absl::Span<absl::StatusOr<cache::KeyGrant>> grants,
    absl::FunctionRef<bool(cache::Handle)> revoked) {
  std::vector<absl::StatusOr<SlottedGrant>> out;
  out.reserve(grants.size());
  bool exhausted = false;
  // Runs of kLockRun: a long batch does not hold off the session's revocations for all of it.
  for (size_t from = 0; from < grants.size(); from += kLockRun) {
    base::MutexLock lock(&mu_);
    for (absl::StatusOr<cache::KeyGrant>& g : grants.subspan(from, kLockRun)) {
      if (g.ok()) {
        out.emplace_back(RecordLocked(*g, /*parent=*/0, revoked));
      } else {
        exhausted = exhausted || absl::IsResourceExhausted(g.status());
        out.emplace_back(std::move(g).status());
      }
    }
  }
  if (exhausted) RaiseReclaim();
  return out;
}

SlottedGrant GrantTable::RecordLocked(const cache::KeyGrant& grant, cache::Handle parent,
                                      absl::FunctionRef<bool(cache::Handle)> revoked) {
  SlottedGrant out;
  out.grant = grant;
  auto [it, fresh] = entries_.try_emplace(grant.handle);
  Entry& e = it->second;
  if (fresh) {
    e.slot = AllocateSlot();
    e.key = grant.rkey;
    e.va = grant.va;
    e.length = grant.length;
    e.parent = parent;
    if (parent != 0) windows_[parent].push_back(grant.handle);
  }
  ++e.holds;
  // Recorded. A revocation whose second pass (after the cache revoked the key) takes this lock
  // later finds the entry; one whose second pass ran earlier had revoked the key in the cache
  // before it released the lock, which `revoked` therefore sees.
  if (!e.revoked && revoked(grant.handle)) {
    RevokeEntry(
        grant.handle, e,
        parent != 0 ? shm::RevokeReason::kParentInvalidated : shm::RevokeReason::kInvalidated);
  }
  out.revoked = e.revoked;
  out.slot = e.slot;
  if (e.slot != shm::kNoSlot) {
    out.generation =
        shm::SlotGeneration(shm_->slot_words()[e.slot].load(std::memory_order_relaxed));
  }
  return out;
}

void GrantTable::Released(cache::Handle handle) {
  base::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.holds > 0) --e.holds;
  if (e.holds > 0) return;
  FreeSlot(e.slot);
  if (e.parent != 0) {
    auto p = windows_.find(e.parent);
    if (p != windows_.end()) {
      auto& w = p->second;
      w.erase(std::remove(w.begin(), w.end(), handle), w.end());
      if (w.empty()) windows_.erase(p);
    }
  }
  entries_.erase(it);
}

void GrantTable::RevokeEntry(cache::Handle handle, Entry& e, shm::RevokeReason reason) {
  if (e.revoked) return;
  e.revoked = true;
  uint32_t generation = 0;
  if (e.slot != shm::kNoSlot) {
    std::atomic<uint32_t>& word = shm_->slot_words()[e.slot];
    generation = shm::SlotGeneration(word.load(std::memory_order_relaxed));
    // seq_cst: the bit is visible before anything the caller does next (the invalidation).
    word.store(shm::SlotWord(generation, true), std::memory_order_seq_cst);
  }
  shm::RevocationEvent ev{};
  ev.handle = handle;
  ev.key = e.key;
  ev.slot = e.slot;
  ev.generation = generation;
  ev.reason = static_cast<uint32_t>(reason);
  AppendEvent(ev);
}

void GrantTable::AppendEvent(const shm::RevocationEvent& event) {
  const uint64_t index = events_++;
  shm::RevocationEvent& slot = shm_->events()[index % shm::kEventCapacity];
  Put(slot.handle, event.handle);
  Put(slot.key, event.key);
  Put(slot.slot, event.slot);
  Put(slot.generation, event.generation);
  Put(slot.reason, event.reason);
  std::atomic_ref<uint64_t>(slot.sequence).store(index, std::memory_order_release);
  shm::StateHeader* h = shm_->state_header();
  h->event_head.store(static_cast<uint32_t>(index + 1), std::memory_order_seq_cst);
  shm::FutexWakeAll(&h->event_head);
}

void GrantTable::RevokeHandle(cache::Handle handle, shm::RevokeReason reason) {
  base::MutexLock lock(&mu_);
  if (auto p = windows_.find(handle); p != windows_.end()) {
    for (cache::Handle w : p->second) {
      auto wit = entries_.find(w);
      if (wit != entries_.end()) {
        RevokeEntry(w, wit->second, shm::RevokeReason::kParentInvalidated);
      }
    }
  }
  auto it = entries_.find(handle);
  if (it != entries_.end()) RevokeEntry(handle, it->second, reason);
}

void GrantTable::RevokeRange(uint64_t va, uint64_t length) {
  base::MutexLock lock(&mu_);
  const uint64_t end = va + length;
  for (auto& [handle, e] : entries_) {
    if (e.va < end && va < e.va + e.length) {
      RevokeEntry(handle, e, shm::RevokeReason::kMemoryDetached);
    }
  }
}

absl::Status GrantTable::RevokeRangeAround(uint64_t va, uint64_t length,
                                           absl::FunctionRef<absl::Status()> detach) {
  RevokeRange(va, length);
  absl::Status detached = detach();
  RevokeRange(va, length);
  return detached;
}

std::function<void(cache::Handle)> GrantTable::Reclaimer() {
  return [this](cache::Handle h) { RevokeHandle(h, shm::RevokeReason::kReclaimed); };
}

void GrantTable::Closing(uint32_t reason_number) {
  // The first reason given stays (a drain's, then the session's own close).
  if (reason_number != 0) {
    shm_->state_header()->close_reason.store(reason_number, std::memory_order_relaxed);
  }
  shm_->state_header()->session_state.store(shm::kSessionClosing, std::memory_order_seq_cst);
  shm::FutexWakeAll(&shm_->state_header()->event_head);
}

void GrantTable::RaiseReclaim() {
  shm_->state_header()->reclaim.fetch_add(1, std::memory_order_seq_cst);
}

uint32_t GrantTable::Holds(cache::Handle handle) const {
  base::MutexLock l(&mu_);
  auto it = entries_.find(handle);
  return it == entries_.end() ? 0 : it->second.holds;
}

size_t GrantTable::held() const {
  base::MutexLock lock(&mu_);
  return entries_.size();
}

size_t GrantTable::slots_in_use() const {
  base::MutexLock lock(&mu_);
  return next_fresh_slot_ - free_slots_.size();
}

}  // namespace regcache::service::internal
