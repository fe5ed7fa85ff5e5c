#include "server/control_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/unique_fd.h"
#include "protocol/control_protocol.h"
#include "server/internal/control_client_memory.h"
#include "server/internal/session_closer.h"

namespace regcache::server {
namespace {

// Sessions closed at once, off the accepting thread (a close waits for the session's calls).
constexpr int kCloseWorkers = 4;

// Connections that have not sent their Open yet, per peer uid (SO_PEERCRED, known at accept):
// one more from a uid that has this many is closed at once. Per uid, so that a user who floods
// the socket — allowed or not — fills only its own share and never keeps another user's clients
// out; each pending connection is dropped after protocol::kOpenTimeout anyway.
constexpr size_t kMaxPendingOpensPerUid = 8;
// And in all, a bound on the descriptors such connections hold (reached only by many uids).
constexpr size_t kMaxPendingOpens = 1024;

struct Connection {
  int fd = -1;
  service::SessionGrant grant;  // id 0 until the session opens (the client's Open)
  service::PeerCredentials peer;
  absl::Time accepted;
};

class ControlServerImpl final : public ControlServer {
 public:
  ControlServerImpl(service::Daemon* daemon, base::UniqueFd listen_fd, base::UniqueFd epoll_fd,
                    base::UniqueFd wake_fd)
      : daemon_(daemon),
        listen_fd_(std::move(listen_fd)),
        epoll_fd_(std::move(epoll_fd)),
        wake_fd_(std::move(wake_fd)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ControlServerImpl() override { Stop(); }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    uint64_t one = 1;
    (void)!write(wake_fd_.get(), &one, sizeof(one));
    thread_.join();
    std::vector<int> fds;
    {
      base::MutexLock l(&mu_);
      for (auto& [fd, conn] : by_fd_) fds.push_back(fd);
    }
    for (int fd : fds) Drop(fd, "server stopping");
    closer_.Drain();
    listen_fd_.reset();
    epoll_fd_.reset();
    wake_fd_.reset();
  }

  size_t connections() const override {
    base::ReaderMutexLock l(&mu_);
    return by_fd_.size();
  }

  absl::Status SendMemoryFd(service::SessionId session,
                            const service::AllocatedMemory& memory) override {
    protocol::MemoryFdMsg m =
        protocol::MakeControlMessage<protocol::MemoryFdMsg>(protocol::ControlType::kMemoryFd);
    m.memory_id = memory.id;
    m.length = memory.length;
    m.hugetlb = memory.hugetlb ? 1 : 0;
    base::MutexLock l(&mu_);
    auto it = by_session_.find(session);
    if (it == by_session_.end()) {
      return absl::NotFoundError(absl::StrCat("session ", session, " has no control connection"));
    }
    absl::Status s = protocol::SendControlMessage(it->second, &m, sizeof(m), memory.fd);
    if (!s.ok()) {
      // A client that does not read its control socket is dropped; the epoll thread sees the
      // shutdown and closes the session.
      shutdown(it->second, SHUT_RDWR);
    }
    return s;
  }

 private:
  void Loop() {
    epoll_event events[32];
    while (!stopped_.load(std::memory_order_acquire)) {
      int n = epoll_wait(epoll_fd_.get(), events, 32, 1000);
      if (n < 0) {
        if (errno == EINTR) continue;
        RC_LOG(ERROR) << "control socket epoll_wait: " << base::ErrnoName(errno);
        return;
      }
      DropLateOpens();
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd_.get()) return;
        if (fd == listen_fd_.get()) {
          Accept();
        } else {
          Serve(fd, events[i].events);
        }
      }
    }
  }

  void Accept() {
    base::UniqueFd owned(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!owned) {
      if (errno != EAGAIN && errno != EINTR) {
        RC_LOG(WARNING) << "control socket accept: " << base::ErrnoName(errno);
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(owned.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      RC_LOG(WARNING) << "SO_PEERCRED: " << base::ErrnoName(errno);
      return;
    }
    service::PeerCredentials peer{cred.pid, cred.uid, cred.gid};
    // The session opens when the client's Open names its device (OpenSession below).
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = owned.get();
    int fd = -1;  // the connection table's from here (Drop closes it)
    {
      base::MutexLock l(&mu_);
      size_t& mine = pending_by_uid_[peer.uid];
      if (mine >= kMaxPendingOpensPerUid || pending_ >= kMaxPendingOpens) {
        RC_LOG(WARNING) << "control: uid " << peer.uid << " has " << mine << " connections (all"
                        << " uids " << pending_ << ") that have not sent Open; closing the one"
                        << " from pid " << peer.pid;
        if (mine == 0) pending_by_uid_.erase(peer.uid);
        return;
      }
      fd = owned.release();
      ++mine;
      ++pending_;
      by_fd_[fd] = Connection{fd, {}, peer, absl::Now()};
    }
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) Drop(fd, "epoll_ctl");
  }

  // The client's first message: opens its session on the device it names and answers with the
  // Welcome and the fast path's files, or with an Error (and closes the connection).
  void OpenSession(int fd, const service::PeerCredentials& peer, protocol::ControlMessage& msg) {
    protocol::CloseFds(&msg.fds);
    absl::StatusOr<service::SessionGrant> grant;
    if (msg.type != protocol::ControlType::kOpen) {
      grant = absl::InvalidArgumentError(
          absl::StrCat("control message type ", static_cast<uint16_t>(msg.type),
                       " before Open (the first "
                       "message of a connection opens its session)"));
    } else {
      const protocol::OpenMsg open = msg.As<protocol::OpenMsg>();
      absl::StatusOr<std::string> device = protocol::DeviceNameOf(open.device);
      if (!device.ok()) {
        grant = device.status();
      } else if (open.reserved != 0 || (open.flags & ~protocol::kOpenKnownFlags) != 0) {
        grant = absl::InvalidArgumentError("Open: reserved field or unknown flags are not 0");
      } else if ((open.flags & protocol::kOpenObserver) != 0) {
        grant = (open.flags & protocol::kOpenOwnContext) != 0
                    ? absl::InvalidArgumentError("Open: an observer has no device context")
                    : daemon_->OpenObserver(peer, *device);
      } else {
        grant = daemon_->OpenSession(peer, *device, (open.flags & protocol::kOpenOwnContext) != 0);
      }
    }
    if (!grant.ok()) {
      RC_LOG(INFO) << "control: refused pid=" << peer.pid << " uid=" << peer.uid
                   << " gid=" << peer.gid << ": " << grant.status();
      protocol::ErrorMsg e =
          protocol::MakeErrorMessage(grant.status(), 0, static_cast<uint16_t>(msg.type));
      (void)protocol::SendControlMessage(fd, &e, sizeof(e), -1);
      Drop(fd, "session refused");
      return;
    }
    // The fast path's files go out with the Welcome and are closed here either way; the
    // connection's copy of the grant owns none.
    const base::UniqueFd channel(grant->channel_fd);
    const base::UniqueFd state(grant->state_fd);
    const int files[2] = {channel.get(), state.get()};
    grant->channel_fd = grant->state_fd = -1;
    {
      base::MutexLock l(&mu_);
      auto it = by_fd_.find(fd);  // only this thread drops connections: it is there
      it->second.grant = *grant;
      by_session_[grant->id] = fd;
      Opened(peer.uid);
    }
    protocol::WelcomeMsg w = Welcome(*grant);
    absl::Status sent = protocol::SendControlMessage(
        fd, &w, sizeof(w), absl::MakeConstSpan(files, grant->observer ? 0 : 2));
    if (!sent.ok()) {
      Drop(fd, sent.ToString());
      return;
    }
    // Observers (regcachectl's read-only commands, readiness probes) log at debug level only.
    if (grant->observer) {
      RC_LOG(DEBUG) << "control: observer " << grant->id << " opened for pid=" << peer.pid
                    << " uid=" << peer.uid;
      return;
    }
    RC_LOG(INFO) << "control: session " << grant->id << " opened for pid=" << peer.pid
                 << " uid=" << peer.uid << " on " << grant->device.name
                 << (grant->admin ? " (admin)" : "");
  }

  // Closes the connections that did not send their Open within kOpenTimeout.
  void DropLateOpens() {
    std::vector<int> late;
    {
      base::ReaderMutexLock l(&mu_);
      if (pending_ == 0) return;
      const absl::Time now = absl::Now();
      for (const auto& [fd, conn] : by_fd_) {
        if (conn.grant.id == 0 && now - conn.accepted > protocol::kOpenTimeout) late.push_back(fd);
      }
    }
    for (int fd : late) Drop(fd, "no Open in time");
  }

  void Serve(int fd, uint32_t events) {
    absl::StatusOr<protocol::ControlMessage> msg =
        protocol::ReceiveControlMessage(fd, absl::ZeroDuration());
    if (!msg.ok()) {
      if (msg.status().code() == absl::StatusCode::kInvalidArgument) {
        // Garbage from the client: say what was wrong and keep the session.
        protocol::ErrorMsg e = protocol::MakeErrorMessage(msg.status(), 0, 0);
        if (!protocol::SendControlMessage(fd, &e, sizeof(e), -1).ok()) Drop(fd, "not reading");
        return;
      }
      if (msg.status().code() == absl::StatusCode::kDeadlineExceeded) {
        if (events & (EPOLLHUP | EPOLLERR)) Drop(fd, "hang-up");
        return;  // spurious wake-up
      }
      Drop(fd, msg.status().ToString());
      return;
    }
    service::SessionGrant grant;
    service::PeerCredentials peer;
    {
      base::ReaderMutexLock l(&mu_);
      auto it = by_fd_.find(fd);
      if (it == by_fd_.end()) {
        protocol::CloseFds(&msg->fds);
        return;
      }
      grant = it->second.grant;
      peer = it->second.peer;
    }
    if (grant.id == 0) {
      OpenSession(fd, peer, *msg);
      return;
    }
    absl::Status replied;
    switch (msg->type) {
      case protocol::ControlType::kHello: {
        protocol::CloseFds(&msg->fds);
        protocol::WelcomeMsg w = Welcome(grant);
        replied = protocol::SendControlMessage(fd, &w, sizeof(w), -1);
        break;
      }
      case protocol::ControlType::kImportFd:
        replied = ServeImportFd(fd, grant.id, *msg);
        break;
      case protocol::ControlType::kExportPd:
      case protocol::ControlType::kAttachRegion:
        replied = internal::ServeClientMemory(daemon_, fd, grant.id, *msg);
        break;
      default: {
        // Types only the daemon sends.
        uint16_t type = static_cast<uint16_t>(msg->type);
        protocol::CloseFds(&msg->fds);
        protocol::ErrorMsg e = protocol::MakeErrorMessage(
            absl::InvalidArgumentError(
                absl::StrCat("control message type ", type, " is not a client request")),
            0, type);
        replied = protocol::SendControlMessage(fd, &e, sizeof(e), -1);
        break;
      }
    }
    if (!replied.ok()) Drop(fd, replied.ToString());
  }

  // ImportFd: exactly one descriptor, which the daemon takes.
  absl::Status ServeImportFd(int fd, service::SessionId session, protocol::ControlMessage& msg) {
    protocol::ImportFdMsg m = msg.As<protocol::ImportFdMsg>();
    if (msg.fds.size() != 1) {
      const size_t count = msg.fds.size();  // before closing them
      protocol::CloseFds(&msg.fds);
      protocol::ErrorMsg e = protocol::MakeErrorMessage(
          absl::InvalidArgumentError(
              absl::StrCat("ImportFd carries ", count, " descriptors, want exactly 1")),
          m.nonce, m.header.type);
      return protocol::SendControlMessage(fd, &e, sizeof(e), -1);
    }
    int memfd = msg.fds[0];
    msg.fds.clear();
    absl::StatusOr<service::MemoryId> id =
        daemon_->ImportMemory(session, memfd, m.offset, m.length);  // takes the fd
    if (!id.ok()) {
      protocol::ErrorMsg e = protocol::MakeErrorMessage(id.status(), m.nonce, m.header.type);
      return protocol::SendControlMessage(fd, &e, sizeof(e), -1);
    }
    protocol::ImportedMsg r =
        protocol::MakeControlMessage<protocol::ImportedMsg>(protocol::ControlType::kImported);
    r.nonce = m.nonce;
    r.memory_id = *id;
    return protocol::SendControlMessage(fd, &r, sizeof(r), -1);
  }

  static protocol::WelcomeMsg Welcome(const service::SessionGrant& grant) {
    protocol::WelcomeMsg w =
        protocol::MakeControlMessage<protocol::WelcomeMsg>(protocol::ControlType::kWelcome);
    w.session_id = grant.id;
    std::memcpy(w.token, grant.token.data(), std::min(grant.token.size(), sizeof(w.token)));
    w.admin = grant.admin ? 1 : 0;
    w.observer = grant.observer ? 1 : 0;
    w.ring_channels = grant.ring_channels;
    w.grant_slots = grant.grant_slots;
    w.device_index = grant.device.index;
    w.port = grant.device.port;
    w.node_guid = grant.device.node_guid;
    w.key_bounds = static_cast<uint8_t>(grant.device.key_bounds);
    std::memcpy(w.gid, grant.device.gid.data(), sizeof(w.gid));
    (void)protocol::SetDeviceName(grant.device.name,
                                  w.device);  // device names fit: 64 bytes in ibverbs
    return w;
  }

  // A connection of `uid` left the pending state (its session opened, or it closed first).
  void Opened(uid_t uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    --pending_;
    auto it = pending_by_uid_.find(uid);
    if (it != pending_by_uid_.end() && --it->second == 0) pending_by_uid_.erase(it);
  }

  // Forgets the connection, closes it and its session.
  void Drop(int fd, absl::string_view why) {
    service::SessionId session = 0;
    bool observer = false;
    {
      base::MutexLock l(&mu_);
      auto it = by_fd_.find(fd);
      if (it == by_fd_.end()) return;
      session = it->second.grant.id;
      observer = it->second.grant.observer;
      if (session == 0) {
        Opened(it->second.peer.uid);
      } else {
        by_session_.erase(session);
      }
      by_fd_.erase(it);
    }
    epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    if (session == 0) {
      RC_LOG(INFO) << "control: connection closed before its session opened (" << why << ")";
      return;
    }
    if (observer) {  // it holds nothing: nothing to wait for
      absl::Status closed = daemon_->CloseSession(session);
      RC_LOG(DEBUG) << "control: observer " << session << " closed (" << why << ")"
                    << (closed.ok() ? "" : ": ") << closed.message();
      return;
    }
    // Off this thread: the close waits for the session's calls in flight.
    closer_.Close(session, std::string(why));
  }

  service::Daemon* const daemon_;
  internal::SessionCloser closer_{daemon_, kCloseWorkers};
  base::UniqueFd listen_fd_;  // closed by Stop, after the loop ended
  base::UniqueFd epoll_fd_;
  base::UniqueFd wake_fd_;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
  mutable base::Mutex mu_;
  absl::flat_hash_map<int, Connection> by_fd_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<service::SessionId, int> by_session_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // connections without a session yet
  absl::flat_hash_map<uid_t, size_t> pending_by_uid_ ABSL_GUARDED_BY(mu_);  // of those, by uid
};

}  // namespace

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(service::Daemon* daemon,
                                                                    const std::string& socket_dir) {
  std::string path = absl::StrCat(socket_dir, "/", protocol::kControlSocketName);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  base::UniqueFd lfd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!lfd) return base::ErrnoToStatus(errno, "control socket");
  unlink(path.c_str());  // a stale socket of a previous run
  if (bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return base::ErrnoToStatus(errno, absl::StrCat("bind ", path));
  }
  chmod(path.c_str(), 0666);
  if (listen(lfd.get(), 128) != 0) {
    return base::ErrnoToStatus(errno, absl::StrCat("listen ", path));
  }
  base::UniqueFd efd(epoll_create1(EPOLL_CLOEXEC));
  if (!efd) return base::ErrnoToStatus(errno, "control socket epoll");
  base::UniqueFd wfd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wfd) return base::ErrnoToStatus(errno, "control socket eventfd");
  for (int fd : {lfd.get(), wfd.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(efd.get(), EPOLL_CTL_ADD, fd, &ev);
  }
  RC_LOG(INFO) << "control socket listening on " << path;
  return std::unique_ptr<ControlServer>(
      new ControlServerImpl(daemon, std::move(lfd), std::move(efd), std::move(wfd)));
}

}  // namespace regcache::server