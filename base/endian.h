// Big-endian field types for device-visible layouts (PRM structures, WQEs, mailboxes).
//
// A BigEndian<T> stores its value in network byte order and has no implicit conversion in
// either direction: writing a host value into a PRM field, or reading one out, must name the
// conversion (FromHost / ToHost). A missing byte swap therefore does not compile.
//
//   base::be32 dw = base::be32::FromHost(0x25);      // bytes 00 00 00 25
//   uint32_t v = dw.ToHost();
//
// PRM fields narrower than their dword are read and written with GetBits / SetBits, whose bit
// numbering is the PRM's: bit 31 is the most significant bit of a 32-bit dword.
#ifndef REGCACHE_BASE_ENDIAN_H_
#define REGCACHE_BASE_ENDIAN_H_

#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

namespace regcache::base {

template <std::unsigned_integral T>
constexpr T ByteSwap(T v) {
  if constexpr (sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    static_assert(sizeof(T) == 8);
    return static_cast<T>(__builtin_bswap64(v));
  }
}

template <std::unsigned_integral T>
constexpr T HostToBig(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    return v;
  } else {
    return ByteSwap(v);
  }
}

// A mask of `width` low bits. REQUIRES: 0 < width <= bits of T.
template <std::unsigned_integral T>
constexpr T LowMask(unsigned width) {
  return width >= sizeof(T) * 8 ? static_cast<T>(~T{0}) : static_cast<T>((T{1} << width) - 1);
}

template <std::unsigned_integral T>
class BigEndian {
 public:
  using HostType = T;

  constexpr BigEndian() = default;  // zero

  static constexpr BigEndian FromHost(T host) {
    BigEndian b;
    b.stored_ = HostToBig(host);
    return b;
  }
  constexpr T ToHost() const { return HostToBig(stored_); }

  // Bits [hi:lo] of the host value, shifted down (PRM numbering: bit 0 is the LSB).
  // REQUIRES: lo <= hi < bits of T.
  constexpr T GetBits(unsigned hi, unsigned lo) const {
    return static_cast<T>((ToHost() >> lo) & LowMask<T>(hi - lo + 1));
  }
  // Replaces bits [hi:lo] with the low bits of `value`; bits of `value` above the field are
  // dropped (callers validate ranges before encoding). REQUIRES: lo <= hi < bits of T.
  constexpr void SetBits(unsigned hi, unsigned lo, T value) {
    const T mask = static_cast<T>(LowMask<T>(hi - lo + 1) << lo);
    const T host = static_cast<T>((ToHost() & ~mask) | ((value << lo) & mask));
    *this = FromHost(host);
  }
  constexpr bool GetBit(unsigned bit) const { return GetBits(bit, bit) != 0; }
  constexpr void SetBit(unsigned bit, bool on) { SetBits(bit, bit, on ? 1 : 0); }

  friend constexpr bool operator==(BigEndian a, BigEndian b) = default;

 private:
  T stored_ = 0;  // network byte order
};

using be16 = BigEndian<uint16_t>;
using be32 = BigEndian<uint32_t>;
using be64 = BigEndian<uint64_t>;

static_assert(sizeof(be16) == 2 && sizeof(be32) == 4 && sizeof(be64) == 8);
static_assert(std::is_trivially_copyable_v<be64>);
static_assert(!std::is_convertible_v<be32, uint32_t>, "raw value must not leak implicitly");
static_assert(!std::is_convertible_v<uint32_t, be32>, "host value must not enter implicitly");

}  // namespace regcache::base
#endif  // REGCACHE_BASE_ENDIAN_H_
