#include "hca/sim/internal/mkc_convert.h"

namespace regcache::hca::sim {

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

MkeyState FromMkc(const umr::MkeyContextDesc& d) {
  MkeyState s;
  s.free = d.free;
  s.umr_en = d.umr_en;
  s.access_mode = d.access_mode;
  s.access = FromMkeyAccess(d.access);
  s.variant = d.mkey_7_0;
  s.qpn = d.qpn;
  s.pd = d.pd;
  s.length64 = d.length64;
  s.en_rinval = d.en_rinval;
  s.start_addr = d.start_addr;
  s.len = d.len;
  s.translations_octword_size = d.translations_octword_size;
  s.log_entity_size = d.log_entity_size;
  return s;
}

umr::MkeyContextDesc ToMkc(const MkeyState& s) {
  umr::MkeyContextDesc d;
  d.free = s.free;
  d.umr_en = s.umr_en;
  d.access_mode = s.access_mode;
  d.access = ToMkeyAccess(s.access);
  d.mkey_7_0 = s.variant;
  d.qpn = s.qpn;
  d.pd = s.pd;
  d.length64 = s.length64;
  d.en_rinval = s.en_rinval;
  d.start_addr = s.start_addr;
  d.len = s.len;
  d.translations_octword_size = s.translations_octword_size;
  d.log_entity_size = s.log_entity_size;
  return d;
}

umr::KlmEntry ToUmrKlm(const KlmEntry& e) {
  return umr::KlmEntry{static_cast<uint32_t>(e.length), e.key, e.addr};
}
umr::KsmEntry ToUmrKsm(const KlmEntry& e) { return umr::KsmEntry{e.key, e.addr}; }
umr::MttEntry ToUmrMtt(const MttEntry& e) { return umr::MttEntry{e.dma_addr, e.read, e.write}; }

KlmEntry FromUmrKlm(const umr::KlmEntry& e) { return KlmEntry{e.mkey, e.address, e.byte_count}; }
KlmEntry FromUmrKsm(const umr::KsmEntry& e) { return KlmEntry{e.mkey, e.va, 0}; }
MttEntry FromUmrMtt(const umr::MttEntry& e) { return MttEntry{e.addr, e.read, e.write}; }

}  // namespace regcache::hca::sim