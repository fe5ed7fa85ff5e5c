// Stable, machine-readable reasons on an absl::Status, next to its canonical code and English
// message: what a caller branches on when one code has several causes (RESOURCE_EXHAUSTED for a
// key quota, a memory quota or the device's key budget). Where an error is made (cache/,
// service/, api/), WithReason attaches a reason and the numbers behind it as a status payload;
// base::Annotate and status propagation keep payloads, and the gRPC layer turns the payload into
// a google.rpc.ErrorInfo in the status details (protocol/grpc_status.h; the reasons are
// listed in docs/api.md). Errors without a reason carry no payload.
//
// The payload (type URL kErrorReasonTypeUrl) is text: the reason on the first line, then one
// "key=value" line per metadata entry. Keys are [A-Za-z0-9_]; values must not contain '\n'
// (WithReason replaces one with a space).
#ifndef REGCACHE_BASE_ERROR_REASON_H_
#define REGCACHE_BASE_ERROR_REASON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace regcache::base {

inline constexpr absl::string_view kErrorReasonTypeUrl = "type.regcache.io/regcache.ErrorReason";

// The reasons (docs/api.md). Once published a reason keeps its meaning.
namespace reason {
inline constexpr absl::string_view kKeyQuotaExceeded = "KEY_QUOTA_EXCEEDED";
inline constexpr absl::string_view kMemoryQuotaExceeded = "MEMORY_QUOTA_EXCEEDED";
inline constexpr absl::string_view kDaemonMemoryBudgetExhausted = "DAEMON_MEMORY_BUDGET_EXHAUSTED";
inline constexpr absl::string_view kDeviceKeyBudgetExhausted = "DEVICE_KEY_BUDGET_EXHAUSTED";
inline constexpr absl::string_view kKeyPoolExhausted = "KEY_POOL_EXHAUSTED";
inline constexpr absl::string_view kKeyRevoked = "KEY_REVOKED";
inline constexpr absl::string_view kHandleNotOwned = "HANDLE_NOT_OWNED";
inline constexpr absl::string_view kSessionUnknown = "SESSION_UNKNOWN";
inline constexpr absl::string_view kSessionTokenMissing = "SESSION_TOKEN_MISSING";
inline constexpr absl::string_view kSessionLimitReached = "SESSION_LIMIT_REACHED";
inline constexpr absl::string_view kPeerNotAllowed = "PEER_NOT_ALLOWED";
inline constexpr absl::string_view kAdminRequired = "ADMIN_REQUIRED";
inline constexpr absl::string_view kObserverReadOnly = "OBSERVER_READ_ONLY";
inline constexpr absl::string_view kEndpointLimitReached = "ENDPOINT_LIMIT_REACHED";
inline constexpr absl::string_view kDraining = "DRAINING";
inline constexpr absl::string_view kDeadlineTooShort = "DEADLINE_TOO_SHORT";
inline constexpr absl::string_view kCallAbandoned = "CALL_ABANDONED";
inline constexpr absl::string_view kInvalidPageToken = "INVALID_PAGE_TOKEN";
inline constexpr absl::string_view kDeviceFailed = "DEVICE_FAILED";
inline constexpr absl::string_view kRangeNotAttached = "RANGE_NOT_ATTACHED";
}  // namespace reason

struct ErrorReason {
  std::string reason;
  std::vector<std::pair<std::string, std::string>> metadata;  // in the order attached
};

// `status` with `reason` and `metadata` attached (replacing a reason it had). OK stays OK.
absl::Status WithReason(absl::Status status, absl::string_view reason,
                        std::vector<std::pair<std::string, std::string>> metadata = {});

// The reason attached to `status`; nullopt when there is none (or the payload is malformed).
std::optional<ErrorReason> GetErrorReason(const absl::Status& status);

}  // namespace regcache::base
#endif  // REGCACHE_BASE_ERROR_REASON_H_
