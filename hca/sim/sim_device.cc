#include "hca/sim/sim_device.h"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "hca/dmabuf.h"
#include "hca/prm_convert.h"
#include "hca/sim/internal/endpoints.h"
#include "hca/sim/internal/sim_queue.h"
#include "hca/sim/sim_core.h"
#include "umr/mailbox.h"
#include "umr/mkey.h"
#include "umr/prm.h"

namespace regcache::hca::sim {
namespace {

class SimDeviceImpl;

class SimPeer final : public Peer {
 public:
  SimPeer(SimDeviceImpl* dev, Pd pd, uint32_t qpn) : dev_(dev), pd_(pd), qpn_(qpn) {}
  Pd pd() const override { return pd_; }
  absl::Status Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data) override;
  absl::Status Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out) override;
  absl::StatusOr<uint64_t> CompareSwap(Key rkey, uint64_t remote_addr, uint64_t compare,
                                       uint64_t swap) override;
  absl::StatusOr<uint64_t> FetchAdd(Key rkey, uint64_t remote_addr, uint64_t add) override;
  absl::Status SendWithInvalidate(Key rkey) override;
  absl::Status LocalRead(Key lkey, uint64_t addr, absl::Span<uint8_t> out) override;
  absl::Status LocalWrite(Key lkey, uint64_t addr, absl::Span<const uint8_t> data) override;

 private:
  absl::StatusOr<uint64_t> Atomic(Key rkey, uint64_t addr, bool cas, uint64_t a, uint64_t b);
  SimDeviceImpl* const dev_;
  const Pd pd_;
  const uint32_t qpn_;  // the QP its accesses arrive on (WQE-subtype page faults name it)
};

class SimDeviceImpl final : public SimDevice {
 public:
  SimDeviceImpl(const SimOptions& o, const OpenOptions& open, std::unique_ptr<HcaCore> core)
      : options_(o), core_(std::move(core)), stats_(core_->stats()) {
    caps_.backend = "sim";
    caps_.device_name = o.device_name;
    caps_.max_klm_entries = 1u << o.log_max_klm_list_size;
    caps_.max_inline_klm = umr::kMaxInlineKlms;
    caps_.max_indirection = o.max_indirection;
    for (unsigned n = umr::kMinLogEntitySize; n <= umr::kMaxLogEntitySize; ++n) {
      caps_.page_size_mask |= uint64_t{1} << n;
    }
    caps_.max_key_length = 0;
    caps_.max_queue_depth = o.max_queue_depth;
    caps_.max_keys = o.max_keys;
    caps_.umr = caps_.ksm = caps_.odp = caps_.atomics = caps_.remote_invalidate = true;
    caps_.dmabuf = true;  // mapped to play the device (RegisterDmabufBacking)
    caps_.translation_offset = caps_.peer = caps_.endpoints = true;
    caps_.umr_pointer_translation = true;
    caps_.umr_modify_atomic = !o.umr_modify_atomic_disabled;
    caps_.umr_modify_entity_size = !o.umr_modify_entity_size_disabled;
    // A stable identity per device name, so that two sims in one daemon differ: FNV-1a of the
    // name with the locally-administered bit set, and the link-local GID made from it.
    uint64_t guid = 0xcbf29ce484222325ull;
    for (unsigned char c : o.device_name) guid = (guid ^ c) * 0x100000001b3ull;
    caps_.node_guid = guid | (uint64_t{0x02} << 56);
    caps_.port = 1;
    caps_.gid = {0xfe, 0x80};
    for (int i = 0; i < 8; ++i)
      caps_.gid[8 + i] = static_cast<uint8_t>(caps_.node_guid >> (56 - 8 * i));
    caps_.key_bounds = KeyBounds::kKey;
    caps_.key_bounds_detail = "by design: every access is checked against the key's range";
    if (open.stats_registry != nullptr) {
      registration_ = base::stats::Registration(
          *open.stats_registry, open.stats_component.empty() ? "hca_sim" : open.stats_component,
          &stats_);
    }
  }

  const Capabilities& capabilities() const override { return caps_; }
  const SimStats& stats() const override { return stats_; }

  absl::StatusOr<Pd> AllocPd() override { return Pd{core_->AllocPd()}; }
  absl::Status DeallocPd(Pd pd) override {
    if (const size_t n = endpoints_.CountInPd(pd); n != 0) {
      return absl::FailedPreconditionError(absl::StrCat("pd ", pd.pdn, " has ", n, " endpoints"));
    }
    return core_->DeallocPd(pd.pdn);
  }

  absl::StatusOr<Backing> RegisterBacking(Pd pd, uint64_t addr, uint64_t length, AccessFlags access,
                                          const BackingOptions& options) override {
    RETURN_IF_ERROR(CheckPd(pd));
    if (length == 0) return absl::InvalidArgumentError("backing of length 0");
    if (options_.backing_delay > absl::ZeroDuration()) {
      stats_.backings_delayed.Add();
      absl::SleepFor(options_.backing_delay);
      stats_.backings_delayed.Sub();
    }
    if (options.iova.has_value()) {
      return absl::UnimplementedError(
          "the sim's backings speak the daemon's addresses (no iova: it has no memory windows)");
    }
    ASSIGN_OR_RETURN(const std::vector<uint8_t> mailbox,
                     HcaCore::MttKeyMailbox(pd.pdn, addr, length, access, options.log_page_size,
                                            options.on_demand));
    ASSIGN_OR_RETURN(uint32_t index, CreateMkey(mailbox, options.on_demand));
    const uint64_t page = uint64_t{1} << options.log_page_size;
    const uint64_t pages = ((addr & (page - 1)) + length + page - 1) / page;
    Backing b;
    b.key = MakeKey(index, 0);
    b.pd = pd;
    b.addr = addr;
    b.length = length;
    b.log_page_size = options.log_page_size;
    b.num_entries = static_cast<uint32_t>(pages);
    b.on_demand = options.on_demand;
    return b;
  }

  absl::StatusOr<std::vector<Key>> CreateIndirectKeys(Pd pd, uint32_t capacity, uint32_t count,
                                                      const IndirectKeyOptions& o) override {
    RETURN_IF_ERROR(CheckPd(pd));
    ASSIGN_OR_RETURN(const umr::FreeMkeyParams p,
                     IndirectKeyParams(pd, capacity, caps_.max_klm_entries, o));
    return CreateMany(p, count);
  }

  absl::StatusOr<std::vector<Key>> CreateDirectKeys(Pd pd, uint32_t capacity, uint32_t count,
                                                    const DirectKeyOptions& o) override {
    RETURN_IF_ERROR(CheckPd(pd));
    ASSIGN_OR_RETURN(const umr::FreeMkeyParams p, DirectKeyParams(pd, capacity, o));
    return CreateMany(p, count);
  }

  // The sim's device reaches memory through this process's mappings, so it maps the dma-buf
  // (which an exporter that cannot be mapped refuses) and registers that mapping: its key's
  // addresses are the mapping's (the sim has no iova), which Backing::addr reports.
  absl::StatusOr<Backing> RegisterDmabufBacking(Pd pd, const DmabufRange& buf, uint64_t length,
                                                uint64_t iova, AccessFlags access) override {
    (void)iova;
    ASSIGN_OR_RETURN(std::unique_ptr<DmabufMapping> m,
                     DmabufMapping::Map(buf.fd, buf.offset, length));
    ASSIGN_OR_RETURN(Backing b, RegisterBacking(pd, reinterpret_cast<uint64_t>(m->data()), length,
                                                access, BackingOptions{}));
    base::MutexLock lock(&mu_);
    dmabufs_[KeyIndex(b.key)] = std::move(m);
    return b;
  }

  absl::Status DestroyKey(Key key) override {
    absl::Status s = core_->DestroyMkey(KeyIndex(key));
    if (!s.ok()) return absl::NotFoundError(s.message());
    base::MutexLock lock(&mu_);
    dmabufs_.erase(KeyIndex(key));  // unmapped once the key cannot reach it
    return s;
  }

  absl::StatusOr<KeyInfo> QueryKey(Key key) override {
    umr::QueryMkeyIn q;
    q.mkey_index = KeyIndex(key);
    ASSIGN_OR_RETURN(const umr::Mailbox16 in, umr::EncodeQueryMkeyIn(q));
    std::vector<uint8_t> out;
    absl::Status s = RunCommand(in, &out, false);
    if (!s.ok()) return absl::NotFoundError(s.message());
    ASSIGN_OR_RETURN(const umr::QueryMkeyOut o, umr::DecodeQueryMkeyOut(out));
    return KeyInfoFromQuery(KeyIndex(key), o);
  }

  absl::StatusOr<std::unique_ptr<Queue>> CreateQueue(Pd pd, const QueueOptions& o) override {
    RETURN_IF_ERROR(CheckPd(pd));
    if (o.depth > caps_.max_queue_depth) {
      return absl::InvalidArgumentError(
          absl::StrCat("depth ", o.depth, " > ", caps_.max_queue_depth));
    }
    QueueContext ctx;
    ctx.core = core_.get();
    ctx.rules.modify = {caps_.umr_modify_atomic, caps_.umr_modify_entity_size};
    ctx.register_staging = [this](Pd p, absl::Span<uint8_t> bytes) -> absl::StatusOr<Key> {
      ASSIGN_OR_RETURN(Backing b, RegisterBacking(p, reinterpret_cast<uint64_t>(bytes.data()),
                                                  bytes.size(), kLocalRead, {}));
      return b.key;
    };
    ctx.destroy_staging = [this](Key k) { (void)DestroyKey(k); };
    ctx.take_injected_umr_failure = [this] {
      return static_cast<Syndrome>(fail_next_umr_.exchange(0));
    };
    ctx.completion_delay = [this] {
      return absl::Nanoseconds(completion_delay_ns_.load(std::memory_order_relaxed));
    };
    uint32_t sqn;
    {
      base::MutexLock lock(&mu_);
      sqn = next_sqn_++;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SimQueue> q,
                     SimQueue::Create(std::move(ctx), pd, sqn, o.depth, options_.mode));
    return std::unique_ptr<Queue>(std::move(q));
  }

  absl::StatusOr<std::unique_ptr<Peer>> CreatePeer(Pd pd) override {
    RETURN_IF_ERROR(CheckPd(pd));
    uint32_t qpn;
    {
      base::MutexLock lock(&mu_);
      qpn = next_sqn_++;  // one QP number space for send queues and peers
    }
    return std::unique_ptr<Peer>(new SimPeer(this, pd, qpn));
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(Pd pd,
                                                           const EndpointOptions& o) override {
    RETURN_IF_ERROR(CheckPd(pd));
    uint32_t qpn;
    {
      base::MutexLock lock(&mu_);
      if (next_sqn_ > umr::kMaxMkeyIndex) {
        return absl::ResourceExhaustedError("the sim's 24-bit QP number space is used up");
      }
      qpn = next_sqn_++;  // the device's one QP number space
    }
    return endpoints_.Create(pd, qpn, o.remote_access);
  }

  std::unique_ptr<RemoteQp> CreateRemoteQp() override {
    return NewRemoteQp(endpoints_.NewRemoteAddress(), &endpoints_, PeerOnQp());
  }
  absl::StatusOr<std::unique_ptr<RemoteQp>> CreateRemoteQpAs(const EndpointAddress& as) override {
    RETURN_IF_ERROR(CheckEndpointAddress(as));
    return NewRemoteQp(as, &endpoints_, PeerOnQp());
  }

  // --- ODP --- The driver's half of fault handling: decode the EQE, answer with a
  // PAGE_FAULT_RESUME mailbox that the device's command path executes (fault_queue.h).
  absl::StatusOr<FaultEvent> NextFaultEvent(absl::Duration timeout) override {
    return core_->NextFaultEvent(timeout);
  }
  int FaultEventFd() override { return core_->FaultEventFd(); }

  absl::Status ResumeFault(uint64_t token, bool ok) override {
    if (ok && fail_next_resume_.exchange(false)) {
      stats_.injected_failures.Inc();
      ok = false;
    }
    ASSIGN_OR_RETURN(const std::vector<uint8_t> mailbox, core_->ResumeMailbox(token, !ok));
    std::vector<uint8_t> out;
    // kNotFound (BAD_RESOURCE) when the access gave up meanwhile.
    return RunCommand(mailbox, &out, false);
  }

  absl::Status Prefetch(Key backing, uint64_t addr, uint64_t length, bool write) override {
    return core_->Prefetch(backing, addr, length, write);
  }

  // --- test hooks ---
  void FailNextUmrForTest(Syndrome s) override { fail_next_umr_.store(static_cast<uint8_t>(s)); }
  void DelayCompletionsForTest(absl::Duration d) override {
    completion_delay_ns_.store(absl::ToInt64Nanoseconds(d));
  }
  void FailNextResumeForTest() override { fail_next_resume_.store(true); }
  absl::Status ExecuteCommandForTest(absl::Span<const uint8_t> in,
                                     std::vector<uint8_t>* out) override {
    return RunCommand(in, out, false);
  }
  std::vector<uint8_t> EventRingForTest() override { return core_->EventRingForTest(); }

  // --- used by SimPeer ---
  // Translates, parking on ODP faults until the daemon resumes them.
  absl::Status Translate(uint32_t pd, uint32_t qpn, Key key, uint64_t va, uint64_t len,
                         AccessKind kind, Segments* out) {
    return core_->Translate(pd, qpn, key, va, len, kind, FaultPolicy::kPark, out);
  }
  absl::Status ReadThroughLkey(uint32_t pd, uint32_t qpn, Key lkey, uint64_t addr,
                               absl::Span<uint8_t> out) {
    return core_->ReadThroughLkey(pd, qpn, lkey, addr, out, FaultPolicy::kPark);
  }
  absl::Status InvalidateRemote(uint32_t pd, Key rkey) { return core_->InvalidateRemote(pd, rkey); }

  SimStats& mutable_stats() { return stats_; }

 private:
  // The device's data path for accesses that passed an endpoint's checks.
  PeerFactory PeerOnQp() {
    return
        [this](Pd pd, uint32_t qpn) { return std::unique_ptr<Peer>(new SimPeer(this, pd, qpn)); };
  }

  absl::Status CheckPd(Pd pd) {
    if (!core_->HasPd(pd.pdn)) return absl::InvalidArgumentError(absl::StrCat("no pd ", pd.pdn));
    return absl::OkStatus();
  }

  absl::Status RunCommand(absl::Span<const uint8_t> in, std::vector<uint8_t>* out, bool odp) {
    return core_->RunCommand(in, out, odp);
  }

  // Executes one CREATE_MKEY mailbox (umr-encoded, as a DevX backend posts it).
  absl::StatusOr<uint32_t> CreateMkey(absl::Span<const uint8_t> mailbox, bool on_demand) {
    return core_->CreateMkey(mailbox, on_demand);
  }

  // `count` pool keys from one CREATE_MKEY mailbox (PoolKeyMailbox), executed `count` times.
  absl::StatusOr<std::vector<Key>> CreateMany(const umr::FreeMkeyParams& p, uint32_t count) {
    ASSIGN_OR_RETURN(const std::vector<uint8_t> mailbox, PoolKeyMailbox(p));
    std::vector<Key> keys;
    keys.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      absl::StatusOr<uint32_t> index = CreateMkey(mailbox, false);
      if (!index.ok()) {
        for (Key k : keys) (void)DestroyKey(k);
        return index.status();
      }
      keys.push_back(MakeKey(*index, 0));
    }
    return keys;
  }

  const SimOptions options_;
  const std::unique_ptr<HcaCore> core_;
  SimStats& stats_;  // the core's
  Capabilities caps_;
  base::stats::Registration registration_;
  EndpointTable endpoints_{&stats_};

  base::Mutex mu_;
  uint32_t next_sqn_ ABSL_GUARDED_BY(mu_) = 1;
  // The dma-bufs backings were registered over, by key index.
  std::map<uint32_t, std::unique_ptr<DmabufMapping>> dmabufs_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint8_t> fail_next_umr_{0};
  std::atomic<int64_t> completion_delay_ns_{absl::ToInt64Nanoseconds(options_.completion_delay)};
  std::atomic<bool> fail_next_resume_{false};
};

// --- SimPeer ---

absl::Status SimPeer::Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data) {
  dev_->mutable_stats().peer_writes.Inc();
  Segments segs;
  RETURN_IF_ERROR(dev_->Translate(pd_.pdn, qpn_, rkey, remote_addr, data.size(),
                                  AccessKind::kRemoteWrite, &segs));
  CopyIn(segs, data);
  dev_->mutable_stats().moved_bytes.Inc(data.size());
  return absl::OkStatus();
}

absl::Status SimPeer::Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out) {
  dev_->mutable_stats().peer_reads.Inc();
  Segments segs;
  RETURN_IF_ERROR(dev_->Translate(pd_.pdn, qpn_, rkey, remote_addr, out.size(),
                                  AccessKind::kRemoteRead, &segs));
  CopyOut(segs, out);
  dev_->mutable_stats().moved_bytes.Inc(out.size());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SimPeer::Atomic(Key rkey, uint64_t addr, bool cas, uint64_t a,
                                         uint64_t b) {
  dev_->mutable_stats().peer_atomics.Inc();
  if (addr % 8 != 0) {
    return DeviceError(Syndrome::kRemoteInvalReq,
                       absl::StrFormat("atomic at 0x%x is not 8-byte aligned", addr));
  }
  Segments segs;
  RETURN_IF_ERROR(dev_->Translate(pd_.pdn, qpn_, rkey, addr, 8, AccessKind::kRemoteAtomic, &segs));
  absl::StatusOr<uint64_t> old = AtomicAt(segs, cas, a, b);
  if (!old.ok()) {
    return DeviceError(Syndrome::kRemoteInvalReq,
                       absl::StrFormat("atomic at 0x%x: %s", addr, old.status().message()));
  }
  return old;
}

absl::StatusOr<uint64_t> SimPeer::CompareSwap(Key rkey, uint64_t remote_addr, uint64_t compare,
                                              uint64_t swap) {
  return Atomic(rkey, remote_addr, true, compare, swap);
}

absl::StatusOr<uint64_t> SimPeer::FetchAdd(Key rkey, uint64_t remote_addr, uint64_t add) {
  return Atomic(rkey, remote_addr, false, add, 0);
}

absl::Status SimPeer::SendWithInvalidate(Key rkey) { return dev_->InvalidateRemote(pd_.pdn, rkey); }

absl::Status SimPeer::LocalRead(Key lkey, uint64_t addr, absl::Span<uint8_t> out) {
  dev_->mutable_stats().local_accesses.Inc();
  return dev_->ReadThroughLkey(pd_.pdn, qpn_, lkey, addr, out);
}

absl::Status SimPeer::LocalWrite(Key lkey, uint64_t addr, absl::Span<const uint8_t> data) {
  dev_->mutable_stats().local_accesses.Inc();
  Segments segs;
  RETURN_IF_ERROR(
      dev_->Translate(pd_.pdn, qpn_, lkey, addr, data.size(), AccessKind::kLocalWrite, &segs));
  CopyIn(segs, data);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SimDevice>> NewSimDevice(const SimOptions& options,
                                                        const OpenOptions& open) {
  if (options.max_keys < 4 || options.max_keys > umr::kMaxMkeyIndex + 1) {
    return absl::InvalidArgumentError("sim: max_keys outside 4..2^24");
  }
  CoreOptions core;
  core.max_keys = options.max_keys;
  core.max_indirection = options.max_indirection;
  core.fault_timeout = options.fault_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<HcaCore> c, HcaCore::Create(core));
  return std::unique_ptr<SimDevice>(new SimDeviceImpl(options, open, std::move(c)));
}

void RegisterBackend() {
  (void)hca::RegisterBackend(
      "sim",
      [](const BackendSpec& spec,
         const OpenOptions& open) -> absl::StatusOr<std::unique_ptr<Device>> {
        ASSIGN_OR_RETURN(SimOptions o, SimOptionsFromSpec(spec));
        ASSIGN_OR_RETURN(std::unique_ptr<SimDevice> d, NewSimDevice(o, open));
        return std::unique_ptr<Device>(std::move(d));
      });
}

}  // namespace regcache::hca::sim