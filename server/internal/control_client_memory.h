// The control socket's requests for clients' own PDs and memory (docs/client_memory.md):
// ExportPd (the session's PD, its fd by SCM_RIGHTS) and AttachRegion. Internal to server/: the
// control server (server/control_server.cc) calls it.
#ifndef REGCACHE_SERVER_INTERNAL_CONTROL_CLIENT_MEMORY_H_
#define REGCACHE_SERVER_INTERNAL_CONTROL_CLIENT_MEMORY_H_

#include "absl/status/status.h"
#include "protocol/control_protocol.h"
#include "service/daemon.h"

namespace regcache::server::internal {

// Answers `msg` (a kExportPd or kAttachRegion from the client of `session` on `sock`): PdExport
// with the fd, Imported, or Error naming the nonce. Closes any fd that came with `msg` (neither
// request carries one). Returns the status of sending the answer (an error drops the client).
absl::Status ServeClientMemory(service::Daemon* daemon, int sock, service::SessionId session,
                               protocol::ControlMessage& msg);

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_CONTROL_CLIENT_MEMORY_H_
