// What the libibverbs and libmlx5 entry points share: finding the emulator's objects from the
// handles, contexts (with the verbs_context operations the header inlines dispatch through),
// queue pairs, and the device's attributes.
//
// Thread safety: as the entry points (any thread; objects as rdma-core's).
#ifndef REGCACHE_HCA_MLX5EMU_INTERNAL_VERBS_OPS_H_
#define REGCACHE_HCA_MLX5EMU_INTERNAL_VERBS_OPS_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <set>

#include "hca/mlx5emu/internal/emu.h"

namespace regcache::hca::mlx5emu {

Context* CtxOf(ibv_context* c);
Device* DevOf(ibv_context* c);
// The PD a handle names: the file's own, also through an imported handle.
inline Pd* PdOf(ibv_pd* pd) {
  Pd* p = reinterpret_cast<Pd*>(pd);
  return p->origin != nullptr ? p->origin : p;
}
inline Ufile* FileOf(ibv_context* c) { return CtxOf(c)->file; }

// A context on `device` (null and errno for a device the emulator did not give out), on a new
// uverbs file. `devx`: opened with MLX5DV_CONTEXT_FLAGS_DEVX.
ibv_context* OpenContext(ibv_device* device, bool devx);
// ibv_import_device: a context on the file `cmd_fd` is a command fd of (its duplicate), which
// it then owns. EOPNOTSUPP for another process's file (the emulated devices live in one
// process), EINVAL for a descriptor that is no command fd.
ibv_context* ImportContext(int cmd_fd);
// Closes the context; the file's last destroys what is left in it and frees every context.
int CloseContext(ibv_context* context);
// The file's objects made through `context`: recorded when made, forgotten when destroyed
// (REQUIRES dev->mu).
template <typename T>
void Own(ibv_context* context, std::set<T*> Ufile::*set, T* object) {
  (FileOf(context)->*set).insert(object);
}
template <typename T>
void Disown(ibv_context* context, std::set<T*> Ufile::*set, T* object) {
  (FileOf(context)->*set).erase(object);
}

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
