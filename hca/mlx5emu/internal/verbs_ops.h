// What the libibverbs and libmlx5 entry points share: finding the emulator's objects from the
// handles, contexts (with the verbs_context operations the header inlines dispatch through),
// queue pairs, and the device's attributes.
//
// Thread safety: as the entry points (any thread; objects as rdma-core's).
#ifndef REGCACHE_HCA_MLX5EMU_INTERNAL_VERBS_OPS_H_
#define REGCACHE_HCA_MLX5EMU_INTERNAL_VERBS_OPS_H_

#include <infiniband/verbs.h>

#include <cstddef>

#include "hca/mlx5emu/internal/emu.h"

namespace regcache::hca::mlx5emu {

Context* CtxOf(ibv_context* c);
Device* DevOf(ibv_context* c);
inline Pd* PdOf(ibv_pd* pd) { return reinterpret_cast<Pd*>(pd); }

// A context on `device` (null and errno for a device the emulator did not give out). `devx`:
// opened with MLX5DV_CONTEXT_FLAGS_DEVX.
ibv_context* OpenContext(ibv_device* device, bool devx);
int CloseContext(ibv_context* context);

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* attr, size_t attr_size);
int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len);
ibv_gid GidOf(Device* dev);
uint64_t NodeGuidOf(Device* dev);  // host order

// A queue pair of `pd`: a verbs RC queue pair (post_send), or with `raw` one whose send queue
// the caller writes itself (mlx5dv_create_qp with MLX5DV_QP_EX_WITH_RAW_WQE). Null and errno
// on refusal.
ibv_qp* CreateQp(ibv_context* context, ibv_pd* pd, const ibv_qp_init_attr& attr, bool raw);
int DestroyQp(ibv_qp* qp);

const char* WcStatusName(ibv_wc_status status);

}  // namespace regcache::hca::mlx5emu
#endif  // REGCACHE_HCA_MLX5EMU_INTERNAL_VERBS_OPS_H_
