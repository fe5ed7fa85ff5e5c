// libmlx5's entry points the mlx5 backend calls, as rdma-core 44 declares them
// (infiniband/mlx5dv.h): the device check and DevX open, mlx5dv_init_obj, the raw-WQE queue
// pair, DevX commands and objects, and mlx5dv_create_mkey. DevX mailboxes run through the
// device core's command interface (hca/sim/sim_core.h); a firmware failure is EREMOTEIO with
// the status and syndrome in the outbox, as the kernel returns it.
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "hca/mlx5emu/internal/emu.h"
#include "hca/mlx5emu/internal/verbs_ops.h"
#include "umr/mailbox.h"
#include "umr/mkey.h"
#include "umr/prm.h"

using namespace regcache::hca::mlx5emu;  // NOLINT: C entry points implement this namespace's API
namespace umr = regcache::umr;

namespace {

// Copies a command's output into the caller's outbox (as much as fits).
void CopyOut(const std::vector<uint8_t>& out, void* dst, size_t outlen) {
  std::memcpy(dst, out.data(), std::min(out.size(), outlen));
}

// Writes a failed status into the outbox; the errno of a firmware failure.
int FirmwareFailure(void* out, size_t outlen, uint8_t status, uint32_t syndrome) {
  const umr::Mailbox16 m = umr::EncodeCmdStatusOut(umr::CmdStatus{status, syndrome});
  std::memcpy(out, m.data(), std::min(m.size(), outlen));
  errno = EREMOTEIO;
  return EREMOTEIO;
}

// The test's injected failure for `opcode`, if one is due.
bool Injected(uint16_t opcode, void* out, size_t outlen) {
  Faults& f = GetFaults();
  int want = opcode;
  if (!f.fail_command_opcode.compare_exchange_strong(want, -1)) return false;
  FirmwareFailure(out, outlen, f.fail_command_status.load(), f.fail_command_syndrome.load());
  return true;
}

// Runs one command mailbox on the device; 0 or the errno (EREMOTEIO with the outbox filled).
int RunCommand(Device* dev, const void* in, size_t inlen, void* out, size_t outlen,
               uint16_t opcode) {
  if (outlen < 16) {
    errno = EINVAL;
    return EINVAL;
  }
  if (Injected(opcode, out, outlen)) return EREMOTEIO;
  std::vector<uint8_t> result;
  const absl::Status s =
      dev->core().RunCommand(absl::MakeConstSpan(static_cast<const uint8_t*>(in), inlen), &result);
  if (result.size() > outlen) {
    // The firmware needs a larger outbox than the command gave it.
    return FirmwareFailure(out, outlen, 0x51 /* BAD_OUTPUT_LEN */, 0);
  }
  CopyOut(result, out, outlen);
  if (!s.ok()) {
    errno = EREMOTEIO;
    return EREMOTEIO;
  }
  return 0;
}

// The command's opcode (0 for one too short to have one).
uint16_t OpcodeOf(const void* in, size_t inlen) {
  absl::StatusOr<uint16_t> op =
      umr::PeekCommandOpcode(absl::MakeConstSpan(static_cast<const uint8_t*>(in), inlen));
  return op.ok() ? *op : 0;
}

// DevX on a context opened without MLX5DV_CONTEXT_FLAGS_DEVX.
bool NoDevx(ibv_context* ctx) { return !CtxOf(ctx)->devx; }

}  // namespace

extern "C" {

bool mlx5dv_is_supported(ibv_device* device) { return DeviceOf(device) != nullptr; }

ibv_context* mlx5dv_open_device(ibv_device* device, mlx5dv_context_attr* attr) {
  if (attr != nullptr && (attr->flags & ~uint32_t{MLX5DV_CONTEXT_FLAGS_DEVX}) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool devx = attr != nullptr && (attr->flags & MLX5DV_CONTEXT_FLAGS_DEVX) != 0;
  return OpenContext(device, devx);
}

int mlx5dv_init_obj(mlx5dv_obj* obj, uint64_t obj_type) {
  if ((obj_type & ~uint64_t{MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_PD}) != 0) return EOPNOTSUPP;
  if (obj_type & MLX5DV_OBJ_PD) {
    obj->pd.out->pdn = PdOf(obj->pd.in)->pdn;
    obj->pd.out->comp_mask = 0;
  }
  if (obj_type & MLX5DV_OBJ_QP) {
    Qp* qp = reinterpret_cast<Qp*>(obj->qp.in);
    if (!qp->dv) {
      Violation(
          absl::StrFormat("mlx5dv_init_obj on verbs QP 0x%x: the emulator gives raw "
                          "send queues only to mlx5dv_create_qp's queue pairs",
                          qp->qp.qp_num));
      return EINVAL;
    }
    mlx5dv_qp& o = *obj->qp.out;
    o = mlx5dv_qp{};
    o.dbrec = reinterpret_cast<__be32*>(qp->dbrec.get());
    o.sq.buf = qp->sq.get();
    o.sq.wqe_cnt = qp->wqe_cnt;
    o.sq.stride = umr::kWqebb;
    o.bf.reg = qp->bf.get();
    o.bf.size = kBfSize;
  }
  if (obj_type & MLX5DV_OBJ_CQ) {
    Cq* cq = reinterpret_cast<Cq*>(obj->cq.in);
    Device* dev = DevOf(obj->cq.in->context);
    {
      regcache::base::MutexLock lock(&dev->mu);
      cq->dv_owned = true;  // the caller polls it from now on
    }
    mlx5dv_cq& o = *obj->cq.out;
    o = mlx5dv_cq{};
    o.buf = cq->buf.get();
    o.dbrec = reinterpret_cast<__be32*>(cq->dbrec.get());
    o.cqe_cnt = cq->cqe_cnt;
    o.cqe_size = 64;
    o.cqn = cq->cq.handle;
  }
  return 0;
}

ibv_qp* mlx5dv_create_qp(ibv_context* context, ibv_qp_init_attr_ex* attr, mlx5dv_qp_init_attr* dv) {
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((attr->comp_mask & ~kKnown) != 0 || (attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0) {
    errno = EINVAL;
    return nullptr;
  }
  const bool raw = dv != nullptr && (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) &&
                   (dv->send_ops_flags & MLX5DV_QP_EX_WITH_RAW_WQE);
  if (!raw) {
    Violation("mlx5dv_create_qp without MLX5DV_QP_EX_WITH_RAW_WQE: not modelled");
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  return CreateQp(context, attr->pd, a, /*raw=*/true);
}

int mlx5dv_devx_general_cmd(ibv_context* context, const void* in, size_t inlen, void* out,
                            size_t outlen) {
  if (NoDevx(context)) return EOPNOTSUPP;  // no errno, as rdma-core's missing dv op
  Device* dev = DevOf(context);
  if (dev->fatal()) {
    errno = EIO;
    return EIO;
  }
  const uint16_t opcode = OpcodeOf(in, inlen);
  if (opcode != umr::kCmdQueryHcaCap) {
    // Object commands go through mlx5dv_devx_obj_*; the kernel refuses them here.
    errno = EINVAL;
    return EINVAL;
  }
  return RunCommand(dev, in, inlen, out, outlen, opcode);
}

mlx5dv_devx_obj* mlx5dv_devx_obj_create(ibv_context* context, const void* in, size_t inlen,
                                        void* out, size_t outlen) {
  if (NoDevx(context)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Device* dev = DevOf(context);
  const uint16_t opcode = OpcodeOf(in, inlen);
  if (dev->fatal() || opcode != umr::kCmdCreateMkey) {
    errno = dev->fatal() ? EIO : EINVAL;  // the emulator's objects are mkeys
    return nullptr;
  }
  if (!dev->options().devx_mkey) {
    errno = EPERM;
    return nullptr;
  }
  if (RunCommand(dev, in, inlen, out, outlen, opcode) != 0) return nullptr;
  absl::StatusOr<umr::CreateMkeyOut> o =
      umr::DecodeCreateMkeyOut(absl::MakeConstSpan(static_cast<const uint8_t*>(out), outlen));
  if (!o.ok()) {
    errno = EINVAL;
    return nullptr;
  }
  dev->core().stats().live_keys.Add();
  auto* obj = new DevxObj;
  obj->obj.context = context;
  obj->obj.mkey_index = o->mkey_index;
  regcache::base::MutexLock lock(&dev->mu);
  dev->devx_mkeys.insert(o->mkey_index);
  return &obj->obj;
}

int mlx5dv_devx_obj_query(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                          size_t outlen) {
  Device* dev = DevOf(obj->context);
  if (dev->fatal()) {
    errno = EIO;
    return EIO;
  }
  const uint16_t opcode = OpcodeOf(in, inlen);
  absl::StatusOr<umr::QueryMkeyIn> q =
      umr::DecodeQueryMkeyIn(absl::MakeConstSpan(static_cast<const uint8_t*>(in), inlen));
  // The kernel refuses a query that does not address the object it is made on.
  if (opcode != umr::kCmdQueryMkey || !q.ok() || q->mkey_index != obj->mkey_index) {
    errno = EINVAL;
    return EINVAL;
  }
  return RunCommand(dev, in, inlen, out, outlen, opcode);
}

int mlx5dv_devx_obj_destroy(mlx5dv_devx_obj* obj) {
  Device* dev = DevOf(obj->context);
  // The kernel builds DESTROY_MKEY itself; the caller sees only the errno.
  if (!dev->core().DestroyMkey(obj->mkey_index).ok()) return EINVAL;
  {
    regcache::base::MutexLock lock(&dev->mu);
    dev->devx_mkeys.erase(obj->mkey_index);
  }
  delete reinterpret_cast<DevxObj*>(obj);
  return 0;
}

// As rdma-core 44 makes it: a free KLM mkey of the PD, umr_en, local read only, through DevX
// CREATE_MKEY, sized to max_entries rounded up to 4 (written back).
mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr* attr) {
  ibv_context* context = attr->pd->context;
  if (NoDevx(context)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Device* dev = DevOf(context);
  constexpr uint32_t kFlags =
      MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
  if (dev->fatal() || (attr->create_flags & ~kFlags) != 0 ||
      (attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT) == 0 || attr->max_entries == 0) {
    errno = dev->fatal() ? EIO : EINVAL;
    return nullptr;
  }
  umr::FreeMkeyParams p;
  p.mode = umr::AccessMode::kKlm;
  p.capacity_entries = (uint32_t{attr->max_entries} + 3) / 4 * 4;
  p.pd = PdOf(attr->pd)->pdn;
  p.access.local_read = true;
  p.en_rinval = (attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE) != 0;
  absl::StatusOr<umr::CreateMkeyIn> in = umr::BuildCreateFreeMkey(p);
  absl::StatusOr<std::vector<uint8_t>> mailbox =
      in.ok() ? umr::EncodeCreateMkeyIn(*in) : in.status();
  if (!mailbox.ok()) {
    errno = EINVAL;
    return nullptr;
  }
  absl::StatusOr<uint32_t> index = dev->core().CreateMkey(*mailbox);
  if (!index.ok()) {
    errno = absl::IsResourceExhausted(index.status()) ? ENOMEM : EINVAL;
    return nullptr;
  }
  attr->max_entries = static_cast<uint16_t>(p.capacity_entries);
  auto* m = new DvMkey;
  m->pd = PdOf(attr->pd);
  m->index = *index;
  m->mkey.lkey = m->mkey.rkey = umr::MakeKey(*index, 0);
  regcache::base::MutexLock lock(&dev->mu);
  dev->dv_mkeys.insert(*index);
  ++m->pd->users;
  return &m->mkey;
}

int mlx5dv_destroy_mkey(mlx5dv_mkey* mkey) {
  DvMkey* m = reinterpret_cast<DvMkey*>(mkey);
  Device* dev = DevOf(m->pd->pd.context);
  if (!dev->core().DestroyMkey(m->index).ok()) return EINVAL;
  {
    regcache::base::MutexLock lock(&dev->mu);
    dev->dv_mkeys.erase(m->index);
    --m->pd->users;
  }
  delete m;
  return 0;
}

}  // extern "C"
