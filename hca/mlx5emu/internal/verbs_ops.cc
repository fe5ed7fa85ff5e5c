#include "hca/mlx5emu/internal/verbs_ops.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "hca/sim/sim_core.h"

namespace regcache::hca::mlx5emu {
namespace {

ibv_qp* FailQp(int err) {
  errno = err;
  return nullptr;
}

int OpPollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  return PollCq(DevOf(cq->context), reinterpret_cast<Cq*>(cq), n, wc);
}

int OpPostSend(ibv_qp* vqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp* qp = reinterpret_cast<Qp*>(vqp);
  if (qp->dv) {
    // The backend writes raw WQEs into such a queue; the provider's posting path is not
    // modelled for it.
    Violation(absl::StrFormat("ibv_post_send on raw-WQE QP 0x%x", vqp->qp_num));
    *bad = wr;
    return EINVAL;
  }
  return PostSend(DevOf(vqp->context), qp, wr, bad);
}

int OpPostRecv(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  *bad = wr;  // the emulated queue pairs carry one-sided operations only
  return EOPNOTSUPP;
}

int OpReqNotifyCq(ibv_cq*, int) { return EOPNOTSUPP; }
int OpBindMw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }
int OpDeallocMw(ibv_mw*) { return EOPNOTSUPP; }

int OpAdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg,
               uint32_t num_sge) {
  Device* dev = DevOf(pd->context);
  if (dev->fatal()) return EIO;
  if ((flags & ~uint32_t{IBV_ADVISE_MR_FLAG_FLUSH}) != 0 || num_sge == 0) return EINVAL;
  const bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && !write &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
    return EOPNOTSUPP;
  }
  for (uint32_t i = 0; i < num_sge; ++i) {
    {
      base::MutexLock lock(&dev->mu);
      auto it = dev->mrs.find(KeyIndex(sg[i].lkey));
      // The kernel prefetches only on-demand regions of this PD (else ENOENT).
      if (it == dev->mrs.end() || !it->second->on_demand || it->second->owner != PdOf(pd) ||
          it->second->mr.lkey != sg[i].lkey) {
        return ENOENT;
      }
    }
    if (!dev->core().Prefetch(sg[i].lkey, sg[i].addr, sg[i].length, write).ok()) return EINVAL;
  }
  return 0;
}

int OpQueryDeviceEx(ibv_context* c, const ibv_query_device_ex_input* in, ibv_device_attr_ex* a,
                    size_t size) {
  return QueryDeviceEx(c, in, a, size);
}

int OpQueryPort(ibv_context* c, uint8_t port, ibv_port_attr* a, size_t len) {
  return QueryPort(c, port, a, len);
}

}  // namespace

Context* CtxOf(ibv_context* c) { return reinterpret_cast<Context*>(verbs_get_ctx(c)); }
Device* DevOf(ibv_context* c) { return CtxOf(c)->dev; }

namespace {

// A context on `file` (a new one when null), whose command fd is `cmd_fd`.
ibv_context* NewContext(Device* dev, Ufile* file, bool devx, base::UniqueFd cmd_fd) {
  auto* c = new Context;
  c->dev = dev;
  c->devx = devx && dev->options().devx;
  c->cmd_fd = std::move(cmd_fd);
  c->async_fd = base::UniqueFd(eventfd(0, EFD_CLOEXEC));
  verbs_context& v = c->vctx;
  v.sz = sizeof(verbs_context);
  v.query_device_ex = OpQueryDeviceEx;
  v.query_port = OpQueryPort;
  v.advise_mr = OpAdviseMr;
  ibv_context& ctx = v.context;
  ctx.device = dev->ibv();
  ctx.cmd_fd = c->cmd_fd.get();
  ctx.async_fd = c->async_fd.get();
  ctx.num_comp_vectors = 1;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.ops.poll_cq = OpPollCq;
  ctx.ops.post_send = OpPostSend;
  ctx.ops.post_recv = OpPostRecv;
  ctx.ops.req_notify_cq = OpReqNotifyCq;
  ctx.ops.bind_mw = OpBindMw;
  ctx.ops.dealloc_mw = OpDeallocMw;  // alloc_mw stays null: no memory windows (EOPNOTSUPP)
  dev->open_contexts.fetch_add(1);
  base::MutexLock lock(&dev->mu);
  if (file == nullptr) {
    file = new Ufile;
    struct stat st {};
    if (fstat(c->cmd_fd.get(), &st) == 0) {
      file->st_dev = st.st_dev;
      file->st_ino = st.st_ino;
    }
    dev->files.insert(file);
  }
  c->file = file;
  ++file->open;
  file->contexts.push_back(c);
  dev->contexts.insert(c);
  return &ctx;
}

template <typename T>
std::vector<T*> Take(std::set<T*>& s) {
  std::vector<T*> out(s.begin(), s.end());
  s.clear();
  return out;
}

}  // namespace

ibv_context* OpenContext(ibv_device* device, bool devx) {
  Device* dev = DeviceOf(device);
  if (dev == nullptr) {
    errno = ENODEV;
    return nullptr;
  }
  if (dev->fatal()) {
    errno = EIO;
    return nullptr;
  }
  // A memfd: each file's inode is its own, so an imported duplicate names exactly this file.
  base::UniqueFd cmd(memfd_create("mlx5emu-uverbs", MFD_CLOEXEC));
  if (!cmd) return nullptr;
  return NewContext(dev, nullptr, devx, std::move(cmd));
}

ibv_context* ImportContext(int cmd_fd) {
  struct stat st {};
  if (cmd_fd < 0 || fstat(cmd_fd, &st) != 0) {
    errno = EBADF;
    return nullptr;
  }
  for (Device* dev : Devices()) {
    Ufile* file = nullptr;
    {
      base::MutexLock lock(&dev->mu);
      for (Ufile* f : dev->files) {
        if (f->st_dev == st.st_dev && f->st_ino == st.st_ino) file = f;
      }
    }
    if (file == nullptr) continue;
    if (dev->fatal()) {
      errno = EIO;
      return nullptr;
    }
    return NewContext(dev, file, false, base::UniqueFd(cmd_fd));
  }
  // Another process's emulated device cannot reach this process's memory, nor it that one's.
  char link[64] = {};
  const std::string path = absl::StrFormat("/proc/self/fd/%d", cmd_fd);
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  errno = n > 0 && std::strstr(link, "mlx5emu-uverbs") != nullptr ? EOPNOTSUPP : EINVAL;
  return nullptr;
}

int CloseContext(ibv_context* context) {
  Context* c = CtxOf(context);
  Device* dev = c->dev;
  Ufile* file = c->file;
  {
    base::MutexLock lock(&dev->mu);
    if (c->closed) return EINVAL;
    c->closed = true;
    dev->contexts.erase(c);
    if (--file->open > 0) {
      dev->open_contexts.fetch_sub(1);
      return 0;  // the file, and this context's memory, live on with the others
    }
    dev->files.erase(file);
  }
  // The file's last context: what is left in it goes, queue pairs first, PDs last.
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Cq*> cqs;
  std::vector<Pd*> pds;
  {
    base::MutexLock lock(&dev->mu);
    qps = Take(file->qps);
    mrs = Take(file->mrs);
    cqs = Take(file->cqs);
    pds = Take(file->pds);
  }
  for (Qp* qp : qps) (void)DestroyQp(&qp->qp);
  for (Mr* mr : mrs) (void)ibv_dereg_mr(&mr->mr);
  for (Cq* cq : cqs) (void)ibv_destroy_cq(&cq->cq);
  for (Pd* pd : pds) (void)ibv_dealloc_pd(&pd->pd);
  for (Context* each : file->contexts) {
    pthread_mutex_destroy(&each->vctx.context.mutex);
    delete each;
  }
  delete file;
  dev->open_contexts.fetch_sub(1);
  return 0;
}

uint64_t NodeGuidOf(Device* dev) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : dev->name()) h = (h ^ ch) * 0x100000001b3ull;
  return 0x0c42a10300000000ull | (h & 0xffffff);  // the Mellanox OUI 0c:42:a1
}

ibv_gid GidOf(Device* dev) {
  // A RoCE v2 GID of an IPv4 address, ::ffff:127.a.b.c, with the process id and the device's
  // ordinal in a.b.c: each process is a host of its own on the fabric (fabric.cc).
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  const uint32_t host = ((static_cast<uint32_t>(getpid()) << 1) | (dev->ordinal() & 1)) & 0xffffff;
  g.raw[12] = 127;
  g.raw[13] = static_cast<uint8_t>(host >> 16);
  g.raw[14] = static_cast<uint8_t>(host >> 8);
  g.raw[15] = static_cast<uint8_t>(host);
  return g;
}

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* attr, size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr_ex)) return EINVAL;
  Device* dev = DevOf(context);
  const Image& im = dev->image();
  std::memset(attr, 0, attr_size);
  ibv_device_attr& o = attr->orig_attr;
  std::snprintf(o.fw_ver, sizeof(o.fw_ver), "emulated %s", im.model.c_str());
  o.node_guid = htobe64(NodeGuidOf(dev));
  o.sys_image_guid = o.node_guid;
  o.max_mr_size = ~uint64_t{0};
  o.page_size_cap = ~uint64_t{0xfff};
  o.vendor_id = 0x02c9;
  o.vendor_part_id = im.vendor_part_id;
  o.max_qp = 1 << 17;
  o.max_qp_wr = static_cast<int>(im.max_qp_wr);
  o.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
  o.max_sge = 30;
  o.max_cq = 1 << 24;
  o.max_cqe = im.max_cqe;
  o.max_mr = 1 << im.general.log_max_mkey;
  o.max_pd = 1 << 24;
  o.max_qp_rd_atom = im.max_qp_rd_atom;
  o.max_qp_init_rd_atom = im.max_qp_rd_atom;
  o.atomic_cap = im.general.atomic ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
  o.max_pkeys = 128;
  o.phys_port_cnt = 1;
  const umr::OdpTransportCaps& rc = im.odp.rc;
  uint32_t t = 0;
  if (rc.send) t |= IBV_ODP_SUPPORT_SEND;
  if (rc.receive) t |= IBV_ODP_SUPPORT_RECV;
  if (rc.write) t |= IBV_ODP_SUPPORT_WRITE;
  if (rc.read) t |= IBV_ODP_SUPPORT_READ;
  if (rc.atomic) t |= IBV_ODP_SUPPORT_ATOMIC;
  if (t != 0) attr->odp_caps.general_caps = IBV_ODP_SUPPORT;
  attr->odp_caps.per_transport_caps.rc_odp_caps = t;
  return 0;
}

int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  if (port_num != 1 || attr_len < sizeof(ibv_port_attr)) return EINVAL;
  (void)context;
  std::memset(attr, 0, attr_len);
  attr->state = IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_1024;  // RoCE over a 1500-byte Ethernet MTU
  attr->gid_tbl_len = 2;
  attr->max_msg_sz = 1u << 30;
  attr->pkey_tbl_len = 1;
  attr->active_width = 2;   // 4x
  attr->active_speed = 64;  // 50 Gb/s per lane
  attr->phys_state = 5;     // link up
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

ibv_qp* CreateQp(ibv_context* context, ibv_pd* pd, const ibv_qp_init_attr& a, bool raw) {
  Device* dev = DevOf(context);
  if (dev->fatal()) return FailQp(EIO);
  if (a.qp_type != IBV_QPT_RC) return FailQp(EOPNOTSUPP);
  // Every object named must be of the context's file (uverbs finds them by handle there).
  if (pd == nullptr || a.send_cq == nullptr || a.recv_cq == nullptr || a.srq != nullptr ||
      FileOf(pd->context) != FileOf(context) || FileOf(a.send_cq->context) != FileOf(context) ||
      FileOf(a.recv_cq->context) != FileOf(context) || a.cap.max_send_wr == 0 ||
      a.cap.max_send_wr > dev->image().max_qp_wr || a.cap.max_send_sge > 30 ||
      a.cap.max_recv_wr > dev->image().max_qp_wr) {
    return FailQp(EINVAL);
  }
  auto* qp = new Qp;
  qp->pd = PdOf(pd);
  qp->send_cq = reinterpret_cast<Cq*>(a.send_cq);
  qp->dv = raw;
  qp->max_send_wr = a.cap.max_send_wr;
  qp->qp.context = context;
  qp->qp.qp_context = a.qp_context;
  qp->qp.pd = pd;
  qp->qp.send_cq = a.send_cq;
  qp->qp.recv_cq = a.recv_cq;
  qp->qp.qp_type = a.qp_type;
  qp->qp.state = IBV_QPS_RESET;
  if (raw) {
    // Sized as the provider sizes a queue whose WQEs may be two WQEBBs (a UMR's control, UMR
    // control and mkey context segments), to a power of two.
    uint32_t n = 4;
    while (n < 2 * a.cap.max_send_wr) n <<= 1;
    qp->wqe_cnt = n;
    qp->sq = AllocDeviceMemory(size_t{n} * umr::kWqebb);
    qp->snapshot = AllocDeviceMemory(size_t{n} * umr::kWqebb);
    qp->dbrec = AllocDeviceMemory(64);
    qp->bf = AllocDeviceMemory(4096);
  }
  base::MutexLock lock(&dev->mu);
  qp->qp.qp_num = qp->qp.handle = dev->next_qpn++;
  dev->qps[qp->qp.qp_num] = qp;
  Own(context, &Ufile::qps, qp);
  ++qp->pd->users;
  return &qp->qp;
}

int DestroyQp(ibv_qp* vqp) {
  Device* dev = DevOf(vqp->context);
  Qp* qp = reinterpret_cast<Qp*>(vqp);
  {
    base::MutexLock lock(&dev->mu);  // waits for the device thread's pass over it
    dev->qps.erase(vqp->qp_num);
    Disown(vqp->context, &Ufile::qps, qp);
    --qp->pd->users;
  }
  delete qp;
  return 0;
}

const char* WcStatusName(ibv_wc_status status) {
  static const char* const kNames[] = {"success",
                                       "local length error",
                                       "local QP operation error",
                                       "local EE context operation error",
                                       "local protection error",
                                       "Work Request Flushed Error",
                                       "memory management operation error",
                                       "bad response error",
                                       "local access error",
                                       "remote invalid request error",
                                       "remote access error",
                                       "remote operation error",
                                       "transport retry counter exceeded",
                                       "RNR retry counter exceeded",
                                       "local RDD violation error",
                                       "remote invalid RD request",
                                       "aborted error",
                                       "invalid EE context number",
                                       "invalid EE context state",
                                       "fatal error",
                                       "response timeout error",
                                       "general error",
                                       "TM error",
                                       "TM Rendezvous Request"};
  const auto i = static_cast<size_t>(status);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

}  // namespace regcache::hca::mlx5emu
