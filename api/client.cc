#include "regcache/client.h"

#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "api/control_protocol.h"
#include "api/internal/client_testing.h"
#include "api/internal/grpc_status.h"
#include "api/internal/ring_client.h"
#include "api/internal/ring_keys.h"
#include "api/regcache.grpc.pb.h"
#include "base/errno_status.h"
#include "base/mutex.h"
#include "base/status_macros.h"

namespace regcache::api {

void KeyRef::reset() {
  if (client_ == nullptr) return;
  (void)client_->Release(key_.handle);
  client_ = nullptr;
}

absl::StatusOr<KeyRef> Client::Acquire(const void* addr, uint64_t length, uint32_t access,
                                       PrefetchMode prefetch) {
  ASSIGN_OR_RETURN(Key k, Register(addr, length, access, prefetch));
  return KeyRef(this, k);
}

absl::StatusOr<KeyRef> Client::AcquireWindow(uint64_t parent, uint64_t offset, uint64_t length,
                                             uint32_t access) {
  ASSIGN_OR_RETURN(Key k, Window(parent, offset, length, access));
  return KeyRef(this, k);
}

absl::StatusOr<int64_t> StatsSnapshot::Get(const std::string& component,
                                           const std::string& name) const {
  for (const StatValue& s : stats) {
    if (s.component == component && s.name == name) return s.value;
  }
  return absl::NotFoundError(absl::StrCat("no stat ", component, "/", name));
}

namespace {

namespace pb = ::regcache::v1;

// How long AllocateMemory waits for its fd once the RPC returned (it was sent before).
constexpr absl::Duration kFdWait = absl::Seconds(5);

SessionUsage FromProto(const pb::Usage& u) {
  SessionUsage o;
  o.live_registrations = u.live_registrations();
  o.revoked_held = u.revoked_held();
  o.cached_unreferenced = u.cached_unreferenced();
  o.backings = u.backings();
  o.backed_bytes = u.backed_bytes();
  o.pool_outstanding = u.pool_outstanding();
  o.pool_total = u.pool_total();
  return o;
}

// The values are the wire's (api/wire_values.cc); unknown ones pass through for the daemon to
// refuse.
pb::Prefetch ToProto(PrefetchMode m) { return static_cast<pb::Prefetch>(m); }

Key FromProto(const pb::KeyGrant& g) {
  return Key{g.handle(), g.lkey(), g.rkey(), g.va(), g.length(), g.access(), g.hit()};
}

KeyInfo FromProto(const pb::KeyInfo& k) {
  KeyInfo o;
  o.handle = k.handle();
  o.key = k.key();
  o.va = k.va();
  o.length = k.length();
  o.access = k.access();
  o.holders = k.holders();
  o.revoked = k.revoked();
  o.is_window = k.is_window();
  o.parent = k.parent();
  o.key_state = k.key_state();
  return o;
}

class ClientImpl final : public Client {
 public:
  ClientImpl(int control_fd, const WelcomeMsg& welcome, std::shared_ptr<grpc::Channel> channel,
             const ClientOptions& options, std::unique_ptr<internal::RingClient> ring)
      : ring_(std::move(ring)),
        control_fd_(control_fd),
        session_id_(welcome.session_id),
        admin_(welcome.admin != 0),
        token_(welcome.token, sizeof(welcome.token)),
        channel_(std::move(channel)),
        stub_(pb::RegCache::NewStub(channel_)),
        options_(options) {}
  ~ClientImpl() override { Close(); }

  uint64_t session_id() const override { return session_id_; }
  bool admin() const override { return admin_; }

  absl::StatusOr<Memory> AllocateMemory(uint64_t length, bool hugetlb, bool on_demand) override {
    pb::AllocateMemoryRequest req;
    req.set_length(length);
    req.set_hugetlb(hugetlb);
    pb::AllocateMemoryResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::AllocateMemory, req, &resp));
    ASSIGN_OR_RETURN(int fd, TakeMemoryFd(resp.memory_id()));
    return MapAndAttach(resp.memory_id(), fd, 0, resp.length(), on_demand);
  }

  absl::StatusOr<Memory> AttachFd(int fd, uint64_t offset, uint64_t length,
                                  bool on_demand) override {
    ImportFdMsg m = MakeControlMessage<ImportFdMsg>(ControlType::kImportFd);
    m.nonce = next_nonce_.fetch_add(1);
    m.offset = offset;
    m.length = length;
    {
      base::MutexLock l(&send_mu_);
      RETURN_IF_ERROR(SendControlMessage(control_fd_, &m, sizeof(m), fd));
    }
    ASSIGN_OR_RETURN(uint64_t id, TakeImported(m.nonce));
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return base::ErrnoToStatus(errno, "dup");
    return MapAndAttach(id, dup_fd, offset, length, on_demand);
  }

  absl::Status DetachMemory(const Memory& memory) override {
    pb::DetachMemoryRequest req;
    req.set_memory_id(memory.id);
    pb::DetachMemoryResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::DetachMemory, req, &resp));
    base::MutexLock l(&maps_mu_);
    auto it = maps_.find(memory.id);
    if (it != maps_.end()) {
      munmap(it->second.data, it->second.length);
      maps_.erase(it);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Key> Register(const void* addr, uint64_t length, uint32_t access,
                               PrefetchMode prefetch) override {
    if (ring_ != nullptr) return internal::RingRegister(*ring_, addr, length, access, prefetch);
    pb::RegisterRequest req;
    req.set_va(reinterpret_cast<uint64_t>(addr));
    req.set_length(length);
    req.set_access(access);
    req.set_prefetch(ToProto(prefetch));
    pb::KeyGrant resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Register, req, &resp));
    return FromProto(resp);
  }

  absl::Status Prefetch(const void* addr, uint64_t length, bool write, PrefetchMode mode) override {
    if (ring_ != nullptr) return internal::RingPrefetch(*ring_, addr, length, write, mode);
    pb::PrefetchRequest req;
    req.set_va(reinterpret_cast<uint64_t>(addr));
    req.set_length(length);
    req.set_write(write);
    req.set_mode(ToProto(mode));
    pb::PrefetchResponse resp;
    return Call(&pb::RegCache::Stub::Prefetch, req, &resp);
  }

  absl::StatusOr<Key> Window(uint64_t parent, uint64_t offset, uint64_t length,
                             uint32_t access) override {
    if (ring_ != nullptr) return internal::RingWindow(*ring_, parent, offset, length, access);
    pb::WindowRequest req;
    req.set_parent(parent);
    req.set_offset(offset);
    req.set_length(length);
    req.set_access(access);
    pb::KeyGrant resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Window, req, &resp));
    return FromProto(resp);
  }

  absl::Status Release(uint64_t handle) override {
    if (ring_ != nullptr) return internal::RingRelease(*ring_, handle);
    pb::ReleaseRequest req;
    req.set_handle(handle);
    pb::ReleaseResponse resp;
    return Call(&pb::RegCache::Stub::Release, req, &resp);
  }

  absl::Status Invalidate(uint64_t handle) override {
    if (ring_ != nullptr) return internal::RingInvalidate(*ring_, handle);
    pb::InvalidateRequest req;
    req.set_handle(handle);
    pb::InvalidateResponse resp;
    return Call(&pb::RegCache::Stub::Invalidate, req, &resp);
  }

  absl::StatusOr<KeyInfo> Query(uint64_t handle) override {
    if (ring_ != nullptr) return internal::RingQuery(*ring_, handle);
    pb::QueryRequest req;
    req.set_handle(handle);
    pb::KeyInfo resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Query, req, &resp));
    return FromProto(resp);
  }

  absl::StatusOr<std::vector<KeyInfo>> ListKeys(uint64_t session) override {
    pb::ListKeysRequest req;
    req.set_session_id(session);
    pb::ListKeysResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::ListKeys, req, &resp));
    std::vector<KeyInfo> out;
    for (const pb::KeyInfo& k : resp.keys()) out.push_back(FromProto(k));
    return out;
  }

  absl::Status Ping() override {
    pb::PingRequest req;
    pb::PingResponse resp;
    return Call(&pb::RegCache::Stub::Ping, req, &resp);
  }

  absl::StatusOr<StatsSnapshot> Stats() override {
    pb::StatsRequest req;
    pb::StatsResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Stats, req, &resp));
    StatsSnapshot out;
    out.session = FromProto(resp.session_usage());
    for (const pb::Stat& s : resp.stats()) {
      out.stats.push_back(StatValue{s.component(), s.name(), s.kind(), s.value(), s.count(),
                                    s.sum(), s.p50(), s.p99(), s.max()});
    }
    return out;
  }

  absl::StatusOr<DaemonInfo> Status() override {
    pb::StatusRequest req;
    pb::StatusResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Status, req, &resp));
    return DaemonInfo{resp.device(),   resp.backend(),   resp.sessions(),
                      resp.draining(), resp.uptime_ms(), resp.peer()};
  }

  absl::StatusOr<std::vector<SessionRecord>> Sessions() override {
    pb::SessionsRequest req;
    pb::SessionsResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Sessions, req, &resp));
    std::vector<SessionRecord> out;
    for (const pb::SessionInfo& s : resp.sessions()) {
      out.push_back(SessionRecord{s.session_id(), s.pid(), s.uid(), s.gid(), s.admin(),
                                  FromProto(s.usage()), s.memories()});
    }
    return out;
  }

  absl::Status Drain() override {
    pb::DrainRequest req;
    pb::DrainResponse resp;
    return Call(&pb::RegCache::Stub::Drain, req, &resp);
  }

  absl::Status PeerWrite(uint32_t rkey, uint64_t addr, const std::string& data,
                         uint64_t session) override {
    pb::PeerWriteRequest req;
    req.set_rkey(rkey);
    req.set_addr(addr);
    req.set_data(data);
    req.set_session_id(session);
    pb::PeerWriteResponse resp;
    return Call(&pb::RegCache::Stub::PeerWrite, req, &resp);
  }

  absl::StatusOr<std::string> PeerRead(uint32_t rkey, uint64_t addr, uint64_t length,
                                       uint64_t session) override {
    pb::PeerReadRequest req;
    req.set_rkey(rkey);
    req.set_addr(addr);
    req.set_length(length);
    req.set_session_id(session);
    pb::PeerReadResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::PeerRead, req, &resp));
    return resp.data();
  }

  // api/internal/client_testing.h.
  absl::Status RawCall(const std::string& method, const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    Prepare(&ctx);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    base::Mutex mu;
    base::CondVar cv;
    bool done = false;    // guarded by mu
    grpc::Status result;  // guarded by mu
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      base::MutexLock l(&mu);
      result = std::move(s);
      done = true;
      cv.SignalAll();
    });
    base::MutexLock l(&mu);
    while (!done) cv.Wait(&mu);  // the call's deadline bounds the wait
    return FromGrpcStatus(result);
  }

  void SetToken(bool send, const std::string& token) {
    base::MutexLock l(&token_mu_);
    send_token_ = send;
    token_ = token;
  }

  int control_fd() const { return control_fd_; }
  internal::RingClient* ring() const { return ring_.get(); }

  void Close() override {
    if (closed_.exchange(true)) return;
    ring_.reset();  // before the session goes with the control socket
    stub_.reset();
    channel_.reset();
    if (control_fd_ >= 0) close(control_fd_);
    control_fd_ = -1;
    base::MutexLock l(&maps_mu_);
    for (auto& [id, m] : maps_) munmap(m.data, m.length);
    maps_.clear();
    for (auto& [id, fd] : pending_fds_) close(fd);
    pending_fds_.clear();
  }

 private:
  void Prepare(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(token_mu_) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    base::MutexLock l(&token_mu_);
    if (send_token_) ctx->AddMetadata(kSessionMetadataKey, token_);
  }

  template <typename Req, typename Resp>
  absl::Status Call(grpc::Status (pb::RegCache::Stub::*method)(grpc::ClientContext*, const Req&,
                                                               Resp*),
                    const Req& req, Resp* resp) {
    if (closed_.load()) return absl::FailedPreconditionError("client closed");
    grpc::ClientContext ctx;
    Prepare(&ctx);
    return FromGrpcStatus((stub_.get()->*method)(&ctx, req, resp));
  }

  // Receives control messages until `ready` finds what it waits for; stashes the rest.
  // One thread receives at a time; the others wait for it and re-check their stash.
  template <typename Ready>
  absl::Status ReceiveUntil(Ready ready) ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_) {
    absl::Time deadline = absl::Now() + kFdWait;
    base::MutexLock l(&recv_mu_);
    while (!ready()) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError("control socket: the expected message did not come");
      }
      absl::StatusOr<ControlMessage> msg = ReceiveControlMessage(control_fd_, left);
      if (!msg.ok()) return msg.status();
      base::MutexLock ml(&maps_mu_);
      switch (msg->type) {
        case ControlType::kMemoryFd:
          if (msg->fds.size() == 1) {
            pending_fds_[msg->As<MemoryFdMsg>().memory_id] = msg->fds[0];
            msg->fds.clear();
          }
          break;
        case ControlType::kImported: {
          ImportedMsg m = msg->As<ImportedMsg>();
          imported_[m.nonce] = m.memory_id;
          break;
        }
        case ControlType::kError: {
          ErrorMsg m = msg->As<ErrorMsg>();
          import_errors_[m.nonce] = StatusFromErrorMessage(m);
          break;
        }
        default:
          break;
      }
      CloseFds(&msg->fds);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> TakeMemoryFd(uint64_t id) ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_) {
    int fd = -1;
    RETURN_IF_ERROR(ReceiveUntil([&] {
      base::MutexLock l(&maps_mu_);
      auto it = pending_fds_.find(id);
      if (it == pending_fds_.end()) return false;
      fd = it->second;
      pending_fds_.erase(it);
      return true;
    }));
    return fd;
  }

  absl::StatusOr<uint64_t> TakeImported(uint64_t nonce) ABSL_LOCKS_EXCLUDED(recv_mu_, maps_mu_) {
    absl::StatusOr<uint64_t> out = absl::UnknownError("unset");
    RETURN_IF_ERROR(ReceiveUntil([&] {
      base::MutexLock l(&maps_mu_);
      if (auto it = imported_.find(nonce); it != imported_.end()) {
        out = it->second;
        imported_.erase(it);
        return true;
      }
      if (auto it = import_errors_.find(nonce); it != import_errors_.end()) {
        out = it->second;
        import_errors_.erase(it);
        return true;
      }
      return false;
    }));
    return out;
  }

  // Maps `fd` here (then closes it) and attaches the memory at that address.
  absl::StatusOr<Memory> MapAndAttach(uint64_t id, int fd, uint64_t offset, uint64_t length,
                                      bool on_demand) ABSL_LOCKS_EXCLUDED(maps_mu_) {
    void* p =
        mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
      absl::Status s = base::ErrnoToStatus(err, absl::StrCat("mmap memory ", id));
      pb::DetachMemoryRequest req;
      req.set_memory_id(id);
      pb::DetachMemoryResponse resp;
      (void)Call(&pb::RegCache::Stub::DetachMemory, req, &resp);
      return s;
    }
    pb::AttachMemoryRequest req;
    req.set_memory_id(id);
    req.set_client_va(reinterpret_cast<uint64_t>(p));
    req.set_on_demand(on_demand);
    pb::AttachMemoryResponse resp;
    absl::Status attached = Call(&pb::RegCache::Stub::AttachMemory, req, &resp);
    if (!attached.ok()) {
      munmap(p, length);
      pb::DetachMemoryRequest dreq;
      dreq.set_memory_id(id);
      pb::DetachMemoryResponse dresp;
      (void)Call(&pb::RegCache::Stub::DetachMemory, dreq, &dresp);
      return attached;
    }
    Memory m{id, p, length};
    base::MutexLock l(&maps_mu_);
    maps_[id] = m;
    return m;
  }

  // The fast path; null without it (ClientOptions::fast_path false) and after Close.
  std::unique_ptr<internal::RingClient> ring_;
  int control_fd_;
  const uint64_t session_id_;
  const bool admin_;
  base::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
  bool send_token_ ABSL_GUARDED_BY(token_mu_) = true;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::RegCache::Stub> stub_;
  const ClientOptions options_;
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> next_nonce_{1};
  // One message (with its fd) on the control socket at a time.
  base::Mutex send_mu_;
  // One receiver on the control socket at a time (ReceiveUntil); it stashes under maps_mu_.
  base::Mutex recv_mu_;
  base::Mutex maps_mu_ ABSL_ACQUIRED_AFTER(recv_mu_);
  absl::flat_hash_map<uint64_t, Memory> maps_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, int> pending_fds_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, uint64_t> imported_ ABSL_GUARDED_BY(maps_mu_);
  absl::flat_hash_map<uint64_t, absl::Status> import_errors_ ABSL_GUARDED_BY(maps_mu_);

  // --- Re-registration and batches (kept together at the end of the class) ---
 public:
  absl::StatusOr<Key> Reregister(uint64_t handle, const void* addr, uint64_t length,
                                 uint32_t access) override {
    pb::ReregisterRequest req;
    req.set_handle(handle);
    req.set_va(reinterpret_cast<uint64_t>(addr));
    req.set_length(length);
    req.set_access(access);
    pb::KeyGrant resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::Reregister, req, &resp));
    Key key = FromProto(resp);
    key.same_key = resp.same_key();
    return key;
  }

  absl::StatusOr<std::vector<absl::StatusOr<Key>>> RegisterBatch(
      absl::Span<const RegisterItem> items) override {
    pb::RegisterBatchRequest req;
    for (const RegisterItem& item : items) {
      pb::RegisterRequest* r = req.add_items();
      r->set_va(reinterpret_cast<uint64_t>(item.addr));
      r->set_length(item.length);
      r->set_access(item.access);
      r->set_prefetch(ToProto(item.prefetch));
    }
    pb::RegisterBatchResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::RegisterBatch, req, &resp));
    RETURN_IF_ERROR(CheckBatchReply(resp.results_size(), items.size()));
    std::vector<absl::StatusOr<Key>> out;
    out.reserve(items.size());
    for (const pb::RegisterResult& r : resp.results()) {
      absl::Status s = FromItemStatus(r.status());
      if (s.ok()) {
        out.emplace_back(FromProto(r.grant()));
      } else {
        out.emplace_back(std::move(s));
      }
    }
    return out;
  }

  absl::StatusOr<std::vector<absl::Status>> ReleaseBatch(
      absl::Span<const uint64_t> handles) override {
    pb::ReleaseBatchRequest req;
    req.mutable_handles()->Add(handles.begin(), handles.end());
    pb::ReleaseBatchResponse resp;
    RETURN_IF_ERROR(Call(&pb::RegCache::Stub::ReleaseBatch, req, &resp));
    RETURN_IF_ERROR(CheckBatchReply(resp.results_size(), handles.size()));
    std::vector<absl::Status> out;
    out.reserve(handles.size());
    for (const pb::ItemStatus& r : resp.results()) out.push_back(FromItemStatus(r));
    return out;
  }

 private:
  // A batch reply has exactly one result per item; anything else is a broken daemon.
  static absl::Status CheckBatchReply(int results, size_t items) {
    if (static_cast<size_t>(results) == items) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("batch reply has ", results, " results for ", items, " items"));
  }
  // An item's status off the wire; a code outside the canonical ones becomes kUnknown.
  static absl::Status FromItemStatus(const pb::ItemStatus& s) {
    if (s.code() == 0) return absl::OkStatus();
    const bool known =
        s.code() > 0 && s.code() <= static_cast<int>(absl::StatusCode::kUnauthenticated);
    return absl::Status(
        known ? static_cast<absl::StatusCode>(s.code()) : absl::StatusCode::kUnknown, s.message());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_dir,
                                                        const ClientOptions& options) {
  std::string path = absl::StrCat(socket_dir, "/", kControlSocketName);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return base::ErrnoToStatus(errno, "socket");
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect ", path, ": ", base::ErrnoName(err), " (is regcached running?)"));
  }
  // The daemon speaks first: Welcome, or Error when it refused this process.
  absl::StatusOr<ControlMessage> reply = ReceiveControlMessage(fd, options.call_timeout);
  if (!reply.ok() || reply->type != ControlType::kWelcome) {
    absl::Status s;
    if (!reply.ok()) {
      s = reply.status();
    } else if (reply->type == ControlType::kError) {
      s = StatusFromErrorMessage(reply->As<ErrorMsg>());
    } else {
      s = absl::InternalError("control socket: unexpected first message");
    }
    if (reply.ok()) CloseFds(&reply->fds);
    close(fd);
    return base::Annotate(s, "regcached session");
  }
  WelcomeMsg welcome = reply->As<WelcomeMsg>();
  std::unique_ptr<internal::RingClient> ring;
  if (options.fast_path && reply->fds.size() == 2) {
    auto mapped = internal::RingClient::Create(reply->fds[0], reply->fds[1], welcome.session_id,
                                               welcome.ring_channels, welcome.grant_slots,
                                               options.call_timeout);  // takes the fds
    reply->fds.clear();
    if (!mapped.ok()) {
      close(fd);
      return base::Annotate(mapped.status(), "regcached session");
    }
    ring = std::move(*mapped);
  }
  CloseFds(&reply->fds);
  std::string target = options.tcp_port != 0
                           ? absl::StrCat("127.0.0.1:", options.tcp_port)
                           : absl::StrCat("unix:", socket_dir, "/", kGrpcSocketName);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  return std::unique_ptr<Client>(
      new ClientImpl(fd, welcome, std::move(channel), options, std::move(ring)));
}

namespace testing {

absl::Status RawCall(Client& client, const std::string& method, const std::string& bytes) {
  return static_cast<ClientImpl&>(client).RawCall(method, bytes);
}

void SetToken(Client& client, bool send, const std::string& token) {
  static_cast<ClientImpl&>(client).SetToken(send, token);
}

int ControlFd(const Client& client) { return static_cast<const ClientImpl&>(client).control_fd(); }

absl::Status RingNop(Client& client) {
  internal::RingClient* ring = static_cast<ClientImpl&>(client).ring();
  if (ring == nullptr) return absl::FailedPreconditionError("this client has no fast path");
  return internal::RingNop(*ring);
}

bool UsesFastPath(const Client& client) {
  return static_cast<const ClientImpl&>(client).ring() != nullptr;
}

}  // namespace testing

}  // namespace regcache::api