#include "umr/wqe_decoder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace regcache::umr {
namespace {

constexpr size_t kUmrHeadBytes = kUmrHeadDs * kOctoword;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

absl::Status NotA(const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("not a ", what, " WQE: ", why));
}

}  // namespace

absl::StatusOr<WqeDesc> DecodeWqe(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(CtrlSegLayout)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WQE of ", bytes.size(), " B is shorter than a control segment"));
  }
  WqeDesc d;
  ASSIGN_OR_RETURN(d.ctrl, DecodeCtrlSeg(Load<CtrlSegLayout>(bytes.data())));
  const unsigned ds = d.ctrl.ds;
  if (ds == 0) return absl::InvalidArgumentError("WQE with DS=0");
  if (ds * kOctoword > bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DS=", ds, " needs ", ds * kOctoword, " B, only ", bytes.size(), " B given"));
  }
  const uint8_t* p = bytes.data();
  switch (d.ctrl.opcode) {
    case kOpcodeUmr: {
      if (ds < kUmrHeadDs) {
        return absl::InvalidArgumentError(
            absl::StrCat("UMR WQE with DS=", ds, " < 8 (ctrl + UMR ctrl + mkey context)"));
      }
      ASSIGN_OR_RETURN(d.umr, DecodeUmrCtrlSeg(Load<UmrCtrlSegLayout>(p + 16)));
      if (d.umr.mkey_mask & ~kMaskKnown) {
        return absl::InvalidArgumentError(absl::StrCat("UMR mkey_mask has unknown bits 0x",
                                                       absl::Hex(d.umr.mkey_mask & ~kMaskKnown)));
      }
      if (!d.umr.translation_offset_en && d.umr.bsf_octowords != 0) {
        return absl::UnimplementedError(
            absl::StrCat("UMR with BSF (bsf_octowords=", d.umr.bsf_octowords, ")"));
      }
      d.mkc = DecodeMkeyContext(Load<MkeyContext>(p + 64));
      const unsigned octo = d.umr.klm_octowords;
      if (d.umr.inline_translation) {
        if (kUmrHeadDs + octo > ds) {
          return absl::InvalidArgumentError(
              absl::StrCat("klm_octowords=", octo, " exceeds the WQE (DS=", ds, ")"));
        }
        if (kUmrHeadDs + octo != ds) {
          return absl::InvalidArgumentError(
              absl::StrCat("DS=", ds, " but an inline UMR with klm_octowords=", octo, " needs ",
                           kUmrHeadDs + octo));
        }
        d.inline_translation.assign(p + kUmrHeadBytes, p + kUmrHeadBytes + octo * kOctoword);
      } else {
        if (ds != kUmrHeadDs + 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("DS=", ds, " but a pointer-mode UMR needs 9"));
        }
        ASSIGN_OR_RETURN(DataSegDesc ptr, DecodeDataSeg(Load<DataSegLayout>(p + kUmrHeadBytes)));
        if (ptr.byte_count != octo * kOctoword) {
          return absl::InvalidArgumentError(
              absl::StrCat("translation pointer byte_count=", ptr.byte_count,
                           " disagrees with klm_octowords=", octo));
        }
        d.translation_pointer = ptr;
      }
      return d;
    }
    case kOpcodeSendInval:
    case kOpcodeSend:
      for (unsigned i = 1; i < ds; ++i) {
        ASSIGN_OR_RETURN(DataSegDesc s, DecodeDataSeg(Load<DataSegLayout>(p + i * kOctoword)));
        d.data.push_back(s);
      }
      return d;
    case kOpcodeNop:
      if (ds != 1) return absl::InvalidArgumentError(absl::StrCat("NOP with DS=", ds));
      return d;
    default:
      return absl::UnimplementedError(
          absl::StrCat("opcode 0x", absl::Hex(d.ctrl.opcode), " is not executed"));
  }
}

WqeHeader DecodeWqeHeader(const CtrlSegDesc& c) {
  WqeHeader h;
  h.wqe_index = c.wqe_index;
  h.sqn = c.qpn;
  h.fence = c.fence;
  h.signaled = c.signaled();
  h.solicited = c.solicited;
  return h;
}

absl::StatusOr<Translation> DecodeTranslation(AccessMode mode, absl::Span<const uint8_t> bytes) {
  Translation t;
  t.mode = mode;
  switch (mode) {
    case AccessMode::kMtt: {
      ASSIGN_OR_RETURN(t.mtt, DecodeMttEntries(bytes));
      return t;
    }
    case AccessMode::kKlm: {
      ASSIGN_OR_RETURN(t.klm, DecodeKlmEntries(bytes));
      return t;
    }
    case AccessMode::kKsm: {
      ASSIGN_OR_RETURN(t.ksm, DecodeKsmEntries(bytes));
      return t;
    }
    default:
      return absl::UnimplementedError(absl::StrCat(
          "access mode ", AccessModeName(static_cast<uint8_t>(mode)), " has no translation list"));
  }
}

namespace {

template <typename E>
void TrimPadding(std::vector<E>* v, size_t per64) {
  size_t dropped = 0;
  while (!v->empty() && dropped + 1 < per64 && v->back() == E{}) {
    v->pop_back();
    ++dropped;
  }
}

absl::Status CheckUmr(const WqeDesc& d, const char* what) {
  if (d.ctrl.opcode != kOpcodeUmr) {
    return NotA(what, absl::StrCat("opcode 0x", absl::Hex(d.ctrl.opcode)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MapKeyRequest> DecodeMapKey(const WqeDesc& d) { return DecodeMapKey(d, {}); }

absl::StatusOr<MapKeyRequest> DecodeMapKey(const WqeDesc& d, absl::Span<const uint8_t> pointed) {
  RETURN_IF_ERROR(CheckUmr(d, "map"));
  const auto mode = static_cast<AccessMode>(d.mkc.access_mode);
  // The map masks of every device setting (A and PAGE_SIZE are optional, see MapKeyRequest).
  UmrModifyCaps modify;
  modify.atomic = (d.umr.mkey_mask & kMaskA) != 0;
  modify.entity_size = mode == AccessMode::kKlm || (d.umr.mkey_mask & kMaskPageSize) != 0;
  const uint64_t want = MapKeyMask(mode, modify);
  if (d.umr.mkey_mask != want) {
    return NotA("map", absl::StrCat("mkey_mask 0x", absl::Hex(d.umr.mkey_mask), ", expected 0x",
                                    absl::Hex(want)));
  }
  const bool by_pointer = !d.umr.inline_translation;
  if (d.umr.translation_offset_en || d.mkc.free ||
      (by_pointer && (!d.translation_pointer.has_value() ||
                      d.translation_pointer->byte_count != d.umr.klm_octowords * kOctoword ||
                      pointed.size() < d.translation_pointer->byte_count))) {
    return NotA("map", "flags, free bit or translation pointer");
  }
  ASSIGN_OR_RETURN(
      Translation t,
      DecodeTranslation(mode, by_pointer ? pointed.subspan(0, d.translation_pointer->byte_count)
                                         : absl::MakeConstSpan(d.inline_translation)));
  MapKeyRequest r;
  r.key = d.ctrl.imm;
  r.mode = mode;
  r.access = d.mkc.access;
  r.start_addr = d.mkc.start_addr;
  r.length = d.mkc.len;
  r.length64 = d.mkc.length64;
  r.log_entity_size = d.mkc.log_entity_size;
  r.en_rinval = d.mkc.en_rinval;
  r.check_free = d.umr.check_free;
  r.modify = modify;
  TrimPadding(&t.mtt, EntriesPer64B(AccessMode::kMtt));
  TrimPadding(&t.klm, EntriesPer64B(AccessMode::kKlm));
  TrimPadding(&t.ksm, EntriesPer64B(AccessMode::kKsm));
  r.mtt.assign(t.mtt.begin(), t.mtt.end());
  r.klm.assign(t.klm.begin(), t.klm.end());
  r.ksm.assign(t.ksm.begin(), t.ksm.end());
  return r;
}

absl::StatusOr<UpdateKeyRequest> DecodeUpdateKey(const WqeDesc& d) {
  RETURN_IF_ERROR(CheckUmr(d, "update"));
  if (d.umr.klm_octowords != 0 || d.umr.translation_offset_en || !d.umr.inline_translation) {
    return NotA("update", "carries translation");
  }
  if (d.umr.mkey_mask == 0) return NotA("update", "empty mkey_mask");
  return UpdateKeyRequest{d.ctrl.imm, d.umr.mkey_mask, d.mkc, d.umr.check_free};
}

absl::StatusOr<RewriteTranslationRequest> DecodeRewriteTranslation(const WqeDesc& d,
                                                                   AccessMode mode) {
  RETURN_IF_ERROR(CheckUmr(d, "rewrite"));
  if (!d.umr.translation_offset_en || d.umr.mkey_mask != 0) {
    return NotA("rewrite", "needs TRANSLATION_OFFSET and an empty mkey_mask");
  }
  RewriteTranslationRequest r;
  r.key = d.ctrl.imm;
  r.mode = mode;
  r.check_free = d.umr.check_free;
  const size_t esz = EntryBytes(mode);
  r.first_entry = d.umr.translation_offset * kOctoword / esz;
  if (d.umr.inline_translation) {
    ASSIGN_OR_RETURN(Translation t, DecodeTranslation(mode, d.inline_translation));
    r.mtt.assign(t.mtt.begin(), t.mtt.end());
    r.klm.assign(t.klm.begin(), t.klm.end());
    r.ksm.assign(t.ksm.begin(), t.ksm.end());
  } else {
    r.pointer = d.translation_pointer;
  }
  return r;
}

absl::StatusOr<LocalInvalidateRequest> DecodeLocalInvalidate(const WqeDesc& d) {
  RETURN_IF_ERROR(CheckUmr(d, "local invalidate"));
  if (d.umr.mkey_mask != kMaskFree || !d.mkc.free || d.umr.klm_octowords != 0) {
    return NotA("local invalidate", "needs mask FREE, free=1 and no translation");
  }
  return LocalInvalidateRequest{d.ctrl.imm, d.umr.check_free};
}

absl::StatusOr<SendInvalidateRequest> DecodeSendInvalidate(const WqeDesc& d) {
  if (d.ctrl.opcode != kOpcodeSendInval) {
    return NotA("send-with-invalidate", absl::StrCat("opcode 0x", absl::Hex(d.ctrl.opcode)));
  }
  SendInvalidateRequest r;
  r.invalidate_key = d.ctrl.imm;
  r.sgl.assign(d.data.begin(), d.data.end());
  return r;
}

}  // namespace regcache::umr