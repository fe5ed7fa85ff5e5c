#include "cache/internal/index.h"

#include "base/log.h"

namespace cache::internal {

size_t RangeHash::operator()(const Registration* r) const { return absl::HashOf(r->va, r->length); }
bool RangeEq::operator()(const Registration* a, const Registration* b) const {
  return a->va == b->va && a->length == b->length;
}
bool RangeEq::operator()(const Registration* a, const RangeKey& k) const {
  return a->va == k.va && a->length == k.length;
}

// --- Handle table of a shard (REQUIRE the shard lock) ---

// Gives `r` a slot and its handle. kResourceExhausted when the shard's table is full.
absl::Status Publish(Shard& s, uint32_t shard_index, uint32_t tenant_slot, Registration* r)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  uint32_t slot;
  if (!s.free_slots.empty()) {
    slot = s.free_slots.back();
    s.free_slots.pop_back();
  } else {
    if (s.slots.size() >= (size_t{1} << kSlotBits)) {
      return absl::ResourceExhaustedError("registration index shard is full");
    }
    slot = static_cast<uint32_t>(s.slots.size());
    s.slots.push_back(nullptr);
    s.gens.push_back(0);
  }
  s.slots[slot] = r;
  r->handle = MakeHandle(tenant_slot, ++s.gens[slot], slot, shard_index);
  s.published++;
  return absl::OkStatus();
}

Registration* Lookup(Shard& s, Handle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  const uint32_t slot = HandleSlot(h);
  if (slot >= s.slots.size()) return nullptr;
  Registration* r = s.slots[slot];
  return r != nullptr && r->handle == h ? r : nullptr;
}

void Unpublish(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  const uint32_t slot = HandleSlot(r->handle);
  RC_DCHECK(slot < s.slots.size() && s.slots[slot] == r);
  s.slots[slot] = nullptr;
  s.free_slots.push_back(slot);
  s.published--;
}

// --- Shard helpers (REQUIRE the shard mutex) ---

void LruUnlink(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (!r->in_lru) return;
  (r->lru_prev ? r->lru_prev->lru_next : s.lru_oldest) = r->lru_next;
  (r->lru_next ? r->lru_next->lru_prev : s.lru_newest) = r->lru_prev;
  r->lru_prev = r->lru_next = nullptr;
  r->in_lru = false;
  s.lru_size--;
}

void LruPush(Shard& s, Registration* r, uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  RC_DCHECK(!r->in_lru);
  r->queued_at = ticket;
  r->referenced = false;
  r->lru_prev = s.lru_newest;
  r->lru_next = nullptr;
  (s.lru_newest ? s.lru_newest->lru_next : s.lru_oldest) = r;
  s.lru_newest = r;
  r->in_lru = true;
  s.lru_size++;
}

void RangeLink(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  auto [it, inserted] = s.by_range.insert(r);
  if (!inserted) {  // a chain for this range exists: r goes second
    r->next_same_range = (*it)->next_same_range;
    (*it)->next_same_range = r;
  }
  r->indexed = true;
}

void RangeUnlink(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (!r->indexed) return;
  auto it = s.by_range.find(RangeKey{r->va, r->length});
  RC_CHECK(it != s.by_range.end());
  Registration* head = *it;
  if (head == r) {
    s.by_range.erase(it);
    if (r->next_same_range != nullptr) s.by_range.insert(r->next_same_range);
  } else {
    Registration* prev = head;
    while (prev->next_same_range != r) prev = prev->next_same_range;
    prev->next_same_range = r->next_same_range;
  }
  r->next_same_range = nullptr;
  r->indexed = false;
}

// Stop-reference: after this no one can become a holder. REQUIRES !r->dying.
void StopReference(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  RC_DCHECK(!r->dying);
  RangeUnlink(s, r);
  LruUnlink(s, r);
  r->dying = true;
  if (r->holders > 0) {
    r->revoked = true;  // the handle stays for Release/Query until the last holder is gone
    s.tombstones++;
  } else if (r->handle != 0) {
    Unpublish(s, r);
  }
}

// Tickets order LRU queueing across a tenant's shards. Taken only when an entry is (re)queued,
// never on a hit or a plain release.
std::atomic<uint64_t> g_lru_ticket{1};

// A holder is done: the registration joins the LRU, or marks itself used since it was queued.
void Unreferenced(Shard& s, Registration* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (r->in_lru) {
    r->referenced = true;
  } else {
    LruPush(s, r, g_lru_ticket.fetch_add(1, std::memory_order_relaxed));
  }
}

}  // namespace cache::internal
