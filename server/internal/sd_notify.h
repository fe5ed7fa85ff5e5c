// The service manager's readiness protocol (systemd's sd_notify(3), "Type=notify" units): the
// daemon tells systemd that it is ready to serve (READY=1), so units ordered after it start only
// then, and that it is stopping (STOPPING=1) when it drains. Internal to server/ (regcached_main).
//
// The protocol is one datagram of newline-separated VAR=value assignments on the AF_UNIX socket
// named by $NOTIFY_SOCKET: a filesystem path, or an abstract name when it starts with '@'. It is
// implemented here rather than through libsystemd (libsystemd-dev) because it is this small and
// stable, and the daemon also runs where systemd is not (containers): a dependency on the library
// would be carried by every image for these few lines. Without $NOTIFY_SOCKET nothing is sent.
#ifndef REGCACHE_SERVER_INTERNAL_SD_NOTIFY_H_
#define REGCACHE_SERVER_INTERNAL_SD_NOTIFY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace regcache::server::internal {

// Sends `state` (e.g. "READY=1\nSTATUS=serving") as one datagram to `socket`: an absolute path,
// or "@name" for the abstract name "name". kInvalidArgument for an empty `state` or a `socket`
// that is neither (or too long for a unix address); the errno's code when sending fails (e.g.
// kNotFound / kUnavailable when nothing listens there).
absl::Status SdNotifyTo(absl::string_view socket, absl::string_view state);

// SdNotifyTo($NOTIFY_SOCKET, state); OK without sending when NOTIFY_SOCKET is unset or empty
// (not started by a service manager that waits for it).
absl::Status SdNotify(absl::string_view state);

// SdNotify, logging a failure as a warning: readiness is advisory, the daemon serves anyway.
void NotifyServiceManager(absl::string_view state);

}  // namespace regcache::server::internal

#endif  // REGCACHE_SERVER_INTERNAL_SD_NOTIFY_H_
