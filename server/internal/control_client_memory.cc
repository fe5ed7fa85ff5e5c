#include "server/internal/control_client_memory.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"

namespace regcache::server::internal {
namespace {

absl::Status ReplyError(int sock, const absl::Status& status, uint64_t nonce,
                        protocol::ControlType type) {
  protocol::ErrorMsg e = protocol::MakeErrorMessage(status, nonce, static_cast<uint16_t>(type));
  return protocol::SendControlMessage(sock, &e, sizeof(e), -1);
}

absl::Status ServeExportPd(service::Daemon* daemon, int sock, service::SessionId session,
                           const protocol::ExportPdMsg& m) {
  absl::StatusOr<hca::PdExport> e = daemon->ExportPd(session);
  if (!e.ok()) return ReplyError(sock, e.status(), m.nonce, protocol::ControlType::kExportPd);
  // Closed on return: the client has its own copy then (or nothing, when the send failed).
  const base::UniqueFd cmd_fd(e->cmd_fd);
  protocol::PdExportMsg r =
      protocol::MakeControlMessage<protocol::PdExportMsg>(protocol::ControlType::kPdExport);
  r.nonce = m.nonce;
  r.pd_handle = e->pd_handle;
  return protocol::SendControlMessage(sock, &r, sizeof(r), cmd_fd.get());
}

absl::Status ServeAttachRegion(service::Daemon* daemon, int sock, service::SessionId session,
                               const protocol::AttachRegionMsg& m) {
  service::ClientRegion region;
  region.handle = m.mr_handle;
  region.region_addr = m.region_addr;
  region.region_length = m.region_length;
  region.va = m.va;
  region.length = m.length;
  region.access = m.access;  // the cache refuses unknown bits, naming them
  absl::StatusOr<service::MemoryId> id = daemon->AttachRegion(session, region);
  if (!id.ok()) return ReplyError(sock, id.status(), m.nonce, protocol::ControlType::kAttachRegion);
  protocol::ImportedMsg r =
      protocol::MakeControlMessage<protocol::ImportedMsg>(protocol::ControlType::kImported);
  r.nonce = m.nonce;
  r.memory_id = *id;
  return protocol::SendControlMessage(sock, &r, sizeof(r), -1);
}

}  // namespace

absl::Status ServeClientMemory(service::Daemon* daemon, int sock, service::SessionId session,
                               protocol::ControlMessage& msg) {
  const size_t fds = msg.fds.size();
  protocol::CloseFds(&msg.fds);
  if (msg.type == protocol::ControlType::kExportPd) {
    protocol::ExportPdMsg m = msg.As<protocol::ExportPdMsg>();
    if (fds != 0) {
      return ReplyError(sock,
                        absl::InvalidArgumentError(
                            absl::StrCat("ExportPd carries ", fds, " descriptors, want none")),
                        m.nonce, msg.type);
    }
    return ServeExportPd(daemon, sock, session, m);
  }
  protocol::AttachRegionMsg m = msg.As<protocol::AttachRegionMsg>();
  if (fds != 0) {
    return ReplyError(sock,
                      absl::InvalidArgumentError(
                          absl::StrCat("AttachRegion carries ", fds, " descriptors, want none")),
                      m.nonce, msg.type);
  }
  return ServeAttachRegion(daemon, sock, session, m);
}

}  // namespace regcache::server::internal
