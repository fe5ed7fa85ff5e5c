#include "hca/sim/internal/umr_executor.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hca/sim/internal/mkc_convert.h"
#include "hca/status.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {
namespace {

absl::Status Bind(uint32_t key, absl::string_view why) {
  return DeviceError(Syndrome::kMwBind, absl::StrFormat("UMR on key 0x%08x: %s", key, why));
}
absl::Status QpOp(uint32_t key, absl::string_view why) {
  return DeviceError(Syndrome::kLocalQpOp, absl::StrFormat("UMR on key 0x%08x: %s", key, why));
}

// Mask bits the sim applies or accepts.
constexpr uint64_t kModelledMask =
    umr::kMaskLen | umr::kMaskPageSize | umr::kMaskStartAddr | umr::kMaskPd | umr::kMaskEnRinval |
    umr::kMaskKey | umr::kMaskQpn | umr::kMaskAccess | umr::kMaskSmallFence |
    umr::kMaskRelaxedOrderingWrite | umr::kMaskFree | umr::kMaskRelaxedOrderingRead;

}  // namespace

absl::Status ExecuteUmr(MkeyTable* table, uint32_t queue_pd, const umr::WqeDesc& wqe,
                        umr::UmrModifyCaps allowed, UmrOutcome* outcome,
                        const ReadLocal& read_local) {
  const uint32_t key = wqe.ctrl.imm;
  const umr::UmrCtrlSegDesc& u = wqe.umr;
  const uint64_t mask = u.mkey_mask;
  if ((mask & ~kModelledMask) != 0) {
    return QpOp(key, absl::StrFormat("mkey_mask bits 0x%x not modelled", mask & ~kModelledMask));
  }
  if ((mask & umr::kMaskA) != 0 && !allowed.atomic) {
    return QpOp(key, "mkey_mask selects A, which the device forbids (umr_modify_atomic_disabled)");
  }
  if ((mask & umr::kMaskPageSize) != 0 && !allowed.entity_size) {
    return QpOp(key,
                "mkey_mask selects PAGE_SIZE, which the device forbids "
                "(umr_modify_entity_size_disabled)");
  }
  // Pointer mode: the list is fetched before the target key is locked (the read translates
  // through another key, the staging buffer's).
  std::vector<uint8_t> pointed;
  if (u.klm_octowords > 0 && !u.inline_translation) {
    if (!wqe.translation_pointer.has_value() || read_local == nullptr) {
      return QpOp(key, "translation pointer without a readable data segment");
    }
    const umr::DataSegDesc& d = *wqe.translation_pointer;
    if (d.byte_count != uint32_t{u.klm_octowords} * umr::kOctoword) {
      return QpOp(key, absl::StrCat("pointer byte_count ", d.byte_count, " is not ",
                                    u.klm_octowords, " octowords"));
    }
    pointed.resize(d.byte_count);
    if (absl::Status s = read_local(d.lkey, d.addr, absl::MakeSpan(pointed)); !s.ok()) {
      return DeviceError(
          Syndrome::kLocalProt,
          absl::StrFormat("UMR on key 0x%08x: reading its translation: %s", key, s.message()));
    }
  }
  if (u.klm_octowords % umr::kOctowordsPer64B != 0) {
    return QpOp(key, absl::StrCat("klm_octowords ", u.klm_octowords, " not 64-byte aligned"));
  }
  const uint64_t offset = u.translation_offset_en ? u.translation_offset : 0;
  if (offset % umr::kOctowordsPer64B != 0) {
    return QpOp(key, absl::StrCat("translation offset ", offset, " not 64-byte aligned"));
  }
  MkeySlot* slot = table->Slot(KeyIndex(key));
  if (slot == nullptr) return Bind(key, "index beyond the key table");

  base::MutexLock lock(&slot->mu);
  if (!slot->exists) return Bind(key, "no such key");
  const MkeyState cur = slot->state;  // a copy: the lock analysis cannot follow a reference
  if (!cur.umr_en) return Bind(key, "umr_en is 0");
  if (cur.pd != queue_pd) {
    return Bind(key, absl::StrFormat("key pd %u differs from the queue's pd %u", cur.pd, queue_pd));
  }
  if (u.check_free == umr::FreeCheck::kMustBeFree && !cur.free) {
    return Bind(key, "must-be-free check failed: key is live");
  }
  if (u.check_free == umr::FreeCheck::kMustNotBeFree && cur.free) {
    return Bind(key, "must-not-be-free check failed: key is free");
  }
  if (mask & umr::kMaskPd) return Bind(key, "PD change needs a REG_UMR queue");
  if (offset + u.klm_octowords > cur.translations_octword_size) {
    return Bind(key, absl::StrCat("translation [", offset, ", +", u.klm_octowords,
                                  ") octowords exceeds capacity ", cur.translations_octword_size));
  }
  umr::Translation t;
  if (u.klm_octowords > 0) {
    absl::StatusOr<umr::Translation> dt =
        umr::DecodeTranslation(static_cast<umr::AccessMode>(cur.access_mode),
                               u.inline_translation ? absl::MakeConstSpan(wqe.inline_translation)
                                                    : absl::MakeConstSpan(pointed));
    if (!dt.ok()) return QpOp(key, dt.status().message());
    t = *std::move(dt);
  }

  // All checks passed: build the new state, then commit.
  MkeyState next = cur;
  const MkeyState in = FromMkc(wqe.mkc);
  if (mask & umr::kMaskLen) {
    next.len = in.len;
    next.length64 = in.length64;
  }
  if (mask & umr::kMaskPageSize) next.log_entity_size = in.log_entity_size;
  if (mask & umr::kMaskStartAddr) next.start_addr = in.start_addr;
  if (mask & umr::kMaskEnRinval) next.en_rinval = in.en_rinval;
  if (mask & umr::kMaskKey) next.variant = in.variant;
  if (mask & umr::kMaskQpn) next.qpn = in.qpn;
  const std::pair<uint64_t, AccessFlags> bits[] = {{umr::kMaskLr, kLocalRead},
                                                   {umr::kMaskLw, kLocalWrite},
                                                   {umr::kMaskRr, kRemoteRead},
                                                   {umr::kMaskRw, kRemoteWrite},
                                                   {umr::kMaskA, kRemoteAtomic}};
  for (const auto& [m, bit] : bits) {
    if (mask & m) next.access = (next.access & ~bit) | (in.access & bit);
  }
  if (mask & umr::kMaskFree) next.free = in.free;
  outcome->local_invalidate = mask == umr::kMaskFree && in.free && u.klm_octowords == 0;

  if (u.klm_octowords > 0) {
    const size_t first =
        offset * umr::EntriesPerOctoword(static_cast<umr::AccessMode>(cur.access_mode));
    if (cur.access_mode == umr::kAccessModeMtt) {
      for (size_t i = 0; i < t.mtt.size(); ++i) slot->mtt[first + i] = StoredMtt(t.mtt[i]);
    } else {
      std::copy(t.klm.begin(), t.klm.end(), slot->klm.begin() + first);
      for (size_t i = 0; i < t.ksm.size(); ++i) slot->klm[first + i] = StoredKsm(t.ksm[i]);
      slot->RecomputeKlmEnds();
    }
  }
  slot->state = next;
  return absl::OkStatus();
}

}  // namespace regcache::hca::sim