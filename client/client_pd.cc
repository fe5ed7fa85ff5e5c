// Client::ImportPd and Client::AttachRegion: the session's PD in this process, and memory this
// process registered in it attached to the session (docs/client_memory.md).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/internal/client_impl.h"

namespace regcache::api::internal {
namespace {

absl::Status VerbsError(int err, absl::string_view call) {
  const std::string what = absl::StrCat(call, ": ", std::strerror(err));
  if (err == EOPNOTSUPP) {
    return absl::UnimplementedError(
        absl::StrCat(what, " (this host's provider cannot import a device context)"));
  }
  if (err == ENOENT || err == EINVAL) return absl::NotFoundError(what);
  if (err == ENOMEM) return absl::ResourceExhaustedError(what);
  return absl::InternalError(what);
}

}  // namespace

absl::StatusOr<ImportedPd> ClientImpl::ImportPd() {
  if (closed_.load()) return absl::FailedPreconditionError("client closed");
  base::MutexLock pl(&pd_mu_);
  if (pd_.pd != nullptr) return pd_;
  protocol::ExportPdMsg m =
      protocol::MakeControlMessage<protocol::ExportPdMsg>(protocol::ControlType::kExportPd);
  m.nonce = next_nonce_.fetch_add(1);
  {
    base::MutexLock l(&send_mu_);
    RETURN_IF_ERROR(protocol::SendControlMessage(control_fd_, &m, sizeof(m), -1));
  }
  ASSIGN_OR_RETURN(PdExportReply e, TakePdExport(m.nonce));
  // ibv_import_device owns the fd from its success on (ibv_close_device closes it).
  ibv_context* ctx = ibv_import_device(e.fd);
  if (ctx == nullptr) {
    const int err = errno;
    close(e.fd);
    return VerbsError(err, "ibv_import_device");
  }
  ibv_pd* pd = ibv_import_pd(ctx, e.pd_handle);
  if (pd == nullptr) {
    const int err = errno;
    ibv_close_device(ctx);
    return VerbsError(err, absl::StrCat("ibv_import_pd of handle ", e.pd_handle));
  }
  pd_ = ImportedPd{ctx, pd, e.pd_handle};
  return pd_;
}

void ClientImpl::ReleasePd() {
  base::MutexLock pl(&pd_mu_);
  if (pd_.pd != nullptr) ibv_unimport_pd(pd_.pd);
  if (pd_.context != nullptr) ibv_close_device(pd_.context);
  pd_ = ImportedPd{};
}

absl::StatusOr<Memory> ClientImpl::AttachRegion(const ibv_mr* mr, const void* addr, uint64_t length,
                                                uint32_t access) {
  if (closed_.load()) return absl::FailedPreconditionError("client closed");
  if (mr == nullptr) return absl::InvalidArgumentError("AttachRegion: mr is null");
  protocol::AttachRegionMsg m =
      protocol::MakeControlMessage<protocol::AttachRegionMsg>(protocol::ControlType::kAttachRegion);
  m.nonce = next_nonce_.fetch_add(1);
  m.mr_handle = mr->handle;
  m.access = access;
  m.region_addr = reinterpret_cast<uint64_t>(mr->addr);
  m.region_length = mr->length;
  m.va = addr == nullptr ? m.region_addr : reinterpret_cast<uint64_t>(addr);
  m.length = addr == nullptr ? m.region_length : length;
  {
    base::MutexLock l(&send_mu_);
    RETURN_IF_ERROR(protocol::SendControlMessage(control_fd_, &m, sizeof(m), -1));
  }
  ASSIGN_OR_RETURN(uint64_t id, TakeImported(m.nonce));
  // Not in maps_: this library never unmaps it.
  return Memory{id, reinterpret_cast<void*>(m.va), m.length};
}

}  // namespace regcache::api::internal
