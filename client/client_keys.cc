// The client library: keys — the client's grant cache first, then the key transport chosen at
// Connect (client/internal/key_transport.h: the rings, or gRPC without the fast path).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/internal/client_impl.h"
#include "protocol/shm_futex.h"

namespace regcache::api::internal {
namespace {

// How long the watcher sleeps before it looks at the reclaim word again without an event.
constexpr absl::Duration kWatchPeriod = absl::Seconds(1);

RevocationReason ReasonOf(uint32_t wire) {
  switch (static_cast<shm::RevokeReason>(wire)) {
    case shm::RevokeReason::kInvalidated:
      return RevocationReason::kInvalidated;
    case shm::RevokeReason::kParentInvalidated:
      return RevocationReason::kParentInvalidated;
    case shm::RevokeReason::kMemoryDetached:
      return RevocationReason::kMemoryDetached;
    case shm::RevokeReason::kReregistered:
      return RevocationReason::kReregistered;
    case shm::RevokeReason::kReclaimed:
      return RevocationReason::kReclaimed;
    default:
      return RevocationReason::kUnknown;
  }
}

absl::Status CheckBatchSize(size_t n) {
  if (n <= kMaxBatchItems) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a batch carries at most ", kMaxBatchItems, " items, not ", n));
}

// A release of a cached grant that no one in this process holds (what the daemon answers for a
// handle with no holder left).
absl::Status NoLocalHolder(uint64_t handle) {
  return absl::FailedPreconditionError(
      absl::StrCat("handle ", handle, " has no holder left in this process"));
}

// What a closed client's key calls answer.
class Closed final : public KeyTransport {
 public:
  absl::StatusOr<Granted> Register(const void*, uint64_t, uint32_t, PrefetchMode) override {
    return Why();
  }
  absl::StatusOr<Granted> Reregister(uint64_t, const void*, uint64_t, uint32_t) override {
    return Why();
  }
  absl::StatusOr<Key> Window(uint64_t, uint64_t, uint64_t, uint32_t) override { return Why(); }
  absl::Status Release(uint64_t) override { return Why(); }
  absl::Status Invalidate(uint64_t) override { return Why(); }
  absl::Status Prefetch(const void*, uint64_t, bool, PrefetchMode) override { return Why(); }
  absl::StatusOr<KeyInfo> Query(uint64_t) override { return Why(); }
  absl::StatusOr<std::vector<absl::StatusOr<Granted>>> RegisterBatch(
      absl::Span<const RegisterItem>) override {
    return Why();
  }
  absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(absl::Span<const uint64_t>) override {
    return Why();
  }

 private:
  static absl::Status Why() { return absl::FailedPreconditionError("client closed"); }
};

}  // namespace

std::unique_ptr<KeyTransport> ClosedTransport() { return std::make_unique<Closed>(); }

// --- Register, release, invalidate ----------------------------------------------------------

absl::StatusOr<Key> ClientImpl::Register(const void* addr, uint64_t length, uint32_t access,
                                         PrefetchMode prefetch) {
  // One returned object (named return value): a hit is written into the caller's StatusOr.
  absl::StatusOr<Key> out(absl::in_place);
  if (grants_ != nullptr && prefetch == PrefetchMode::kNone &&
      grants_->AcquireInto(reinterpret_cast<uint64_t>(addr), length, access, &*out)) [[likely]] {
    return out;
  }
  out = RegisterMiss(addr, length, access, prefetch);
  return out;
}

absl::StatusOr<Key> ClientImpl::RegisterMiss(const void* addr, uint64_t length, uint32_t access,
                                             PrefetchMode prefetch) {
  if (grants_ != nullptr) ReclaimIfAsked();
  if (prefetch != PrefetchMode::kNone) {
    PopulateIfMappedHere(addr, length,
                         (access & (kLocalWrite | kRemoteWrite | kRemoteAtomic)) != 0);
  }
  absl::StatusOr<Granted> g = keys_->Register(addr, length, access, prefetch);
  if (!g.ok() && g.status().code() == absl::StatusCode::kResourceExhausted && grants_ != nullptr) {
    // Our own unreferenced grants may be what fills the quota: give them back, try once more.
    GiveBack(grants_->TakeUnreferenced());
    g = keys_->Register(addr, length, access, prefetch);
  }
  if (!g.ok()) return g.status();
  return Keep(*g);
}

void ClientImpl::ForgetIfLost(const absl::Status& status, absl::Span<const uint64_t> ids) {
  if (!absl::IsDeadlineExceeded(status) && !absl::IsCancelled(status) &&
      !absl::IsUnavailable(status) && !absl::IsUnknown(status)) {
    return;  // the daemon answered: a refused call made nothing
  }
  if (closed_.load() || ids.empty()) return;
  pb::ForgetCallsRequest req;
  for (uint64_t id : ids) req.add_call_ids(id);
  pb::ForgetCallsResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  // Not the full call timeout: a daemon that did not answer in time may still not.
  ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + std::min(options_.call_timeout, absl::Seconds(1))));
  (void)stub_->ForgetCalls(&ctx, req, &resp);
}

Key ClientImpl::Keep(const Granted& g) {
  // Not cacheable (no slot, revoked already, session closing): the caller holds the daemon's
  // hold itself, and its Release goes to the daemon.
  if (grants_ != nullptr) grants_->Insert(g.key, g.slot, g.generation);
  return g.key;
}

absl::Status ClientImpl::Release(uint64_t handle) {
  if (grants_ != nullptr) {
    GrantCache::ReleaseOutcome o = grants_->Release(handle);
    if (o.cached) {
      if (o.no_reference) {
        return NoLocalHolder(handle);
      }
      if (o.daemon_releases > 0) GiveBack(handle, o.daemon_releases);
      return absl::OkStatus();
    }
  }
  return keys_->Release(handle);
}

absl::Status ClientImpl::Invalidate(uint64_t handle) {
  // Out of the cache first: from now on no thread of ours gets it from a hit. Then the cache's
  // holds go back and the key is invalidated, in one round trip on the rings.
  const uint32_t holds = grants_ != nullptr ? grants_->Forget(handle) : 0;
  if (holds == 0) return keys_->Invalidate(handle);
  return keys_->ReleaseThenInvalidate(handle, holds);
}

void ClientImpl::ReclaimIfAsked() {
  // Holds a hit found it must give back (the last reference of a revoked grant).
  if (grants_->HasPending()) GiveBack(grants_->TakePending());
  const uint32_t now = ring_->state()->reclaim.load(std::memory_order_acquire);
  uint32_t seen = reclaim_seen_.load(std::memory_order_relaxed);
  if (now == seen || !reclaim_seen_.compare_exchange_strong(seen, now)) return;
  GiveBack(grants_->TakeUnreferenced());
}

void ClientImpl::GiveBack(uint64_t handle, uint32_t holds) {
  std::vector<std::pair<uint64_t, uint32_t>> one = {{handle, holds}};
  GiveBack(one);
}

void ClientImpl::GiveBack(const std::vector<std::pair<uint64_t, uint32_t>>& holds) {
  std::vector<uint64_t> handles;
  for (const auto& [handle, n] : holds) handles.insert(handles.end(), n, handle);
  for (size_t i = 0; i < handles.size(); i += kMaxBatchItems) {
    size_t n = std::min(kMaxBatchItems, handles.size() - i);
    // A failure leaves the holds with the session, which ends with the client: nothing leaks.
    (void)keys_->ReleaseBatch(absl::MakeConstSpan(handles).subspan(i, n));
  }
}

// --- Windows, prefetch, query -----------------------------------------------------------------

absl::StatusOr<Key> ClientImpl::Window(uint64_t parent, uint64_t offset, uint64_t length,
                                       uint32_t access) {
  return keys_->Window(parent, offset, length, access);
}

absl::Status ClientImpl::Prefetch(const void* addr, uint64_t length, bool write,
                                  PrefetchMode mode) {
  if (mode != PrefetchMode::kNone) PopulateIfMappedHere(addr, length, write);
  return keys_->Prefetch(addr, length, write, mode);
}

absl::StatusOr<KeyInfo> ClientImpl::Query(uint64_t handle) { return keys_->Query(handle); }

// --- Re-registration --------------------------------------------------------------------------

absl::StatusOr<Key> ClientImpl::Reregister(uint64_t handle, const void* addr, uint64_t length,
                                           uint32_t access) {
  if (grants_ != nullptr) {
    GrantCache::Sole t = grants_->TakeSole(handle);
    if (t.cached && !t.sole) {
      // Other references of this process share the grant: it must not change under them (the
      // daemon sees one hold and could not tell). A new registration, then our reference goes.
      ASSIGN_OR_RETURN(Key k, Register(addr, length, access, PrefetchMode::kNone));
      RETURN_IF_ERROR(Release(handle));
      return k;
    }
    // Sole: the grant left the cache with its daemon holds; one is traded in, the rest go.
    if (t.sole && t.daemon_holds > 1) GiveBack(handle, t.daemon_holds - 1);
  }
  ASSIGN_OR_RETURN(Granted g, keys_->Reregister(handle, addr, length, access));
  return Keep(g);
}

// --- Batches ----------------------------------------------------------------------------------

absl::StatusOr<std::vector<absl::StatusOr<Key>>> ClientImpl::RegisterBatch(
    absl::Span<const RegisterItem> items) {
  RETURN_IF_ERROR(CheckBatchSize(items.size()));
  // Hits answer here; the misses go to the daemon together, in one batch.
  // Every item is answered below; no placeholder status to copy into each and drop again.
  std::vector<absl::StatusOr<Key>> out(items.size());
  std::vector<RegisterItem> misses;
  std::vector<size_t> where;
  misses.reserve(items.size());
  where.reserve(items.size());
  // The first miss: the daemon will be asked, so have it awake when the batch arrives.
  bool announced = false;
  const auto announce = [&] {
    if (!announced && items.size() > 1) keys_->Announce();
    announced = true;
  };
  std::vector<std::optional<Key>> hits;
  if (grants_ != nullptr) {
    ReclaimIfAsked();
    // An item with a prefetch goes to the daemon, which populates: not looked up here.
    std::vector<GrantCache::Lookup> lookups(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const RegisterItem& it = items[i];
      if (it.prefetch == PrefetchMode::kNone) {
        lookups[i] = {reinterpret_cast<uint64_t>(it.addr), it.length, it.access};
      }
    }
    hits.resize(items.size());
    grants_->AcquireBatch(lookups, absl::MakeSpan(hits), [&] { announce(); });
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const RegisterItem& it = items[i];
    if (!hits.empty() && hits[i].has_value()) {
      out[i] = *hits[i];
      continue;
    }
    announce();  // where the lookups did not already (no cache, or a prefetch)
    misses.push_back(it);
    where.push_back(i);
  }
  if (misses.empty()) return out;
  ASSIGN_OR_RETURN(std::vector<absl::StatusOr<Granted>> done, keys_->RegisterBatch(misses));
  std::vector<GrantCache::Insertion> keep;  // Keep for each, under one hold of the cache's lock
  if (grants_ != nullptr) keep.reserve(done.size());
  for (size_t j = 0; j < done.size(); ++j) {
    if (!done[j].ok()) {
      out[where[j]] = std::move(done[j]).status();
      continue;
    }
    out[where[j]] = done[j]->key;
    if (grants_ != nullptr) keep.push_back({&done[j]->key, done[j]->slot, done[j]->generation});
  }
  if (!keep.empty()) grants_->InsertBatch(keep);
  return out;
}

absl::StatusOr<std::vector<absl::Status>> ClientImpl::ReleaseBatch(
    absl::Span<const uint64_t> handles) {
  RETURN_IF_ERROR(CheckBatchSize(handles.size()));
  std::vector<absl::Status> out(handles.size());
  std::vector<uint64_t> to_daemon;
  std::vector<size_t> where;
  std::vector<std::pair<uint64_t, uint32_t>> give_back;
  for (size_t i = 0; i < handles.size(); ++i) {
    if (grants_ != nullptr) {
      GrantCache::ReleaseOutcome o = grants_->Release(handles[i]);
      if (o.cached) {
        if (o.no_reference) {
          out[i] = NoLocalHolder(handles[i]);
        }
        if (o.daemon_releases > 0) give_back.emplace_back(handles[i], o.daemon_releases);
        continue;
      }
    }
    to_daemon.push_back(handles[i]);
    where.push_back(i);
  }
  if (!give_back.empty()) GiveBack(give_back);
  if (to_daemon.empty()) return out;
  ASSIGN_OR_RETURN(std::vector<absl::Status> done, keys_->ReleaseBatch(to_daemon));
  for (size_t j = 0; j < done.size(); ++j) out[where[j]] = done[j];
  return out;
}

// --- Revocations ------------------------------------------------------------------------------

void ClientImpl::SetRevocationCallback(std::function<void(const Revocation&)> callback) {
  base::MutexLock l(&callback_mu_);
  callback_ = callback
                  ? std::make_shared<std::function<void(const Revocation&)>>(std::move(callback))
                  : nullptr;
}

void ClientImpl::Revoked(uint64_t handle, uint32_t key, RevocationReason reason) {
  const uint32_t holds = grants_->Forget(handle);
  if (holds > 0) GiveBack(handle, holds);
  std::shared_ptr<std::function<void(const Revocation&)>> cb;
  {
    base::MutexLock l(&callback_mu_);
    cb = callback_;
  }
  if (cb != nullptr) (*cb)(Revocation{handle, key, reason});
}

// Follows the daemon's event ring (protocol/shm_protocol.h, "Grant state"): copy an event out,
// then check that the daemon did not overwrite it meanwhile; when we fell behind, rescan the
// state words of every cached grant instead.
void ClientImpl::WatchRevocations() {
  const shm::StateHeader* st = ring_->state();
  const shm::RevocationEvent* ring = ring_->events();
  uint32_t cursor = st->event_head.load(std::memory_order_acquire);
  auto rescan = [&] {
    for (uint64_t h : grants_->RevokedHandles()) Revoked(h, 0, RevocationReason::kUnknown);
    cursor = st->event_head.load(std::memory_order_acquire);
  };
  while (!stop_watcher_.load(std::memory_order_acquire)) {
    const uint32_t head = st->event_head.load(std::memory_order_acquire);
    if (head == cursor) {
      ReclaimIfAsked();
      shm::FutexWait(&st->event_head, head, kWatchPeriod);
      continue;
    }
    if (head - cursor > shm::kEventCapacity) {
      rescan();
      continue;
    }
    for (; cursor != head; ++cursor) {
      const shm::RevocationEvent* slot = &ring[cursor % shm::kEventCapacity];
      const uint64_t sequence = __atomic_load_n(&slot->sequence, __ATOMIC_ACQUIRE);
      shm::RevocationEvent e;
      std::memcpy(&e, slot, sizeof(e));
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint32_t now = st->event_head.load(std::memory_order_acquire);
      if (static_cast<uint32_t>(sequence) != cursor || now - cursor > shm::kEventCapacity) {
        rescan();  // overwritten while we read it
        break;
      }
      Revoked(e.handle, e.key, ReasonOf(e.reason));
    }
  }
}

}  // namespace regcache::api::internal
