#include "server/internal/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/unique_fd.h"

namespace regcache::server::internal {

absl::Status SdNotifyTo(absl::string_view socket, absl::string_view state) {
  if (state.empty()) return absl::InvalidArgumentError("sd_notify: empty state");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool abstract = !socket.empty() && socket[0] == '@';
  if (!abstract && (socket.empty() || socket[0] != '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("sd_notify: NOTIFY_SOCKET '", socket, "' is neither a path nor @name"));
  }
  // A path needs its terminating NUL in sun_path; an abstract name is its bytes after a NUL.
  if (socket.size() + (abstract ? 0 : 1) > sizeof(addr.sun_path) || socket.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("sd_notify: bad NOTIFY_SOCKET length ", socket.size()));
  }
  std::memcpy(addr.sun_path, socket.data(), socket.size());
  if (abstract) addr.sun_path[0] = '\0';
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size() + (abstract ? 0 : 1));
  const base::UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return base::ErrnoToStatus(errno, "sd_notify: socket");
  const ssize_t sent = ::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = errno;
  if (sent < 0) return base::ErrnoToStatus(err, absl::StrCat("sd_notify: sendto ", socket));
  if (static_cast<size_t>(sent) != state.size()) {
    return absl::UnavailableError("sd_notify: datagram truncated");
  }
  return absl::OkStatus();
}

absl::Status SdNotify(absl::string_view state) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || socket[0] == '\0') return absl::OkStatus();
  return SdNotifyTo(socket, state);
}

void NotifyServiceManager(absl::string_view state) {
  if (absl::Status s = SdNotify(state); !s.ok()) {
    RC_LOG(WARNING) << "regcached: telling the service manager '" << state << "': " << s;
  }
}

}  // namespace regcache::server::internal
