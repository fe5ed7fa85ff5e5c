// Memory-key encoding: a 32-bit lkey/rkey is index<<8 | variant (docs/prm.md, Memory keys). The
// index (24 bits) names the mkey object in CREATE/QUERY/DESTROY_MKEY; the variant (8 bits) must
// equal the context's mkey_7_0 for an access to be accepted, and is bumped on every reuse of an
// index.
//
// Thread safety: pure functions.
#ifndef REGCACHE_UMR_MKEY_H_
#define REGCACHE_UMR_MKEY_H_

#include <cstdint>

namespace regcache::umr {

inline constexpr uint32_t kMaxMkeyIndex = 0xffffff;
// MLX5_INVALID_LKEY: never a valid key (docs/prm.md, Memory keys).
inline constexpr uint32_t kInvalidLkey = 0x100;

// REQUIRES: index <= kMaxMkeyIndex (higher bits are dropped).
constexpr uint32_t MakeKey(uint32_t index, uint8_t variant) { return (index << 8) | variant; }
constexpr uint32_t KeyIndex(uint32_t key) { return key >> 8; }
constexpr uint8_t KeyVariant(uint32_t key) { return static_cast<uint8_t>(key & 0xff); }
// The same index with the next variant (wraps in 8 bits), as ibv_inc_rkey does.
constexpr uint32_t NextVariant(uint32_t key) {
  return (key & 0xffffff00u) | static_cast<uint8_t>(KeyVariant(key) + 1);
}

static_assert(MakeKey(0x123456, 0x78) == 0x12345678);
static_assert(KeyIndex(0x12345678) == 0x123456 && KeyVariant(0x12345678) == 0x78);
static_assert(NextVariant(0x000001ff) == 0x00000100);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_MKEY_H_
