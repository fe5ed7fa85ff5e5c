#include "hca/prm_convert.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "umr/prm.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca {

AccessFlags FromMkeyAccess(const umr::MkeyAccess& a) {
  AccessFlags f = 0;  // built bit by bit: `cond ? kEnum : 0` mixes enum and int (-Wextra)
  if (a.local_read) f |= kLocalRead;
  if (a.local_write) f |= kLocalWrite;
  if (a.remote_read) f |= kRemoteRead;
  if (a.remote_write) f |= kRemoteWrite;
  if (a.remote_atomic) f |= kRemoteAtomic;
  return f;
}

umr::MkeyAccess ToMkeyAccess(AccessFlags access) {
  umr::MkeyAccess a;
  a.local_read = (access & kLocalRead) != 0;
  a.local_write = (access & kLocalWrite) != 0;
  a.remote_read = (access & kRemoteRead) != 0;
  a.remote_write = (access & kRemoteWrite) != 0;
  a.remote_atomic = (access & kRemoteAtomic) != 0;
  return a;
}

umr::KlmEntry ToUmrKlm(const KlmEntry& e) {
  return umr::KlmEntry{static_cast<uint32_t>(e.length), e.key, e.addr};
}
umr::KsmEntry ToUmrKsm(const KlmEntry& e) { return umr::KsmEntry{e.key, e.addr}; }
umr::MttEntry ToUmrMtt(const MttEntry& e) { return umr::MttEntry{e.dma_addr, e.read, e.write}; }

KlmEntry FromUmrKlm(const umr::KlmEntry& e) { return KlmEntry{e.mkey, e.address, e.byte_count}; }
KlmEntry FromUmrKsm(const umr::KsmEntry& e) { return KlmEntry{e.mkey, e.va, 0}; }
MttEntry FromUmrMtt(const umr::MttEntry& e) { return MttEntry{e.addr, e.read, e.write}; }

namespace {

// log_entity_size of a paged pool key (MTT page / KSM entity): 12..31.
absl::Status EntitySize(uint32_t log, umr::FreeMkeyParams* p) {
  if (log < umr::kMinLogEntitySize || log > umr::kMaxLogEntitySize) {
    return absl::InvalidArgumentError(absl::StrCat("log entity size ", log, " outside 12..31"));
  }
  p->log_entity_size = static_cast<uint8_t>(log);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<umr::FreeMkeyParams> IndirectKeyParams(Pd pd, uint32_t capacity,
                                                      uint32_t max_klm_entries,
                                                      const IndirectKeyOptions& o) {
  if (capacity == 0 || capacity > max_klm_entries) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity ", capacity, " outside 1..", max_klm_entries));
  }
  if (o.layout == Layout::kMtt) return absl::InvalidArgumentError("indirect key with kMtt");
  umr::FreeMkeyParams p;
  p.mode = o.layout == Layout::kKsm ? umr::AccessMode::kKsm : umr::AccessMode::kKlm;
  p.capacity_entries = capacity;
  p.pd = pd.pdn;
  p.en_rinval = o.remote_invalidate;
  if (o.layout == Layout::kKsm) RETURN_IF_ERROR(EntitySize(o.log_entity_size, &p));
  return p;
}

absl::StatusOr<umr::FreeMkeyParams> DirectKeyParams(Pd pd, uint32_t capacity,
                                                    const DirectKeyOptions& o) {
  if (capacity == 0 || capacity > (1u << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", capacity, " outside 1..2^30"));
  }
  umr::FreeMkeyParams p;
  p.mode = umr::AccessMode::kMtt;
  p.capacity_entries = capacity;
  p.pd = pd.pdn;
  p.en_rinval = o.remote_invalidate;
  p.pg_access = true;  // maps may carry absent entries: honour rd_en / wr_en
  RETURN_IF_ERROR(EntitySize(o.log_page_size, &p));
  return p;
}

absl::StatusOr<std::vector<uint8_t>> PoolKeyMailbox(const umr::FreeMkeyParams& p) {
  absl::StatusOr<umr::CreateMkeyIn> in = umr::BuildCreateFreeMkey(p);
  if (!in.ok()) return absl::InvalidArgumentError(in.status().message());
  return umr::EncodeCreateMkeyIn(*in);
}

absl::StatusOr<KeyInfo> KeyInfoFromQuery(uint32_t index, const umr::QueryMkeyOut& o) {
  const umr::MkeyContextDesc& mkc = o.mkc;
  KeyInfo info;
  info.key = MakeKey(index, mkc.mkey_7_0);
  info.free = mkc.free;
  info.umr_en = mkc.umr_en;
  info.access_mode = mkc.access_mode;
  info.layout = mkc.access_mode == umr::kAccessModeMtt   ? Layout::kMtt
                : mkc.access_mode == umr::kAccessModeKsm ? Layout::kKsm
                                                         : Layout::kKlm;
  info.access = FromMkeyAccess(mkc.access);
  info.pd = Pd{mkc.pd};
  info.start_addr = mkc.start_addr;
  info.length = mkc.len;
  info.length64 = mkc.length64;
  info.remote_invalidate = mkc.en_rinval;
  info.log_entity_size = mkc.log_entity_size;
  const auto mode = static_cast<umr::AccessMode>(mkc.access_mode);
  info.capacity_entries =
      mkc.translations_octword_size * static_cast<uint32_t>(umr::EntriesPerOctoword(mode));
  const absl::Span<const uint8_t> xlt =
      absl::MakeConstSpan(o.translation)
          .subspan(0, size_t{info.capacity_entries} * umr::EntryBytes(mode));
  ASSIGN_OR_RETURN(umr::Translation t, umr::DecodeTranslation(mode, xlt));
  for (const umr::MttEntry& e : t.mtt) info.mtt.push_back(FromUmrMtt(e));
  for (const umr::KlmEntry& e : t.klm) info.klm.push_back(FromUmrKlm(e));
  for (const umr::KsmEntry& e : t.ksm) info.klm.push_back(FromUmrKsm(e));
  return info;
}

}  // namespace regcache::hca
