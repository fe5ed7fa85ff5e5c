#include "hca/sim/sim_device.h"

#include <atomic>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "hca/prm_convert.h"
#include "hca/sim/internal/commands.h"
#include "hca/sim/internal/endpoints.h"
#include "hca/sim/internal/fault_queue.h"
#include "hca/sim/internal/mkc_convert.h"
#include "hca/sim/internal/mkey_table.h"
#include "hca/sim/internal/sim_queue.h"
#include "hca/sim/internal/translator.h"
#include "umr/mailbox.h"
#include "umr/mkey.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_builder.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {
namespace {

constexpr uint32_t kMaxParkRetries = 64;  // a parked access re-faulting this often gives up

class SimDeviceImpl;

// The data movement of a read, once translated (defined below).
void CopyOut(const Segments& segs, absl::Span<uint8_t> out);

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
  SimDeviceImpl(const SimOptions& o, const OpenOptions& open)
      : options_(o),
        table_(o.max_keys),
        translator_(&table_, o.max_indirection),
        faults_(&stats_, o.fault_timeout),
        commands_(&table_,
                  [this](const umr::PageFaultResumeIn& in) { return faults_.Resume(in); }) {
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
    if (open.stats_registry != nullptr) {
      registration_ = base::stats::Registration(
          *open.stats_registry, open.stats_component.empty() ? "hca_sim" : open.stats_component,
          &stats_);
    }
  }

  const Capabilities& capabilities() const override { return caps_; }
  const SimStats& stats() const override { return stats_; }

  absl::StatusOr<Pd> AllocPd() override {
    base::MutexLock lock(&mu_);
    const Pd pd{next_pdn_++};
    pds_.insert(pd.pdn);
    return pd;
  }
  absl::Status DeallocPd(Pd pd) override {
    if (const size_t n = endpoints_.CountInPd(pd); n != 0) {
      return absl::FailedPreconditionError(absl::StrCat("pd ", pd.pdn, " has ", n, " endpoints"));
    }
    base::MutexLock lock(&mu_);
    if (pds_.erase(pd.pdn) == 0) return absl::NotFoundError(absl::StrCat("no pd ", pd.pdn));
    return absl::OkStatus();
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
    if (options.log_page_size < umr::kMinLogEntitySize ||
        options.log_page_size > umr::kMaxLogEntitySize) {
      return absl::InvalidArgumentError(
          absl::StrCat("page size 2^", options.log_page_size, " unsupported (12..31)"));
    }
    if (addr + length < addr) return absl::InvalidArgumentError("backing wraps 2^64");
    if (options.iova.has_value()) {
      return absl::UnimplementedError(
          "the sim's backings speak the daemon's addresses (no iova: it has no memory windows)");
    }
    const uint64_t page = uint64_t{1} << options.log_page_size;
    const uint64_t pages = ((addr & (page - 1)) + length + page - 1) / page;
    // Capacity in whole 64-byte blocks of entries, as a UMR rewrites them.
    constexpr uint64_t kBlock = umr::EntriesPer64B(umr::AccessMode::kMtt);
    const uint64_t cap = (pages + kBlock - 1) / kBlock * kBlock;
    if (cap > (uint64_t{1} << 31)) return absl::InvalidArgumentError("backing too large");
    MkeyState st;
    st.free = false;
    st.umr_en = true;
    st.access_mode = umr::kAccessModeMtt;
    st.access = access | kLocalRead;
    st.pd = pd.pdn;
    st.start_addr = addr;
    st.len = length;
    st.translations_octword_size =
        static_cast<uint32_t>(cap / umr::EntriesPerOctoword(umr::AccessMode::kMtt));
    st.log_entity_size = static_cast<uint8_t>(options.log_page_size);
    // A live MTT key with its translation inline, as a pinned MR's CREATE_MKEY carries it; an
    // on-demand one supplies none (every entry absent). pg_access: rd_en/wr_en per entry count.
    umr::CreateMkeyIn in;
    in.pg_access = true;
    in.mkc = ToMkc(st);
    if (!options.on_demand) {
      const bool wr = (access & (kLocalWrite | kRemoteWrite | kRemoteAtomic)) != 0;
      std::vector<umr::MttEntry> mtt(pages);
      const uint64_t base = addr & ~(page - 1);
      for (uint64_t i = 0; i < pages; ++i) mtt[i] = umr::MttEntry{base + i * page, true, wr};
      constexpr uint64_t kPerOctoword = umr::EntriesPerOctoword(umr::AccessMode::kMtt);
      in.translation.assign((pages + kPerOctoword - 1) / kPerOctoword * umr::kOctoword,
                            0);  // whole octowords
      RETURN_IF_ERROR(umr::EncodeMttEntries(mtt, in.translation.data()));
    }
    ASSIGN_OR_RETURN(const std::vector<uint8_t> mailbox, umr::EncodeCreateMkeyIn(in));
    ASSIGN_OR_RETURN(uint32_t index, CreateMkey(mailbox, options.on_demand));
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

  absl::Status DestroyKey(Key key) override {
    ASSIGN_OR_RETURN(const umr::Mailbox16 in,
                     umr::EncodeDestroyMkeyIn(umr::DestroyMkeyIn{0, 0, KeyIndex(key)}));
    std::vector<uint8_t> out;
    absl::Status s = RunCommand(in, &out, false);
    if (!s.ok()) return absl::NotFoundError(s.message());
    ASSIGN_OR_RETURN(const umr::CmdStatus st, umr::DecodeCmdStatusOut(out));
    if (st.status != umr::kCmdStatusOk) {
      return absl::InternalError("DESTROY_MKEY succeeded with a failed outbox");
    }
    stats_.live_keys.Sub();
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
    ctx.table = &table_;
    ctx.stats = &stats_;
    ctx.modify = {caps_.umr_modify_atomic, caps_.umr_modify_entity_size};
    ctx.register_staging = [this](Pd p, absl::Span<uint8_t> bytes) -> absl::StatusOr<Key> {
      ASSIGN_OR_RETURN(Backing b, RegisterBacking(p, reinterpret_cast<uint64_t>(bytes.data()),
                                                  bytes.size(), kLocalRead, {}));
      return b.key;
    };
    ctx.destroy_staging = [this](Key k) { (void)DestroyKey(k); };
    ctx.read_local = [this](Pd p, uint32_t lkey, uint64_t addr, absl::Span<uint8_t> out) {
      return ReadThroughLkey(p.pdn, /*qpn=*/0, lkey, addr, out);
    };
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
    return faults_.Next(timeout);
  }
  int FaultEventFd() override { return faults_.fd(); }

  absl::Status ResumeFault(uint64_t token, bool ok) override {
    if (ok && fail_next_resume_.exchange(false)) {
      stats_.injected_failures.Inc();
      ok = false;
    }
    ASSIGN_OR_RETURN(const umr::PageFaultResumeIn in, faults_.ResumeCommandFor(token, !ok));
    ASSIGN_OR_RETURN(const umr::Mailbox16 mailbox, umr::EncodePageFaultResumeIn(in));
    std::vector<uint8_t> out;
    // kNotFound (BAD_RESOURCE) when the access gave up meanwhile.
    return RunCommand(mailbox, &out, false);
  }

  absl::Status Prefetch(Key backing, uint64_t addr, uint64_t length, bool write) override {
    stats_.prefetches.Inc();
    MkeySlot* slot = table_.Slot(KeyIndex(backing));
    if (slot == nullptr) return absl::InvalidArgumentError("no such key");
    base::MutexLock lock(&slot->mu);
    const MkeyState s = slot->state;  // a copy: the lock analysis cannot follow a reference
    if (!slot->exists || !slot->on_demand || s.variant != KeyVariant(backing)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("key 0x%08x is not an on-demand backing", backing));
    }
    if (addr < s.start_addr || addr + length > s.start_addr + s.len || addr + length < addr) {
      return absl::InvalidArgumentError("prefetch range outside the backing");
    }
    if (length == 0) return absl::OkStatus();
    // The sim's "driver" resolves the pages itself (DMA address = VA) and writes the MTT
    // entries; on hardware this is the kernel's fault path (ibv_advise_mr).
    const unsigned log = s.log_entity_size;
    const uint64_t page = uint64_t{1} << log;
    const uint64_t base = s.start_addr & ~(page - 1);
    const uint64_t first = (addr - base) >> log, last = (addr + length - 1 - base) >> log;
    for (uint64_t i = first; i <= last && i < slot->mtt.size(); ++i) {
      const bool wr = write || (slot->mtt[i] & umr::kMttWrite) != 0;
      slot->mtt[i] = StoredMtt(umr::MttEntry{base + i * page, /*read=*/true, wr});
    }
    return absl::OkStatus();
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
  std::vector<uint8_t> EventRingForTest() override { return faults_.EventRingForTest(); }

  // --- used by SimPeer ---
  // A read through an lkey of `pd`, as the device's DMA engine does it: a peer's local SGE, the
  // list of a pointer-mode UMR.
  absl::Status ReadThroughLkey(uint32_t pd, uint32_t qpn, Key lkey, uint64_t addr,
                               absl::Span<uint8_t> out) {
    Segments segs;
    RETURN_IF_ERROR(
        TranslateParked(pd, qpn, lkey, addr, out.size(), AccessKind::kLocalRead, &segs));
    CopyOut(segs, out);
    return absl::OkStatus();
  }
  // Translates, parking on ODP faults until resumed. Bumps the counters.
  absl::Status TranslateParked(uint32_t pd, uint32_t qpn, Key key, uint64_t va, uint64_t len,
                               AccessKind kind, Segments* out) {
    for (uint32_t attempt = 0; attempt < kMaxParkRetries; ++attempt) {
      out->clear();
      std::optional<FaultNeed> need;
      absl::Status s = translator_.Translate(pd, key, va, len, kind, out, &need);
      if (s.ok()) {
        stats_.translations.Inc();
        return s;
      }
      if (!need.has_value()) {
        stats_.translation_errors.Inc();
        return s;
      }
      RETURN_IF_ERROR(faults_.Park(*need, kind, qpn));
    }
    stats_.translation_errors.Inc();
    return DeviceError(IsRemote(kind) ? Syndrome::kRemoteAccess : Syndrome::kLocalProt,
                       "access faulted too often", kVendorSyndromeOdpFault);
  }

  absl::Status InvalidateRemote(uint32_t pd, Key rkey) {
    // The responder executes the requester's SEND_INVAL WQE: build it with umr/ and decode it
    // back, so the key to invalidate comes from the bytes.
    alignas(umr::kWqebb) uint8_t buf[umr::kWqebb] = {};
    umr::SendInvalidateRequest r;
    r.invalidate_key = rkey;
    ASSIGN_OR_RETURN(umr::WqeSize size, umr::BuildSendInvalidate(umr::WqeHeader{}, r, buf));
    ASSIGN_OR_RETURN(umr::WqeDesc wqe, umr::DecodeWqe(absl::MakeConstSpan(buf, size.bytes())));
    const Key key = wqe.ctrl.imm;
    auto refuse = [&](absl::string_view why) {
      stats_.remote_invalidations_refused.Inc();
      return DeviceError(Syndrome::kRemoteInvalReq,
                         absl::StrFormat("invalidate key 0x%08x: %s", key, why));
    };
    MkeySlot* slot = table_.Slot(KeyIndex(key));
    if (slot == nullptr) return refuse("no such key");
    base::MutexLock lock(&slot->mu);
    if (!slot->exists || slot->state.variant != KeyVariant(key)) return refuse("no such key");
    if (slot->state.free) return refuse("key is free");
    if (slot->state.pd != pd) return refuse("PD mismatch");
    if (!slot->state.en_rinval) return refuse("en_rinval is 0");
    slot->state.free = true;
    stats_.remote_invalidations.Inc();
    return absl::OkStatus();
  }

  SimStats& mutable_stats() { return stats_; }

 private:
  // The device's data path for accesses that passed an endpoint's checks.
  PeerFactory PeerOnQp() {
    return
        [this](Pd pd, uint32_t qpn) { return std::unique_ptr<Peer>(new SimPeer(this, pd, qpn)); };
  }

  absl::Status CheckPd(Pd pd) {
    base::MutexLock lock(&mu_);
    if (pds_.count(pd.pdn) == 0) return absl::InvalidArgumentError(absl::StrCat("no pd ", pd.pdn));
    return absl::OkStatus();
  }

  absl::Status RunCommand(absl::Span<const uint8_t> in, std::vector<uint8_t>* out, bool odp) {
    stats_.commands.Inc();
    absl::Status s = commands_.Execute(in, out, odp);
    if (!s.ok()) stats_.command_errors.Inc();
    return s;
  }

  // Executes one CREATE_MKEY mailbox (umr-encoded, as a DevX backend posts it) and decodes the
  // index from its output.
  absl::StatusOr<uint32_t> CreateMkey(absl::Span<const uint8_t> mailbox, bool on_demand) {
    std::vector<uint8_t> out;
    RETURN_IF_ERROR(RunCommand(mailbox, &out, on_demand));
    ASSIGN_OR_RETURN(const umr::CreateMkeyOut o, umr::DecodeCreateMkeyOut(out));
    stats_.live_keys.Add();
    return o.mkey_index;
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
  Capabilities caps_;
  SimStats stats_;
  base::stats::Registration registration_;
  MkeyTable table_;
  Translator translator_;
  FaultQueue faults_;
  CommandProcessor commands_;
  EndpointTable endpoints_{&stats_};

  base::Mutex mu_;
  std::set<uint32_t> pds_ ABSL_GUARDED_BY(mu_);
  uint32_t next_pdn_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_sqn_ ABSL_GUARDED_BY(mu_) = 1;

  std::atomic<uint8_t> fail_next_umr_{0};
  std::atomic<int64_t> completion_delay_ns_{absl::ToInt64Nanoseconds(options_.completion_delay)};
  std::atomic<bool> fail_next_resume_{false};
};

// --- SimPeer ---

// The data movement of an access, once translated into `segs`.
void CopyIn(const Segments& segs, absl::Span<const uint8_t> data) {
  size_t off = 0;
  for (const Segment& s : segs) {
    std::memcpy(reinterpret_cast<void*>(s.addr), data.data() + off, s.len);
    off += s.len;
  }
}
void CopyOut(const Segments& segs, absl::Span<uint8_t> out) {
  size_t off = 0;
  for (const Segment& s : segs) {
    std::memcpy(out.data() + off, reinterpret_cast<const void*>(s.addr), s.len);
    off += s.len;
  }
}

absl::Status SimPeer::Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data) {
  dev_->mutable_stats().peer_writes.Inc();
  Segments segs;
  RETURN_IF_ERROR(dev_->TranslateParked(pd_.pdn, qpn_, rkey, remote_addr, data.size(),
                                        AccessKind::kRemoteWrite, &segs));
  CopyIn(segs, data);
  dev_->mutable_stats().moved_bytes.Inc(data.size());
  return absl::OkStatus();
}

absl::Status SimPeer::Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out) {
  dev_->mutable_stats().peer_reads.Inc();
  Segments segs;
  RETURN_IF_ERROR(dev_->TranslateParked(pd_.pdn, qpn_, rkey, remote_addr, out.size(),
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
  RETURN_IF_ERROR(
      dev_->TranslateParked(pd_.pdn, qpn_, rkey, addr, 8, AccessKind::kRemoteAtomic, &segs));
  if (segs.size() != 1 || segs[0].addr % 8 != 0) {
    return DeviceError(Syndrome::kRemoteInvalReq,
                       absl::StrFormat("atomic at 0x%x does not translate to one aligned 8-byte "
                                       "location",
                                       addr));
  }
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(segs[0].addr));
  if (cas) {
    uint64_t expected = a;
    word.compare_exchange_strong(expected, b);
    return expected;  // the old value, whether or not it swapped
  }
  return word.fetch_add(a);
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
  RETURN_IF_ERROR(dev_->TranslateParked(pd_.pdn, qpn_, lkey, addr, data.size(),
                                        AccessKind::kLocalWrite, &segs));
  CopyIn(segs, data);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SimDevice>> NewSimDevice(const SimOptions& options,
                                                        const OpenOptions& open) {
  if (options.max_keys < 4 || options.max_keys > umr::kMaxMkeyIndex + 1) {
    return absl::InvalidArgumentError("sim: max_keys outside 4..2^24");
  }
  return std::unique_ptr<SimDevice>(new SimDeviceImpl(options, open));
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