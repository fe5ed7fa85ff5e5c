// The client's key calls over gRPC (client/internal/key_transport.h): the transport a client
// uses when it has no rings. Calls that make a hold carry a call id, and when their reply may
// have been lost (a deadline, a cancellation, a broken channel) the client asks the daemon to
// forget them, so no hold outlives a call whose caller never learned of it.
#include <memory>
#include <vector>

#include "base/status_code.h"
#include "base/status_macros.h"
#include "client/internal/client_impl.h"
#include "client/internal/key_transport.h"

namespace regcache::api::internal {
namespace {

// An item's status off the wire; a code outside the canonical ones becomes kUnknown.
absl::Status FromItemStatus(const pb::ItemStatus& s) {
  if (s.code() == 0) return absl::OkStatus();
  return absl::Status(base::CanonicalCode(s.code()), s.message());
}

class GrpcKeys final : public KeyTransport {
 public:
  explicit GrpcKeys(ClientImpl& client) : c_(client) {}

  absl::StatusOr<Granted> Register(const void* addr, uint64_t length, uint32_t access,
                                   PrefetchMode prefetch) override {
    pb::RegisterRequest req;
    req.set_va(reinterpret_cast<uint64_t>(addr));
    req.set_length(length);
    req.set_access(access);
    req.set_prefetch(ToProto(prefetch));
    req.set_call_id(c_.NextCallId());
    pb::RegisterResponse resp;
    RETURN_IF_ERROR(HoldingCall(&pb::RegCacheService::Stub::Register, req, &resp));
    return Granted{FromProto(resp.grant())};
  }

  absl::StatusOr<Granted> Reregister(uint64_t handle, const void* addr, uint64_t length,
                                     uint32_t access) override {
    pb::ReregisterRequest req;
    req.set_handle(handle);
    req.set_va(reinterpret_cast<uint64_t>(addr));
    req.set_length(length);
    req.set_access(access);
    req.set_call_id(c_.NextCallId());
    pb::ReregisterResponse resp;
    // Lost: the hold the call made is released, now or when it ends. The one it was to trade
    // in is gone if the call ran, kept if it never did (include/regcache/client.h).
    RETURN_IF_ERROR(HoldingCall(&pb::RegCacheService::Stub::Reregister, req, &resp));
    return Granted{FromProto(resp.grant())};
  }

  absl::StatusOr<Key> Window(uint64_t parent, uint64_t offset, uint64_t length,
                             uint32_t access) override {
    pb::WindowRequest req;
    req.set_parent(parent);
    req.set_offset(offset);
    req.set_length(length);
    req.set_access(access);
    req.set_call_id(c_.NextCallId());
    pb::WindowResponse resp;
    RETURN_IF_ERROR(HoldingCall(&pb::RegCacheService::Stub::Window, req, &resp));
    return FromProto(resp.grant());
  }

  absl::Status Release(uint64_t handle) override {
    pb::ReleaseRequest req;
    req.set_handle(handle);
    pb::ReleaseResponse resp;
    return c_.Call(&pb::RegCacheService::Stub::Release, req, &resp);
  }

  absl::Status Invalidate(uint64_t handle) override {
    pb::InvalidateRequest req;
    req.set_handle(handle);
    pb::InvalidateResponse resp;
    return c_.Call(&pb::RegCacheService::Stub::Invalidate, req, &resp);
  }

  absl::Status Prefetch(const void* addr, uint64_t length, bool write, PrefetchMode mode) override {
    pb::PrefetchRequest req;
    req.set_va(reinterpret_cast<uint64_t>(addr));
    req.set_length(length);
    req.set_write(write);
    req.set_mode(ToProto(mode));
    pb::PrefetchResponse resp;
    return c_.Call(&pb::RegCacheService::Stub::Prefetch, req, &resp);
  }

  absl::StatusOr<KeyInfo> Query(uint64_t handle) override {
    pb::QueryRequest req;
    req.set_handle(handle);
    pb::QueryResponse resp;
    RETURN_IF_ERROR(c_.Call(&pb::RegCacheService::Stub::Query, req, &resp));
    return FromProto(resp.key());
  }

  absl::StatusOr<std::vector<absl::StatusOr<Granted>>> RegisterBatch(
      absl::Span<const RegisterItem> items) override {
    pb::RegisterBatchRequest req;
    std::vector<uint64_t> ids;
    for (const RegisterItem& item : items) {
      pb::RegisterRequest* r = req.add_items();
      r->set_va(reinterpret_cast<uint64_t>(item.addr));
      r->set_length(item.length);
      r->set_access(item.access);
      r->set_prefetch(ToProto(item.prefetch));
      r->set_call_id(c_.NextCallId());
      ids.push_back(r->call_id());
    }
    pb::RegisterBatchResponse resp;
    absl::Status s = c_.Call(&pb::RegCacheService::Stub::RegisterBatch, req, &resp);
    if (!s.ok()) {
      c_.ForgetIfLost(s, ids);
      return s;
    }
    RETURN_IF_ERROR(CheckBatchReply(static_cast<size_t>(resp.results_size()), items.size()));
    std::vector<absl::StatusOr<Granted>> out;
    for (const pb::RegisterResult& r : resp.results()) {
      absl::Status item = FromItemStatus(r.status());
      if (item.ok()) {
        out.push_back(Granted{FromProto(r.grant())});
      } else {
        out.push_back(item);
      }
    }
    return out;
  }

  absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(
      absl::Span<const uint64_t> handles) override {
    pb::ReleaseBatchRequest req;
    req.mutable_handles()->Add(handles.begin(), handles.end());
    pb::ReleaseBatchResponse resp;
    RETURN_IF_ERROR(c_.Call(&pb::RegCacheService::Stub::ReleaseBatch, req, &resp));
    RETURN_IF_ERROR(CheckBatchReply(static_cast<size_t>(resp.results_size()), handles.size()));
    std::vector<absl::Status> out;
    for (const pb::ItemStatus& r : resp.results()) out.push_back(FromItemStatus(r));
    return out;
  }

 private:
  // A call that makes a hold (its request carries call_id): on a failure whose reply may have
  // been lost, the daemon is asked to forget it.
  template <typename Req, typename Resp>
  absl::Status HoldingCall(grpc::Status (pb::RegCacheService::Stub::*method)(grpc::ClientContext*,
                                                                             const Req&, Resp*),
                           const Req& req, Resp* resp) {
    absl::Status s = c_.Call(method, req, resp);
    if (!s.ok()) c_.ForgetIfLost(s, {req.call_id()});
    return s;
  }

  ClientImpl& c_;
};

}  // namespace

std::unique_ptr<KeyTransport> GrpcTransport(ClientImpl& client) {
  return std::make_unique<GrpcKeys>(client);
}

}  // namespace regcache::api::internal
