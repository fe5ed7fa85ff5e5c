#include "hca/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace regcache::hca {
namespace {

// Payload key: two bytes, syndrome then vendor syndrome.
constexpr absl::string_view kPayloadUrl = "type.regcache/hca.ErrorInfo";

}  // namespace

absl::string_view SyndromeName(Syndrome s) {
  switch (s) {
    case Syndrome::kNone:
      return "OK";
    case Syndrome::kLocalLength:
      return "LOCAL_LENGTH";
    case Syndrome::kLocalQpOp:
      return "LOCAL_QP_OP";
    case Syndrome::kLocalProt:
      return "LOCAL_PROT";
    case Syndrome::kWrFlush:
      return "WR_FLUSH";
    case Syndrome::kMwBind:
      return "MW_BIND";
    case Syndrome::kBadResp:
      return "BAD_RESP";
    case Syndrome::kLocalAccess:
      return "LOCAL_ACCESS";
    case Syndrome::kRemoteInvalReq:
      return "REMOTE_INVAL_REQ";
    case Syndrome::kRemoteAccess:
      return "REMOTE_ACCESS";
    case Syndrome::kRemoteOp:
      return "REMOTE_OP";
  }
  return "SYNDROME";
}

absl::StatusCode CodeForSyndrome(Syndrome s, uint8_t vendor_syndrome) {
  if (vendor_syndrome == kVendorSyndromeOdpFault) return absl::StatusCode::kUnavailable;
  switch (s) {
    case Syndrome::kLocalProt:
    case Syndrome::kRemoteAccess:
    case Syndrome::kLocalAccess:
      return absl::StatusCode::kPermissionDenied;
    case Syndrome::kMwBind:
      return absl::StatusCode::kFailedPrecondition;
    case Syndrome::kLocalQpOp:
    case Syndrome::kRemoteInvalReq:
    case Syndrome::kLocalLength:
      return absl::StatusCode::kInvalidArgument;
    case Syndrome::kWrFlush:
      return absl::StatusCode::kAborted;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status DeviceError(Syndrome s, absl::string_view reason, uint8_t vendor_syndrome) {
  std::string msg = absl::StrFormat("%s (syndrome 0x%02x", SyndromeName(s), static_cast<int>(s));
  if (vendor_syndrome != 0) absl::StrAppendFormat(&msg, ", vendor 0x%02x", vendor_syndrome);
  absl::StrAppend(&msg, "): ", reason);
  absl::Status status(CodeForSyndrome(s, vendor_syndrome), msg);
  const char bytes[2] = {static_cast<char>(s), static_cast<char>(vendor_syndrome)};
  status.SetPayload(kPayloadUrl, absl::Cord(absl::string_view(bytes, 2)));
  return status;
}

std::optional<ErrorInfo> ErrorOf(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  auto payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value() || payload->size() != 2) return std::nullopt;
  std::string bytes(*payload);
  return ErrorInfo{static_cast<Syndrome>(static_cast<uint8_t>(bytes[0])),
                   static_cast<uint8_t>(bytes[1])};
}

}  // namespace regcache::hca