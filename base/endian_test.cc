#include "base/endian.h"

#include <cstring>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

template <typename B>
std::array<uint8_t, sizeof(B)> Bytes(B b) {
  std::array<uint8_t, sizeof(B)> out;
  std::memcpy(out.data(), &b, sizeof(B));
  return out;
}

TEST(EndianTest, StoresNetworkByteOrder) {
  EXPECT_EQ(Bytes(be16::FromHost(0x1234)), (std::array<uint8_t, 2>{0x12, 0x34}));
  EXPECT_EQ(Bytes(be32::FromHost(0x00000025)), (std::array<uint8_t, 4>{0, 0, 0, 0x25}));
  EXPECT_EQ(Bytes(be64::FromHost(0x0102030405060708ull)),
            (std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(be64::FromHost(0xdeadbeefcafef00dull).ToHost(), 0xdeadbeefcafef00dull);
  EXPECT_EQ(be32().ToHost(), 0u);
}

TEST(EndianTest, BitFieldsUsePrmNumbering) {
  // mkc DW0: free at bit 30, umr_en at bit 15, access_mode_1_0 at bits 9:8.
  be32 dw;
  dw.SetBit(30, true);
  dw.SetBit(15, true);
  dw.SetBits(9, 8, 2);
  EXPECT_EQ(Bytes(dw), (std::array<uint8_t, 4>{0x40, 0x00, 0x82, 0x00}));
  EXPECT_TRUE(dw.GetBit(30));
  EXPECT_EQ(dw.GetBits(9, 8), 2u);
  dw.SetBits(9, 8, 0x7);  // bits above the field are dropped, neighbours untouched
  EXPECT_EQ(dw.GetBits(9, 8), 3u);
  EXPECT_TRUE(dw.GetBit(15));
  EXPECT_FALSE(dw.GetBit(10));
  // Full-width field.
  be32 all;
  all.SetBits(31, 0, 0xffffffffu);
  EXPECT_EQ(all.ToHost(), 0xffffffffu);
  be64 q;
  q.SetBits(63, 8, 0x12345678ull);
  EXPECT_EQ(q.ToHost(), 0x1234567800ull);
}

TEST(EndianTest, ConstexprUsable) {
  constexpr be32 k = be32::FromHost(0x25);
  static_assert(k.ToHost() == 0x25);
  static_assert(k.GetBits(7, 0) == 0x25);
  static_assert(LowMask<uint64_t>(64) == ~uint64_t{0});
}

}  // namespace
}  // namespace regcache::base