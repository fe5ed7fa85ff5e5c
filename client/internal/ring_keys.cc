#include "client/internal/ring_keys.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "protocol/ring_codec.h"

namespace regcache::api::internal {
namespace {

shm::RingRequest Request(shm::RingOp op) {
  shm::RingRequest r{};
  r.op = static_cast<uint16_t>(op);
  return r;
}

// The completion of `r`, or the transport's error, or the daemon's.
absl::StatusOr<shm::RingCompletion> Run(RingClient& ring, const shm::RingRequest& r) {
  ASSIGN_OR_RETURN(shm::RingCompletion c, ring.Call(r));
  RETURN_IF_ERROR(ring.StatusOf(c));
  return c;
}

absl::Status RunStatus(RingClient& ring, const shm::RingRequest& r) {
  return Run(ring, r).status();
}

// PrefetchMode's values are the ring's (kNone 0, kSync 1, kAsync 2); others pass through for
// the daemon to refuse.
uint32_t RingPrefetchValue(PrefetchMode m) { return static_cast<uint32_t>(m); }
static_assert(static_cast<uint32_t>(PrefetchMode::kSync) == shm::kPrefetchSync);
static_assert(static_cast<uint32_t>(PrefetchMode::kAsync) == shm::kPrefetchAsync);

}  // namespace

Key KeyFromCompletion(const shm::RingCompletion& c) {
  Key k{c.handle, c.lkey, c.rkey, c.va, c.length, c.access, (c.flags & shm::kFlagHit) != 0};
  k.same_key = (c.flags & shm::kFlagSameKey) != 0;
  return k;
}

namespace {

Granted GrantFromCompletion(const shm::RingCompletion& c) {
  return Granted{KeyFromCompletion(c), c.slot, c.slot_generation};
}

shm::RingRequest RegisterRequest(const void* addr, uint64_t length, uint32_t access,
                                 PrefetchMode prefetch) {
  shm::RingRequest r = Request(shm::RingOp::kRegister);
  r.va = reinterpret_cast<uint64_t>(addr);
  r.length = length;
  r.access = access;
  r.prefetch = RingPrefetchValue(prefetch);
  return r;
}

}  // namespace

absl::StatusOr<Granted> RingRegister(RingClient& ring, const void* addr, uint64_t length,
                                     uint32_t access, PrefetchMode prefetch) {
  ASSIGN_OR_RETURN(shm::RingCompletion c,
                   Run(ring, RegisterRequest(addr, length, access, prefetch)));
  return GrantFromCompletion(c);
}

absl::StatusOr<Granted> RingReregister(RingClient& ring, uint64_t handle, const void* addr,
                                       uint64_t length, uint32_t access) {
  shm::RingRequest r = Request(shm::RingOp::kReregister);
  r.handle = handle;
  r.va = reinterpret_cast<uint64_t>(addr);
  r.length = length;
  r.access = access;
  ASSIGN_OR_RETURN(shm::RingCompletion c, Run(ring, r));
  return GrantFromCompletion(c);
}

absl::StatusOr<std::vector<absl::StatusOr<Granted>>> RingRegisterBatch(
    RingClient& ring, absl::Span<const RegisterItem> items) {
  std::vector<shm::RingRequest> requests;
  requests.reserve(items.size());
  for (const RegisterItem& item : items) {
    requests.push_back(RegisterRequest(item.addr, item.length, item.access, item.prefetch));
  }
  ASSIGN_OR_RETURN(std::vector<shm::RingCompletion> done, ring.CallBatch(requests));
  std::vector<absl::StatusOr<Granted>> out;
  out.reserve(done.size());
  for (const shm::RingCompletion& c : done) {
    absl::Status s = ring.StatusOf(c);
    if (s.ok()) {
      out.emplace_back(GrantFromCompletion(c));
    } else {
      out.emplace_back(std::move(s));
    }
  }
  return out;
}

absl::StatusOr<std::vector<absl::Status>> RingReleaseBatch(RingClient& ring,
                                                           absl::Span<const uint64_t> handles) {
  std::vector<shm::RingRequest> requests;
  requests.reserve(handles.size());
  for (uint64_t h : handles) {
    requests.push_back(Request(shm::RingOp::kRelease));
    requests.back().handle = h;
  }
  ASSIGN_OR_RETURN(std::vector<shm::RingCompletion> done, ring.CallBatch(requests));
  std::vector<absl::Status> out;
  out.reserve(done.size());
  for (const shm::RingCompletion& c : done) out.push_back(ring.StatusOf(c));
  return out;
}

absl::Status RingPrefetch(RingClient& ring, const void* addr, uint64_t length, bool write,
                          PrefetchMode mode) {
  shm::RingRequest r = Request(shm::RingOp::kPrefetch);
  r.va = reinterpret_cast<uint64_t>(addr);
  r.length = length;
  r.flags = write ? shm::kFlagWrite : 0;
  r.prefetch = RingPrefetchValue(mode);
  return RunStatus(ring, r);
}

absl::StatusOr<Key> RingWindow(RingClient& ring, uint64_t parent, uint64_t offset, uint64_t length,
                               uint32_t access) {
  shm::RingRequest r = Request(shm::RingOp::kWindow);
  r.handle = parent;
  r.va = offset;
  r.length = length;
  r.access = access;
  ASSIGN_OR_RETURN(shm::RingCompletion c, Run(ring, r));
  return KeyFromCompletion(c);
}

absl::Status RingRelease(RingClient& ring, uint64_t handle) {
  shm::RingRequest r = Request(shm::RingOp::kRelease);
  r.handle = handle;
  return RunStatus(ring, r);
}

absl::Status RingInvalidate(RingClient& ring, uint64_t handle) {
  shm::RingRequest r = Request(shm::RingOp::kInvalidate);
  r.handle = handle;
  return RunStatus(ring, r);
}

// The holds' releases and the invalidate on the ring together: one doorbell, one wait.
absl::Status RingReleaseThenInvalidate(RingClient& ring, uint64_t handle, uint32_t holds) {
  std::vector<shm::RingRequest> requests;
  while (holds > 0) {
    const uint32_t n = std::min<uint32_t>(holds, kMaxBatchItems - 1);
    requests.assign(n, Request(shm::RingOp::kRelease));
    for (shm::RingRequest& r : requests) r.handle = handle;
    holds -= n;
    if (holds > 0) (void)ring.CallBatch(requests);  // the rare many-holds case: in chunks
  }
  requests.push_back(Request(shm::RingOp::kInvalidate));
  requests.back().handle = handle;
  ASSIGN_OR_RETURN(std::vector<shm::RingCompletion> done, ring.CallBatch(requests));
  RETURN_IF_ERROR(CheckBatchReply(done.size(), requests.size()));
  return ring.StatusOf(done.back());
}

absl::StatusOr<KeyInfo> RingQuery(RingClient& ring, uint64_t handle) {
  shm::RingRequest r = Request(shm::RingOp::kQuery);
  r.handle = handle;
  ASSIGN_OR_RETURN(shm::RingCompletion c, Run(ring, r));
  KeyInfo k;
  k.handle = c.handle;
  k.key = c.rkey;
  k.va = c.va;
  k.length = c.length;
  k.access = c.access;
  k.holders = c.holders;
  k.revoked = (c.flags & shm::kFlagRevoked) != 0;
  k.is_window = (c.flags & shm::kFlagWindow) != 0;
  k.parent = c.parent;
  k.key_state = shm::KeyStateName(c.key_state);
  return k;
}

absl::Status RingNop(RingClient& ring) { return RunStatus(ring, Request(shm::RingOp::kNop)); }

namespace {

class RingKeys final : public KeyTransport {
 public:
  explicit RingKeys(RingClient& ring) : ring_(ring) {}

  absl::StatusOr<Granted> Register(const void* addr, uint64_t length, uint32_t access,
                                   PrefetchMode prefetch) override {
    return RingRegister(ring_, addr, length, access, prefetch);
  }
  absl::StatusOr<Granted> Reregister(uint64_t handle, const void* addr, uint64_t length,
                                     uint32_t access) override {
    return RingReregister(ring_, handle, addr, length, access);
  }
  absl::StatusOr<Key> Window(uint64_t parent, uint64_t offset, uint64_t length,
                             uint32_t access) override {
    return RingWindow(ring_, parent, offset, length, access);
  }
  absl::Status Release(uint64_t handle) override { return RingRelease(ring_, handle); }
  absl::Status Invalidate(uint64_t handle) override { return RingInvalidate(ring_, handle); }
  absl::Status ReleaseThenInvalidate(uint64_t handle, uint32_t holds) override {
    return RingReleaseThenInvalidate(ring_, handle, holds);
  }
  absl::Status Prefetch(const void* addr, uint64_t length, bool write, PrefetchMode mode) override {
    return RingPrefetch(ring_, addr, length, write, mode);
  }
  absl::StatusOr<KeyInfo> Query(uint64_t handle) override { return RingQuery(ring_, handle); }
  void Announce() override { ring_.Announce(); }
  absl::StatusOr<std::vector<absl::StatusOr<Granted>>> RegisterBatch(
      absl::Span<const RegisterItem> items) override {
    ASSIGN_OR_RETURN(std::vector<absl::StatusOr<Granted>> done, RingRegisterBatch(ring_, items));
    RETURN_IF_ERROR(CheckBatchReply(done.size(), items.size()));
    return done;
  }
  absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(
      absl::Span<const uint64_t> handles) override {
    ASSIGN_OR_RETURN(std::vector<absl::Status> done, RingReleaseBatch(ring_, handles));
    RETURN_IF_ERROR(CheckBatchReply(done.size(), handles.size()));
    return done;
  }

 private:
  RingClient& ring_;
};

}  // namespace

std::unique_ptr<KeyTransport> RingTransport(RingClient& ring) {
  return std::make_unique<RingKeys>(ring);
}

absl::Status CheckBatchReply(size_t results, size_t items) {
  if (results == items) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("batch reply has ", results, " results for ", items, " items"));
}

}  // namespace regcache::api::internal
