#include "hca/sim/internal/commands.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "hca/sim/internal/mkc_convert.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {
namespace {

using umr::kCmdStatusBadParam;
using umr::kCmdStatusBadResource;
using umr::kCmdStatusLimit;

absl::Status Fail(std::vector<uint8_t>* out, uint8_t status, uint32_t syndrome,
                  absl::string_view why) {
  const umr::Mailbox16 m = umr::EncodeCmdStatusOut(umr::CmdStatus{status, syndrome});
  out->assign(m.begin(), m.end());
  const std::string msg = absl::StrCat(why, " (status 0x", absl::Hex(status), ", syndrome 0x",
                                       absl::Hex(syndrome), ")");
  switch (status) {
    case kCmdStatusBadResource:
      return absl::NotFoundError(msg);
    case kCmdStatusLimit:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InvalidArgumentError(msg);
  }
}

void Succeed(const umr::Mailbox16& m, std::vector<uint8_t>* out) {
  out->assign(m.begin(), m.end());
}

// Sim-chosen command syndromes (the real ones are firmware-internal).
constexpr uint32_t kSynBadMailbox = 0x5a0001;  // short, wrong opcode for its decoder
constexpr uint32_t kSynBadOpcode = 0x5a0002;
constexpr uint32_t kSynBadMode = 0x5a0003;
constexpr uint32_t kSynTooManyEntries = 0x5a0004;
constexpr uint32_t kSynNoSuchKey = 0x5a0005;
constexpr uint32_t kSynTableFull = 0x5a0006;
constexpr uint32_t kSynUmem = 0x5a0007;
constexpr uint32_t kSynNoSuchFault = 0x5a0008;
constexpr uint32_t kSynFaultMismatch = 0x5a0009;
constexpr uint32_t kSynNoSuchPd = 0x5a000a;
constexpr uint32_t kSynListTooLong = 0x5a000b;
constexpr uint32_t kSynNoCapImage = 0x5a000c;

}  // namespace

absl::Status CommandProcessor::Execute(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                                       bool on_demand) {
  const absl::StatusOr<uint16_t> opcode = umr::PeekCommandOpcode(in);
  if (!opcode.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMailbox, opcode.status().message());
  switch (*opcode) {
    case umr::kCmdCreateMkey:
      return CreateMkey(in, out, on_demand);
    case umr::kCmdQueryMkey:
      return QueryMkey(in, out);
    case umr::kCmdDestroyMkey:
      return DestroyMkey(in, out);
    case umr::kCmdPageFaultResume:
      if (options_.resume) return PageFaultResume(in, out);
      break;
    case umr::kCmdQueryHcaCap:
      if (options_.general_caps || options_.odp_caps) return QueryHcaCap(in, out);
      break;
    default:
      break;
  }
  return Fail(out, kCmdStatusBadParam, kSynBadOpcode,
              absl::StrCat("opcode 0x", absl::Hex(*opcode), " not modelled"));
}

absl::Status CommandProcessor::CreateMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                                          bool on_demand) {
  const absl::StatusOr<umr::CreateMkeyIn> cmd = umr::DecodeCreateMkeyIn(in);
  if (!cmd.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMailbox, cmd.status().message());
  if (cmd->mkey_umem_valid) {
    // Translations arrive inline only: the sim has no UMEM objects to read them from.
    return Fail(out, kCmdStatusBadParam, kSynUmem, "CREATE_MKEY from a UMEM is not modelled");
  }
  const MkeyState st = FromMkc(cmd->mkc);
  const umr::AccessMode mode = static_cast<umr::AccessMode>(st.access_mode);
  if (mode != umr::AccessMode::kMtt && mode != umr::AccessMode::kKlm &&
      mode != umr::AccessMode::kKsm) {
    return Fail(out, kCmdStatusBadParam, kSynBadMode,
                absl::StrCat("access mode ", st.access_mode, " not modelled"));
  }
  if (options_.pd_exists && !options_.pd_exists(st.pd)) {
    return Fail(out, kCmdStatusBadParam, kSynNoSuchPd, absl::StrCat("no pd ", st.pd));
  }
  if (const uint32_t max = options_.max_klm_entries;
      max != 0 && mode != umr::AccessMode::kMtt && MkeySlot::CapacityEntries(st) > max) {
    return Fail(out, kCmdStatusLimit, kSynListTooLong,
                absl::StrCat(MkeySlot::CapacityEntries(st), " KLM/KSM entries exceed ", max));
  }
  if (cmd->translation.size() / umr::kOctoword > st.translations_octword_size) {
    return Fail(out, kCmdStatusBadParam, kSynTooManyEntries,
                "translations_octword_actual_size exceeds translations_octword_size");
  }
  absl::StatusOr<umr::Translation> t = umr::DecodeTranslation(mode, cmd->translation);
  if (!t.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMode, t.status().message());

  absl::StatusOr<uint32_t> index = table_->Allocate();
  if (!index.ok()) return Fail(out, kCmdStatusLimit, kSynTableFull, index.status().message());
  MkeySlot* slot = table_->Slot(*index);
  {
    base::MutexLock lock(&slot->mu);
    slot->exists = true;
    slot->on_demand = on_demand;
    slot->state = st;
    const uint32_t cap = MkeySlot::CapacityEntries(st);
    slot->mtt.assign(mode == umr::AccessMode::kMtt ? cap : 0, 0);
    slot->klm.assign(mode == umr::AccessMode::kMtt ? 0 : cap, umr::KlmEntry{});
    for (size_t i = 0; i < t->mtt.size(); ++i) slot->mtt[i] = StoredMtt(t->mtt[i]);
    std::copy(t->klm.begin(), t->klm.end(), slot->klm.begin());
    for (size_t i = 0; i < t->ksm.size(); ++i) slot->klm[i] = StoredKsm(t->ksm[i]);
    slot->RecomputeKlmEnds();
  }
  // The index came from a table of at most 2^24 slots: it fits.
  Succeed(umr::EncodeCreateMkeyOut(umr::CreateMkeyOut{{}, *index}).value(), out);
  return absl::OkStatus();
}

absl::Status CommandProcessor::QueryMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out) {
  const absl::StatusOr<umr::QueryMkeyIn> cmd = umr::DecodeQueryMkeyIn(in);
  if (!cmd.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMailbox, cmd.status().message());
  const uint32_t index = cmd->mkey_index;
  MkeySlot* slot = table_->Slot(index);
  if (slot == nullptr) {
    return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
  }
  umr::QueryMkeyOut o;
  {
    base::ReaderMutexLock lock(&slot->mu);
    if (!slot->exists) {
      return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
    }
    o.mkc = ToMkc(slot->state);
    // The whole table (capacity entries: whole octowords), as the kernel sizes its outbox to
    // read every entry (docs/prm.md, Command mailboxes).
    if (slot->state.access_mode == umr::kAccessModeMtt) {
      std::vector<umr::MttEntry> e(slot->mtt.size());
      for (size_t i = 0; i < e.size(); ++i) e[i] = LoadedMtt(slot->mtt[i]);
      o.translation.resize(e.size() * umr::kMttEntryBytes);
      if (absl::Status s = umr::EncodeMttEntries(e, o.translation.data()); !s.ok()) return s;
    } else if (slot->state.access_mode == umr::kAccessModeKsm) {
      std::vector<umr::KsmEntry> e(slot->klm.size());
      for (size_t i = 0; i < e.size(); ++i) {
        e[i] = umr::KsmEntry{slot->klm[i].mkey, slot->klm[i].address};
      }
      o.translation.resize(e.size() * umr::kKlmEntryBytes);
      umr::EncodeKsmEntries(e, o.translation.data());
    } else {
      o.translation.resize(slot->klm.size() * umr::kKlmEntryBytes);
      umr::EncodeKlmEntries(slot->klm, o.translation.data());
    }
  }
  // Stored state always fits its PRM widths; a failure here is a sim bug, reported as such.
  absl::StatusOr<std::vector<uint8_t>> bytes = umr::EncodeQueryMkeyOut(o);
  if (!bytes.ok()) return absl::InternalError(bytes.status().message());
  *out = *std::move(bytes);
  return absl::OkStatus();
}

absl::Status CommandProcessor::DestroyMkey(absl::Span<const uint8_t> in,
                                           std::vector<uint8_t>* out) {
  const absl::StatusOr<umr::DestroyMkeyIn> cmd = umr::DecodeDestroyMkeyIn(in);
  if (!cmd.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMailbox, cmd.status().message());
  const uint32_t index = cmd->mkey_index;
  MkeySlot* slot = table_->Slot(index);
  if (slot == nullptr) {
    return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
  }
  {
    base::MutexLock lock(&slot->mu);
    if (!slot->exists) {
      return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
    }
    slot->exists = false;
    slot->on_demand = false;
    slot->state = MkeyState{};
    slot->mtt.clear();
    slot->klm.clear();
    slot->klm_end.clear();
  }
  table_->Release(index);
  Succeed(umr::EncodeCmdStatusOut({}), out);
  return absl::OkStatus();
}

absl::Status CommandProcessor::PageFaultResume(absl::Span<const uint8_t> in,
                                               std::vector<uint8_t>* out) {
  const absl::StatusOr<umr::PageFaultResumeIn> cmd = umr::DecodePageFaultResumeIn(in);
  if (!cmd.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMailbox, cmd.status().message());
  const absl::Status s = options_.resume(*cmd);
  if (absl::IsNotFound(s)) return Fail(out, kCmdStatusBadResource, kSynNoSuchFault, s.message());
  if (!s.ok()) return Fail(out, kCmdStatusBadParam, kSynFaultMismatch, s.message());
  Succeed(umr::EncodeCmdStatusOut({}), out);
  return absl::OkStatus();
}

absl::Status CommandProcessor::QueryHcaCap(absl::Span<const uint8_t> in,
                                           std::vector<uint8_t>* out) {
  const absl::StatusOr<umr::QueryHcaCapIn> cmd = umr::DecodeQueryHcaCapIn(in);
  if (!cmd.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMailbox, cmd.status().message());
  if (cmd->other_function) {
    return Fail(out, kCmdStatusBadParam, kSynNoCapImage, "other_function: no other functions");
  }
  absl::StatusOr<std::vector<uint8_t>> bytes = absl::InvalidArgumentError("");
  if (cmd->cap_type == umr::kCapTypeGeneral && options_.general_caps) {
    bytes = umr::EncodeQueryHcaCapOut({}, *options_.general_caps);
  } else if (cmd->cap_type == umr::kCapTypeOdp && options_.odp_caps) {
    bytes = umr::EncodeQueryOdpCapOut({}, *options_.odp_caps);
  } else {
    return Fail(out, kCmdStatusBadParam, kSynNoCapImage,
                absl::StrCat("no capability image of cap_type ", cmd->cap_type));
  }
  // The images are the device's own and fit their fields; a failure is a model bug.
  if (!bytes.ok()) return absl::InternalError(bytes.status().message());
  *out = *std::move(bytes);
  return absl::OkStatus();
}

}  // namespace regcache::hca::sim
