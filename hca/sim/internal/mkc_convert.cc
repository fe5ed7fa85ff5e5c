#include "hca/sim/internal/mkc_convert.h"

namespace regcache::hca::sim {

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

}  // namespace regcache::hca::sim