#include "server/internal/http_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/unique_fd.h"
#include "server/http_request.h"

namespace regcache::server::internal {
namespace {

// The epoll data of the two descriptors that are not connections; connections count from 2,
// never reused, so that an event for a connection closed earlier in the same batch cannot reach
// a new one that got its descriptor number.
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr int kMaxEvents = 64;
constexpr size_t kReadChunk = 4096;
// After its answer a connection lingers (reading and dropping) at most this long.
constexpr absl::Duration kLingerTime = absl::Seconds(2);
// When accept fails for want of descriptors or memory and no connection can be closed to make
// room, the listening socket rests this long (it is level-triggered: it would spin).
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

struct Connection {
  enum class Phase { kReading, kWriting, kLingering };
  Connection(int fd, size_t max_head_bytes, absl::Time deadline)
      : fd(fd), parser(max_head_bytes), deadline(deadline) {}
  int fd;
  Phase phase = Phase::kReading;
  HttpRequestParser parser;
  std::string out;  // the answer
  size_t sent = 0;
  size_t lingered = 0;
  absl::Time deadline;
  uint64_t last_progress = 0;  // the endpoint's progress clock at its last byte in or out
};

// Every member is used by the serving thread only (the constructor and the destructor run
// before it starts and after it ended).
class HttpEndpointImpl final : public HttpEndpoint {
 public:
  HttpEndpointImpl(const HttpEndpointOptions& options, std::function<std::string()> body,
                   base::UniqueFd listen_fd, base::UniqueFd epoll_fd, base::UniqueFd wake_fd,
                   uint16_t port)
      : options_(options),
        body_(std::move(body)),
        listen_fd_(std::move(listen_fd)),
        epoll_fd_(std::move(epoll_fd)),
        wake_fd_(std::move(wake_fd)),
        port_(port) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~HttpEndpointImpl() override {
    uint64_t one = 1;
    (void)!write(wake_fd_.get(), &one, sizeof(one));
    thread_.join();
    for (auto& [id, c] : conns_) close(c.fd);
  }
  uint16_t port() const override { return port_; }

 private:
  void Loop() {
    epoll_event events[kMaxEvents];
    for (;;) {
      int n = epoll_wait(epoll_fd_.get(), events, kMaxEvents, WaitMs());
      if (n < 0 && errno != EINTR) {
        RC_LOG(ERROR) << "metrics: epoll_wait: " << base::ErrnoName(errno) << "; not serving";
        return;
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kWakeId) return;
        if (id == kListenId) {
          AcceptAll();
        } else if (auto it = conns_.find(id); it != conns_.end()) {
          Serve(id, it->second, events[i].events);
        }
      }
      ExpireDeadlines();
    }
  }

  // Milliseconds until the next deadline (rounded up), -1 for none.
  int WaitMs() const {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [id, c] : conns_) next = std::min(next, c.deadline);
    if (accept_paused_) next = std::min(next, accept_resume_);
    if (next == absl::InfiniteFuture()) return -1;
    double ms = std::ceil(absl::ToDoubleMilliseconds(next - absl::Now()));
    return static_cast<int>(std::clamp(ms, 0.0, 60000.0));
  }

  // Accepts what is pending, at most max_connections per call so that a flood of connects
  // cannot keep the thread from the connections it has.
  void AcceptAll() {
    for (size_t i = 0; i < options_.max_connections; ++i) {
      int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        if ((err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) &&
            !conns_.empty()) {
          CloseIdlest();
          continue;
        }
        RC_LOG(WARNING) << "metrics: accept: " << base::ErrnoName(err);
        PauseAccept();
        return;
      }
      if (conns_.size() >= options_.max_connections) CloseIdlest();
      const uint64_t id = next_id_++;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = id;
      if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        continue;
      }
      auto [it, inserted] =
          conns_.try_emplace(id, fd, options_.max_head_bytes, absl::Now() + options_.deadline);
      it->second.last_progress = ++progress_clock_;
    }
  }

  void PauseAccept() {
    epoll_event ev{};
    ev.data.u64 = kListenId;
    (void)epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev);
    accept_paused_ = true;
    accept_resume_ = absl::Now() + kAcceptPause;
  }

  void Serve(uint64_t id, Connection& c, uint32_t events) {
    switch (c.phase) {
      case Connection::Phase::kReading:
        ReadRequest(id, c);
        return;
      case Connection::Phase::kWriting:
        if ((events & EPOLLERR) != 0) {
          Close(id);
        } else {
          WriteAnswer(id, c);
        }
        return;
      case Connection::Phase::kLingering:
        Linger(id, c);
        return;
    }
  }

  // One read: the request's bytes go through the parser; once its head is complete (or
  // refused) the answer is made and sent.
  void ReadRequest(uint64_t id, Connection& c) {
    char buf[kReadChunk];
    ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {  // gone before its request ended, or an error
      Close(id);
      return;
    }
    c.last_progress = ++progress_clock_;
    if (c.parser.Feed(absl::string_view(buf, static_cast<size_t>(n))) ==
        HttpRequestParser::State::kMore) {
      return;
    }
    c.out = Answer(c.parser);
    c.phase = Connection::Phase::kWriting;
    if (!Watch(id, c.fd, EPOLLOUT)) return;
    WriteAnswer(id, c);
  }

  std::string Answer(const HttpRequestParser& p) const {
    if (p.state() == HttpRequestParser::State::kBad) {
      return HttpResponse(p.error_status(), "text/plain", absl::StrCat(p.error(), "\n"));
    }
    if (p.path() != options_.path) {
      return HttpResponse(404, "text/plain", absl::StrCat("only ", options_.path, " is here\n"));
    }
    if (p.method() != "GET") {
      return HttpResponse(405, "text/plain", absl::StrCat("only GET, not ", p.method(), "\n"));
    }
    if (p.has_body()) return HttpResponse(400, "text/plain", "a GET carries no body\n");
    return HttpResponse(200, options_.content_type, body_());
  }

  // Sends up to kWriteBurst bytes; once all is sent, shuts the sending side down and lingers.
  void WriteAnswer(uint64_t id, Connection& c) {
    size_t burst = 0;
    while (c.sent < c.out.size() && burst < kWriteBurst) {
      const size_t len = std::min(c.out.size() - c.sent, kWriteBurst - burst);
      ssize_t n = send(c.fd, c.out.data() + c.sent, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT brings it back
        Close(id);                                            // the client went away mid-answer
        return;
      }
      c.sent += static_cast<size_t>(n);
      burst += static_cast<size_t>(n);
      c.last_progress = ++progress_clock_;
    }
    if (c.sent < c.out.size()) return;  // burst spent: level-triggered EPOLLOUT comes again
    std::string().swap(c.out);
    shutdown(c.fd, SHUT_WR);
    c.phase = Connection::Phase::kLingering;
    c.deadline = std::min(c.deadline, absl::Now() + kLingerTime);
    Watch(id, c.fd, EPOLLIN | EPOLLRDHUP);
  }

  void Linger(uint64_t id, Connection& c) {
    char buf[kReadChunk];
    ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n > 0) {
      c.lingered += static_cast<size_t>(n);
      if (c.lingered <= kLingerBytes) return;
    }
    Close(id);
  }

  // Changes what a connection waits for; closes it if epoll refuses (false).
  bool Watch(uint64_t id, int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, fd, &ev) == 0) return true;
    Close(id);
    return false;
  }

  void ExpireDeadlines() {
    const absl::Time now = absl::Now();
    if (accept_paused_ && now >= accept_resume_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      (void)epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev);
      accept_paused_ = false;
    }
    std::vector<uint64_t> late;
    for (const auto& [id, c] : conns_) {
      if (c.deadline <= now) late.push_back(id);
    }
    for (uint64_t id : late) Close(id);
  }

  // Closes the connection that has gone longest without a byte in or out.
  void CloseIdlest() {
    auto idlest = std::min_element(conns_.begin(), conns_.end(), [](const auto& a, const auto& b) {
      return a.second.last_progress < b.second.last_progress;
    });
    if (idlest != conns_.end()) Close(idlest->first);
  }

  void Close(uint64_t id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    close(it->second.fd);  // leaves the epoll set with it
    conns_.erase(it);
  }

  const HttpEndpointOptions options_;
  const std::function<std::string()> body_;
  const base::UniqueFd listen_fd_;
  const base::UniqueFd epoll_fd_;
  const base::UniqueFd wake_fd_;
  const uint16_t port_;
  absl::flat_hash_map<uint64_t, Connection> conns_;
  uint64_t next_id_ = 2;
  uint64_t progress_clock_ = 0;
  bool accept_paused_ = false;
  absl::Time accept_resume_;
  std::thread thread_;  // last: started once everything above is built
};

// Binds and listens on `host`:`port`; returns the socket and the port it got.
absl::StatusOr<std::pair<base::UniqueFd, uint16_t>> Listen(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int err = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); err != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot resolve '", host, "': ", gai_strerror(err)));
  }
  const addrinfo& a = *found;
  base::UniqueFd fd(socket(a.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    const int err = errno;
    freeaddrinfo(found);
    return base::ErrnoToStatus(err, "metrics: socket");
  }
  int one = 1;
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // restarts in TIME_WAIT
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  const bool ok = bind(fd.get(), a.ai_addr, a.ai_addrlen) == 0 &&
                  listen(fd.get(), SOMAXCONN) == 0 &&
                  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (!ok) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", base::ErrnoName(err)));
  }
  const uint16_t got = sa.ss_family == AF_INET6
                           ? ntohs(reinterpret_cast<const sockaddr_in6*>(&sa)->sin6_port)
                           : ntohs(reinterpret_cast<const sockaddr_in*>(&sa)->sin_port);
  return std::make_pair(std::move(fd), got);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    uint16_t port, const HttpEndpointOptions& options, std::function<std::string()> body) {
  if (options.max_connections == 0 || options.max_head_bytes == 0) {
    return absl::InvalidArgumentError("http endpoint: max_connections and max_head_bytes > 0");
  }
  absl::StatusOr<std::pair<base::UniqueFd, uint16_t>> listening = Listen(options.host, port);
  if (!listening.ok()) return listening.status();
  base::UniqueFd listen_fd = std::move(listening->first);
  base::UniqueFd epoll_fd(epoll_create1(EPOLL_CLOEXEC));
  base::UniqueFd wake_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  bool ok =
      epoll_fd && wake_fd && epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listen_fd.get(), &ev) == 0;
  ev.data.u64 = kWakeId;
  ok = ok && epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, wake_fd.get(), &ev) == 0;
  if (!ok) return base::ErrnoToStatus(errno, "metrics: epoll");  // the fds close themselves
  return std::unique_ptr<HttpEndpoint>(std::make_unique<HttpEndpointImpl>(
      options, std::move(body), std::move(listen_fd), std::move(epoll_fd), std::move(wake_fd),
      listening->second));
}

}  // namespace regcache::server::internal
