#include "cache/internal/rereg.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "cache/internal/holds.h"
#include "cache/internal/lifecycle.h"
#include "cache/internal/mapper.h"
#include "cache/umr_engine.h"

namespace regcache::cache::internal {

namespace {

// What a re-registration works with: the record, its range before, and the range asked for.
struct Plan {
  Record* r = nullptr;
  Handle handle = 0;
  uint64_t old_va = 0;
  uint64_t old_length = 0;
  hca::AccessFlags old_access = 0;
  hca::Key key = 0;
  bool window = false;
  uint64_t va = 0;
  uint64_t length = 0;
  hca::AccessFlags access = 0;  // normalized
  KlmLayout layout;
  BackingIds backings;
  bool rebind_only = false;  // memory-window device: a live key cannot be rewritten in place

  uint64_t end() const { return va + length; }
  bool unchanged() const { return va == old_va && length == old_length && access == old_access; }
  // Only adds: the new range contains the old one and the new rights contain the old ones.
  bool only_adds() const {
    return va <= old_va && end() >= old_va + old_length && (old_access & ~access) == 0;
  }
  // Grown in place under the same key: only by a UMR (a window's rebind changes its rkey).
  bool in_place() const { return only_adds() && !rebind_only; }
};

// Step 1 for the handle: a live registration that someone holds, read into `p`.
absl::Status ReadHandle(const Tenant& t, Handle handle, Plan& p) {
  ASSIGN_OR_RETURN(p.r, Resolve(t, handle));
  const uint64_t s = p.r->hot->state.load(std::memory_order_acquire);
  if (!state::PublishedAs(s, HandleGen(handle))) return NoSuchHandle(handle);
  if ((s & state::kDead) != 0) {
    return base::WithReason(
        absl::FailedPreconditionError(absl::StrFormat(
            "handle 0x%x was invalidated or is being re-registered by another call", handle)),
        base::reason::kKeyRevoked, {{"handle", std::to_string(handle)}});
  }
  if (Holders(t, p.r->slot, s) <= 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("handle 0x%x has no holders left to trade", handle));
  }
  p.handle = handle;
  p.window = (s & state::kWindow) != 0;
  p.old_va = p.r->hot->va.load(std::memory_order_relaxed);
  p.old_length = p.r->hot->length.load(std::memory_order_relaxed);
  p.old_access = p.r->hot->access.load(std::memory_order_relaxed);
  p.key = p.r->hot->key.load(std::memory_order_relaxed);
  return absl::OkStatus();
}

// Step 1 for the new range: as Register checks it.
absl::Status ReadRange(uint64_t va, uint64_t length, hca::AccessFlags access, Plan& p) {
  if (length == 0) return absl::InvalidArgumentError("length 0");
  if (va + length < va) {
    return absl::InvalidArgumentError(
        absl::StrFormat("range [0x%x, +0x%x) wraps around the address space", va, length));
  }
  ASSIGN_OR_RETURN(p.access, NormalizeAccess(access));
  p.va = va;
  p.length = length;
  return absl::OkStatus();
}

// Takes `r` out of the cover index (it is there under its start address).
void EraseCover(Tenant& t, Record* r, uint64_t va) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  t.cover.erase({va, r});
}

// Counts (or uncounts) a layout's references on the memory it uses.
void CountUsers(Tenant& t, absl::Span<const BackingId> ids, bool add)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  for (BackingId id : ids) {
    if (BackingRecord* b = t.backings.Find(id)) add ? b->users++ : b->users--;
  }
}

// Steps 2 and 3, under the locks. Returns the path: kMarked for in place (the new layout's
// memory counted) or narrowed, kShared for replaced; layout errors before anything changed.
absl::StatusOr<Sole> PlanAndMark(Tenant& t, Plan& p) {
  base::MutexLock lock(&t.mu);
  ASSIGN_OR_RETURN(p.layout, t.backings.Layout(p.va, p.length, p.access, &p.backings));
  ASSIGN_OR_RETURN(const int cls, t.pool->ClassFor(static_cast<uint32_t>(p.layout.size())));
  (void)cls;  // Register will pick the class; this only refuses layouts no class holds
  if (p.window || !p.r->windows.empty()) return Sole::kShared;
  if (p.only_adds() && p.layout.size() > t.pool->capacity(p.r->pooled.cls)) return Sole::kShared;
  base::MutexLock il(&t.index_mu);
  const Sole sole = MarkSole(t, p.r, HandleGen(p.handle));
  if (sole == Sole::kMarked && p.in_place()) CountUsers(t, p.backings, /*add=*/true);
  return sole;
}

// Step 4 after a successful UMR: the record takes its new range, in every index.
KeyGrant Commit(Tenant& t, Plan& p) {
  KeyGrant grant;
  base::MutexLock lock(&t.mu);
  Record* r = p.r;
  CountUsers(t, r->backings, /*add=*/false);
  r->backings.assign(p.backings.begin(), p.backings.end());
  r->klm_entries = static_cast<uint32_t>(p.layout.size());
  EraseCover(t, r, p.old_va);
  t.cover.emplace(p.va, r);
  t.max_length = std::max(t.max_length, p.length);
  base::MutexLock il(&t.index_mu);
  const bool erased = t.index.Erase(RangeHash(p.old_va, p.old_length), r->slot);
  RC_CHECK(erased) << "range index: re-registered record " << r->slot << " was not indexed";
  // The start first: a hit that read the old range before the mark and reads a mix of old and
  // new fields sees a range inside the new one (and fails its recheck on the epoch anyway).
  r->hot->va.store(p.va, std::memory_order_relaxed);
  r->hot->length.store(p.length, std::memory_order_relaxed);
  r->hot->access.store(p.access, std::memory_order_relaxed);
  t.index.Insert(RangeHash(p.va, p.length), r->slot);
  ReviveSole(t, r);
  FillGrant(grant, *r->hot, r->handle, /*hit=*/false);
  grant.same_key = true;
  return grant;
}

// Step 4: one UMR rewrites the marked record's key; on failure the key goes to recovery.
absl::StatusOr<KeyGrant> InPlace(Tenant& t, Plan& p, absl::FunctionRef<void(Handle)> revoking) {
  UmrOp op;
  op.kind = UmrOp::Kind::kMap;
  op.klm = p.layout;
  op.map.key = p.key;
  op.map.new_variant = hca::KeyVariant(p.key);  // the same key value
  op.map.layout = hca::Layout::kKlm;
  op.map.access = p.access;
  op.map.start_addr = p.va;
  op.map.length = p.length;
  op.map.require_free = false;  // live: rewritten, never freed in between
  UmrOp* ops[] = {&op};
  t.engine->Execute(ops);
  if (op.result.ok()) {
    KeyGrant grant = Commit(t, p);
    t.stats().reregisters_in_place.Inc();
    return grant;
  }
  // The key's state is unknown: the registration is revoked (the caller keeps the revoked
  // handle) and retired, whose invalidate or recovery settles the key.
  revoking(p.handle);
  {
    base::MutexLock lock(&t.mu);
    CountUsers(t, p.backings,
               /*add=*/false);  // the old layout's memory goes with the record in Retire
    base::MutexLock il(&t.index_mu);
    if (RevokeSole(t, p.r) == Stopped::kRevoked) t.stats().revoked_with_holders.Inc();
  }
  t.stats().register_errors.Inc();
  Retire(t, p.r);
  return op.result;
}

// Step 5: the marked record is revoked and retired before the new range is registered.
absl::StatusOr<KeyGrant> Narrow(Tenant& t, Plan& p, RegisterNew register_new,
                                absl::FunctionRef<void(Handle)> revoking) {
  revoking(p.handle);  // before the key refuses anything
  {
    base::MutexLock il(&t.index_mu);
    (void)RevokeSole(t, p.r);
  }
  Retire(t, p.r);                                    // from here the old key refuses every access
  ASSIGN_OR_RETURN(KeyGrant grant, register_new());  // error: the caller holds it, revoked
  // The caller's hold on the revoked record: its last, so its handle goes. A failure means the
  // caller released it meanwhile; there is nothing left to give back.
  (void)ReleaseHold(t, p.handle);
  t.stats().reregisters_replaced.Inc();
  return grant;
}

// Step 6: a new hold first, then the old one goes; if it cannot, the new one goes back.
absl::StatusOr<KeyGrant> Replace(Tenant& t, const Plan& p, RegisterNew register_new) {
  ASSIGN_OR_RETURN(KeyGrant grant, register_new());
  if (absl::Status released = ReleaseHold(t, p.handle); !released.ok()) {
    (void)ReleaseHold(t, grant.handle);
    return released;
  }
  grant.same_key = grant.handle == p.handle;
  t.stats().reregisters_replaced.Inc();
  return grant;
}

}  // namespace

absl::StatusOr<KeyGrant> Reregister(Tenant& t, Handle handle, uint64_t va, uint64_t length,
                                    hca::AccessFlags access, RegisterNew register_new,
                                    absl::FunctionRef<void(Handle)> revoking) {
  Plan p;
  RETURN_IF_ERROR(ReadHandle(t, handle, p));
  RETURN_IF_ERROR(ReadRange(va, length, access, p));
  RETURN_IF_ERROR(DeviceCanGrant(t, p.access));
  p.rebind_only = t.device()->capabilities().memory_windows;
  if (p.unchanged()) {
    KeyGrant grant;
    FillGrant(grant, *p.r->hot, handle, /*hit=*/true);
    grant.same_key = true;
    return grant;
  }
  ASSIGN_OR_RETURN(const Sole sole, PlanAndMark(t, p));
  switch (sole) {
    case Sole::kMarked:
      return p.in_place() ? InPlace(t, p, revoking) : Narrow(t, p, register_new, revoking);
    case Sole::kShared:
      return Replace(t, p, register_new);
    case Sole::kNone:
      return absl::FailedPreconditionError(
          absl::StrFormat("handle 0x%x has no holders left to trade", handle));
    case Sole::kNotLive:
      break;
  }
  // Invalidated (or gone) since step 1: the errors as step 1 words them.
  RETURN_IF_ERROR(ReadHandle(t, handle, p));
  return absl::FailedPreconditionError(
      absl::StrFormat("handle 0x%x changed during the re-registration; retry", handle));
}

}  // namespace regcache::cache::internal
