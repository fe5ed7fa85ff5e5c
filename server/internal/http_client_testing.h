// Test-only: a plain TCP client for the HTTP endpoint's tests (server/internal/http_endpoint.h),
// on 127.0.0.1 only. Blocking sockets whose every read and write is bounded by kIoTimeout, so a
// test that goes wrong fails instead of hanging; no result depends on how long anything takes.
#ifndef REGCACHE_SERVER_INTERNAL_HTTP_CLIENT_TESTING_H_
#define REGCACHE_SERVER_INTERNAL_HTTP_CLIENT_TESTING_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace regcache::server::testing {

inline constexpr int kIoTimeoutSeconds = 30;

// A connected socket to 127.0.0.1:`port`, or -1. `rcvbuf` > 0: the receive buffer asked for
// (before connecting, so that the window the server sees is small).
inline int ConnectLoopback(uint16_t port, int rcvbuf = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{kIoTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `bytes`; false on an error or the timeout.
inline bool SendAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until EOF (or an error or the timeout, which leave what was read).
inline std::string ReadToEof(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// One request on a new connection; the whole answer (empty when the connection failed).
inline std::string Exchange(uint16_t port, absl::string_view request) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  std::string answer = SendAll(fd, request) ? ReadToEof(fd) : "";
  close(fd);
  return answer;
}

// Whether the server still holds `fd`'s connection open: nothing (no EOF, no reset) is waiting.
inline bool StillOpen(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// The answer's body: what follows the first empty line.
inline std::string BodyOf(const std::string& answer) {
  size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

}  // namespace regcache::server::testing
#endif  // REGCACHE_SERVER_INTERNAL_HTTP_CLIENT_TESTING_H_
