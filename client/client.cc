// The client library: connecting, memory and closing (client/internal/client_impl.h says where
// the rest lives).
#include "regcache/client.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/errno_status.h"
#include "base/error_reason.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "client/internal/client_impl.h"
#include "client/internal/client_testing.h"
#include "client/internal/populate.h"
#include "protocol/control_protocol.h"
#include "protocol/shm_futex.h"

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

const char* KeyBoundsName(KeyBounds b) {
  switch (b) {
    case KeyBounds::kUnknown:
      return "unknown";
    case KeyBounds::kKey:
      return "key";
    case KeyBounds::kCut:
      return "cut";
    case KeyBounds::kAttachment:
      return "attachment";
  }
  return "unknown";
}

std::string ErrorReason(const absl::Status& status) {
  std::optional<base::ErrorReason> r = base::GetErrorReason(status);
  return r.has_value() ? r->reason : std::string();
}

std::map<std::string, std::string> ErrorMetadata(const absl::Status& status) {
  std::optional<base::ErrorReason> r = base::GetErrorReason(status);
  if (!r.has_value()) return {};
  return std::map<std::string, std::string>(r->metadata.begin(), r->metadata.end());
}

absl::StatusOr<int64_t> StatsSnapshot::Get(const std::string& component,
                                           const std::string& name) const {
  for (const StatValue& s : stats) {
    if (s.component == component && s.name == name) return s.value;
  }
  // A labelled component (`cache{device="sim0"}`) by its plain name, when one series has it.
  const StatValue* only = nullptr;
  for (const StatValue& s : stats) {
    if (s.name != name || !s.component.starts_with(component + "{")) continue;
    if (only != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("stat ", component, "/", name, " has several series (", only->component,
                       ", ", s.component, "): name one with its labels"));
    }
    only = &s;
  }
  if (only != nullptr) return only->value;
  return absl::NotFoundError(absl::StrCat("no stat ", component, "/", name));
}

namespace internal {
namespace {

// How long AllocateMemory waits for its fd once the RPC returned (it was sent before).
constexpr absl::Duration kFdWait = absl::Seconds(5);

DeviceInfo DeviceOf(const protocol::WelcomeMsg& w) {
  DeviceInfo d;
  d.index = w.device_index;
  d.name = protocol::DeviceNameOf(w.device).value_or("");
  d.node_guid = w.node_guid;
  d.port = w.port;
  std::memcpy(d.gid.data(), w.gid, d.gid.size());
  // A value this library does not know reads as unknown: it promises nothing.
  d.key_bounds = w.key_bounds <= static_cast<uint8_t>(KeyBounds::kAttachment)
                     ? static_cast<KeyBounds>(w.key_bounds)
                     : KeyBounds::kUnknown;
  return d;
}

}  // namespace

ClientImpl::ClientImpl(int control_fd, const protocol::WelcomeMsg& welcome,
                       std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
                       std::unique_ptr<RingClient> ring)
    : ring_(std::move(ring)),
      control_fd_(control_fd),
      session_id_(welcome.session_id),
      admin_(welcome.admin != 0),
      device_(DeviceOf(welcome)),
      token_(welcome.token, sizeof(welcome.token)),
      channel_(std::move(channel)),
      stub_(pb::RegCacheService::NewStub(channel_)),
      sim_peer_stub_(pb::SimPeerService::NewStub(channel_)),
      options_(options) {
  keys_ = ring_ != nullptr ? RingTransport(*ring_) : GrpcTransport(*this);
  if (ring_ != nullptr && options_.client_cache) {
    grants_ = std::make_unique<GrantCache>(
        GrantStateView{ring_->slot_words(), ring_->slots(), &ring_->state()->session_state});
    reclaim_seen_.store(ring_->state()->reclaim.load(std::memory_order_acquire));
    watcher_ = std::thread([this] { WatchRevocations(); });
  }
}

void ClientImpl::Prepare(grpc::ClientContext* ctx) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  base::MutexLock l(&token_mu_);
  if (send_token_) ctx->AddMetadata(protocol::kSessionMetadataKey, token_);
}

void ClientImpl::SetToken(bool send, const std::string& token) {
  base::MutexLock l(&token_mu_);
  send_token_ = send;
  token_ = token;
}

absl::StatusOr<Memory> ClientImpl::AllocateMemory(uint64_t length, bool hugetlb, bool on_demand) {
  pb::AllocateMemoryRequest req;
  req.set_length(length);
  req.set_hugetlb(hugetlb);
  pb::AllocateMemoryResponse resp;
  RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::AllocateMemory, req, &resp));
  ASSIGN_OR_RETURN(int fd, TakeMemoryFd(resp.memory_id()));
  return MapAndAttach(resp.memory_id(), fd, 0, resp.length(), on_demand);
}

absl::StatusOr<uint64_t> ClientImpl::ImportFd(int fd, uint64_t offset, uint64_t length) {
  protocol::ImportFdMsg m =
      protocol::MakeControlMessage<protocol::ImportFdMsg>(protocol::ControlType::kImportFd);
  m.nonce = next_nonce_.fetch_add(1);
  m.offset = offset;
  m.length = length;
  {
    base::MutexLock l(&send_mu_);
    RETURN_IF_ERROR(protocol::SendControlMessage(control_fd_, &m, sizeof(m), fd));
  }
  return TakeImported(m.nonce);
}

absl::StatusOr<Memory> ClientImpl::AttachFd(int fd, uint64_t offset, uint64_t length,
                                            bool on_demand) {
  ASSIGN_OR_RETURN(uint64_t id, ImportFd(fd, offset, length));
  int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return base::ErrnoToStatus(errno, "dup");
  return MapAndAttach(id, dup_fd, offset, length, on_demand);
}

absl::StatusOr<Memory> ClientImpl::AttachDmabuf(int fd, uint64_t offset, uint64_t length,
                                                const void* va) {
  if (va == nullptr) {
    return absl::InvalidArgumentError("a dma-buf needs the address its keys speak (va nullptr)");
  }
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0 || fs.f_type != DMA_BUF_MAGIC) {
    return absl::InvalidArgumentError(
        absl::StrCat("fd ", fd, " is not a dma-buf (AttachFd takes memfds)"));
  }
  ASSIGN_OR_RETURN(uint64_t id, ImportFd(fd, offset, length));
  pb::AttachMemoryRequest req;
  req.set_memory_id(id);
  req.set_client_va(reinterpret_cast<uint64_t>(va));
  pb::AttachMemoryResponse resp;
  if (absl::Status attached = Call(&pb::RegCacheService::Stub::AttachMemory, req, &resp);
      !attached.ok()) {
    pb::DetachMemoryRequest dreq;
    dreq.set_memory_id(id);
    pb::DetachMemoryResponse dresp;
    (void)Call(&pb::RegCacheService::Stub::DetachMemory, dreq, &dresp);
    return attached;
  }
  return Memory{id, const_cast<void*>(va), length};  // nothing mapped here: not in maps_
}

absl::Status ClientImpl::DetachMemory(const Memory& memory) {
  pb::DetachMemoryRequest req;
  req.set_memory_id(memory.id);
  pb::DetachMemoryResponse resp;
  RETURN_IF_ERROR(Call(&pb::RegCacheService::Stub::DetachMemory, req, &resp));
  base::MutexLock l(&maps_mu_);
  auto it = maps_.find(memory.id);
  if (it != maps_.end()) {
    munmap(it->second.data, it->second.length);
    maps_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::ReceiveUntil(const std::function<bool()>& ready) {
  absl::Time deadline = absl::Now() + kFdWait;
  base::MutexLock l(&recv_mu_);
  while (!ready()) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("control socket: the expected message did not come");
    }
    absl::StatusOr<protocol::ControlMessage> msg =
        protocol::ReceiveControlMessage(control_fd_, left);
    if (!msg.ok()) return msg.status();
    base::MutexLock ml(&maps_mu_);
    switch (msg->type) {
      case protocol::ControlType::kMemoryFd:
        if (msg->fds.size() == 1) {
          pending_fds_[msg->As<protocol::MemoryFdMsg>().memory_id] = msg->fds[0];
          msg->fds.clear();
        }
        break;
      case protocol::ControlType::kImported: {
        protocol::ImportedMsg m = msg->As<protocol::ImportedMsg>();
        imported_[m.nonce] = m.memory_id;
        break;
      }
      case protocol::ControlType::kPdExport:
        if (msg->fds.size() == 1) {
          protocol::PdExportMsg m = msg->As<protocol::PdExportMsg>();
          if (auto old = pd_exports_.find(m.nonce); old != pd_exports_.end()) close(old->second.fd);
          pd_exports_[m.nonce] = PdExportReply{msg->fds[0], m.pd_handle};
          msg->fds.clear();
        }
        break;
      case protocol::ControlType::kError: {
        protocol::ErrorMsg m = msg->As<protocol::ErrorMsg>();
        import_errors_[m.nonce] = protocol::StatusFromErrorMessage(m);
        break;
      }
      default:
        break;
    }
    protocol::CloseFds(&msg->fds);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ClientImpl::TakeMemoryFd(uint64_t id) {
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

absl::StatusOr<Memory> ClientImpl::MapAndAttach(uint64_t id, int fd, uint64_t offset,
                                                uint64_t length, bool on_demand) {
  base::UniqueFd owned(fd);  // closed once mapped: the mapping keeps the memory
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, owned.get(),
                 static_cast<off_t>(offset));
  int err = errno;
  owned.reset();
  if (p == MAP_FAILED) {
    absl::Status s = base::ErrnoToStatus(err, absl::StrCat("mmap memory ", id));
    pb::DetachMemoryRequest req;
    req.set_memory_id(id);
    pb::DetachMemoryResponse resp;
    (void)Call(&pb::RegCacheService::Stub::DetachMemory, req, &resp);
    return s;
  }
  // Pinned memory: faulted in here first, so it is charged to this process's cgroup, not to the
  // daemon that registers (pins) it (docs/operations.md, "Whose memory is it"). On-demand
  // memory is faulted in as it is prefetched (PopulateIfMappedHere) or used.
  absl::Status attached = on_demand ? absl::OkStatus() : PopulateHere(p, length, /*write=*/true);
  pb::AttachMemoryRequest req;
  req.set_memory_id(id);
  req.set_client_va(reinterpret_cast<uint64_t>(p));
  req.set_on_demand(on_demand);
  pb::AttachMemoryResponse resp;
  if (attached.ok()) attached = Call(&pb::RegCacheService::Stub::AttachMemory, req, &resp);
  if (!attached.ok()) {
    munmap(p, length);
    pb::DetachMemoryRequest dreq;
    dreq.set_memory_id(id);
    pb::DetachMemoryResponse dresp;
    (void)Call(&pb::RegCacheService::Stub::DetachMemory, dreq, &dresp);
    return attached;
  }
  Memory m{id, p, length};
  base::MutexLock l(&maps_mu_);
  maps_[id] = m;
  return m;
}

void ClientImpl::PopulateIfMappedHere(const void* addr, uint64_t length, bool write) {
  const uint64_t start = reinterpret_cast<uint64_t>(addr);
  {
    base::MutexLock l(&maps_mu_);
    bool inside = false;
    for (const auto& [id, m] : maps_) {
      const uint64_t base = reinterpret_cast<uint64_t>(m.data);
      if (start >= base && length <= m.length && start - base <= m.length - length) {
        inside = true;
        break;
      }
    }
    if (!inside) return;
  }
  // A failure here (the memory cannot be had) is the daemon's to report, as it would be.
  (void)PopulateHere(addr, length, write);
}

void ClientImpl::Close() {
  if (closed_.exchange(true)) return;
  if (watcher_.joinable()) {
    stop_watcher_.store(true);
    shm::FutexWakeAll(&ring_->state()->event_head);  // the watcher may sleep on it
    watcher_.join();
  }
  grants_.reset();
  keys_ = ClosedTransport();  // before the ring it may use goes
  ring_.reset();              // before the session goes with the control socket
  stub_.reset();
  channel_.reset();
  if (control_fd_ >= 0) close(control_fd_);
  control_fd_ = -1;
  base::MutexLock l(&maps_mu_);
  for (auto& [id, m] : maps_) munmap(m.data, m.length);
  maps_.clear();
  for (auto& [id, fd] : pending_fds_) close(fd);
  pending_fds_.clear();
  for (auto& [nonce, e] : pd_exports_) close(e.fd);
  pd_exports_.clear();
  ReleasePd();
}

}  // namespace internal

namespace {

// The session's gRPC channel, connected before the first call: a daemon that has just started
// may have bound its gRPC socket a moment before it listens, and a call on a channel whose first
// attempt was refused fails at once (the channel is backing off) instead of waiting. Not an
// error here if it does not connect in time: the calls then say why.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& socket_dir,
                                           const ClientOptions& options) {
  std::string target = options.tcp_port != 0
                           ? absl::StrCat("127.0.0.1:", options.tcp_port)
                           : absl::StrCat("unix:", socket_dir, "/", protocol::kGrpcSocketName);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  (void)channel->WaitForConnected(
      absl::ToChronoTime(absl::Now() + std::min(options.call_timeout, absl::Seconds(2))));
  return channel;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& given_dir,
                                                        const ClientOptions& options) {
  const std::string socket_dir = given_dir.empty() ? protocol::DefaultSocketDir() : given_dir;
  std::string path = absl::StrCat(socket_dir, "/", protocol::kControlSocketName);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  base::UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return base::ErrnoToStatus(errno, "socket");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    return absl::UnavailableError(
        absl::StrCat("connect ", path, ": ", base::ErrnoName(err), " (is regcached running?)"));
  }
  // Open names the session's device; the daemon answers Welcome, or Error when it refused.
  protocol::OpenMsg open =
      protocol::MakeControlMessage<protocol::OpenMsg>(protocol::ControlType::kOpen);
  open.flags = (options.observer ? protocol::kOpenObserver : 0) |
               (options.own_device_context ? protocol::kOpenOwnContext : 0);
  absl::Status sent = protocol::SetDeviceName(options.device, open.device);
  if (sent.ok()) sent = protocol::SendControlMessage(fd.get(), &open, sizeof(open), -1);
  if (!sent.ok()) {
    return base::Annotate(sent, "regcached session");
  }
  absl::StatusOr<protocol::ControlMessage> reply =
      protocol::ReceiveControlMessage(fd.get(), options.call_timeout);
  if (!reply.ok() || reply->type != protocol::ControlType::kWelcome) {
    absl::Status s;
    if (!reply.ok()) {
      s = reply.status();
    } else if (reply->type == protocol::ControlType::kError) {
      s = protocol::StatusFromErrorMessage(reply->As<protocol::ErrorMsg>());
    } else {
      s = absl::InternalError("control socket: unexpected first message");
    }
    if (reply.ok()) protocol::CloseFds(&reply->fds);
    return base::Annotate(s, "regcached session");
  }
  protocol::WelcomeMsg welcome = reply->As<protocol::WelcomeMsg>();
  if ((welcome.observer != 0) != options.observer) {
    protocol::CloseFds(&reply->fds);
    return absl::InternalError(absl::StrCat("control socket: asked for ",
                                            options.observer ? "an observer" : "a session",
                                            ", the Welcome is not one"));
  }
  if (const DeviceInfo d = internal::DeviceOf(welcome);
      options.require_key_bounds && !d.key_range_enforced()) {
    protocol::CloseFds(&reply->fds);  // and closing `fd` ends the session
    return absl::FailedPreconditionError(absl::StrFormat(
        "regcached session: device %s does not confine a peer to a key's own range (key bounds: "
        "%s) and ClientOptions::require_key_bounds is set; a daemon started with "
        "--strict_key_bounds would",
        d.name, KeyBoundsName(d.key_bounds)));
  }
  std::unique_ptr<internal::RingClient> ring;
  if (options.fast_path && reply->fds.size() == 2) {
    auto mapped = internal::RingClient::Create(reply->fds[0], reply->fds[1], welcome.session_id,
                                               welcome.ring_channels, welcome.grant_slots,
                                               options.call_timeout);  // takes the fds
    reply->fds.clear();
    if (!mapped.ok()) {
      return base::Annotate(mapped.status(), "regcached session");
    }
    ring = std::move(*mapped);
  }
  protocol::CloseFds(&reply->fds);
  std::shared_ptr<grpc::Channel> channel = OpenChannel(socket_dir, options);
  return std::unique_ptr<Client>(new internal::ClientImpl(fd.release(), welcome, std::move(channel),
                                                          options, std::move(ring)));
}

namespace testing {

absl::Status RawCall(Client& client, const std::string& method, const std::string& bytes) {
  return static_cast<internal::ClientImpl&>(client).RawCall(method, bytes);
}

void SetToken(Client& client, bool send, const std::string& token) {
  static_cast<internal::ClientImpl&>(client).SetToken(send, token);
}

std::string Token(Client& client) { return static_cast<internal::ClientImpl&>(client).token(); }

int ControlFd(const Client& client) {
  return static_cast<const internal::ClientImpl&>(client).control_fd();
}

absl::Status RingNop(Client& client) {
  internal::RingClient* ring = static_cast<internal::ClientImpl&>(client).ring();
  if (ring == nullptr) return absl::FailedPreconditionError("this client has no fast path");
  return internal::RingNop(*ring);
}

bool UsesFastPath(const Client& client) {
  return static_cast<const internal::ClientImpl&>(client).ring() != nullptr;
}

}  // namespace testing

}  // namespace regcache::api
