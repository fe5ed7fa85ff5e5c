// ClientImpl — the one implementation of regcache::api::Client (include/regcache/client.h).
// Internal to client/. Its methods live in three files, by what they do:
//   client/client.cc        connecting, memory (the control socket's fds), closing
//   client/client_keys.cc   keys: the client's grant cache, then the key transport
//   client/client_calls.cc  introspection, admin and the sim's peer, over gRPC
//
// Keys. The constructor picks the key transport once (client/internal/key_transport.h): with
// the fast path (ClientOptions::fast_path, the default) every key call goes over the session's
// rings (client/internal/ring_client.h), without it over gRPC (client/grpc_keys.cc). With the
// client cache too (ClientOptions::client_cache, the default) the grants this process holds are
// kept in a GrantCache (client/internal/grant_cache.h): a Register a held grant covers is answered
// here, without IPC, and Release of such a grant only gives back a local reference. A watcher
// thread follows the daemon's revocation events: it takes revoked grants out of the cache,
// gives their daemon holds back, and calls the application's revocation callback. When the
// daemon raises its reclaim word (quota or pool pressure), the next miss gives back every
// grant nobody in the process references, and a register refused with kResourceExhausted is
// retried once after that.
//
// Thread safety: as Client.
#ifndef REGCACHE_CLIENT_INTERNAL_CLIENT_IMPL_H_
#define REGCACHE_CLIENT_INTERNAL_CLIENT_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "client/internal/grant_cache.h"
#include "client/internal/key_transport.h"
#include "client/internal/ring_client.h"
#include "client/internal/ring_keys.h"
#include "protocol/control_protocol.h"
#include "protocol/grpc_status.h"
#include "regcache/client.h"
#include "regcache/v1/regcache.grpc.pb.h"

namespace regcache::api::internal {

namespace pb = ::regcache::v1;

// Protobuf <-> public types (client/client_calls.cc).
SessionUsage FromProto(const pb::Usage& u);
Key FromProto(const pb::KeyGrant& g);
KeyInfo FromProto(const pb::KeyInfo& k);
EndpointInfo FromProto(const pb::EndpointInfo& e);
// The values are the wire's (server/wire_values.cc); unknown ones pass through for the daemon to
// refuse.
inline pb::Prefetch ToProto(PrefetchMode m) { return static_cast<pb::Prefetch>(m); }

// A PdExport from the daemon: its fd (owned) and the PD's handle.
struct PdExportReply {
  int fd = -1;
  uint32_t pd_handle = 0;
};

class ClientImpl final : public Client {
 public:
  ClientImpl(int control_fd, const protocol::WelcomeMsg& welcome,
             std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
             std::unique_ptr<RingClient> ring);
  ~ClientImpl() override { Close(); }

  uint64_t session_id() const override { return session_id_; }
  bool admin() const override { return admin_; }
  const DeviceInfo& device() const override { return device_; }

  // client/client.cc
  absl::StatusOr<Memory> AllocateMemory(uint64_t length, bool hugetlb, bool on_demand) override;
  absl::StatusOr<Memory> AttachFd(int fd, uint64_t offset, uint64_t length,
                                  bool on_demand) override;
  absl::StatusOr<Memory> AttachDmabuf(int fd, uint64_t offset, uint64_t length,
                                      const void* va) override;
  absl::Status DetachMemory(const Memory& memory) override;
  void Close() override;

  // client/client_pd.cc
  absl::StatusOr<ImportedPd> ImportPd() override ABSL_LOCKS_EXCLUDED(pd_mu_);
  absl::StatusOr<Memory> AttachRegion(const ibv_mr* mr, const void* addr, uint64_t length,
                                      uint32_t access) override;

  // client/client_keys.cc
  absl::StatusOr<Key> Register(const void* addr, uint64_t length, uint32_t access,
                               PrefetchMode prefetch) override;
  absl::Status Prefetch(const void* addr, uint64_t length, bool write, PrefetchMode mode) override;
  absl::StatusOr<Key> Window(uint64_t parent, uint64_t offset, uint64_t length,
                             uint32_t access) override;
  absl::Status Release(uint64_t handle) override;
  absl::Status Invalidate(uint64_t handle) override;
  absl::StatusOr<KeyInfo> Query(uint64_t handle) override;
  absl::StatusOr<Key> Reregister(uint64_t handle, const void* addr, uint64_t length,
                                 uint32_t access) override;
  absl::StatusOr<std::vector<absl::StatusOr<Key>>> RegisterBatch(
      absl::Span<const RegisterItem> items) override;
  absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(
      absl::Span<const uint64_t> handles) override;
  void SetRevocationCallback(std::function<void(const Revocation&)> callback) override;

  // client/client_calls.cc
  absl::StatusOr<std::vector<KeyInfo>> ListKeys(uint64_t session) override;
  absl::Status Ping() override;
  absl::StatusOr<StatsSnapshot> Stats() override;
  absl::StatusOr<DaemonInfo> Status() override;
  absl::StatusOr<std::vector<SessionRecord>> Sessions() override;
  absl::Status Drain() override;
  absl::StatusOr<EndpointInfo> CreateEndpoint(const RemoteQp& peer, uint32_t access) override;
  absl::Status DestroyEndpoint(uint64_t id) override;
  absl::StatusOr<std::vector<EndpointInfo>> ListEndpoints(uint64_t session) override;

  // regcache/sim_peer.h (client/sim_peer.cc): whom the simulated peer's access reaches (the
  // fields of regcache.v1.PeerWriteRequest of the same names).
  struct PeerRoute {
    uint64_t session = 0;
    uint64_t endpoint = 0;
    uint32_t endpoint_qpn = 0;
    uint32_t peer_qpn = 0;
  };
  absl::Status PeerWrite(uint32_t rkey, uint64_t addr, const std::string& data,
                         const PeerRoute& route);
  absl::StatusOr<std::string> PeerRead(uint32_t rkey, uint64_t addr, uint64_t length,
                                       const PeerRoute& route);

  // client/internal/client_testing.h.
  absl::Status RawCall(const std::string& method, const std::string& bytes);
  void SetToken(bool send, const std::string& token) ABSL_LOCKS_EXCLUDED(token_mu_);
  std::string token() ABSL_LOCKS_EXCLUDED(token_mu_) {
    base::MutexLock l(&token_mu_);
    return token_;
  }
  int control_fd() const { return control_fd_; }
  RingClient* ring() const { return ring_.get(); }
  GrantCache* grants() const { return grants_.get(); }

  // --- gRPC calls (also the gRPC key transport's, client/grpc_keys.cc) ---
  // A fresh id for a gRPC call that makes a hold (RegisterRequest.call_id).
  uint64_t NextCallId() { return next_call_id_.fetch_add(1, std::memory_order_relaxed); }
  // After a hold-making call failed with `status`: when the reply may have been lost rather
  // than refused (deadline, cancellation, transport), asks the daemon to release whatever the
  // calls `ids` made. Best effort, with a short deadline of its own.
  void ForgetIfLost(const absl::Status& status, absl::Span<const uint64_t> ids);

  // One unary call with the session's token and the call timeout.
  template <typename Stub, typename Req, typename Resp>
  absl::Status Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp) {
    if (closed_.load()) return absl::FailedPreconditionError("client closed");
    grpc::ClientContext ctx;
    Prepare(&ctx);
    return protocol::FromGrpcStatus(
        (StubOf(static_cast<Stub*>(nullptr))->*method)(&ctx, req, resp));
  }

 private:
  void Prepare(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(token_mu_);
  // The stub of each service the client calls (Call picks by the method's class).
  pb::RegCacheService::Stub* StubOf(pb::RegCacheService::Stub*) { return stub_.get(); }
  pb::SimPeerService::Stub* StubOf(pb::SimPeerService::Stub*) { return sim_peer_stub_.get(); }

  // Every page of a paged List call (docs/api.md): `page(token)` fetches the page `token` names
  // (the first for "") and returns the next page's token, "" after the last.
  absl::Status AllPages(const std::function<absl::StatusOr<std::string>(const std::string&)>& page);

  // --- The control socket (client/client.cc) ---
  // Receives control messages until `ready()` holds; stashes the rest. One thread receives
  // at a time; the others wait for it and re-check their stash.
  absl::Status ReceiveUntil(const std::function<bool()>& ready)
      ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_);
  absl::StatusOr<int> TakeMemoryFd(uint64_t id) ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_);
  // The reply to request `nonce`, stashed in the map `replies` names (imported_, pd_exports_),
  // or the Error that answered it instead.
  template <typename T>
  absl::StatusOr<T> TakeReply(absl::flat_hash_map<uint64_t, T> ClientImpl::*replies, uint64_t nonce)
      ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_) {
    absl::StatusOr<T> out = absl::UnknownError("unset");
    absl::Status s = ReceiveUntil([&] {
      base::MutexLock l(&maps_mu_);
      auto& stash = this->*replies;
      if (auto it = stash.find(nonce); it != stash.end()) {
        out = std::move(it->second);
        stash.erase(it);
        return true;
      }
      if (auto it = import_errors_.find(nonce); it != import_errors_.end()) {
        out = it->second;
        import_errors_.erase(it);
        return true;
      }
      return false;
    });
    if (!s.ok()) return s;
    return out;
  }
  absl::StatusOr<uint64_t> TakeImported(uint64_t nonce) ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_) {
    return TakeReply(&ClientImpl::imported_, nonce);
  }
  // The PdExport (or Error) answering ExportPd `nonce`; the fd is the caller's.
  absl::StatusOr<PdExportReply> TakePdExport(uint64_t nonce)
      ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_) {
    return TakeReply(&ClientImpl::pd_exports_, nonce);
  }
  // Unimports the PD and closes the imported context (Close).
  void ReleasePd() ABSL_LOCKS_EXCLUDED(pd_mu_);
  // Maps `fd` here (then closes it) and attaches the memory at that address.
  // Sends `fd` in an ImportFd and waits for the memory id the daemon gives it.
  absl::StatusOr<uint64_t> ImportFd(int fd, uint64_t offset, uint64_t length);
  absl::StatusOr<Memory> MapAndAttach(uint64_t id, int fd, uint64_t offset, uint64_t length,
                                      bool on_demand) ABSL_LOCKS_EXCLUDED(maps_mu_);
  // Before the daemon prefetches [addr, +length): its pages faulted in here when the range is
  // memory this client mapped (client/internal/populate.h); nothing for other memory (a
  // dma-buf, a region of the application's own).
  void PopulateIfMappedHere(const void* addr, uint64_t length, bool write)
      ABSL_LOCKS_EXCLUDED(maps_mu_);

  // --- Keys (client/client_keys.cc) ---
  // Register when the client cache did not answer: the daemon's (through the key transport).
  absl::StatusOr<Key> RegisterMiss(const void* addr, uint64_t length, uint32_t access,
                                   PrefetchMode prefetch);
  // A grant the daemon returned: into the cache when it can be cached.
  Key Keep(const Granted& g);
  // When the daemon raised reclaim since we last looked: gives back every unreferenced grant.
  void ReclaimIfAsked();
  void GiveBack(const std::vector<std::pair<uint64_t, uint32_t>>& holds);
  void GiveBack(uint64_t handle, uint32_t holds);
  void WatchRevocations();
  void Revoked(uint64_t handle, uint32_t key, RevocationReason reason);

  // The fast path; null without it (ClientOptions::fast_path false) and after Close.
  std::unique_ptr<RingClient> ring_;
  // How the key calls reach the daemon: over ring_ when there is one, else gRPC. Set once by
  // the constructor; after Close, one that answers "client closed".
  std::unique_ptr<KeyTransport> keys_;
  // The client's grant cache; null without the fast path or with ClientOptions::client_cache
  // false.
  std::unique_ptr<GrantCache> grants_;
  std::atomic<uint32_t> reclaim_seen_{0};
  std::thread watcher_;
  std::atomic<bool> stop_watcher_{false};
  base::Mutex callback_mu_;
  std::shared_ptr<std::function<void(const Revocation&)>> callback_ ABSL_GUARDED_BY(callback_mu_);

  int control_fd_;
  const uint64_t session_id_;
  const bool admin_;
  const DeviceInfo device_;
  base::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
  bool send_token_ ABSL_GUARDED_BY(token_mu_) = true;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::RegCacheService::Stub> stub_;
  std::unique_ptr<pb::SimPeerService::Stub> sim_peer_stub_;  // served on the sim only
  const ClientOptions options_;
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> next_nonce_{1};
  std::atomic<uint64_t> next_call_id_{1};
  // One message (with its fd) on the control socket at a time.
  base::Mutex send_mu_;
  // One receiver on the control socket at a time (ReceiveUntil); it stashes under maps_mu_.
  base::Mutex recv_mu_;
  base::Mutex maps_mu_ ABSL_ACQUIRED_AFTER(recv_mu_);
  absl::flat_hash_map<uint64_t, Memory> maps_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, int> pending_fds_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, uint64_t> imported_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, absl::Status> import_errors_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, PdExportReply> pd_exports_ ABSL_GUARDED_BY(maps_mu_);
  // ImportPd's result, once imported.
  base::Mutex pd_mu_;
  ImportedPd pd_ ABSL_GUARDED_BY(pd_mu_);
};

}  // namespace regcache::api::internal
#endif  // REGCACHE_CLIENT_INTERNAL_CLIENT_IMPL_H_
