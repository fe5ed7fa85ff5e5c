#include "umr/prm.h"

#include <cstring>

namespace regcache::umr {

// The field occupies bits [31 - off%32 .. 32 - off%32 - width] of dword off/32 (docs/prm.md,
// Conventions).
uint32_t PrmGet(const uint8_t* bytes, unsigned bit_off, unsigned width) {
  be32 dw;
  std::memcpy(&dw, bytes + (bit_off / 32) * 4, 4);
  const unsigned hi = 31 - bit_off % 32;
  return dw.GetBits(hi, hi + 1 - width);
}

void PrmSet(uint8_t* bytes, unsigned bit_off, unsigned width, uint32_t value) {
  be32 dw;
  uint8_t* p = bytes + (bit_off / 32) * 4;
  std::memcpy(&dw, p, 4);
  const unsigned hi = 31 - bit_off % 32;
  dw.SetBits(hi, hi + 1 - width, value);
  std::memcpy(p, &dw, 4);
}

}  // namespace regcache::umr