#include "regcache/descriptor.h"

#include <string>

#include "absl/strings/escaping.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace regcache::api {
namespace {

using ::regcache::base::IsOkAndHolds;
using ::regcache::base::StatusIs;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

PeerDescriptor Sample() {
  PeerDescriptor d;
  d.node_guid = 0x0002c90300a1b2c3;
  for (size_t i = 0; i < d.gid.size(); ++i) d.gid[i] = static_cast<uint8_t>(0xfe - i);
  d.port = 1;
  d.key_bounds = KeyBounds::kKey;
  d.rkey = 0x00123456;
  d.addr = 0x7f0000001000;
  d.length = 0x10000;
  d.access = kRemoteRead | kRemoteWrite;
  return d;
}

PeerDescriptor WithEndpoint() {
  PeerDescriptor d = Sample();
  RemoteQp q;
  q.qpn = 0xabc;
  q.psn = 0x123456;
  q.mtu = 4096;
  d.endpoint = q;
  return d;
}

std::string Hex(const std::string& bytes) { return absl::BytesToHexString(bytes); }

// The layout is a promise to peers running other versions of the library (docs/descriptors.md):
// these bytes must never change for version 1.
TEST(PeerDescriptor, PacksToTheDocumentedBytes) {
  EXPECT_THAT(PackDescriptor(Sample()),
              IsOkAndHolds(absl::HexStringToBytes(
                  "52434b4401004000c3b2a10003c90200fefdfcfbfaf9f8f7f6f5f4f3f2f1f0ef01010000"
                  "5634120000100000007f000000000100000000000c00000000000000")));
  absl::StatusOr<std::string> with = PackDescriptor(WithEndpoint());
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->size(), kDescriptorWithEndpointBytes);
  EXPECT_EQ(Hex(with->substr(4, 4)), "01016000") << "version 1, endpoint flag, 96 bytes";
  EXPECT_EQ(Hex(with->substr(64)),
            "bc0a0000"                          // qpn
            "56341200"                          // psn
            "00000000000000000000000000000000"  // gid
            "0000"                              // lid
            "0010"                              // mtu
            "00000000");                        // reserved
}

TEST(PeerDescriptor, RoundTripsAsBytesAndText) {
  for (const PeerDescriptor& d : {Sample(), WithEndpoint()}) {
    absl::StatusOr<std::string> bytes = PackDescriptor(d);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_THAT(UnpackDescriptor(*bytes), IsOkAndHolds(d));
    absl::StatusOr<std::string> text = DescriptorToText(d);
    ASSERT_TRUE(text.ok());
    EXPECT_TRUE(text->starts_with(kDescriptorTextPrefix)) << *text;
    EXPECT_EQ(text->find_first_of("=+/ \n"), std::string::npos) << *text;
    EXPECT_THAT(DescriptorFromText(*text), IsOkAndHolds(d));
  }
  absl::StatusOr<std::string> longest = DescriptorToText(WithEndpoint());
  ASSERT_TRUE(longest.ok());
  EXPECT_EQ(longest->size(), 133u) << "REGCACHE_DESCRIPTOR_MAX_TEXT - 1";
}

TEST(PeerDescriptor, DescribeKeyTakesTheRemoteRightsBothSidesAllow) {
  DeviceInfo dev;
  dev.node_guid = 7;
  dev.port = 2;
  dev.gid[15] = 9;
  dev.key_bounds = KeyBounds::kCut;
  Key k;
  k.rkey = 0x42;
  k.va = 0x1000;
  k.length = 0x2000;
  k.access = kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite;
  absl::StatusOr<PeerDescriptor> d = DescribeKey(dev, k);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->access, kRemoteRead | kRemoteWrite) << "no local rights go to a peer";
  EXPECT_EQ(d->node_guid, 7u);
  EXPECT_EQ(d->port, 2);
  EXPECT_EQ(d->gid[15], 9);
  EXPECT_EQ(d->key_bounds, KeyBounds::kCut);
  EXPECT_FALSE(d->endpoint.has_value());

  EndpointInfo ep;
  ep.local.qpn = 0x77;
  ep.local.mtu = 1024;
  ep.access = kRemoteWrite | kRemoteAtomic;
  d = DescribeKey(dev, k, &ep);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->access, kRemoteWrite);
  ASSERT_TRUE(d->endpoint.has_value());
  EXPECT_EQ(d->endpoint->qpn, 0x77u);

  k.access = kLocalRead | kLocalWrite;
  EXPECT_THAT(DescribeKey(dev, k), StatusIs(kInvalid, HasSubstr("no remote right")));
  k.access = kRemoteRead;
  EXPECT_THAT(DescribeKey(dev, k, &ep), StatusIs(kInvalid, HasSubstr("no remote right")))
      << "the endpoint accepts no read";
}

TEST(PeerDescriptor, PackRefusesWhatNoPeerCouldUse) {
  const auto refused = [](void (*change)(PeerDescriptor&), const char* why) {
    PeerDescriptor d = WithEndpoint();
    change(d);
    EXPECT_THAT(PackDescriptor(d), StatusIs(kInvalid, HasSubstr(why)));
    EXPECT_THAT(DescriptorToText(d), StatusIs(kInvalid, HasSubstr(why)));
  };
  refused([](PeerDescriptor& d) { d.port = 0; }, "port 0");
  refused([](PeerDescriptor& d) { d.key_bounds = static_cast<KeyBounds>(4); }, "key_bounds 4");
  refused([](PeerDescriptor& d) { d.access = 0; }, "no remote right");
  refused([](PeerDescriptor& d) { d.access |= kLocalWrite; }, "other than remote");
  refused([](PeerDescriptor& d) { d.length = 0; }, "length 0");
  refused([](PeerDescriptor& d) { d.addr = ~uint64_t{0} - 10; }, "wraps");
  refused([](PeerDescriptor& d) { d.endpoint->qpn = 0; }, "qpn 0");
  refused([](PeerDescriptor& d) { d.endpoint->qpn = 1u << 24; }, "qpn 16777216");
  refused([](PeerDescriptor& d) { d.endpoint->psn = 1u << 24; }, "psn");
  refused([](PeerDescriptor& d) { d.endpoint->mtu = 0; }, "mtu 0");
  refused([](PeerDescriptor& d) { d.endpoint->mtu = 1500; }, "mtu 1500");
  PeerDescriptor top = Sample();
  top.addr = ~uint64_t{0} - 0xfff;
  top.length = 0x1000;  // ends exactly at 2^64: allowed
  EXPECT_TRUE(PackDescriptor(top).ok());
}

TEST(PeerDescriptor, UnpackRefusesMalformedBytesSayingWhy) {
  const std::string good = *PackDescriptor(WithEndpoint());
  const auto with_byte = [&](size_t at, uint8_t v) {
    std::string b = good;
    b[at] = static_cast<char>(v);
    return b;
  };
  EXPECT_THAT(UnpackDescriptor(""), StatusIs(kInvalid, HasSubstr("not a regcache peer")));
  EXPECT_THAT(UnpackDescriptor(with_byte(0, 'X')), StatusIs(kInvalid, HasSubstr("RCKD")));
  EXPECT_THAT(UnpackDescriptor(with_byte(4, 0)), StatusIs(kInvalid, HasSubstr("version 0")));
  EXPECT_THAT(UnpackDescriptor(with_byte(4, 2)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("newer")));
  EXPECT_THAT(UnpackDescriptor(with_byte(5, 3)), StatusIs(kInvalid, HasSubstr("unknown flags")));
  EXPECT_THAT(UnpackDescriptor(with_byte(5, 0)), StatusIs(kInvalid, HasSubstr("size field 96")));
  EXPECT_THAT(UnpackDescriptor(good.substr(0, 95)), StatusIs(kInvalid, HasSubstr("truncated")));
  EXPECT_THAT(UnpackDescriptor(good + "x"), StatusIs(kInvalid, HasSubstr("trailing")));
  EXPECT_THAT(UnpackDescriptor(with_byte(35, 1)), StatusIs(kInvalid, HasSubstr("reserved")));
  EXPECT_THAT(UnpackDescriptor(with_byte(61, 1)), StatusIs(kInvalid, HasSubstr("reserved")));
  EXPECT_THAT(UnpackDescriptor(with_byte(95, 1)), StatusIs(kInvalid, HasSubstr("reserved")));
  EXPECT_THAT(UnpackDescriptor(with_byte(32, 0)), StatusIs(kInvalid, HasSubstr("port 0")));
  EXPECT_THAT(UnpackDescriptor(with_byte(56, 0x20)), StatusIs(kInvalid, HasSubstr("access")));
  EXPECT_THAT(UnpackDescriptor(with_byte(67, 1)), StatusIs(kInvalid, HasSubstr("qpn")));
  EXPECT_THAT(UnpackDescriptor(with_byte(91, 0)), StatusIs(kInvalid, HasSubstr("mtu")));
}

TEST(PeerDescriptor, TextFormIsCanonical) {
  const std::string text = *DescriptorToText(Sample());
  EXPECT_THAT(DescriptorFromText(text.substr(1)), StatusIs(kInvalid, HasSubstr("\"rcd1:\"")));
  EXPECT_THAT(DescriptorFromText(text + "=="), StatusIs(kInvalid, HasSubstr("base64url")));
  EXPECT_THAT(DescriptorFromText(text + "AA"), StatusIs(kInvalid, HasSubstr("trailing")));
  EXPECT_THAT(DescriptorFromText(text + "A"), StatusIs(kInvalid));  // 87 characters: no such text
  std::string plus = text;
  plus[10] = '+';
  EXPECT_THAT(DescriptorFromText(plus), StatusIs(kInvalid, HasSubstr("base64url")));
  // 64 bytes end in a partial group of one byte: its unused low bits must be zero.
  std::string noncanonical = text;
  noncanonical.back() = static_cast<char>(noncanonical.back() + 1);
  EXPECT_THAT(DescriptorFromText(noncanonical), StatusIs(kInvalid));
  EXPECT_THAT(DescriptorFromText("rcd1:"), StatusIs(kInvalid, HasSubstr("not a regcache peer")));
}

}  // namespace
}  // namespace regcache::api
