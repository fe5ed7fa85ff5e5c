// The error reasons' numbers on the fast path's rings: a ring completion has no room for a
// reason's text, so it carries the reason's number in kNumberedReasons (index + 1) and each end
// maps it back (protocol/ring_codec.h). gRPC carries the text itself (protocol/grpc_status.h).
// The reasons themselves are base/error_reason.h's; docs/api.md lists them.
#ifndef REGCACHE_PROTOCOL_REASON_NUMBERS_H_
#define REGCACHE_PROTOCOL_REASON_NUMBERS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "base/error_reason.h"

namespace regcache::protocol {

// Every reason, in a fixed order: a reason's number, which the fast path's rings carry instead
// of its text, is its index here + 1. Append only; a number never changes its reason.
inline constexpr absl::string_view kNumberedReasons[] = {
    base::reason::kKeyQuotaExceeded,
    base::reason::kMemoryQuotaExceeded,
    base::reason::kDaemonMemoryBudgetExhausted,
    base::reason::kDeviceKeyBudgetExhausted,
    base::reason::kKeyPoolExhausted,
    base::reason::kKeyRevoked,
    base::reason::kHandleNotOwned,
    base::reason::kSessionUnknown,
    base::reason::kSessionTokenMissing,
    base::reason::kSessionLimitReached,
    base::reason::kPeerNotAllowed,
    base::reason::kAdminRequired,
    base::reason::kEndpointLimitReached,
    base::reason::kDraining,
    base::reason::kDeadlineTooShort,
    base::reason::kCallAbandoned,
    base::reason::kInvalidPageToken,
    base::reason::kObserverReadOnly,
    base::reason::kDeviceFailed,
    base::reason::kRangeNotAttached,
};

// The number of `reason` (1...), 0 for a reason not in kNumberedReasons.
uint32_t ReasonNumber(absl::string_view reason);
// The reason numbered `n`; "" for 0 or a number this build does not know.
absl::string_view NumberedReason(uint32_t n);

}  // namespace regcache::protocol
#endif  // REGCACHE_PROTOCOL_REASON_NUMBERS_H_
