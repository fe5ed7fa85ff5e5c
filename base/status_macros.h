// Status propagation macros. abseil 20220623 ships absl::Status/StatusOr but no macros for
// early return, so the project defines its two here, and nothing else.
//
//   RETURN_IF_ERROR(expr);              expr yields absl::Status; returns it if not OK.
//   ASSIGN_OR_RETURN(lhs, expr);        expr yields absl::StatusOr<T>; on OK moves the value
//                                       into `lhs` (a declaration or an lvalue), otherwise
//                                       returns the status. `lhs` may not contain a bare comma:
//                                       write ASSIGN_OR_RETURN((auto [a, b]), expr) as two steps.
//
// Both evaluate `expr` exactly once. Use base::Annotate to add context while propagating.
#ifndef REGCACHE_BASE_STATUS_MACROS_H_
#define REGCACHE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace regcache::base {

// Returns `s` with `context` prepended to its message ("context: message"); the code and the
// payloads are kept. OK stays OK.
absl::Status Annotate(const absl::Status& s, absl::string_view context);

}  // namespace regcache::base
#define RC_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define RC_STATUS_MACROS_CONCAT_(a, b) RC_STATUS_MACROS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                 \
  do {                                                        \
    ::absl::Status rc_status_macros_status_ = (expr);         \
    if (ABSL_PREDICT_FALSE(!rc_status_macros_status_.ok())) { \
      return rc_status_macros_status_;                        \
    }                                                         \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  RC_ASSIGN_OR_RETURN_IMPL_(RC_STATUS_MACROS_CONCAT_(rc_status_macros_or_, __LINE__), lhs, expr)

#define RC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {            \
    return std::move(statusor).status();               \
  }                                                    \
  lhs = std::move(statusor).value()

#endif  // REGCACHE_BASE_STATUS_MACROS_H_
