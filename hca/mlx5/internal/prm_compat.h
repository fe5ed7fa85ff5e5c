// rdma-core compatibility of umr/'s PRM layouts, for the mlx5 backend.
//
// umr/ is pure code and may not include <infiniband/...>; this file is where its layouts meet
// rdma-core's installed definitions (<infiniband/mlx5dv.h>, rdma-core 44). prm_compat.cc holds
// compile-time static_asserts that every umr segment has the size and member offsets of the
// matching mlx5dv struct (mlx5_wqe_ctrl_seg, mlx5_wqe_umr_ctrl_seg, mlx5_wqe_mkey_context_seg,
// mlx5_wqe_umr_klm_seg, mlx5_wqe_data_seg, the repeat-block segs, mlx5_cqe64, mlx5_err_cqe) and
// that umr's opcode / flag / mask / syndrome constants equal rdma-core's. A header update that
// moves any of them breaks the build of this backend, not a device.
//
// At run time the backend may call CheckPrmCompat() once at start-up: it builds a UMR WQE with
// umr/ and the same WQE the way rdma-core's provider fills its structs, and compares the bytes.
//
// Thread safety: CheckPrmCompat is a pure function.
#ifndef REGCACHE_HCA_MLX5_PRM_COMPAT_H_
#define REGCACHE_HCA_MLX5_PRM_COMPAT_H_

#include "absl/status/status.h"

namespace regcache::hca::mlx5 {

// OK when the canonical map and local-invalidate WQEs are byte-identical both ways;
// kInternal naming the first differing byte otherwise.
absl::Status CheckPrmCompat();

}  // namespace regcache::hca::mlx5
#endif  // REGCACHE_HCA_MLX5_PRM_COMPAT_H_
