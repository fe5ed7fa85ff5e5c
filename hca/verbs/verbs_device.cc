#include "hca/verbs/verbs_device.h"

#include <endian.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/verbs/context.h"
#include "hca/verbs/endpoint.h"
#include "hca/verbs/internal/bind_queue.h"
#include "hca/verbs/internal/bounds_probe.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

absl::Status ParseNumber(absl::string_view backend, const std::string& key,
                         const std::string& value, uint32_t max, uint32_t* out) {
  if (!absl::SimpleAtoi(value, out) || *out > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s='%s' is not a number up to %d", backend, key, value, max));
  }
  return absl::OkStatus();
}

class VerbsDevice final : public Device {
 public:
  VerbsDevice(std::unique_ptr<Context> c, const OpenOptions& open, const BoundsProbe& bounds)
      : c_(std::move(c)) {
    const ibv_device_attr& a = c_->attr.orig_attr;
    caps_.backend = "verbs";
    caps_.device_name = ibv_get_device_name(c_->ctx()->device);
    caps_.max_klm_entries = 1;
    caps_.max_inline_klm = 1;
    caps_.max_indirection = 2;  // a window on a registration, both bound on the backing's MR
    caps_.page_size_mask = uint64_t{1} << 12;
    caps_.max_key_length = a.max_mr_size;
    uint32_t depth = 1;  // a bind queue's pair holds one work request more (its marker)
    while (depth * 2 < static_cast<uint32_t>(a.max_qp_wr) &&
           depth * 2 <= c_->options().max_queue_depth) {
      depth *= 2;
    }
    caps_.max_queue_depth = depth;
    caps_.max_keys = static_cast<uint32_t>(a.max_mw);
    caps_.memory_windows = true;
    caps_.atomics = a.atomic_cap != IBV_ATOMIC_NONE;
    caps_.peer = true;
    caps_.endpoints = true;
    caps_.node_guid = be64toh(a.node_guid);
    caps_.port = static_cast<uint8_t>(c_->options().port);
    std::memcpy(caps_.gid.data(), c_->gid.raw, caps_.gid.size());  // queried while opening
    caps_.key_bounds = bounds.bounds;
    caps_.key_bounds_detail = bounds.detail;
    if (bounds.bounds != KeyBounds::kKey && open.strict_key_bounds) {
      c_->set_cut_backings(true);
      caps_.key_bounds = KeyBounds::kCut;
      caps_.key_bounds_detail += "; strict key bounds: every key is bound on a region of its own";
    }
    // rdma-core implements the import verbs for mlx5 only, whose provider has no type-1
    // windows; a provider with both would export here (docs/client_memory.md).
    const absl::Status pd_import = c_->ProbePdImport();
    caps_.pd_export = pd_import.ok();
    caps_.dmabuf = true;  // ibv_reg_dmabuf_mr: the provider answers at the first dma-buf
    if (!pd_import.ok()) RC_LOG(INFO) << "verbs: no PD export: " << pd_import.message();
    if (open.stats_registry != nullptr) {
      registration_ = base::stats::Registration(
          *open.stats_registry, open.stats_component.empty() ? "hca_verbs" : open.stats_component,
          &c_->stats());
    }
  }
  ~VerbsDevice() override { registration_ = {}; }

  const Capabilities& capabilities() const override { return caps_; }
  absl::Status Health() const override { return c_->health(); }

  absl::StatusOr<Pd> AllocPd() override {
    ibv_pd* pd = ibv_alloc_pd(c_->ctx());
    if (pd == nullptr) return ErrnoStatus(errno, "ibv_alloc_pd");
    return c_->AddPd(pd);
  }
  absl::Status DeallocPd(Pd pd) override { return c_->RemovePd(pd); }

  absl::StatusOr<Backing> RegisterBacking(Pd pd, uint64_t addr, uint64_t length, AccessFlags access,
                                          const BackingOptions& options) override {
    if (options.on_demand) {
      return absl::UnimplementedError(
          absl::StrFormat("%s: the verbs backend has no on-demand paging", caps_.device_name));
    }
    if (options.log_page_size != 12) {
      return absl::InvalidArgumentError("the verbs backend registers 4 KiB pages only");
    }
    if (length == 0) return absl::InvalidArgumentError("backing of length 0");
    if (addr + length < addr) return absl::InvalidArgumentError("backing wraps 2^64");
    const uint64_t iova = options.iova.value_or(addr);
    if (iova + length < iova) return absl::InvalidArgumentError("backing iova wraps 2^64");
    ASSIGN_OR_RETURN(ibv_pd * vpd, c_->FindPd(pd));
    // No remote rights of its own: only the windows bound on it reach it remotely. Local write
    // is what a window granting remote write or atomics needs from its region.
    int flags = IBV_ACCESS_MW_BIND;
    if (access & (kLocalWrite | kRemoteWrite | kRemoteAtomic)) flags |= IBV_ACCESS_LOCAL_WRITE;
    ibv_mr* mr = ibv_reg_mr_iova2(vpd, reinterpret_cast<void*>(addr), length, iova,
                                  static_cast<unsigned>(flags));
    if (mr == nullptr) {
      return base::Annotate(ErrnoStatus(errno, "ibv_reg_mr"),
                            absl::StrFormat("backing [0x%x, +0x%x)", addr, length));
    }
    MrRecord r{mr, pd, addr, iova, length, access | kLocalRead};
    if (absl::Status s = c_->AddMr(r); !s.ok()) {
      (void)ibv_dereg_mr(mr);
      return s;
    }
    c_->stats().backings_registered.Inc();
    c_->stats().registered_bytes.Inc(length);
    Backing b;
    b.key = mr->lkey;
    b.pd = pd;
    b.addr = addr;
    b.length = length;
    b.log_page_size = 12;
    b.num_entries = Pages4k(addr, length);
    return b;
  }

  absl::StatusOr<Backing> RegisterDmabufBacking(Pd pd, const DmabufRange& buf, uint64_t length,
                                                uint64_t iova, AccessFlags access) override {
    // As RegisterBacking: no remote rights of its own, only windows bound on it reach it.
    unsigned flags = IBV_ACCESS_MW_BIND;
    if (access & (kLocalWrite | kRemoteWrite | kRemoteAtomic)) flags |= IBV_ACCESS_LOCAL_WRITE;
    ASSIGN_OR_RETURN(Backing b, c_->RegisterDmabuf("verbs", pd, buf, length, iova, access, flags));
    c_->stats().backings_registered.Inc();
    c_->stats().registered_bytes.Inc(length);
    return b;
  }

  absl::StatusOr<std::vector<Key>> CreateIndirectKeys(Pd pd, uint32_t capacity_entries,
                                                      uint32_t count,
                                                      const IndirectKeyOptions& options) override {
    if (capacity_entries == 0 || capacity_entries > 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a memory window holds one entry; asked for keys of %d", capacity_entries));
    }
    if (options.layout != Layout::kKlm) {
      return absl::InvalidArgumentError("memory windows have no KSM layout");
    }
    if (options.remote_invalidate) {
      return absl::UnimplementedError("type-1 memory windows cannot be invalidated remotely");
    }
    ASSIGN_OR_RETURN(ibv_pd * vpd, c_->FindPd(pd));
    std::vector<Key> keys;
    keys.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      ibv_mw* mw = ibv_alloc_mw(vpd, IBV_MW_TYPE_1);
      absl::Status s = mw == nullptr ? ErrnoStatus(errno, "ibv_alloc_mw") : c_->AddMw(mw, pd);
      if (!s.ok()) {
        if (mw != nullptr) (void)ibv_dealloc_mw(mw);
        for (Key k : keys) (void)c_->DestroyKey(k);
        return s;
      }
      c_->stats().windows_allocated.Inc();
      keys.push_back(mw->rkey);
    }
    return keys;
  }

  absl::StatusOr<std::vector<Key>> CreateDirectKeys(Pd, uint32_t, uint32_t,
                                                    const DirectKeyOptions&) override {
    return absl::UnimplementedError("the verbs backend has no UMR-mapped direct keys");
  }

  absl::Status DestroyKey(Key key) override { return c_->DestroyKey(key); }
  absl::StatusOr<KeyInfo> QueryKey(Key key) override { return c_->QueryKey(key); }

  absl::StatusOr<std::unique_ptr<Queue>> CreateQueue(Pd pd, const QueueOptions& o) override {
    if (o.depth == 0 || (o.depth & (o.depth - 1)) != 0 || o.depth > caps_.max_queue_depth) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "queue depth %d is not a power of two up to %d", o.depth, caps_.max_queue_depth));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<BindQueue> q, BindQueue::Create(c_.get(), pd, o.depth));
    return std::unique_ptr<Queue>(std::move(q));
  }

  absl::StatusOr<std::unique_ptr<Peer>> CreatePeer(Pd pd) override {
    return NewRequesterPeer(c_.get(), pd, "type-1 memory windows cannot be invalidated remotely",
                            "memory-window keys are rkeys only (no local SGE use)");
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(
      Pd pd, const EndpointOptions& options) override {
    ASSIGN_OR_RETURN(std::unique_ptr<TargetEndpoint> e,
                     TargetEndpoint::Create(c_.get(), pd, options));
    return std::unique_ptr<Endpoint>(std::move(e));
  }

  absl::StatusOr<FaultEvent> NextFaultEvent(absl::Duration) override {
    return absl::UnimplementedError("the verbs backend has no on-demand paging");
  }
  int FaultEventFd() override { return -1; }
  absl::Status ResumeFault(uint64_t, bool) override {
    return absl::UnimplementedError("the verbs backend has no on-demand paging");
  }
  absl::Status Prefetch(Key, uint64_t, uint64_t, bool) override {
    return absl::UnimplementedError("the verbs backend has no on-demand paging");
  }

  absl::StatusOr<PdExport> ExportPd(Pd pd) override { return c_->ExportPd(pd); }
  absl::StatusOr<Backing> ImportBacking(Pd pd, const ImportedRegion& region) override {
    return c_->ImportMr(pd, region);
  }

 private:
  std::unique_ptr<Context> c_;
  Capabilities caps_;
  base::stats::Registration registration_;
};

}  // namespace

absl::StatusOr<bool> ApplyContextParam(absl::string_view backend, const std::string& k,
                                       const std::string& v, VerbsOptions* o) {
  uint32_t n = 0;
  if (k == "port") {
    RETURN_IF_ERROR(ParseNumber(backend, k, v, 255, &n));
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat(backend, ": ports start at 1"));
    o->port = static_cast<uint8_t>(n);
  } else if (k == "gid_index") {
    RETURN_IF_ERROR(ParseNumber(backend, k, v, 255, &n));
    o->gid_index = static_cast<int>(n);
  } else if (k == "max_queue_depth") {
    RETURN_IF_ERROR(ParseNumber(backend, k, v, 1u << 20, &n));
    if (n < 4) {
      return absl::InvalidArgumentError(absl::StrCat(backend, ": max_queue_depth must be >= 4"));
    }
    o->max_queue_depth = n;
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<VerbsOptions> VerbsOptionsFromSpec(const BackendSpec& spec) {
  VerbsOptions o;
  o.device_name = spec.device;
  for (const auto& [k, v] : spec.params) {
    if (k == "bind_lists") {
      if (v != "0" && v != "1") {
        return absl::InvalidArgumentError(
            absl::StrCat("verbs: bind_lists must be 0 or 1, not '", v, "'"));
      }
      o.bind_lists = v == "1";
      continue;
    }
    ASSIGN_OR_RETURN(const bool applied, ApplyContextParam("verbs", k, v, &o));
    if (!applied) {
      return absl::InvalidArgumentError(absl::StrCat(
          "verbs: unknown parameter '", k, "' (port, gid_index, max_queue_depth, bind_lists)"));
    }
  }
  return o;
}

absl::StatusOr<std::unique_ptr<Device>> NewVerbsDevice(const VerbsOptions& options,
                                                       const OpenOptions& open) {
  ASSIGN_OR_RETURN(std::unique_ptr<Context> c, OpenContext(options));
  if (absl::Status s = c->StartEventWatch(); !s.ok()) {
    RC_LOG(WARNING) << "verbs: no async event watch (a fatal device error goes unnoticed): " << s;
  }
  const BoundsProbe bounds = ProbeWindowBounds(*c);
  if (options.bind_lists) {
    const BindListProbe lists = ProbeBindLists(*c);
    c->set_bind_lists(lists.usable);
    RC_LOG(INFO) << "verbs: binds posted " << (lists.usable ? "as lists" : "one by one") << " ("
                 << lists.detail << ")";
  }
  RC_LOG(INFO) << "verbs: opened " << ibv_get_device_name(c->ctx()->device) << " port "
               << int{options.port} << " (max_mw " << c->attr.orig_attr.max_mw << ", max_qp_wr "
               << c->attr.orig_attr.max_qp_wr << "); key bounds: " << KeyBoundsName(bounds.bounds)
               << " (" << bounds.detail << ")";
  if (bounds.bounds != KeyBounds::kKey) {
    RC_LOG(WARNING) << "verbs: " << ibv_get_device_name(c->ctx()->device)
                    << (open.strict_key_bounds
                            ? " does not confine a peer to a key's own range: strict key bounds "
                              "cut a region at every key's edges (each miss registers memory)"
                            : " does not confine a peer to a key's own range: a key's holder "
                              "can reach the rest of its attachment (--strict_key_bounds "
                              "confines it; docs/key_bounds.md)");
  }
  return std::unique_ptr<Device>(new VerbsDevice(std::move(c), open, bounds));
}

void RegisterBackend() {
  (void)hca::RegisterBackend(
      "verbs",
      [](const BackendSpec& spec,
         const OpenOptions& open) -> absl::StatusOr<std::unique_ptr<Device>> {
        ASSIGN_OR_RETURN(VerbsOptions o, VerbsOptionsFromSpec(spec));
        return NewVerbsDevice(o, open);
      });
}

}  // namespace regcache::hca::verbs
