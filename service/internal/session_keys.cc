#include "service/internal/session_keys.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "base/error_reason.h"
#include "base/status_macros.h"
#include "odp/register.h"

namespace regcache::service::internal {

#ifndef NDEBUG
std::atomic<void (*)(KeyHookPoint)> key_test_hook{nullptr};
#endif

namespace {

// How often a registration whose key was revoked before its grant was recorded is made again.
constexpr int kRevokedRetries = 3;

}  // namespace

absl::StatusOr<cache::KeyGrant> GrantOf(absl::StatusOr<SlottedGrant> g) {
  if (!g.ok()) return g.status();
  return g->grant;
}

std::vector<absl::StatusOr<cache::KeyGrant>> GrantsOf(std::vector<absl::StatusOr<SlottedGrant>> g) {
  std::vector<absl::StatusOr<cache::KeyGrant>> out;
  out.reserve(g.size());
  for (auto& one : g) out.push_back(GrantOf(std::move(one)));
  return out;
}

SessionKeys::SessionKeys(cache::RegCache* cache, odp::Servicer* servicer, const hca::Device* device,
                         const std::atomic<bool>* draining)
    : cache_(cache), servicer_(servicer), device_(device), draining_(draining) {}

absl::Status SessionKeys::Open() const {
  if (draining_->load(std::memory_order_acquire)) {
    return base::WithReason(absl::UnavailableError("regcached is draining"),
                            base::reason::kDraining);
  }
  return absl::OkStatus();
}

absl::Status SessionKeys::Usable() const {
  RETURN_IF_ERROR(Open());
  if (absl::Status h = device_->Health(); !h.ok()) {
    return base::WithReason(std::move(h), base::reason::kDeviceFailed);
  }
  return absl::OkStatus();
}

absl::Status SessionKeys::NoOdp() const {
  return absl::UnimplementedError(
      absl::StrFormat("device %s has no on-demand paging: prefetch has nothing to do",
                      device_->capabilities().backend));
}

absl::StatusOr<cache::KeyGrant> SessionKeys::RegisterIn(Session& s, uint64_t va, uint64_t length,
                                                        hca::AccessFlags access,
                                                        std::optional<odp::PrefetchMode> prefetch) {
  if (!prefetch.has_value()) return cache_->Register(s.tenant, va, length, access);
  if (servicer_ == nullptr) return NoOdp();
  odp::RegisterOptions o;
  o.mode = *prefetch;
  return odp::RegisterWithPrefetch(cache_, servicer_, s.tenant, va, length, access, o);
}

absl::StatusOr<SlottedGrant> SessionKeys::Record(Session& s, absl::StatusOr<cache::KeyGrant> g,
                                                 cache::Handle parent) {
  RC_KEY_TEST_HOOK(kHeldNotRecorded);
  return s.grants->Granted(std::move(g), parent,
                           [&](cache::Handle h) { return cache_->Revoked(s.tenant, h); });
}

// Every grant goes through the session's grant table (its state slot, reclaim). A key revoked
// between the cache's hold and the record (an Invalidate or detach that had no grant to mark
// yet) is given back and the range registered again: the caller asked for a key that works.
absl::StatusOr<SlottedGrant> SessionKeys::Register(Session& s, uint64_t va, uint64_t length,
                                                   hca::AccessFlags access,
                                                   std::optional<odp::PrefetchMode> prefetch) {
  RETURN_IF_ERROR(Usable());
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(SlottedGrant out,
                     Record(s, RegisterIn(s, va, length, access, prefetch), /*parent=*/0));
    if (!out.revoked) return out;
    (void)cache_->Release(s.tenant, out.grant.handle);
    s.grants->Released(out.grant.handle);
    if (attempt == kRevokedRetries) {
      return absl::AbortedError(absl::StrFormat(
          "the key for [0x%x, +%d) was revoked while it was being granted, %d times: retry", va,
          length, attempt + 1));
    }
  }
}

// The calls without a prefetch go to the cache as one batch; each grant is then recorded as
// Register records it (a key revoked meanwhile is made again, alone). Calls with a prefetch run
// as Register runs them.
std::vector<absl::StatusOr<SlottedGrant>> SessionKeys::RegisterBatch(
    Session& s, absl::Span<const RegisterCall> calls) {
  if (absl::Status u = Usable(); !u.ok()) {
    return std::vector<absl::StatusOr<SlottedGrant>>(calls.size(), u);
  }
  // Sized only when a call has a prefetch; without (the usual batch) the recorded grants below
  // are the answers, in order.
  std::vector<absl::StatusOr<SlottedGrant>> out;
  std::vector<cache::RegisterItem> plain;
  std::vector<size_t> plain_of;
  plain.reserve(calls.size());
  plain_of.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const RegisterCall& c = calls[i];
    if (c.prefetch.has_value()) {
      if (out.empty()) out.resize(calls.size());
      out[i] = Register(s, c.va, c.length, c.access, c.prefetch);
      continue;
    }
    plain.push_back(cache::RegisterItem{c.va, c.length, c.access});
    plain_of.push_back(i);
  }
  if (plain.empty()) return out;
  std::vector<absl::StatusOr<cache::KeyGrant>> made = cache_->RegisterBatch(s.tenant, plain);
  // Recorded as Record records each, under one hold of the grant table's lock for the batch.
  RC_KEY_TEST_HOOK(kHeldNotRecorded);
  std::vector<absl::StatusOr<SlottedGrant>> recorded = s.grants->GrantedBatch(
      absl::MakeSpan(made), [&](cache::Handle h) { return cache_->Revoked(s.tenant, h); });
  for (size_t k = 0; k < plain.size(); ++k) {
    const RegisterCall& c = calls[plain_of[k]];
    absl::StatusOr<SlottedGrant>& g = recorded[k];
    if (g.ok() && g->revoked) {
      (void)cache_->Release(s.tenant, g->grant.handle);
      s.grants->Released(g->grant.handle);
      g = Register(s, c.va, c.length, c.access, std::nullopt);
    }
    if (!out.empty()) out[plain_of[k]] = std::move(g);
  }
  return out.empty() ? std::move(recorded) : std::move(out);
}

// A window revoked before its record goes out marked (its word reads revoked): its parent was
// invalidated, and a new window on it would be refused anyway.
absl::StatusOr<SlottedGrant> SessionKeys::Window(Session& s, cache::Handle parent, uint64_t offset,
                                                 uint64_t length, hca::AccessFlags access) {
  RETURN_IF_ERROR(Usable());
  return Record(s, cache_->CreateWindow(s.tenant, parent, offset, length, access), parent);
}

// The trade goes through the grant table: the new grant gets its slot, the old hold goes; a
// re-registration that takes rights away from the session's only hold revokes the old state
// word first (the cache then invalidates the key).
absl::StatusOr<SlottedGrant> SessionKeys::Reregister(Session& s, cache::Handle handle, uint64_t va,
                                                     uint64_t length, hca::AccessFlags access) {
  RETURN_IF_ERROR(Usable());
  // The cache decides whether the old key is revoked, and says so before it is: the state word
  // then reads revoked before any access through the key fails.
  cache::Handle revoked = 0;
  absl::StatusOr<cache::KeyGrant> g =
      cache_->Reregister(s.tenant, handle, va, length, access, [&](cache::Handle h) {
        revoked = h;
        s.grants->RevokeHandle(h, shm::RevokeReason::kReregistered);
      });
  // The second pass (grant_table.h, Revoke*).
  if (revoked != 0) s.grants->RevokeHandle(revoked, shm::RevokeReason::kReregistered);
  const bool traded = g.ok();
  absl::StatusOr<SlottedGrant> out = Record(s, std::move(g), /*parent=*/0);
  if (traded) s.grants->Released(handle);  // the hold traded in
  return out;
}

absl::Status SessionKeys::Release(Session& s, cache::Handle handle) {
  RETURN_IF_ERROR(Open());
  RETURN_IF_ERROR(cache_->Release(s.tenant, handle));
  s.grants->Released(handle);
  return absl::OkStatus();
}

absl::Status SessionKeys::Invalidate(Session& s, cache::Handle handle) {
  RETURN_IF_ERROR(Open());
  s.grants->RevokeHandle(handle);  // the state word says it before the key stops working
  RC_KEY_TEST_HOOK(kRevokeMarked);
  absl::Status status = cache_->Invalidate(s.tenant, handle);
  // The second pass: a grant of the key recorded while the cache revoked it.
  s.grants->RevokeHandle(handle);
  return status;
}

absl::Status SessionKeys::Prefetch(Session& s, uint64_t va, uint64_t length, bool write,
                                   std::optional<odp::PrefetchMode> mode) {
  RETURN_IF_ERROR(Open());
  if (servicer_ == nullptr) return NoOdp();
  if (length == 0 || va + length < va) {
    return absl::InvalidArgumentError("prefetch range is empty or wraps");
  }
  if (!mode.has_value()) return absl::OkStatus();
  return servicer_->PrefetchTenantRange(s.tenant, va, length, write, *mode);
}

absl::StatusOr<cache::RegistrationInfo> SessionKeys::Query(Session& s, cache::Handle handle) {
  RETURN_IF_ERROR(Open());
  return cache_->Query(s.tenant, handle);
}

}  // namespace regcache::service::internal
