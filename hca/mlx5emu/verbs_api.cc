// libibverbs' entry points, as rdma-core 44 declares them (infiniband/verbs.h), for the
// emulated devices. Each validates what libibverbs and the kernel's uverbs/mlx5 driver
// validate, reports failure as they do (NULL and errno, or the errno returned), and keeps the
// object behind the handle it returns (internal/emu.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hca/mlx5emu/internal/emu.h"
#include "hca/mlx5emu/internal/verbs_ops.h"
#include "hca/sim/sim_core.h"
#include "umr/mkey.h"

using namespace regcache::hca::mlx5emu;  // NOLINT: C entry points implement this namespace's API

namespace {

template <typename T>
T* Fail(int err) {
  errno = err;
  return nullptr;
}

regcache::hca::AccessFlags AccessOf(unsigned ibv) {
  regcache::hca::AccessFlags a = regcache::hca::kLocalRead;
  if (ibv & IBV_ACCESS_LOCAL_WRITE) a |= regcache::hca::kLocalWrite;
  if (ibv & IBV_ACCESS_REMOTE_READ) a |= regcache::hca::kRemoteRead;
  if (ibv & IBV_ACCESS_REMOTE_WRITE) a |= regcache::hca::kRemoteWrite;
  if (ibv & IBV_ACCESS_REMOTE_ATOMIC) a |= regcache::hca::kRemoteAtomic;
  return a;
}

ibv_mr* RegMr(ibv_pd* vpd, void* addr, size_t length, uint64_t iova, unsigned access) {
  Pd* pd = PdOf(vpd);
  Device* dev = DevOf(vpd->context);
  if (dev->fatal()) return Fail<ibv_mr>(EIO);
  if (const int err = GetFaults().fail_next_reg_mr.exchange(0); err != 0) {
    return Fail<ibv_mr>(err);
  }
  constexpr unsigned kKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                              IBV_ACCESS_ON_DEMAND | IBV_ACCESS_RELAXED_ORDERING |
                              IBV_ACCESS_MW_BIND;
  // ib_check_mr_access: remote write or atomic needs local write.
  if ((access & ~kKnown) != 0 || length == 0 ||
      ((iova ^ reinterpret_cast<uint64_t>(addr)) & 4095) != 0 ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
       (access & IBV_ACCESS_LOCAL_WRITE) == 0)) {
    return Fail<ibv_mr>(EINVAL);
  }
  const bool odp = (access & IBV_ACCESS_ON_DEMAND) != 0;
  if (odp && dev->image().odp.rc == regcache::umr::OdpTransportCaps{}) {
    return Fail<ibv_mr>(EOPNOTSUPP);
  }
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  absl::StatusOr<std::vector<uint8_t>> mailbox = regcache::hca::sim::HcaCore::MttKeyMailboxAt(
      pd->pdn, a, iova, length, AccessOf(access), 12, odp);
  if (!mailbox.ok()) return Fail<ibv_mr>(EINVAL);
  absl::StatusOr<uint32_t> index = dev->core().CreateMkey(*mailbox, odp);
  if (!index.ok()) return Fail<ibv_mr>(absl::IsResourceExhausted(index.status()) ? ENOMEM : EINVAL);
  auto* mr = new Mr;
  mr->index = *index;
  mr->owner = pd;
  mr->on_demand = odp;
  mr->mr.context = vpd->context;
  mr->mr.pd = vpd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = *index;
  mr->mr.lkey = mr->mr.rkey = regcache::umr::MakeKey(*index, 0);
  regcache::base::MutexLock lock(&dev->mu);
  dev->mrs[*index] = mr;
  Own(vpd->context, &Ufile::mrs, mr);
  ++pd->users;
  return &mr->mr;
}

}  // namespace

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  const std::vector<Device*>& devices = Devices();
  auto** list = new ibv_device*[devices.size() + 1];
  for (size_t i = 0; i < devices.size(); ++i) list[i] = devices[i]->ibv();
  list[devices.size()] = nullptr;
  if (num_devices != nullptr) *num_devices = static_cast<int>(devices.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) { delete[] list; }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

ibv_context* ibv_open_device(ibv_device* device) { return OpenContext(device, false); }

int ibv_close_device(ibv_context* context) { return CloseContext(context); }

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  ibv_device_attr_ex ex{};
  const int rc = QueryDeviceEx(context, nullptr, &ex, sizeof(ex));
  if (rc == 0) *attr = ex.orig_attr;
  return rc;
}

int(ibv_query_port)(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* attr) {
  // The fallback of the header's inline passes an ibv_port_attr it cleared.
  return QueryPort(context, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                   sizeof(ibv_port_attr));
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  Device* dev = DevOf(context);
  if (port_num != 1 || index < 0 || index > 1) return -1;
  *gid = GidOf(dev);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Device* dev = DevOf(context);
  if (dev->fatal()) return Fail<ibv_pd>(EIO);
  auto* pd = new Pd;
  pd->pdn = dev->core().AllocPd();
  pd->pd.context = context;
  pd->pd.handle = pd->pdn;
  regcache::base::MutexLock lock(&dev->mu);
  Own(context, &Ufile::pds, pd);
  return &pd->pd;
}

// An imported PD's handle is released with ibv_unimport_pd; the emulator refuses to destroy
// the file's PD through it (the PD stays its allocator's).
int ibv_dealloc_pd(ibv_pd* vpd) {
  if (reinterpret_cast<Pd*>(vpd)->origin != nullptr) return EINVAL;
  Pd* pd = PdOf(vpd);
  Device* dev = DevOf(vpd->context);
  {
    regcache::base::MutexLock lock(&dev->mu);
    if (pd->users != 0) return EBUSY;
    Disown(vpd->context, &Ufile::pds, pd);
  }
  (void)dev->core().DeallocPd(pd->pdn);
  delete pd;
  return 0;
}

ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return RegMr(pd, addr, length, reinterpret_cast<uint64_t>(addr), static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  return RegMr(pd, addr, length, iova, access);
}

// The kernel's ib_umem_dmabuf_get: the fd must be a dma-buf and the range within it. The device
// then reaches the exporter's pages; the emulator maps the buffer to play that DMA (udmabuf's
// can be mapped), so the key translates [iova, +length) into the mapping.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* vpd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  Device* dev = DevOf(vpd->context);
  if (dev->fatal()) return Fail<ibv_mr>(EIO);
  if ((static_cast<unsigned>(access) & IBV_ACCESS_ON_DEMAND) != 0) return Fail<ibv_mr>(EINVAL);
  if (!regcache::hca::IsDmabuf(fd)) return Fail<ibv_mr>(fd < 0 ? EBADF : EINVAL);
  if (((offset ^ iova) & 4095) != 0) return Fail<ibv_mr>(EINVAL);
  absl::StatusOr<std::unique_ptr<regcache::hca::DmabufMapping>> m =
      regcache::hca::DmabufMapping::Map(fd, offset & ~uint64_t{4095}, length + (offset & 4095));
  if (!m.ok()) return Fail<ibv_mr>(EINVAL);
  ibv_mr* vmr =
      RegMr(vpd, (*m)->data() + (offset & 4095), length, iova, static_cast<unsigned>(access));
  if (vmr != nullptr) {
    reinterpret_cast<Mr*>(vmr)->dmabuf = std::move(*m);
    vmr->addr = reinterpret_cast<void*>(offset);  // as libibverbs reports a dma-buf's
  }
  return vmr;
}

// As for PDs, an imported region's handle is released with ibv_unimport_mr.
int ibv_dereg_mr(ibv_mr* vmr) {
  Mr* mr = reinterpret_cast<Mr*>(vmr);
  if (mr->imported) return EINVAL;
  Device* dev = DevOf(vmr->context);
  if (!dev->core().DestroyMkey(mr->index).ok()) return EINVAL;
  {
    regcache::base::MutexLock lock(&dev->mu);
    dev->mrs.erase(mr->index);
    Disown(vmr->context, &Ufile::mrs, mr);
    --mr->owner->users;
  }
  delete mr;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  Device* dev = DevOf(context);
  if (dev->fatal()) return Fail<ibv_cq>(EIO);
  if (cqe <= 0 || cqe > dev->image().max_cqe || channel != nullptr || comp_vector != 0) {
    return Fail<ibv_cq>(EINVAL);
  }
  Cq* cq = NewCq(dev, context, cqe).release();
  cq->cq.cq_context = cq_context;
  regcache::base::MutexLock lock(&dev->mu);
  Own(context, &Ufile::cqs, cq);
  return &cq->cq;
}

int ibv_destroy_cq(ibv_cq* vcq) {
  Cq* cq = reinterpret_cast<Cq*>(vcq);
  Device* dev = DevOf(vcq->context);
  {
    regcache::base::MutexLock lock(&dev->mu);
    for (const auto& [qpn, qp] : dev->qps) {
      if (qp->send_cq == cq || qp->qp.recv_cq == vcq) return EBUSY;
    }
    Disown(vcq->context, &Ufile::cqs, cq);
  }
  delete cq;
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return CreateQp(pd->context, pd, *attr, /*raw=*/false);
}

int ibv_destroy_qp(ibv_qp* qp) { return DestroyQp(qp); }

int ibv_modify_qp(ibv_qp* vqp, ibv_qp_attr* attr, int attr_mask) {
  Device* dev = DevOf(vqp->context);
  regcache::base::MutexLock lock(&dev->mu);
  return ModifyQp(dev, reinterpret_cast<Qp*>(vqp), *attr, attr_mask);
}

const char* ibv_wc_status_str(ibv_wc_status status) { return WcStatusName(status); }

// The next asynchronous event of the context, as from the kernel's async event file: blocks
// until one is queued, unless the caller made async_fd non-blocking (then -1, EAGAIN).
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Context* c = CtxOf(context);
  for (;;) {
    {
      regcache::base::MutexLock lock(&c->dev->mu);
      if (!c->events.empty()) {
        *event = ibv_async_event{};
        event->event_type = c->events.front();
        c->events.pop_front();
        return 0;
      }
    }
    uint64_t count = 0;
    if (read(c->async_fd.get(), &count, sizeof(count)) == sizeof(count)) continue;
    if (errno != EINTR) return -1;  // EAGAIN on a non-blocking fd, as the kernel's file
  }
}

void ibv_ack_async_event(ibv_async_event*) {}

// Importing (rdma-core's ibv_import_device / ibv_import_pd / ibv_import_mr): a context on the
// file the command fd belongs to, and handles of that file's PDs and regions; a handle of any
// other file is unknown there (EINVAL, as uverbs' lookup by handle). Within this process only.
ibv_context* ibv_import_device(int cmd_fd) { return ImportContext(cmd_fd); }

ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  Device* dev = DevOf(context);
  if (dev->fatal()) return Fail<ibv_pd>(EIO);
  regcache::base::MutexLock lock(&dev->mu);
  for (Pd* pd : FileOf(context)->pds) {
    if (pd->pd.handle != pd_handle) continue;
    auto* imported = new Pd;
    imported->pd = pd->pd;
    imported->pd.context = context;
    imported->pdn = pd->pdn;
    imported->origin = pd;
    return &imported->pd;
  }
  return Fail<ibv_pd>(EINVAL);
}

void ibv_unimport_pd(ibv_pd* pd) {
  if (pd != nullptr && reinterpret_cast<Pd*>(pd)->origin != nullptr) {
    delete reinterpret_cast<Pd*>(pd);
  }
}

ibv_mr* ibv_import_mr(ibv_pd* vpd, uint32_t mr_handle) {
  Device* dev = DevOf(vpd->context);
  if (dev->fatal()) return Fail<ibv_mr>(EIO);
  regcache::base::MutexLock lock(&dev->mu);
  for (Mr* mr : FileOf(vpd->context)->mrs) {
    if (mr->mr.handle != mr_handle) continue;
    auto* imported = new Mr;
    imported->mr = mr->mr;
    imported->mr.context = vpd->context;
    imported->mr.pd = vpd;
    imported->index = mr->index;
    imported->owner = mr->owner;
    imported->imported = true;
    imported->on_demand = mr->on_demand;
    return &imported->mr;
  }
  return Fail<ibv_mr>(EINVAL);
}

void ibv_unimport_mr(ibv_mr* mr) {
  if (mr != nullptr && reinterpret_cast<Mr*>(mr)->imported) delete reinterpret_cast<Mr*>(mr);
}

}  // extern "C"
