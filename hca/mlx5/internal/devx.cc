#include "hca/mlx5/internal/devx.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "hca/verbs/wc_status.h"
#include "umr/mailbox.h"
#include "umr/prm.h"

namespace regcache::hca::mlx5 {
namespace {

struct StatusInfo {
  uint8_t value;
  const char* name;
  absl::StatusCode code;
};
constexpr StatusInfo kStatuses[] = {
    {0x01, "INTERNAL_ERR", absl::StatusCode::kInternal},
    {0x02, "BAD_OP", absl::StatusCode::kUnimplemented},
    {0x03, "BAD_PARAM", absl::StatusCode::kInvalidArgument},
    {0x04, "BAD_SYS_STATE", absl::StatusCode::kFailedPrecondition},
    {0x05, "BAD_RESOURCE", absl::StatusCode::kNotFound},
    {0x06, "RESOURCE_BUSY", absl::StatusCode::kFailedPrecondition},
    {0x08, "EXCEED_LIM", absl::StatusCode::kResourceExhausted},
    {0x09, "BAD_RES_STATE", absl::StatusCode::kFailedPrecondition},
    {0x0a, "BAD_INDEX", absl::StatusCode::kNotFound},
    {0x0f, "NO_RESOURCES", absl::StatusCode::kResourceExhausted},
    {0x50, "BAD_INPUT_LEN", absl::StatusCode::kInvalidArgument},
    {0x51, "BAD_OUTPUT_LEN", absl::StatusCode::kInternal},
};

const StatusInfo* FindStatus(uint8_t status) {
  for (const StatusInfo& s : kStatuses) {
    if (s.value == status) return &s;
  }
  return nullptr;
}

absl::Status Unavailable(int err, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      "mlx5: ", what, " refused (", verbs::ErrnoStatus(err, what).message(),
      "): this context has no DevX (kernel without mlx5 DevX, or DevX not permitted here)"));
}

absl::StatusOr<std::vector<uint8_t>> QueryCap(ibv_context* ctx, uint16_t cap_type,
                                              const char* what) {
  umr::QueryHcaCapIn q;
  q.cap_type = cap_type;
  q.current = true;
  ASSIGN_OR_RETURN(const umr::Mailbox16 in, umr::EncodeQueryHcaCapIn(q));
  std::vector<uint8_t> out(umr::kQueryHcaCapOutBytes, 0);
  errno = 0;
  const int rc = mlx5dv_devx_general_cmd(ctx, in.data(), in.size(), out.data(), out.size());
  // rdma-core returns the errno itself (positive), and sets errno except where the context
  // lacks the operation (EOPNOTSUPP, errno untouched).
  const int err = rc == 0 ? 0 : (errno != 0 ? errno : std::abs(rc));
  if (rc != 0 && (err == EOPNOTSUPP || err == EPERM || err == EPROTONOSUPPORT)) {
    return Unavailable(err, what);
  }
  RETURN_IF_ERROR(CommandStatus(what, rc, err, out));
  return out;
}

}  // namespace

std::string CmdStatusName(uint8_t status) {
  if (status == 0) return "OK";
  const StatusInfo* s = FindStatus(status);
  return s != nullptr ? s->name : absl::StrFormat("status 0x%02x", status);
}

absl::Status CommandStatus(absl::string_view what, int rc, int err, absl::Span<const uint8_t> out) {
  absl::StatusOr<umr::CmdStatus> st = umr::DecodeCmdStatusOut(out);
  const bool firmware = st.ok() && st->status != umr::kCmdStatusOk;
  if (rc == 0 && !firmware) return absl::OkStatus();
  if (firmware || err == EREMOTEIO) {
    const uint8_t status = st.ok() ? st->status : 0;
    const uint32_t syndrome = st.ok() ? st->syndrome : 0;
    const StatusInfo* info = FindStatus(status);
    return absl::Status(info != nullptr ? info->code : absl::StatusCode::kInternal,
                        absl::StrFormat("mlx5: %s failed in firmware: %s (0x%02x), syndrome 0x%08x",
                                        what, CmdStatusName(status), status, syndrome));
  }
  return verbs::ErrnoStatus(err, absl::StrCat("mlx5: ", what));
}

absl::StatusOr<umr::HcaCaps> QueryGeneralCaps(ibv_context* ctx) {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> out,
                   QueryCap(ctx, umr::kCapTypeGeneral, "QUERY_HCA_CAP(general)"));
  return umr::DecodeHcaCaps(out);
}

absl::StatusOr<umr::OdpCaps> QueryOdpCaps(ibv_context* ctx) {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> out,
                   QueryCap(ctx, umr::kCapTypeOdp, "QUERY_HCA_CAP(odp)"));
  return umr::DecodeOdpCaps(out);
}

absl::StatusOr<DevxMkey> CreateMkey(ibv_context* ctx, absl::Span<const uint8_t> mailbox) {
  umr::Mailbox16 out{};
  errno = 0;
  mlx5dv_devx_obj* obj =
      mlx5dv_devx_obj_create(ctx, mailbox.data(), mailbox.size(), out.data(), out.size());
  if (obj == nullptr) {
    const int err = errno != 0 ? errno : EIO;
    absl::Status s = CommandStatus("CREATE_MKEY", -1, err, out);
    return s.ok() ? absl::InternalError("mlx5: CREATE_MKEY returned no object") : s;
  }
  absl::StatusOr<umr::CreateMkeyOut> o = umr::DecodeCreateMkeyOut(out);
  if (!o.ok()) {
    (void)mlx5dv_devx_obj_destroy(obj);
    return o.status();
  }
  return DevxMkey{obj, o->mkey_index};
}

absl::StatusOr<std::vector<uint8_t>> QueryMkey(const DevxMkey& m, uint32_t entries,
                                               uint32_t entry_bytes) {
  umr::QueryMkeyIn q;
  q.mkey_index = m.index;
  ASSIGN_OR_RETURN(const umr::Mailbox16 in, umr::EncodeQueryMkeyIn(q));
  const size_t translation = std::max<size_t>(size_t{entries} * entry_bytes, 32);
  std::vector<uint8_t> out(umr::kQueryMkeyOutMinBytes - 32 + (translation + 15) / 16 * 16, 0);
  errno = 0;
  const int rc = mlx5dv_devx_obj_query(m.obj, in.data(), in.size(), out.data(), out.size());
  RETURN_IF_ERROR(CommandStatus("QUERY_MKEY", rc, rc == 0 ? 0 : errno, out));
  return out;
}

absl::Status DestroyMkey(const DevxMkey& m) {
  errno = 0;
  const int rc = mlx5dv_devx_obj_destroy(m.obj);
  // The object's outbox is the kernel's; only the errno comes back.
  return rc == 0 ? absl::OkStatus()
                 : verbs::ErrnoStatus(errno != 0 ? errno : std::abs(rc), "mlx5: DESTROY_MKEY");
}

}  // namespace regcache::hca::mlx5
