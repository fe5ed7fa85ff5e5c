// Work-completion statuses of libibverbs as the device boundary's syndromes (hca/status.h), so
// that the cache treats a refused bind on a verbs device as it treats a refused UMR on ConnectX.
#ifndef REGCACHE_HCA_VERBS_WC_STATUS_H_
#define REGCACHE_HCA_VERBS_WC_STATUS_H_

#include <infiniband/verbs.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "hca/status.h"

namespace regcache::hca::verbs {

// The mlx5 CQE syndrome of the same meaning (IBV_WC_MW_BIND_ERR -> kMwBind, ...). Statuses with
// no listed counterpart keep their mlx5 value where there is one (retry exceeded 0x15, RNR retry
// exceeded 0x16, remote aborted 0x22) and are otherwise kLocalQpOp.
Syndrome SyndromeForWc(ibv_wc_status status);

// OK for IBV_WC_SUCCESS, else DeviceError(SyndromeForWc(status), "<ibv_wc_status_str>: what").
absl::Status StatusForWc(ibv_wc_status status, absl::string_view what);

// An errno from a verb as a Status: EINVAL -> kInvalidArgument, ENOMEM/ENOSPC/EAGAIN ->
// kResourceExhausted, EPERM/EACCES -> kPermissionDenied, EOPNOTSUPP/ENOSYS -> kUnimplemented,
// EBUSY -> kFailedPrecondition, others kInternal; the message is "<what>: <strerror> (errno N)".
absl::Status ErrnoStatus(int err, absl::string_view what);

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_WC_STATUS_H_
