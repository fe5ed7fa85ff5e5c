#include "hca/sim/internal/translator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "umr/prm.h"

namespace regcache::hca::sim {
namespace {

absl::Status Fail(AccessKind kind, Key key, absl::string_view why) {
  return DeviceError(IsRemote(kind) ? Syndrome::kRemoteAccess : Syndrome::kLocalProt,
                     absl::StrFormat("key 0x%08x: %s", key, why));
}

AccessFlags NeededBit(AccessKind kind) {
  switch (kind) {
    case AccessKind::kLocalRead:
      return kLocalRead;
    case AccessKind::kLocalWrite:
      return kLocalWrite;
    case AccessKind::kRemoteRead:
      return kRemoteRead;
    case AccessKind::kRemoteWrite:
      return kRemoteWrite;
    case AccessKind::kRemoteAtomic:
      return kRemoteAtomic;
  }
  return kLocalRead;
}

void Append(Segments* out, uint64_t addr, uint64_t len) {
  if (!out->empty() && out->back().addr + out->back().len == addr) {
    out->back().len += len;
  } else {
    out->push_back(Segment{addr, len});
  }
}

// A sub-request into the next level, collected under the slot lock and walked after it.
struct Hop {
  Key key;
  uint64_t va;
  uint64_t len;
};

}  // namespace

absl::Status Translator::Translate(uint32_t pd, Key key, uint64_t va, uint64_t len, AccessKind kind,
                                   Segments* out, std::optional<FaultNeed>* fault) const {
  fault->reset();
  return Walk(pd, key, va, len, kind, 0, out, fault);
}

absl::Status Translator::Walk(uint32_t pd, Key key, uint64_t va, uint64_t len, AccessKind kind,
                              uint32_t depth, Segments* out,
                              std::optional<FaultNeed>* fault) const {
  const MkeySlot* slot = table_->Slot(KeyIndex(key));
  if (slot == nullptr) return Fail(kind, key, "index beyond the key table");
  absl::InlinedVector<Hop, 4> hops;
  {
    base::ReaderMutexLock lock(&slot->mu);
    const MkeyState& s = slot->state;
    // 1. variant (a destroyed index accepts no variant)
    if (!slot->exists) return Fail(kind, key, "no such key");
    if (s.variant != KeyVariant(key)) {
      return Fail(kind, key, absl::StrFormat("variant mismatch (key accepts 0x%02x)", s.variant));
    }
    // 2. free
    if (s.free) return Fail(kind, key, "key is free");
    // 3. PD
    if (s.pd != pd)
      return Fail(kind, key, absl::StrFormat("PD mismatch (key pd %u, qp pd %u)", s.pd, pd));
    // 4. range, in 128-bit arithmetic: no wrap of va+len, none of start+len.
    const unsigned __int128 end = static_cast<unsigned __int128>(va) + len;
    const unsigned __int128 key_end =
        static_cast<unsigned __int128>(s.start_addr) +
        (s.length64 ? (static_cast<unsigned __int128>(1) << 64) : s.len);
    if (va < s.start_addr || end > key_end || end > (static_cast<unsigned __int128>(1) << 64)) {
      return Fail(kind, key,
                  absl::StrFormat("range [0x%x, +%u) outside key [0x%x, +%s)", va, len,
                                  s.start_addr, s.length64 ? "2^64" : absl::StrCat(s.len)));
    }
    // 5. access bits: lr always, then the bit of this access.
    const AccessFlags need = kLocalRead | NeededBit(kind);
    if ((s.access & need) != need) {
      return Fail(kind, key,
                  absl::StrCat("access ", AccessToString(need & ~s.access),
                               " not granted (key has ", AccessToString(s.access), ")"));
    }
    if (len == 0) return absl::OkStatus();
    // 6. translation.
    const uint64_t d = va - s.start_addr;
    switch (s.access_mode) {
      case umr::kAccessModeMtt: {
        const unsigned log = s.log_entity_size;
        const uint64_t page = uint64_t{1} << log;
        uint64_t u = d + (s.start_addr & (page - 1));
        uint64_t remaining = len;
        const uint64_t need_bit = IsWrite(kind) ? umr::kMttWrite : umr::kMttRead;
        while (remaining > 0) {
          const uint64_t i = u >> log;
          const uint64_t delta = u & (page - 1);
          const uint64_t n = std::min(remaining, page - delta);
          if (i >= slot->mtt.size()) {
            return Fail(kind, key,
                        absl::StrCat("MTT index ", i, " beyond ", slot->mtt.size(), " entries"));
          }
          const uint64_t e = slot->mtt[i];
          if ((e & need_bit) == 0) {
            const uint64_t at = va + (len - remaining);
            if (slot->on_demand) {
              *fault = FaultNeed{key, at, remaining, IsWrite(kind)};
              return absl::UnavailableError(
                  absl::StrFormat("page fault: key 0x%08x MTT[%u] absent at 0x%x", key, i, at));
            }
            return Fail(kind, key,
                        absl::StrCat("MTT[", i, "] lacks ", IsWrite(kind) ? "wr_en" : "rd_en"));
          }
          Append(out, (e & umr::kMttAddrMask) + delta, n);
          u += n;
          remaining -= n;
        }
        return absl::OkStatus();
      }
      case umr::kAccessModeKlm: {
        const std::vector<uint64_t>& ends = slot->klm_end;
        size_t j = std::upper_bound(ends.begin(), ends.end(), d) - ends.begin();
        uint64_t off = d - (j < ends.size() ? ends[j] - slot->klm[j].byte_count : 0);
        uint64_t remaining = len;
        while (remaining > 0) {
          if (j >= ends.size() || slot->klm[j].byte_count == 0) {
            return Fail(kind, key,
                        absl::StrCat("offset ", d + len - remaining, " beyond the KLM entries"));
          }
          const umr::KlmEntry& e = slot->klm[j];
          const uint64_t n = std::min<uint64_t>(remaining, e.byte_count - off);
          hops.push_back(Hop{e.mkey, e.address + off, n});
          remaining -= n;
          off = 0;
          ++j;
        }
        break;
      }
      case umr::kAccessModeKsm: {
        const unsigned log = s.log_entity_size;
        const uint64_t entity = uint64_t{1} << log;
        uint64_t pos = d;
        uint64_t remaining = len;
        while (remaining > 0) {
          const uint64_t j = pos >> log;
          const uint64_t off = pos & (entity - 1);
          if (j >= slot->klm.size()) {
            return Fail(kind, key,
                        absl::StrCat("KSM index ", j, " beyond ", slot->klm.size(), " entries"));
          }
          const uint64_t n = std::min(remaining, entity - off);
          hops.push_back(Hop{slot->klm[j].mkey, slot->klm[j].address + off, n});
          pos += n;
          remaining -= n;
        }
        break;
      }
      default:
        return Fail(kind, key, absl::StrCat("access mode ", s.access_mode, " not modelled"));
    }
  }
  // 7. nested keys, each checked again from step 1.
  if (depth + 1 > max_indirection_) {
    return Fail(kind, key,
                absl::StrCat("indirection deeper than max_indirection ", max_indirection_));
  }
  for (const Hop& hop : hops) {
    absl::Status s = Walk(pd, hop.key, hop.va, hop.len, kind, depth + 1, out, fault);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace regcache::hca::sim