// errno -> absl::Status, converted once at the boundary where a system or verbs call fails,
// with the context that makes the message useful on its own:
//
//   if (mr == nullptr) return base::ErrnoToStatus(errno, absl::StrCat("ibv_reg_mr len=", len));
//   -> RESOURCE_EXHAUSTED "ibv_reg_mr len=4096: ENOMEM (Cannot allocate memory)"
//
// Codes follow absl::ErrnoToStatusCode, so api/ can map them 1:1 onto gRPC codes.
#ifndef REGCACHE_BASE_ERRNO_STATUS_H_
#define REGCACHE_BASE_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace regcache::base {

// The symbolic name of an errno value ("ENOMEM"), or "errno=<n>" when unknown.
std::string ErrnoName(int err);

// REQUIRES: err != 0 (an errno of 0 is a caller bug and yields kInternal saying so).
absl::Status ErrnoToStatus(int err, absl::string_view context);

}  // namespace regcache::base
#endif  // REGCACHE_BASE_ERRNO_STATUS_H_
