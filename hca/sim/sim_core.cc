#include "hca/sim/sim_core.h"

#include <atomic>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "hca/sim/internal/commands.h"
#include "hca/sim/internal/fault_queue.h"
#include "hca/sim/internal/mkc_convert.h"
#include "hca/sim/internal/mkey_table.h"
#include "hca/sim/internal/translator.h"
#include "hca/sim/internal/umr_executor.h"
#include "umr/mailbox.h"
#include "umr/mkey.h"
#include "umr/prm.h"
#include "umr/wqe_builder.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {
namespace {

constexpr uint32_t kMaxParkRetries = 64;  // a parked access re-faulting this often gives up

// How much ordering a fence mode gives a WQE against the ones before it: none, the small
// initiator fence, a full fence, strong ordering (docs/prm.md, UMR WQE).
int FenceStrength(umr::FenceMode m) {
  switch (m) {
    case umr::FenceMode::kNone:
      return 0;
    case umr::FenceMode::kInitiatorSmall:
      return 1;
    case umr::FenceMode::kFence:
    case umr::FenceMode::kSmallAndFence:
      return 2;
    case umr::FenceMode::kStrongOrdering:
      return 3;
  }
  return 0;
}

absl::Status QpOp(absl::string_view why) { return DeviceError(Syndrome::kLocalQpOp, why); }

}  // namespace

struct HcaCore::Impl {
  explicit Impl(const CoreOptions& o)
      : options(o),
        table(o.max_keys),
        translator(&table, o.max_indirection),
        faults(&stats, o.fault_timeout),
        commands(&table, CommandOptionsOf(o)) {}

  CommandProcessor::Options CommandOptionsOf(const CoreOptions& o) {
    CommandProcessor::Options c;
    c.resume = [this](const umr::PageFaultResumeIn& in) { return faults.Resume(in); };
    c.general_caps = o.general_caps;
    c.odp_caps = o.odp_caps;
    if (o.check_pd_on_create) {
      c.pd_exists = [this](uint32_t pdn) {
        base::MutexLock lock(&mu);
        return pds.count(pdn) != 0;
      };
    }
    c.max_klm_entries = o.max_klm_entries;
    return c;
  }

  const CoreOptions options;
  SimStats stats;
  MkeyTable table;
  Translator translator;
  FaultQueue faults;
  CommandProcessor commands;

  mutable base::Mutex mu;
  std::set<uint32_t> pds ABSL_GUARDED_BY(mu);
  uint32_t next_pdn ABSL_GUARDED_BY(mu) = 1;
};

absl::StatusOr<std::unique_ptr<HcaCore>> HcaCore::Create(const CoreOptions& options) {
  if (options.max_keys < 4 || options.max_keys > umr::kMaxMkeyIndex + 1) {
    return absl::InvalidArgumentError("max_keys outside 4..2^24");
  }
  return std::unique_ptr<HcaCore>(new HcaCore(std::make_unique<Impl>(options)));
}

HcaCore::HcaCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HcaCore::~HcaCore() = default;

SimStats& HcaCore::stats() { return impl_->stats; }
const CoreOptions& HcaCore::options() const { return impl_->options; }

uint32_t HcaCore::AllocPd() {
  base::MutexLock lock(&impl_->mu);
  const uint32_t pdn = impl_->next_pdn++;
  impl_->pds.insert(pdn);
  return pdn;
}

absl::Status HcaCore::DeallocPd(uint32_t pdn) {
  base::MutexLock lock(&impl_->mu);
  if (impl_->pds.erase(pdn) == 0) return absl::NotFoundError(absl::StrCat("no pd ", pdn));
  return absl::OkStatus();
}

bool HcaCore::HasPd(uint32_t pdn) const {
  base::MutexLock lock(&impl_->mu);
  return impl_->pds.count(pdn) != 0;
}

absl::Status HcaCore::RunCommand(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                                 bool on_demand) {
  impl_->stats.commands.Inc();
  absl::Status s = impl_->commands.Execute(in, out, on_demand);
  if (!s.ok()) impl_->stats.command_errors.Inc();
  return s;
}

absl::StatusOr<uint32_t> HcaCore::CreateMkey(absl::Span<const uint8_t> mailbox, bool on_demand) {
  std::vector<uint8_t> out;
  RETURN_IF_ERROR(RunCommand(mailbox, &out, on_demand));
  ASSIGN_OR_RETURN(const umr::CreateMkeyOut o, umr::DecodeCreateMkeyOut(out));
  impl_->stats.live_keys.Add();
  return o.mkey_index;
}

absl::Status HcaCore::DestroyMkey(uint32_t index) {
  ASSIGN_OR_RETURN(const umr::Mailbox16 in,
                   umr::EncodeDestroyMkeyIn(umr::DestroyMkeyIn{0, 0, index}));
  std::vector<uint8_t> out;
  RETURN_IF_ERROR(RunCommand(in, &out));
  impl_->stats.live_keys.Sub();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> HcaCore::MttKeyMailbox(uint32_t pdn, uint64_t addr,
                                                            uint64_t length, AccessFlags access,
                                                            unsigned log_page_size,
                                                            bool on_demand) {
  return MttKeyMailboxAt(pdn, addr, addr, length, access, log_page_size, on_demand);
}

absl::StatusOr<std::vector<uint8_t>> HcaCore::MttKeyMailboxAt(uint32_t pdn, uint64_t addr,
                                                              uint64_t iova, uint64_t length,
                                                              AccessFlags access,
                                                              unsigned log_page_size,
                                                              bool on_demand) {
  if (length == 0) return absl::InvalidArgumentError("a key of length 0");
  if (log_page_size < umr::kMinLogEntitySize || log_page_size > umr::kMaxLogEntitySize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page size 2^", log_page_size, " unsupported (12..31)"));
  }
  if (addr + length < addr || iova + length < iova) {
    return absl::InvalidArgumentError("the range wraps 2^64");
  }
  const uint64_t page = uint64_t{1} << log_page_size;
  if (((addr ^ iova) & (page - 1)) != 0) {
    return absl::InvalidArgumentError("iova and address at different offsets within a page");
  }
  const uint64_t pages = ((addr & (page - 1)) + length + page - 1) / page;
  // Capacity in whole 64-byte blocks of entries, as a UMR rewrites them.
  constexpr uint64_t kBlock = umr::EntriesPer64B(umr::AccessMode::kMtt);
  const uint64_t cap = (pages + kBlock - 1) / kBlock * kBlock;
  if (cap > (uint64_t{1} << 31)) return absl::InvalidArgumentError("range too large");
  MkeyState st;
  st.free = false;
  st.umr_en = true;
  st.access_mode = umr::kAccessModeMtt;
  st.access = access | kLocalRead;
  st.pd = pdn;
  st.start_addr = iova;
  st.len = length;
  st.translations_octword_size =
      static_cast<uint32_t>(cap / umr::EntriesPerOctoword(umr::AccessMode::kMtt));
  st.log_entity_size = static_cast<uint8_t>(log_page_size);
  // A live MTT key with its translation inline, as a pinned MR's CREATE_MKEY carries it; an
  // on-demand one supplies none (every entry absent). pg_access: rd_en/wr_en per entry count.
  umr::CreateMkeyIn in;
  in.pg_access = true;
  in.mkc = ToMkc(st);
  if (!on_demand) {
    const bool wr = (access & (kLocalWrite | kRemoteWrite | kRemoteAtomic)) != 0;
    std::vector<umr::MttEntry> mtt(pages);
    const uint64_t base = addr & ~(page - 1);
    for (uint64_t i = 0; i < pages; ++i) mtt[i] = umr::MttEntry{base + i * page, true, wr};
    constexpr uint64_t kPerOctoword = umr::EntriesPerOctoword(umr::AccessMode::kMtt);
    in.translation.assign((pages + kPerOctoword - 1) / kPerOctoword * umr::kOctoword, 0);
    RETURN_IF_ERROR(umr::EncodeMttEntries(mtt, in.translation.data()));
  }
  return umr::EncodeCreateMkeyIn(in);
}

absl::Status HcaCore::Translate(uint32_t pdn, uint32_t qpn, Key key, uint64_t va, uint64_t len,
                                AccessKind kind, FaultPolicy policy, Segments* out) {
  SimStats& stats = impl_->stats;
  for (uint32_t attempt = 0; attempt < kMaxParkRetries; ++attempt) {
    out->clear();
    std::optional<FaultNeed> need;
    absl::Status s = impl_->translator.Translate(pdn, key, va, len, kind, out, &need);
    if (s.ok()) {
      stats.translations.Inc();
      return s;
    }
    if (!need.has_value()) {
      stats.translation_errors.Inc();
      return s;
    }
    if (policy == FaultPolicy::kPark) {
      RETURN_IF_ERROR(impl_->faults.Park(*need, kind, qpn));
    } else {
      stats.page_faults.Inc();
      RETURN_IF_ERROR(Prefetch(need->key, need->address, need->length, need->write));
    }
  }
  stats.translation_errors.Inc();
  return DeviceError(IsRemote(kind) ? Syndrome::kRemoteAccess : Syndrome::kLocalProt,
                     "access faulted too often", kVendorSyndromeOdpFault);
}

absl::Status HcaCore::ReadThroughLkey(uint32_t pdn, uint32_t qpn, Key lkey, uint64_t addr,
                                      absl::Span<uint8_t> out, FaultPolicy policy) {
  Segments segs;
  RETURN_IF_ERROR(
      Translate(pdn, qpn, lkey, addr, out.size(), AccessKind::kLocalRead, policy, &segs));
  CopyOut(segs, out);
  return absl::OkStatus();
}

absl::Status HcaCore::Prefetch(Key backing, uint64_t addr, uint64_t length, bool write) {
  impl_->stats.prefetches.Inc();
  MkeySlot* slot = impl_->table.Slot(KeyIndex(backing));
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
  // The "driver" resolves the pages itself (DMA address = VA) and writes the MTT entries; on
  // hardware this is the kernel's fault path (ibv_advise_mr, or a fault it serves).
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

absl::Status HcaCore::InvalidateRemote(uint32_t pdn, Key rkey) {
  // The responder executes the requester's SEND_INVAL WQE: build it with umr/ and decode it
  // back, so the key to invalidate comes from the bytes.
  alignas(umr::kWqebb) uint8_t buf[umr::kWqebb] = {};
  umr::SendInvalidateRequest r;
  r.invalidate_key = rkey;
  ASSIGN_OR_RETURN(umr::WqeSize size, umr::BuildSendInvalidate(umr::WqeHeader{}, r, buf));
  ASSIGN_OR_RETURN(umr::WqeDesc wqe, umr::DecodeWqe(absl::MakeConstSpan(buf, size.bytes())));
  const Key key = wqe.ctrl.imm;
  SimStats& stats = impl_->stats;
  auto refuse = [&](absl::string_view why) {
    stats.remote_invalidations_refused.Inc();
    return DeviceError(Syndrome::kRemoteInvalReq,
                       absl::StrFormat("invalidate key 0x%08x: %s", key, why));
  };
  MkeySlot* slot = impl_->table.Slot(KeyIndex(key));
  if (slot == nullptr) return refuse("no such key");
  base::MutexLock lock(&slot->mu);
  if (!slot->exists || slot->state.variant != KeyVariant(key)) return refuse("no such key");
  if (slot->state.free) return refuse("key is free");
  if (slot->state.pd != pdn) return refuse("PD mismatch");
  if (!slot->state.en_rinval) return refuse("en_rinval is 0");
  slot->state.free = true;
  stats.remote_invalidations.Inc();
  return absl::OkStatus();
}

WqeResult HcaCore::ExecuteSendWqe(uint32_t pdn, absl::Span<const uint8_t> ring, uint32_t counter,
                                  const SendRules& rules,
                                  const std::function<Syndrome()>& take_injected,
                                  umr::WqeScratch* scratch) {
  SimStats& stats = impl_->stats;
  stats.wqes_executed.Inc();
  WqeResult r;
  const uint32_t slots = static_cast<uint32_t>(ring.size() / umr::kWqebb);
  absl::StatusOr<absl::Span<const uint8_t>> bytes =
      umr::GatherWqe(ring, counter & (slots - 1), scratch);
  absl::StatusOr<umr::WqeDesc> wqe = absl::InternalError("");
  if (bytes.ok()) r.wqebbs = umr::WqebbsForDs(bytes->size() / umr::kOctoword);
  if (!bytes.ok()) {
    r.status = QpOp(bytes.status().message());
  } else if (rules.max_wqe_bytes != 0 && bytes->size() > rules.max_wqe_bytes) {
    r.status = QpOp(absl::StrCat("WQE of ", bytes->size(), " bytes exceeds max_wqe_sz_sq ",
                                 rules.max_wqe_bytes));
  } else if (wqe = umr::DecodeWqe(*bytes); !wqe.ok()) {
    r.status = QpOp(wqe.status().message());
  } else {
    r.signaled = wqe->ctrl.signaled();
    r.opcode = wqe->ctrl.opcode;
    if (rules.qpn.has_value() && wqe->ctrl.qpn != *rules.qpn) {
      r.status = QpOp(absl::StrCat("WQE names QP 0x", absl::Hex(wqe->ctrl.qpn), ", posted on 0x",
                                   absl::Hex(*rules.qpn)));
    } else if (rules.check_wqe_index && wqe->ctrl.wqe_index != (counter & 0xffff)) {
      r.status = QpOp(absl::StrCat("wqe_index ", wqe->ctrl.wqe_index, " at producer position ",
                                   counter & 0xffff));
    } else if (r.opcode == umr::kOpcodeNop) {
      r.status = absl::OkStatus();
    } else if (r.opcode != umr::kOpcodeUmr) {
      r.status = QpOp(absl::StrCat("opcode 0x", absl::Hex(r.opcode), " on a UMR queue"));
    } else if (rules.min_umr_fence.has_value() &&
               FenceStrength(wqe->ctrl.fence) < FenceStrength(*rules.min_umr_fence)) {
      r.status = QpOp(absl::StrCat("UMR fence mode ", static_cast<int>(wqe->ctrl.fence),
                                   " is weaker than the device's umr_fence requires (",
                                   static_cast<int>(*rules.min_umr_fence), ")"));
    } else if (!rules.indirect_umr && !IsMttKey(wqe->ctrl.imm)) {
      r.status = QpOp("UMR on an indirect key: the device reports umr_indirect_mkey_disabled");
    } else if (absl::Status own = rules.umr_check ? rules.umr_check(*wqe) : absl::OkStatus();
               !own.ok()) {
      r.status = std::move(own);
    } else if (const Syndrome injected = take_injected ? take_injected() : Syndrome::kNone;
               injected != Syndrome::kNone) {
      stats.injected_failures.Inc();
      r.status = DeviceError(injected, "injected UMR failure");
    } else {
      UmrOutcome outcome;
      const FaultPolicy policy = rules.pointer_faults;
      r.status = ExecuteUmr(&impl_->table, pdn, *wqe, rules.modify, &outcome,
                            [&](uint32_t lkey, uint64_t addr, absl::Span<uint8_t> out) {
                              return ReadThroughLkey(pdn, 0, lkey, addr, out, policy);
                            });
      r.local_invalidate = outcome.local_invalidate;
      if (r.status.ok()) {
        stats.umrs_executed.Inc();
        if (outcome.local_invalidate) stats.local_invalidations.Inc();
      }
    }
  }
  if (!r.status.ok()) stats.umrs_failed.Inc();
  return r;
}

bool HcaCore::IsMttKey(Key key) const {
  MkeySlot* slot = impl_->table.Slot(KeyIndex(key));
  if (slot == nullptr) return true;  // the executor refuses it with its own reason
  base::MutexLock lock(&slot->mu);
  return !slot->exists || slot->state.access_mode == umr::kAccessModeMtt;
}

absl::StatusOr<FaultEvent> HcaCore::NextFaultEvent(absl::Duration timeout) {
  return impl_->faults.Next(timeout);
}

int HcaCore::FaultEventFd() const { return impl_->faults.fd(); }

absl::StatusOr<std::vector<uint8_t>> HcaCore::ResumeMailbox(uint64_t token, bool error) {
  ASSIGN_OR_RETURN(const umr::PageFaultResumeIn in, impl_->faults.ResumeCommandFor(token, error));
  ASSIGN_OR_RETURN(const umr::Mailbox16 mailbox, umr::EncodePageFaultResumeIn(in));
  return std::vector<uint8_t>(mailbox.begin(), mailbox.end());
}

std::vector<uint8_t> HcaCore::EventRingForTest() { return impl_->faults.EventRingForTest(); }

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

absl::StatusOr<uint64_t> AtomicAt(const Segments& segs, bool compare_swap, uint64_t a, uint64_t b) {
  if (segs.size() != 1 || segs[0].len != 8 || segs[0].addr % 8 != 0) {
    return DeviceError(Syndrome::kRemoteInvalReq,
                       "the atomic does not translate to one aligned 8-byte location");
  }
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(segs[0].addr));
  if (compare_swap) {
    uint64_t expected = a;
    word.compare_exchange_strong(expected, b);
    return expected;  // the old value, whether or not it swapped
  }
  return word.fetch_add(a);
}

}  // namespace regcache::hca::sim
