#include "hca/mlx5/mlx5_device.h"

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "hca/mlx5/internal/caps.h"
#include "hca/mlx5/internal/devx.h"
#include "hca/mlx5/internal/prm_compat.h"
#include "hca/mlx5/internal/umr_queue.h"
#include "hca/prm_convert.h"
#include "hca/verbs/context.h"
#include "hca/verbs/endpoint.h"
#include "hca/verbs/wc_status.h"
#include "umr/mailbox.h"
#include "umr/segments.h"

namespace regcache::hca::mlx5 {
namespace {

using verbs::ErrnoStatus;

// One pooled key: how it was made (and so how it is destroyed and queried).
struct MkeyRecord {
  std::variant<DevxMkey, mlx5dv_mkey*> made;
  Pd pd;
  uint32_t capacity = 0;  // translation entries, as created (QUERY_MKEY reads that many)
};

// What the device keeps per PD next to verbs::Context's table: the PRM pdn that mailboxes carry.
struct PdRecord {
  ibv_pd* vpd = nullptr;
  uint32_t pdn = 0;  // mlx5dv_pd::pdn
};

// The region's rights: keys mapped over it are checked against them too. Atomics only where the
// device has them (ibv_reg_mr refuses them otherwise).
unsigned VerbsAccess(AccessFlags access, bool atomics) {
  unsigned f = IBV_ACCESS_LOCAL_WRITE;  // pinning for DMA writes needs it
  if (access & kRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  if (access & kRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE;
  if ((access & kRemoteAtomic) && atomics) f |= IBV_ACCESS_REMOTE_ATOMIC;
  return f;
}

// Whether a failed DevX CREATE_MKEY is "DevX may not do this here" (then mlx5dv may).
bool DevxRefused(const absl::Status& s) {
  return absl::IsPermissionDenied(s) || absl::IsUnimplemented(s);
}

class Mlx5Device final : public Device {
 public:
  Mlx5Device(std::unique_ptr<verbs::Context> c, Capabilities caps, umr::HcaCaps hca,
             const Mlx5Options& options, const OpenOptions& open)
      : c_(std::move(c)), caps_(std::move(caps)), hca_(hca), options_(options) {
    if (open.stats_registry != nullptr) {
      registration_ = base::stats::Registration(
          *open.stats_registry, open.stats_component.empty() ? "hca_mlx5" : open.stats_component,
          &stats_);
    }
  }

  ~Mlx5Device() override {
    registration_ = {};
    // Pooled keys before the PDs the context releases.
    base::MutexLock lock(&mu_);
    for (auto& [index, r] : mkeys_) (void)DestroyMade(r);
    mkeys_.clear();
  }

  const Capabilities& capabilities() const override { return caps_; }
  absl::Status Health() const override { return c_->health(); }

  absl::StatusOr<Pd> AllocPd() override {
    ibv_pd* vpd = ibv_alloc_pd(c_->ctx());
    if (vpd == nullptr) return ErrnoStatus(errno, "mlx5: ibv_alloc_pd");
    mlx5dv_pd dv{};
    mlx5dv_obj obj{};
    obj.pd.in = vpd;
    obj.pd.out = &dv;
    if (const int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD); rc != 0) {
      (void)ibv_dealloc_pd(vpd);
      return ErrnoStatus(rc, "mlx5: mlx5dv_init_obj(PD)");
    }
    absl::StatusOr<Pd> pd = c_->AddPd(vpd);
    if (!pd.ok()) {
      (void)ibv_dealloc_pd(vpd);
      return pd.status();
    }
    base::MutexLock lock(&mu_);
    pds_[pd->pdn] = PdRecord{vpd, dv.pdn};
    return *pd;
  }

  absl::Status DeallocPd(Pd pd) override {
    RETURN_IF_ERROR(c_->RemovePd(pd));
    base::MutexLock lock(&mu_);
    pds_.erase(pd.pdn);
    return absl::OkStatus();
  }

  absl::StatusOr<Backing> RegisterBacking(Pd pd, uint64_t addr, uint64_t length, AccessFlags access,
                                          const BackingOptions& options) override {
    if (length == 0) return absl::InvalidArgumentError("backing of length 0");
    if (addr + length < addr) return absl::InvalidArgumentError("backing wraps 2^64");
    if (options.iova.has_value()) {
      return absl::UnimplementedError("mlx5: backings speak the daemon's addresses (no iova)");
    }
    if (options.log_page_size != 12) {
      return absl::InvalidArgumentError(absl::StrCat("mlx5: page size 2^", options.log_page_size,
                                                     " (ibv_reg_mr chooses; ask for 2^12)"));
    }
    if (options.on_demand && !caps_.odp) {
      return absl::UnimplementedError(
          absl::StrCat("mlx5: ", caps_.device_name, " has no RC on-demand paging"));
    }
    ASSIGN_OR_RETURN(ibv_pd * vpd, c_->FindPd(pd));
    unsigned flags = VerbsAccess(access, caps_.atomics);
    if (options.on_demand) flags |= IBV_ACCESS_ON_DEMAND;
    ibv_mr* mr = ibv_reg_mr(vpd, reinterpret_cast<void*>(addr), length, static_cast<int>(flags));
    if (mr == nullptr) return ErrnoStatus(errno, "mlx5: ibv_reg_mr");
    verbs::MrRecord r{mr, pd, addr, addr, length, access | kLocalRead};
    if (absl::Status s = c_->AddMr(r); !s.ok()) {
      (void)ibv_dereg_mr(mr);
      return s;
    }
    stats_.backings_registered.Inc();
    stats_.registered_bytes.Inc(length);
    if (options.on_demand) {
      base::MutexLock lock(&mu_);
      odp_backings_.emplace(KeyIndex(mr->lkey), true);
    }
    Backing b;
    b.key = mr->lkey;
    b.pd = pd;
    b.addr = addr;
    b.length = length;
    b.log_page_size = 12;
    b.num_entries = verbs::Pages4k(addr, length);
    b.on_demand = options.on_demand;
    return b;
  }

  absl::StatusOr<Backing> RegisterDmabufBacking(Pd pd, const DmabufRange& buf, uint64_t length,
                                                uint64_t iova, AccessFlags access) override {
    const unsigned flags = VerbsAccess(access, caps_.atomics);
    ASSIGN_OR_RETURN(Backing b, c_->RegisterDmabuf("mlx5", pd, buf, length, iova, access, flags));
    stats_.backings_registered.Inc();
    stats_.registered_bytes.Inc(length);
    return b;
  }

  absl::StatusOr<std::vector<Key>> CreateIndirectKeys(Pd pd, uint32_t capacity, uint32_t count,
                                                      const IndirectKeyOptions& o) override {
    ASSIGN_OR_RETURN(const PdRecord rec, FindPd(pd));
    if (o.layout == Layout::kKsm && !caps_.ksm) {
      return absl::UnimplementedError("mlx5: this device has no KSM (fixed_buffer_size)");
    }
    ASSIGN_OR_RETURN(const umr::FreeMkeyParams p,
                     IndirectKeyParams(Pd{rec.pdn}, capacity, caps_.max_klm_entries, o));
    ASSIGN_OR_RETURN(const std::vector<uint8_t> mailbox, PoolKeyMailbox(p));
    std::vector<Key> keys;
    keys.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      absl::StatusOr<Key> k = CreateOne(pd, rec, p, mailbox);
      if (!k.ok()) {
        for (Key made : keys) (void)DestroyKey(made);
        return k.status();
      }
      keys.push_back(*k);
    }
    return keys;
  }

  absl::StatusOr<std::vector<Key>> CreateDirectKeys(Pd, uint32_t, uint32_t,
                                                    const DirectKeyOptions&) override {
    return absl::UnimplementedError(
        "mlx5: no pooled MTT keys (MTT entries are bus addresses only the kernel knows)");
  }

  absl::Status DestroyKey(Key key) override {
    {
      base::MutexLock lock(&mu_);
      auto it = mkeys_.find(KeyIndex(key));
      if (it != mkeys_.end()) {
        RETURN_IF_ERROR(DestroyMade(it->second));
        mkeys_.erase(it);
        return absl::OkStatus();
      }
    }
    RETURN_IF_ERROR(c_->DestroyKey(key));
    base::MutexLock lock(&mu_);
    odp_backings_.erase(KeyIndex(key));
    return absl::OkStatus();
  }

  absl::StatusOr<KeyInfo> QueryKey(Key key) override {
    MkeyRecord r;
    {
      base::MutexLock lock(&mu_);
      auto it = mkeys_.find(KeyIndex(key));
      if (it == mkeys_.end()) return c_->QueryKey(key);
      r = it->second;
    }
    const DevxMkey* m = std::get_if<DevxMkey>(&r.made);
    if (m == nullptr) {
      return absl::UnimplementedError(absl::StrFormat(
          "mlx5: key 0x%08x was made by mlx5dv_create_mkey, which QUERY_MKEY cannot see", key));
    }
    ASSIGN_OR_RETURN(std::vector<uint8_t> out, QueryMkey(*m, r.capacity, 16));
    ASSIGN_OR_RETURN(const umr::QueryMkeyOut o, umr::DecodeQueryMkeyOut(out));
    ASSIGN_OR_RETURN(KeyInfo info, KeyInfoFromQuery(m->index, o));
    info.pd = r.pd;  // the device's pdn, said as the caller's PD
    return info;
  }

  absl::StatusOr<std::unique_ptr<Queue>> CreateQueue(Pd pd, const QueueOptions& o) override {
    if (o.depth == 0 || (o.depth & (o.depth - 1)) != 0 || o.depth > caps_.max_queue_depth) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "queue depth %d is not a power of two up to %d", o.depth, caps_.max_queue_depth));
    }
    ASSIGN_OR_RETURN(const PdRecord rec, FindPd(pd));
    UmrQueueParams p;
    p.umr_fence = UmrFence(hca_.umr_fence);
    p.modify = {caps_.umr_modify_atomic, caps_.umr_modify_entity_size};
    p.max_inline_klm = caps_.max_inline_klm;
    p.pointer_umr = caps_.umr_pointer_translation;
    p.doorbell_mu = &doorbell_mu_;
    ASSIGN_OR_RETURN(std::unique_ptr<UmrQueue> q,
                     UmrQueue::Create(c_.get(), pd, rec.vpd, o.depth, p));
    stats_.queues_created.Inc();
    return std::unique_ptr<Queue>(std::move(q));
  }

  absl::StatusOr<std::unique_ptr<Peer>> CreatePeer(Pd pd) override {
    return verbs::NewRequesterPeer(c_.get(), pd, "mlx5: the peer sends no SEND with invalidate",
                                   "mlx5: the peer offers remote accesses only");
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(
      Pd pd, const EndpointOptions& options) override {
    ASSIGN_OR_RETURN(std::unique_ptr<verbs::TargetEndpoint> e,
                     verbs::TargetEndpoint::Create(c_.get(), pd, options));
    stats_.endpoints_created.Inc();
    return std::unique_ptr<Endpoint>(std::move(e));
  }

  absl::StatusOr<FaultEvent> NextFaultEvent(absl::Duration) override {
    return absl::UnimplementedError("mlx5: the kernel serves ODP faults (no events reach us)");
  }
  int FaultEventFd() override { return -1; }
  absl::Status ResumeFault(uint64_t, bool) override {
    return absl::UnimplementedError("mlx5: the kernel serves ODP faults (nothing to resume)");
  }

  absl::Status Prefetch(Key backing, uint64_t addr, uint64_t length, bool write) override {
    {
      base::MutexLock lock(&mu_);
      if (!odp_backings_.contains(KeyIndex(backing))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("mlx5: key 0x%08x is not an on-demand backing", backing));
      }
    }
    ASSIGN_OR_RETURN(const verbs::MrRecord r, c_->FindMr(backing));
    if (length == 0 || addr < r.addr || addr - r.addr > r.length ||
        length > r.length - (addr - r.addr) || length > UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "mlx5: prefetch [0x%x, +%u) outside backing 0x%08x [0x%x, +%u) or over 4 GiB", addr,
          length, backing, r.addr, r.length));
    }
    ibv_sge sge{addr, static_cast<uint32_t>(length), r.mr->lkey};
    const int rc = ibv_advise_mr(
        r.mr->pd, write ? IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE : IBV_ADVISE_MR_ADVICE_PREFETCH,
        IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
    if (rc != 0) return ErrnoStatus(rc, "mlx5: ibv_advise_mr");
    stats_.prefetches.Inc();
    return absl::OkStatus();
  }

  // Clients' own PDs and memory (docs/client_memory.md): the mlx5 provider implements the
  // import verbs, so a client imports the session's PD and registers its memory there; keys
  // map over that region as over the daemon's own backings.
  absl::StatusOr<PdExport> ExportPd(Pd pd) override { return c_->ExportPd(pd); }
  absl::StatusOr<Backing> ImportBacking(Pd pd, const ImportedRegion& region) override {
    return c_->ImportMr(pd, region);
  }

 private:
  absl::StatusOr<PdRecord> FindPd(Pd pd) {
    base::MutexLock lock(&mu_);
    auto it = pds_.find(pd.pdn);
    if (it == pds_.end()) return absl::InvalidArgumentError(absl::StrCat("mlx5: no pd ", pd.pdn));
    return it->second;
  }

  // One pooled key by the configured API. Records it.
  absl::StatusOr<Key> CreateOne(Pd pd, const PdRecord& rec, const umr::FreeMkeyParams& p,
                                absl::Span<const uint8_t> mailbox) {
    MkeyRecord r{DevxMkey{}, pd, (p.capacity_entries + 3) / 4 * 4};  // as the mailbox rounds
    Key key = 0;
    absl::Status devx = absl::OkStatus();
    if (options_.mkey_api != MkeyApi::kMlx5dv) {
      absl::StatusOr<DevxMkey> m = CreateMkey(c_->ctx(), mailbox);
      if (m.ok()) {
        r.made = *m;
        key = MakeKey(m->index, 0);
      } else {
        stats_.command_errors.Inc();
        devx = m.status();
        if (options_.mkey_api == MkeyApi::kDevx || !DevxRefused(devx)) return devx;
      }
    }
    if (options_.mkey_api == MkeyApi::kMlx5dv || !devx.ok()) {
      ASSIGN_OR_RETURN(mlx5dv_mkey * m, CreateByMlx5dv(rec, p));
      r.made = m;
      key = m->lkey;
      stats_.mkeys_created_mlx5dv.Inc();
    }
    stats_.mkeys_created.Inc();
    stats_.live_mkeys.Add();
    base::MutexLock lock(&mu_);
    mkeys_[KeyIndex(key)] = r;
    return key;
  }

  absl::StatusOr<mlx5dv_mkey*> CreateByMlx5dv(const PdRecord& rec, const umr::FreeMkeyParams& p) {
    if (p.mode != umr::AccessMode::kKlm) {
      return absl::UnimplementedError("mlx5: mlx5dv_create_mkey makes KLM keys only");
    }
    mlx5dv_mkey_init_attr a{};
    a.pd = rec.vpd;
    a.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
    if (p.en_rinval) a.create_flags |= MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
    a.max_entries = static_cast<uint16_t>(std::min<uint32_t>(p.capacity_entries, 65532));
    mlx5dv_mkey* m = mlx5dv_create_mkey(&a);
    if (m == nullptr) return ErrnoStatus(errno, "mlx5: mlx5dv_create_mkey");
    return m;
  }

  absl::Status DestroyMade(const MkeyRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status s;
    if (const DevxMkey* m = std::get_if<DevxMkey>(&r.made)) {
      s = DestroyMkey(*m);
    } else if (const int rc = mlx5dv_destroy_mkey(std::get<mlx5dv_mkey*>(r.made)); rc != 0) {
      s = ErrnoStatus(rc, "mlx5: mlx5dv_destroy_mkey");
    }
    if (s.ok()) {
      stats_.mkeys_destroyed.Inc();
      stats_.live_mkeys.Sub();
    } else {
      stats_.command_errors.Inc();
    }
    return s;
  }

  std::unique_ptr<verbs::Context> c_;
  const Capabilities caps_;
  const umr::HcaCaps hca_;
  const Mlx5Options options_;
  Mlx5Stats stats_;
  base::stats::Registration registration_;
  base::Mutex doorbell_mu_;  // UAR pages may be shared between queues
  base::Mutex mu_;
  absl::flat_hash_map<uint32_t, PdRecord> pds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, MkeyRecord> mkeys_ ABSL_GUARDED_BY(mu_);  // by key index
  absl::flat_hash_map<uint32_t, bool> odp_backings_ ABSL_GUARDED_BY(mu_);
};

ibv_context* OpenWithDevx(ibv_device* dev) {
  if (!mlx5dv_is_supported(dev)) {
    errno = EPROTONOSUPPORT;  // not a ConnectX: the message says "protocol not supported"
    return nullptr;
  }
  mlx5dv_context_attr a{};
  a.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
  return mlx5dv_open_device(dev, &a);
}

}  // namespace

absl::StatusOr<Mlx5Options> Mlx5OptionsFromSpec(const BackendSpec& spec) {
  Mlx5Options o;
  o.context.device_name = spec.device;
  for (const auto& [k, v] : spec.params) {
    ASSIGN_OR_RETURN(const bool applied, verbs::ApplyContextParam("mlx5", k, v, &o.context));
    if (applied) continue;
    if (k == "mkey_api") {
      if (v == "auto") {
        o.mkey_api = MkeyApi::kAuto;
      } else if (v == "devx") {
        o.mkey_api = MkeyApi::kDevx;
      } else if (v == "mlx5dv") {
        o.mkey_api = MkeyApi::kMlx5dv;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("mlx5: mkey_api='", v, "' (auto, devx or mlx5dv)"));
      }
    } else if (k == "pointer_umr" && (v == "0" || v == "1")) {
      o.pointer_umr = v == "1";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "mlx5: unknown parameter or value '", k, "=", v,
          "' (port, gid_index, max_queue_depth, mkey_api=auto|devx|mlx5dv, pointer_umr=0|1)"));
    }
  }
  return o;
}

absl::StatusOr<std::unique_ptr<Device>> NewMlx5Device(const Mlx5Options& options,
                                                      const OpenOptions& open) {
  RETURN_IF_ERROR(CheckPrmCompat());
  verbs::ContextOpener opener;
  opener.backend = "mlx5";
  opener.open = OpenWithDevx;
  opener.open_call = "mlx5dv_open_device(DEVX)";
  opener.require_memory_windows = false;
  ASSIGN_OR_RETURN(std::unique_ptr<verbs::Context> c, verbs::OpenContext(options.context, opener));
  const std::string name = ibv_get_device_name(c->ctx()->device);
  if (absl::Status s = c->StartEventWatch(); !s.ok()) {
    RC_LOG(WARNING) << "mlx5: no async event watch (a fatal device error goes unnoticed): " << s;
  }
  ASSIGN_OR_RETURN(const umr::HcaCaps hca, QueryGeneralCaps(c->ctx()));
  VerbsLimits limits;
  limits.max_qp_wr = static_cast<uint32_t>(c->attr.orig_attr.max_qp_wr);
  const ibv_odp_caps& odp = c->attr.odp_caps;
  const uint32_t rw = IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE;
  limits.odp_rc_read_write =
      (odp.general_caps & IBV_ODP_SUPPORT) != 0 && (odp.per_transport_caps.rc_odp_caps & rw) == rw;
  CapsPolicy policy;
  policy.max_queue_depth = options.context.max_queue_depth;
  policy.pointer_umr = options.pointer_umr;
  ASSIGN_OR_RETURN(Capabilities caps, CapabilitiesFrom(name, hca, limits, policy));
  caps.node_guid = be64toh(c->attr.orig_attr.node_guid);
  caps.port = options.context.port;
  std::memcpy(caps.gid.data(), c->gid.raw, caps.gid.size());  // queried while opening
  caps.key_bounds = KeyBounds::kKey;
  caps.key_bounds_detail =
      "by design: the HCA checks every access against the mkey's start_addr and len";
  // The mlx5 provider imports PDs unless the kernel context has legacy static UAR registers.
  const absl::Status pd_import = c->ProbePdImport();
  caps.pd_export = pd_import.ok();
  caps.dmabuf = true;  // ibv_reg_dmabuf_mr: the provider answers at the first dma-buf
  if (!pd_import.ok()) RC_LOG(INFO) << "mlx5: no PD export: " << pd_import.message();
  RC_LOG(INFO) << "mlx5: opened " << name << " port " << int{options.context.port}
               << " (max_klm_entries " << caps.max_klm_entries << ", inline " << caps.max_inline_klm
               << (caps.umr_pointer_translation ? ", pointer-mode maps" : "")
               << ", max_indirection " << caps.max_indirection << ", umr_fence "
               << int{hca.umr_fence} << (caps.odp ? ", ODP" : "") << ")";
  return std::unique_ptr<Device>(new Mlx5Device(std::move(c), std::move(caps), hca, options, open));
}

void RegisterBackend() {
  (void)hca::RegisterBackend(
      "mlx5",
      [](const BackendSpec& spec,
         const OpenOptions& open) -> absl::StatusOr<std::unique_ptr<Device>> {
        ASSIGN_OR_RETURN(Mlx5Options o, Mlx5OptionsFromSpec(spec));
        return NewMlx5Device(o, open);
      });
}

}  // namespace regcache::hca::mlx5
