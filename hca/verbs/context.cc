#include "hca/verbs/context.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/status.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {

Context::~Context() {
  StopEventWatch();
  base::MutexLock lock(&mu_);
  for (auto& [index, w] : mws_) {
    if (int err = ibv_dealloc_mw(w.mw); err != 0) {
      RC_LOG(WARNING) << ErrnoStatus(err, "ibv_dealloc_mw at close");
    }
    if (w.cut != nullptr) ReleaseCut(w.cut);
  }
  for (auto& [index, r] : mrs_) {
    if (r.imported) {
      ibv_unimport_mr(r.mr);
      continue;
    }
    if (int err = ibv_dereg_mr(r.mr); err != 0) {
      RC_LOG(WARNING) << ErrnoStatus(err, "ibv_dereg_mr at close");
    }
  }
  for (auto& [pdn, pd] : pds_) {
    if (int err = ibv_dealloc_pd(pd); err != 0) {
      RC_LOG(WARNING) << ErrnoStatus(err, "ibv_dealloc_pd at close");
    }
  }
  ibv_close_device(ctx_);
}

absl::StatusOr<ibv_pd*> Context::FindPd(Pd pd) {
  base::MutexLock lock(&mu_);
  auto it = pds_.find(pd.pdn);
  if (it == pds_.end()) return absl::FailedPreconditionError(absl::StrFormat("no pd %d", pd.pdn));
  return it->second;
}

absl::StatusOr<Pd> Context::AddPd(ibv_pd* pd) {
  base::MutexLock lock(&mu_);
  const Pd p{next_pdn_++};
  pds_[p.pdn] = pd;
  return p;
}

absl::Status Context::RemovePd(Pd pd) {
  base::MutexLock lock(&mu_);
  auto it = pds_.find(pd.pdn);
  if (it == pds_.end()) return absl::NotFoundError(absl::StrFormat("no pd %d", pd.pdn));
  // The verb refuses (EBUSY) while regions, windows or queue pairs of the PD remain.
  if (int err = ibv_dealloc_pd(it->second); err != 0) {
    return ErrnoStatus(err, absl::StrFormat("ibv_dealloc_pd of pd %d", pd.pdn));
  }
  pds_.erase(it);
  return absl::OkStatus();
}

absl::Status Context::AddMr(const MrRecord& r) {
  base::MutexLock lock(&mu_);
  const uint32_t index = KeyIndex(r.mr->lkey);
  if (mrs_.contains(index) || mws_.contains(index)) {
    return absl::InternalError(
        absl::StrFormat("the device gave key index 0x%x twice (lkey 0x%08x)", index, r.mr->lkey));
  }
  mrs_[index] = r;
  stats_.live_backings.Add();
  return absl::OkStatus();
}

absl::Status Context::AddMw(ibv_mw* mw, Pd pd) {
  base::MutexLock lock(&mu_);
  const uint32_t index = KeyIndex(mw->rkey);
  if (mrs_.contains(index) || mws_.contains(index)) {
    return absl::InternalError(
        absl::StrFormat("the device gave key index 0x%x twice (rkey 0x%08x)", index, mw->rkey));
  }
  MwRecord w;
  w.mw = mw;
  w.pd = pd;
  w.key = mw->rkey;
  w.seq = next_seq_++;
  mws_[index] = w;
  stats_.live_windows.Add();
  return absl::OkStatus();
}

absl::StatusOr<MrRecord> Context::FindMr(Key key) {
  base::MutexLock lock(&mu_);
  auto it = mrs_.find(KeyIndex(key));
  if (it == mrs_.end()) {
    return absl::NotFoundError(absl::StrFormat("no memory region with key 0x%08x", key));
  }
  return it->second;
}

absl::Status Context::DestroyKey(Key key) {
  base::MutexLock lock(&mu_);
  const uint32_t index = KeyIndex(key);
  if (auto it = mws_.find(index); it != mws_.end()) {
    if (int err = ibv_dealloc_mw(it->second.mw); err != 0) {
      return ErrnoStatus(err, absl::StrFormat("ibv_dealloc_mw of key 0x%08x", key));
    }
    if (it->second.cut != nullptr) ReleaseCut(it->second.cut);  // unbound with the window
    mws_.erase(it);
    stats_.live_windows.Sub();
    return absl::OkStatus();
  }
  if (auto it = mrs_.find(index); it != mrs_.end()) {
    if (cut_backings_) {
      // Windows are bound on regions cut from this one, so the device would not refuse: refuse
      // as it would have, since their keys still reach this backing's memory.
      for (const auto& [windex, w] : mws_) {
        if (w.live && w.base == it->second.mr->lkey) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "ibv_dereg_mr of key 0x%08x: window 0x%08x is still bound on it", key, w.key));
        }
      }
    }
    if (it->second.imported) {
      ibv_unimport_mr(it->second.mr);  // the client's region: only forgotten here
    } else if (int err = ibv_dereg_mr(it->second.mr); err != 0) {
      // Refused by the device while windows are bound on the region.
      return ErrnoStatus(err, absl::StrFormat("ibv_dereg_mr of key 0x%08x", key));
    }
    for (auto& [windex, w] : mws_) {
      if (w.mr == it->second.mr) w.mr = nullptr;  // free windows remember their last region
    }
    mrs_.erase(it);
    stats_.live_backings.Sub();
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrFormat("no key with index 0x%x", index));
}

absl::StatusOr<KeyInfo> Context::QueryKey(Key key) {
  base::MutexLock lock(&mu_);
  const uint32_t index = KeyIndex(key);
  KeyInfo info;
  if (auto it = mws_.find(index); it != mws_.end()) {
    const MwRecord& w = it->second;
    info.key = w.key;
    info.free = !w.live;
    info.layout = Layout::kKlm;
    info.access_mode = 2;
    info.pd = w.pd;
    info.capacity_entries = 1;
    if (w.live) {
      info.access = w.access | kLocalRead;
      info.start_addr = w.start;
      info.length = w.length;
      info.klm.push_back(KlmEntry{w.parent, w.start, w.length});
    }
    return info;
  }
  if (auto it = mrs_.find(index); it != mrs_.end()) {
    const MrRecord& r = it->second;
    info.key = r.mr->lkey;
    info.free = false;
    info.layout = Layout::kMtt;
    info.access_mode = 1;
    info.access = r.access;
    info.pd = r.pd;
    info.start_addr = r.iova;
    info.length = r.length;
    info.log_entity_size = 12;
    info.capacity_entries = Pages4k(r.addr, r.length);
    return info;
  }
  return absl::NotFoundError(absl::StrFormat("no key with index 0x%x", index));
}

// Whether a PD of `ctx` can be imported (ibv_import_pd of a scratch PD).
static absl::Status ProbeImportOf(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) return ErrnoStatus(errno, "ibv_alloc_pd (probing PD import)");
  ibv_pd* imported = ibv_import_pd(ctx, pd->handle);
  const int err = errno;
  if (imported != nullptr) ibv_unimport_pd(imported);
  (void)ibv_dealloc_pd(pd);
  if (imported != nullptr) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrFormat(
      "%s: its provider cannot import a PD into another process (ibv_import_pd: %s)",
      ibv_get_device_name(ctx->device), std::strerror(err)));
}

absl::Status Context::ProbePdImport() {
  pd_import_ = ProbeImportOf(ctx_);
  return pd_import_;
}

absl::StatusOr<PdExport> Context::ExportPd(Pd pd) {
  RETURN_IF_ERROR(pd_import_);
  ASSIGN_OR_RETURN(ibv_pd * vpd, FindPd(pd));
  const int fd = fcntl(ctx_->cmd_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "dup of the device's command fd");
  return PdExport{fd, vpd->handle};
}

absl::StatusOr<Backing> Context::RegisterDmabuf(absl::string_view backend, Pd pd,
                                                const DmabufRange& buf, uint64_t length,
                                                uint64_t iova, AccessFlags access, unsigned flags) {
  if (length == 0) return absl::InvalidArgumentError("dma-buf range of length 0");
  if (buf.offset + length < buf.offset || iova + length < iova) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dma-buf range +0x%x/0x%x at iova 0x%x wraps around 2^64", buf.offset, length, iova));
  }
  ASSIGN_OR_RETURN(ibv_pd * vpd, FindPd(pd));
  ibv_mr* mr = ibv_reg_dmabuf_mr(vpd, buf.offset, length, iova, buf.fd, static_cast<int>(flags));
  if (mr == nullptr) {
    const int err = errno;
    if (err == EOPNOTSUPP || err == EPROTONOSUPPORT || err == ENOSYS) {
      return absl::UnimplementedError(
          absl::StrFormat("%s:%s cannot register dma-bufs: its provider or kernel driver refuses "
                          "(ibv_reg_dmabuf_mr: %s)",
                          backend, ibv_get_device_name(ctx_->device), std::strerror(err)));
    }
    if (err == EBADF || err == EINVAL) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dma-buf range +0x%x/0x%x refused (ibv_reg_dmabuf_mr: %s): not a dma-buf, or the "
          "range lies outside it",
          buf.offset, length, std::strerror(err)));
    }
    return ErrnoStatus(err, absl::StrFormat("ibv_reg_dmabuf_mr of +0x%x/0x%x", buf.offset, length));
  }
  MrRecord r{mr, pd, iova, iova, length, access | kLocalRead, false, true};
  if (absl::Status s = AddMr(r); !s.ok()) {
    (void)ibv_dereg_mr(mr);
    return s;
  }
  Backing b;
  b.key = mr->lkey;
  b.pd = pd;
  b.addr = iova;
  b.length = length;
  b.log_page_size = 12;
  b.num_entries = Pages4k(iova, length);
  return b;
}

absl::StatusOr<Backing> Context::ImportMr(Pd pd, const ImportedRegion& region) {
  RETURN_IF_ERROR(pd_import_);
  if (region.length == 0) return absl::InvalidArgumentError("imported region of length 0");
  if (region.iova + region.length < region.iova) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "imported region [0x%x, +0x%x) wraps around 2^64", region.iova, region.length));
  }
  ASSIGN_OR_RETURN(ibv_pd * vpd, FindPd(pd));
  ibv_mr* mr = ibv_import_mr(vpd, region.handle);
  if (mr == nullptr) {
    const int err = errno;
    if (err == EOPNOTSUPP) {
      return absl::UnimplementedError(
          absl::StrFormat("%s: its provider cannot import memory regions (ibv_import_mr: %s)",
                          ibv_get_device_name(ctx_->device), std::strerror(err)));
    }
    if (err == ENOENT || err == EINVAL) {
      return absl::NotFoundError(absl::StrFormat(
          "no memory region with handle %d in the session's device context (ibv_import_mr: %s)",
          region.handle, std::strerror(err)));
    }
    return ErrnoStatus(err, absl::StrFormat("ibv_import_mr of handle %d", region.handle));
  }
  if (mr->length != region.length) {
    const uint64_t actual = mr->length;
    ibv_unimport_mr(mr);
    return absl::InvalidArgumentError(
        absl::StrFormat("memory region %d is 0x%x bytes long, not 0x%x as stated", region.handle,
                        actual, region.length));
  }
  MrRecord r{mr, pd, region.iova, region.iova, region.length, region.access | kLocalRead, true};
  {
    base::MutexLock lock(&mu_);
    const uint32_t index = KeyIndex(mr->lkey);
    if (mrs_.contains(index) || mws_.contains(index)) {
      const uint32_t lkey = mr->lkey;  // read before the unimport frees it
      ibv_unimport_mr(mr);
      return absl::AlreadyExistsError(absl::StrFormat(
          "memory region %d (lkey 0x%08x) is already a key of this device: the daemon's own "
          "memory, or a region imported before",
          region.handle, lkey));
    }
    mrs_[index] = r;
    stats_.live_backings.Add();
  }
  Backing b;
  b.key = mr->lkey;
  b.pd = pd;
  b.addr = region.iova;
  b.length = region.length;
  b.log_page_size = 12;
  b.num_entries = Pages4k(region.iova, region.length);
  return b;
}

uint32_t RandomPsn() {
  absl::BitGen gen;
  return absl::Uniform<uint32_t>(gen, 0, 1u << 24);
}

void DestroyQpAndCq(ibv_qp* qp, ibv_cq* cq, const char* what) {
  if (qp != nullptr) {
    if (int err = ibv_destroy_qp(qp); err != 0) RC_LOG(WARNING) << ErrnoStatus(err, what);
  }
  if (cq != nullptr) {
    if (int err = ibv_destroy_cq(cq); err != 0) RC_LOG(WARNING) << ErrnoStatus(err, what);
  }
}

absl::StatusOr<ibv_qp*> CreateRcQp(ibv_pd* pd, ibv_cq* cq, uint32_t send_wr) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (qp == nullptr) return ErrnoStatus(errno, "ibv_create_qp");
  return qp;
}

absl::Status QpToInit(const Context& c, ibv_qp* qp, unsigned access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = c.options().port;
  a.qp_access_flags = access;
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  if (int err = ibv_modify_qp(qp, &a, mask); err != 0) return ErrnoStatus(err, "qp to INIT");
  return absl::OkStatus();
}

absl::Status QpToRtr(const Context& c, ibv_qp* qp, const EndpointAddress& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  const uint32_t local_mtu = MtuBytes(c.port_attr.active_mtu);
  const uint32_t mtu = remote.mtu == 0 ? local_mtu : std::min(remote.mtu, local_mtu);
  a.path_mtu = MtuFromBytes(mtu).value_or(IBV_MTU_1024);
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = static_cast<uint8_t>(std::clamp(c.attr.orig_attr.max_qp_rd_atom, 1, 16));
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = c.options().port;
  a.ah_attr.dlid = remote.lid;
  bool any_gid = false;
  for (uint8_t b : remote.gid) any_gid |= b != 0;
  if (c.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET || any_gid) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(c.options().gid_index);
    a.ah_attr.grh.hop_limit = 64;
  }
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (int err = ibv_modify_qp(qp, &a, mask); err != 0) return ErrnoStatus(err, "qp to RTR");
  return absl::OkStatus();
}

absl::Status QpToRts(const Context& c, ibv_qp* qp, uint32_t psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = psn;
  a.max_rd_atomic = static_cast<uint8_t>(std::clamp(c.attr.orig_attr.max_qp_init_rd_atom, 1, 16));
  const int mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  if (int err = ibv_modify_qp(qp, &a, mask); err != 0) return ErrnoStatus(err, "qp to RTS");
  return absl::OkStatus();
}

absl::Status ConnectToSelf(const Context& c, ibv_qp* qp, unsigned access, uint32_t psn) {
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  if (int err = ibv_modify_qp(qp, &reset, IBV_QP_STATE); err != 0) {
    return ErrnoStatus(err, "qp to RESET");
  }
  RETURN_IF_ERROR(QpToInit(c, qp, access));
  RETURN_IF_ERROR(QpToRtr(c, qp, LocalAddress(c, qp->qp_num, psn)));
  return QpToRts(c, qp, psn);
}

EndpointAddress LocalAddress(const Context& c, uint32_t qpn, uint32_t psn) {
  EndpointAddress a;
  a.qpn = qpn;
  a.psn = psn;
  std::memcpy(a.gid.data(), c.gid.raw, 16);
  a.lid = c.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? 0 : c.port_attr.lid;
  a.mtu = MtuBytes(c.port_attr.active_mtu);
  return a;
}

std::optional<ibv_mtu> MtuFromBytes(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return std::nullopt;
  }
}

uint32_t MtuBytes(ibv_mtu mtu) { return 128u << static_cast<int>(mtu); }

unsigned RemoteAccessFlags(AccessFlags access) {
  unsigned f = 0;
  if (access & kRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  if (access & kRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE;
  if (access & kRemoteAtomic) f |= IBV_ACCESS_REMOTE_ATOMIC;
  return f;
}

absl::StatusOr<std::unique_ptr<Context>> OpenContext(const VerbsOptions& options,
                                                     const ContextOpener& opener) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const std::string wanted =
      options.device_name.empty() ? "any" : absl::StrCat("'", options.device_name, "'");
  if (list == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(opener.backend, ": no RDMA devices on this machine (wanted ", wanted, "; ",
                     ErrnoStatus(errno, "ibv_get_device_list").message(), ")"));
  }
  std::vector<std::string> seen;
  std::vector<std::string> why;
  std::unique_ptr<Context> found;
  for (int i = 0; i < n && found == nullptr; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    seen.push_back(name);
    if (!options.device_name.empty() && name != options.device_name) continue;
    ibv_context* ctx = opener.open ? opener.open(list[i]) : ibv_open_device(list[i]);
    if (ctx == nullptr) {
      why.push_back(absl::StrCat(name, ": ", ErrnoStatus(errno, opener.open_call).message()));
      continue;
    }
    auto c = std::make_unique<Context>(ctx, options);
    if (ibv_query_device_ex(ctx, nullptr, &c->attr) != 0 ||
        ibv_query_port(ctx, options.port, &c->port_attr) != 0 ||
        ibv_query_gid(ctx, options.port, options.gid_index, &c->gid) != 0) {
      why.push_back(absl::StrFormat("%s: cannot query port %d / gid %d", name, options.port,
                                    options.gid_index));
      continue;  // the context closes with `c`
    }
    if (c->port_attr.state != IBV_PORT_ACTIVE) {
      why.push_back(absl::StrFormat("%s: port %d is not active", name, options.port));
      continue;
    }
    const bool windows = (c->attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0 &&
                         c->attr.orig_attr.max_mw != 0;
    if (opener.require_memory_windows && !windows) {
      why.push_back(absl::StrCat(name, ": no memory windows (IBV_DEVICE_MEM_WINDOW)"));
      continue;
    }
    found = std::move(c);
  }
  ibv_free_device_list(list);
  if (found == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("%s: no usable device (wanted %s); devices seen: [%s]%s", opener.backend,
                        wanted, absl::StrJoin(seen, ", "),
                        why.empty() ? "" : absl::StrCat("; ", absl::StrJoin(why, "; "))));
  }
  return found;
}

}  // namespace regcache::hca::verbs
