#include "hca/sim/commands.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "hca/sim/mkc_convert.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_decoder.h"

namespace hca::sim {
namespace {

absl::Status Fail(std::vector<uint8_t>* out, uint8_t status, uint32_t syndrome,
                  absl::string_view why) {
  out->assign(16, 0);
  auto* hdr = reinterpret_cast<umr::CmdOutHeaderLayout*>(out->data());
  hdr->status = base::be32::FromHost(uint32_t{status} << 24);
  hdr->syndrome = base::be32::FromHost(syndrome);
  const std::string msg = absl::StrCat(why, " (status 0x", absl::Hex(status), ", syndrome 0x",
                                       absl::Hex(syndrome), ")");
  return status == kCmdStatusBadParam ? absl::InvalidArgumentError(msg)
                                      : absl::FailedPreconditionError(msg);
}

// Sim-chosen command syndromes (the real ones are firmware-internal).
constexpr uint32_t kSynShortMailbox = 0x5a0001;
constexpr uint32_t kSynBadOpcode = 0x5a0002;
constexpr uint32_t kSynBadMode = 0x5a0003;
constexpr uint32_t kSynTooManyEntries = 0x5a0004;
constexpr uint32_t kSynNoSuchKey = 0x5a0005;
constexpr uint32_t kSynTableFull = 0x5a0006;

}  // namespace

absl::Status CommandProcessor::Execute(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                                       bool on_demand) {
  if (in.size() < sizeof(umr::CmdInHeaderLayout)) {
    return Fail(out, kCmdStatusBadParam, kSynShortMailbox, "command shorter than its header");
  }
  umr::CmdInHeaderLayout hdr;
  std::memcpy(&hdr, in.data(), sizeof(hdr));
  const uint16_t opcode = static_cast<uint16_t>(hdr.opcode_uid.GetBits(31, 16));
  switch (opcode) {
    case umr::kCmdCreateMkey: return CreateMkey(in, out, on_demand);
    case umr::kCmdQueryMkey: return QueryMkey(in, out);
    case umr::kCmdDestroyMkey: return DestroyMkey(in, out);
    default:
      return Fail(out, kCmdStatusBadParam, kSynBadOpcode,
                  absl::StrCat("opcode 0x", absl::Hex(opcode), " not modelled"));
  }
}

absl::Status CommandProcessor::CreateMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                                          bool on_demand) {
  if (in.size() < sizeof(umr::CreateMkeyInLayout)) {
    return Fail(out, kCmdStatusBadParam, kSynShortMailbox, "CREATE_MKEY mailbox too short");
  }
  umr::CreateMkeyInLayout cmd;
  std::memcpy(&cmd, in.data(), sizeof(cmd));
  const MkeyState st = FromMkc(umr::DecodeMkeyContext(cmd.mkc));
  umr::AccessMode mode = static_cast<umr::AccessMode>(st.access_mode);
  if (mode != umr::AccessMode::kMtt && mode != umr::AccessMode::kKlm &&
      mode != umr::AccessMode::kKsm) {
    return Fail(out, kCmdStatusBadParam, kSynBadMode,
                absl::StrCat("access mode ", st.access_mode, " not modelled"));
  }
  const uint32_t actual_oct = cmd.translations_octword_actual_size.ToHost();
  if (actual_oct > st.translations_octword_size ||
      in.size() < sizeof(cmd) + size_t{actual_oct} * 16) {
    return Fail(out, kCmdStatusBadParam, kSynTooManyEntries,
                "translations_octword_actual_size exceeds the capacity or the mailbox");
  }
  absl::StatusOr<umr::Translation> t = umr::DecodeTranslation(
      mode, in.subspan(sizeof(cmd), size_t{actual_oct} * 16));
  if (!t.ok()) return Fail(out, kCmdStatusBadParam, kSynBadMode, t.status().message());

  absl::StatusOr<uint32_t> index = table_->Allocate();
  if (!index.ok()) {
    return Fail(out, kCmdStatusBadResource, kSynTableFull, index.status().message());
  }
  MkeySlot* slot = table_->Slot(*index);
  {
    base::MutexLock lock(&slot->mu);
    slot->exists = true;
    slot->on_demand = on_demand;
    slot->state = st;
    const uint32_t cap = MkeySlot::CapacityEntries(st);
    slot->mtt.assign(mode == umr::AccessMode::kMtt ? cap : 0, 0);
    slot->klm.assign(mode == umr::AccessMode::kMtt ? 0 : cap, IndirectEntry{});
    for (size_t i = 0; i < t->mtt.size(); ++i) {
      slot->mtt[i] = t->mtt[i].addr | (t->mtt[i].read ? 1 : 0) | (t->mtt[i].write ? 2 : 0);
    }
    for (size_t i = 0; i < t->klm.size(); ++i) {
      slot->klm[i] = IndirectEntry{t->klm[i].byte_count, t->klm[i].mkey, t->klm[i].address};
    }
    for (size_t i = 0; i < t->ksm.size(); ++i) {
      slot->klm[i] = IndirectEntry{0, t->ksm[i].mkey, t->ksm[i].va};
    }
    slot->RecomputeKlmEnds();
  }
  out->assign(sizeof(umr::MkeyIndexCmdLayout), 0);
  auto* o = reinterpret_cast<umr::MkeyIndexCmdLayout*>(out->data());
  o->mkey_index = base::be32::FromHost(*index);
  return absl::OkStatus();
}

absl::Status CommandProcessor::QueryMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out) {
  if (in.size() < sizeof(umr::MkeyIndexCmdLayout)) {
    return Fail(out, kCmdStatusBadParam, kSynShortMailbox, "QUERY_MKEY mailbox too short");
  }
  umr::MkeyIndexCmdLayout cmd;
  std::memcpy(&cmd, in.data(), sizeof(cmd));
  const uint32_t index = cmd.mkey_index.GetBits(23, 0);
  MkeySlot* slot = table_->Slot(index);
  if (slot == nullptr) {
    return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
  }
  base::ReaderMutexLock lock(&slot->mu);
  if (!slot->exists) {
    return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
  }
  const bool mtt = slot->state.access_mode == umr::kAccessModeMtt;
  const size_t entries = mtt ? slot->mtt.size() : slot->klm.size();
  const size_t entry_bytes = mtt ? 8 : 16;
  // At least the two octowords the layout always carries (facts §5.5).
  const size_t xlt_bytes = std::max<size_t>(32, entries * entry_bytes);
  out->assign(sizeof(umr::QueryMkeyOutLayout) + xlt_bytes, 0);
  auto* o = reinterpret_cast<umr::QueryMkeyOutLayout*>(out->data());
  absl::Status s = umr::EncodeMkeyContext(ToMkc(slot->state), &o->mkc);
  if (!s.ok()) return s;  // stored state always fits its PRM widths
  uint8_t* xlt = out->data() + sizeof(umr::QueryMkeyOutLayout);
  if (mtt) {
    std::vector<umr::MttEntry> e(entries);
    for (size_t i = 0; i < entries; ++i) {
      e[i] = umr::MttEntry{slot->mtt[i] & ~uint64_t{0xff}, (slot->mtt[i] & 1) != 0,
                           (slot->mtt[i] & 2) != 0};
    }
    s = umr::EncodeMttEntries(e, xlt);
    if (!s.ok()) return s;
  } else if (slot->state.access_mode == umr::kAccessModeKsm) {
    std::vector<umr::KsmEntry> e(entries);
    for (size_t i = 0; i < entries; ++i) e[i] = umr::KsmEntry{slot->klm[i].mkey, slot->klm[i].address};
    umr::EncodeKsmEntries(e, xlt);
  } else {
    std::vector<umr::KlmEntry> e(entries);
    for (size_t i = 0; i < entries; ++i) {
      e[i] = umr::KlmEntry{slot->klm[i].byte_count, slot->klm[i].mkey, slot->klm[i].address};
    }
    umr::EncodeKlmEntries(e, xlt);
  }
  return absl::OkStatus();
}

absl::Status CommandProcessor::DestroyMkey(absl::Span<const uint8_t> in,
                                           std::vector<uint8_t>* out) {
  if (in.size() < sizeof(umr::MkeyIndexCmdLayout)) {
    return Fail(out, kCmdStatusBadParam, kSynShortMailbox, "DESTROY_MKEY mailbox too short");
  }
  umr::MkeyIndexCmdLayout cmd;
  std::memcpy(&cmd, in.data(), sizeof(cmd));
  const uint32_t index = cmd.mkey_index.GetBits(23, 0);
  MkeySlot* slot = table_->Slot(index);
  if (slot == nullptr) {
    return Fail(out, kCmdStatusBadResource, kSynNoSuchKey, absl::StrCat("no mkey index ", index));
  }
  {
    base::MutexLock lock(&slot->mu);
    if (!slot->exists) {
      return Fail(out, kCmdStatusBadResource, kSynNoSuchKey,
                  absl::StrCat("no mkey index ", index));
    }
    slot->exists = false;
    slot->on_demand = false;
    slot->state = MkeyState{};
    slot->mtt.clear();
    slot->klm.clear();
    slot->klm_end.clear();
  }
  table_->Release(index);
  out->assign(sizeof(umr::MkeyIndexCmdLayout), 0);
  return absl::OkStatus();
}

}  // namespace hca::sim
