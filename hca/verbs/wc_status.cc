#include "hca/verbs/wc_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace regcache::hca::verbs {

Syndrome SyndromeForWc(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return Syndrome::kNone;
    case IBV_WC_LOC_LEN_ERR:
      return Syndrome::kLocalLength;
    case IBV_WC_LOC_QP_OP_ERR:
      return Syndrome::kLocalQpOp;
    case IBV_WC_LOC_PROT_ERR:
      return Syndrome::kLocalProt;
    case IBV_WC_WR_FLUSH_ERR:
      return Syndrome::kWrFlush;
    case IBV_WC_MW_BIND_ERR:
      return Syndrome::kMwBind;
    case IBV_WC_BAD_RESP_ERR:
      return Syndrome::kBadResp;
    case IBV_WC_LOC_ACCESS_ERR:
      return Syndrome::kLocalAccess;
    case IBV_WC_REM_INV_REQ_ERR:
      return Syndrome::kRemoteInvalReq;
    case IBV_WC_REM_ACCESS_ERR:
      return Syndrome::kRemoteAccess;
    case IBV_WC_REM_OP_ERR:
      return Syndrome::kRemoteOp;
    case IBV_WC_RETRY_EXC_ERR:
      return static_cast<Syndrome>(0x15);
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return static_cast<Syndrome>(0x16);
    case IBV_WC_REM_ABORT_ERR:
      return static_cast<Syndrome>(0x22);
    default:
      return Syndrome::kLocalQpOp;
  }
}

absl::Status StatusForWc(ibv_wc_status status, absl::string_view what) {
  if (status == IBV_WC_SUCCESS) return absl::OkStatus();
  return DeviceError(SyndromeForWc(status),
                     absl::StrFormat("%s: %s", ibv_wc_status_str(status), what));
}

absl::Status ErrnoStatus(int err, absl::string_view what) {
  const std::string msg = absl::StrFormat("%s: %s (errno %d)", what, std::strerror(err), err);
  switch (err) {
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    case ENOMEM:
    case ENOSPC:
    case EAGAIN:
      return absl::ResourceExhaustedError(msg);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(msg);
    case EOPNOTSUPP:
    case ENOSYS:
      return absl::UnimplementedError(msg);
    case EBUSY:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace regcache::hca::verbs
