#include "server/internal/http_endpoint.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"

namespace regcache::server::internal {
namespace {

// When accept fails for want of descriptors or memory and no connection can be closed to make
// room, accepting rests this long.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);
// A connection shut down (deadline, eviction) that libmicrohttpd has not reported closed after
// this long is forgotten (its duplicate closed) all the same.
constexpr absl::Duration kForgetAfter = absl::Seconds(5);

// A connection handed to libmicrohttpd, as the admission policy sees it. `handle` is a
// duplicate of the socket: shutdown() through it ends the connection whatever libmicrohttpd is
// doing with it, and its number cannot be reused by another connection while it is open (the
// socket's own number, which libmicrohttpd closes, could).
struct Tracked {
  base::UniqueFd handle;
  absl::Time deadline;
  absl::Time last_progress;  // its accept, then its request complete and answered
  bool shut = false;         // shut down by us: no longer counted, never chosen again
};

class HttpEndpointImpl final : public HttpEndpoint {
 public:
  HttpEndpointImpl(const HttpEndpointOptions& options, std::function<std::string()> body,
                   base::UniqueFd listen_fd, base::UniqueFd wake_fd, uint16_t port)
      : options_(options),
        body_(std::move(body)),
        listen_fd_(std::move(listen_fd)),
        wake_fd_(std::move(wake_fd)),
        port_(port) {}
  ~HttpEndpointImpl() override {
    if (thread_.joinable()) {
      uint64_t one = 1;
      (void)!write(wake_fd_.get(), &one, sizeof(one));
      thread_.join();
    }
    if (mhd_ != nullptr) MHD_stop_daemon(mhd_);  // closes every connection it has
    base::MutexLock l(&mu_);
    tracked_.clear();
  }
  uint16_t port() const override { return port_; }

  // Starts libmicrohttpd's thread (epoll, no listening socket of its own) and the accepting one.
  absl::Status Run() {
    const unsigned timeout_s =
        static_cast<unsigned>(std::ceil(absl::ToDoubleSeconds(options_.deadline)));
    mhd_ = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        0, nullptr, nullptr, &HttpEndpointImpl::Answer, this,
        // Room for the evicted connections libmicrohttpd has not closed yet: ours is the bound.
        MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(2 * options_.max_connections + 1),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, MemoryLimit(), MHD_OPTION_CONNECTION_TIMEOUT,
        std::max(1u, timeout_s), MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_NOTIFY_CONNECTION,
        &HttpEndpointImpl::Notify, this, MHD_OPTION_EXTERNAL_LOGGER, &HttpEndpointImpl::Log,
        nullptr, MHD_OPTION_END);
    if (mhd_ == nullptr) return absl::InternalError("metrics: libmicrohttpd did not start");
    thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

 private:
  // libmicrohttpd's per-connection pool: it reads the head into (about) the first half and keeps
  // the rest for the parsed headers and the answer's head, so twice the head bound.
  size_t MemoryLimit() const { return 2 * options_.max_head_bytes; }

  void AcceptLoop() {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    absl::Time resume = absl::InfinitePast();
    for (;;) {
      const bool paused = absl::Now() < resume;
      fds[0].events = paused ? 0 : POLLIN;
      int n = poll(fds, 2, WaitMs(paused ? resume : absl::InfiniteFuture()));
      if (n < 0 && errno != EINTR) {
        RC_LOG(ERROR) << "metrics: poll: " << base::ErrnoName(errno) << "; not accepting";
        return;
      }
      if (fds[1].revents != 0) return;
      if (!paused && (fds[0].revents & POLLIN) != 0 && !AcceptAll()) {
        resume = absl::Now() + kAcceptPause;
      }
      Expire();
    }
  }

  // Milliseconds until the next deadline or `until` (rounded up), -1 for none.
  int WaitMs(absl::Time until) {
    absl::Time next = until;
    {
      base::MutexLock l(&mu_);
      for (const auto& [id, t] : tracked_) {
        next = std::min(next, t.shut ? t.deadline + kForgetAfter : t.deadline);
      }
    }
    if (next == absl::InfiniteFuture()) return -1;
    double ms = std::ceil(absl::ToDoubleMilliseconds(next - absl::Now()));
    return static_cast<int>(std::clamp(ms, 0.0, 60000.0));
  }

  // Accepts what is pending, at most max_connections per call so that a flood of connects
  // cannot starve the deadlines. False when accepting must rest (out of descriptors, nothing to
  // close for room).
  bool AcceptAll() {
    for (size_t i = 0; i < options_.max_connections; ++i) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return true;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          base::MutexLock l(&mu_);
          if (ShutIdlestLocked()) continue;
        }
        RC_LOG(WARNING) << "metrics: accept: " << base::ErrnoName(err);
        return false;
      }
      Admit(fd, addr, len);
    }
    return true;
  }

  // Hands `fd` to libmicrohttpd, first making room: at the bound, the connection that made no
  // progress for the longest is shut down. A newcomer is never refused.
  void Admit(int fd, const sockaddr_storage& addr, socklen_t len) {
    base::UniqueFd handle(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!handle) {
      RC_LOG(WARNING) << "metrics: dup: " << base::ErrnoName(errno);
      close(fd);
      return;
    }
    const absl::Time now = absl::Now();
    uint64_t id;
    {
      base::MutexLock l(&mu_);
      size_t open = 0;
      for (const auto& [k, t] : tracked_) open += t.shut ? 0 : 1;
      if (open >= options_.max_connections) ShutIdlestLocked();
      id = next_id_++;
      tracked_.emplace(id, Tracked{std::move(handle), now + options_.deadline, now});
      pending_[fd] = id;
    }
    // Outside the lock: libmicrohttpd may report the connection started from this call.
    if (MHD_add_connection(mhd_, fd, reinterpret_cast<const sockaddr*>(&addr), len) != MHD_YES) {
      RC_LOG(WARNING) << "metrics: libmicrohttpd refused a connection: " << base::ErrnoName(errno);
      base::MutexLock l(&mu_);
      if (auto it = pending_.find(fd); it != pending_.end() && it->second == id) pending_.erase(it);
      tracked_.erase(id);
    }
  }

  // Shuts down the open connection with the oldest progress; false when there is none.
  bool ShutIdlestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Tracked* idlest = nullptr;
    for (auto& [id, t] : tracked_) {
      if (!t.shut && (idlest == nullptr || t.last_progress < idlest->last_progress)) idlest = &t;
    }
    if (idlest == nullptr) return false;
    Shut(*idlest);
    return true;
  }

  static void Shut(Tracked& t) {
    (void)shutdown(t.handle.get(), SHUT_RDWR);
    t.shut = true;
  }

  // Connections past their deadline are shut down; those shut long ago and never reported
  // closed are forgotten.
  void Expire() {
    const absl::Time now = absl::Now();
    base::MutexLock l(&mu_);
    for (auto it = tracked_.begin(); it != tracked_.end();) {
      Tracked& t = it->second;
      if (t.shut && now >= t.deadline + kForgetAfter) {
        tracked_.erase(it++);
        continue;
      }
      if (!t.shut && now >= t.deadline) Shut(t);
      ++it;
    }
  }

  // libmicrohttpd's thread: a connection starts (it learns its id) or closes (forgotten here).
  static void Notify(void* cls, MHD_Connection* c, void** socket_context,
                     MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<HttpEndpointImpl*>(cls);
    base::MutexLock l(&self->mu_);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      auto it = info != nullptr ? self->pending_.find(info->connect_fd) : self->pending_.end();
      if (it == self->pending_.end()) {
        *socket_context = nullptr;
        return;
      }
      *socket_context = reinterpret_cast<void*>(static_cast<uintptr_t>(it->second));
      self->pending_.erase(it);
      return;
    }
    self->tracked_.erase(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*socket_context)));
  }

  // The answer to one request. Called first when the head is complete, then with any body,
  // then once more with none: only then does it answer.
  static MHD_Result Answer(void* cls, MHD_Connection* c, const char* url, const char* method,
                           const char* /*version*/, const char* /*upload_data*/,
                           size_t* upload_data_size, void** request) {
    auto* self = static_cast<HttpEndpointImpl*>(cls);
    static int head_seen;
    if (*request == nullptr) {
      *request = &head_seen;
      return MHD_YES;
    }
    if (*upload_data_size != 0) {  // a body (its headers announced it): read and dropped
      *upload_data_size = 0;
      return MHD_YES;
    }
    self->Progress(c);
    if (absl::string_view(method) != MHD_HTTP_METHOD_GET) {
      return Reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", "text/plain", true);
    }
    if (HasBodyHeaders(c)) {
      return Reply(c, MHD_HTTP_BAD_REQUEST, "a GET has no body\n", "text/plain", false);
    }
    if (const char* why = BadHeaders(c); why != nullptr) {
      return Reply(c, MHD_HTTP_BAD_REQUEST, why, "text/plain", false);
    }
    absl::string_view path = url;
    // The absolute form (a proxy's): the path after the authority.
    if (absl::StartsWithIgnoreCase(path, "http://")) {
      const size_t slash = path.find('/', 7);
      path = slash == absl::string_view::npos ? "/" : path.substr(slash);
    }
    if (path != self->options_.path) {
      return Reply(c, MHD_HTTP_NOT_FOUND, "not found\n", "text/plain", false);
    }
    const std::string body = self->body_();
    return Reply(c, MHD_HTTP_OK, body, self->options_.content_type.c_str(), false);
  }

  // What libmicrohttpd lets through that a scraper never sends: a NUL inside a header, more
  // than one Host. nullptr when the headers are fine.
  static const char* BadHeaders(MHD_Connection* c) {
    struct Seen {
      int hosts = 0;
      bool nul = false;
    } seen;
    MHD_get_connection_values_n(
        c, MHD_HEADER_KIND,
        [](void* cls, MHD_ValueKind, const char* key, size_t key_size, const char* value,
           size_t value_size) {
          auto* s = static_cast<Seen*>(cls);
          const absl::string_view k(key, key_size), v(value, value_size);
          if (k.find('\0') != absl::string_view::npos || v.find('\0') != absl::string_view::npos) {
            s->nul = true;
          }
          if (absl::EqualsIgnoreCase(k, MHD_HTTP_HEADER_HOST)) ++s->hosts;
          return MHD_YES;
        },
        &seen);
    if (seen.nul) return "a NUL in a header\n";
    if (seen.hosts > 1) return "more than one Host\n";
    return nullptr;
  }

  static bool HasBodyHeaders(MHD_Connection* c) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH) !=
               nullptr ||
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) !=
               nullptr;
  }

  // The request is complete: its connection counts as making progress.
  void Progress(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info == nullptr) return;
    const auto id = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(info->socket_context));
    base::MutexLock l(&mu_);
    if (auto it = tracked_.find(id); it != tracked_.end()) it->second.last_progress = absl::Now();
  }

  // One answer, and the connection closes after it.
  static MHD_Result Reply(MHD_Connection* c, unsigned status, absl::string_view body,
                          const char* content_type, bool allow_get) {
    MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                      MHD_RESPMEM_MUST_COPY);
    if (r == nullptr) return MHD_NO;
    bool ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) == MHD_YES &&
              MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close") == MHD_YES;
    if (allow_get) ok = ok && MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET") == MHD_YES;
    const MHD_Result queued = ok ? MHD_queue_response(c, status, r) : MHD_NO;
    MHD_destroy_response(r);
    return queued;
  }

  static void Log(void* /*cls*/, const char* format, va_list ap) {
    char line[512];
    std::vsnprintf(line, sizeof(line), format, ap);
    absl::string_view text(line);
    while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    RC_LOG(DEBUG) << "metrics: libmicrohttpd: " << text;
  }

  const HttpEndpointOptions options_;
  const std::function<std::string()> body_;
  const base::UniqueFd listen_fd_;
  const base::UniqueFd wake_fd_;
  const uint16_t port_;
  MHD_Daemon* mhd_ = nullptr;
  base::Mutex mu_;
  absl::flat_hash_map<uint64_t, Tracked> tracked_ ABSL_GUARDED_BY(mu_);
  // Sockets handed to libmicrohttpd whose start it has not reported yet: their ids.
  absl::flat_hash_map<int, uint64_t> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread thread_;
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
  base::UniqueFd wake_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd) return base::ErrnoToStatus(errno, "metrics: eventfd");
  auto endpoint = std::make_unique<HttpEndpointImpl>(
      options, std::move(body), std::move(listening->first), std::move(wake_fd), listening->second);
  RETURN_IF_ERROR(endpoint->Run());
  return std::unique_ptr<HttpEndpoint>(std::move(endpoint));
}

}  // namespace regcache::server::internal
