// The hand-written protobuf wire codec (protocol/proto_wire.h) against protobuf's own
// generated classes: google.rpc.Status with an ErrorInfo written by EncodeErrorDetails parses
// with the generated code field for field, what the generated code writes decodes back, and
// malformed, truncated or foreign bytes give nothing rather than a wrong answer.
#include "protocol/proto_wire.h"

#include <string>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "protocol/grpc_status.h"

namespace regcache::protocol {
namespace {

base::ErrorReason Quota() {
  return {"KEY_QUOTA_EXCEEDED", {{"used", "3"}, {"limit", "3"}, {"long", std::string(300, 'x')}}};
}

TEST(ProtoWire, VarintsAndFieldsReadBackAsWritten) {
  std::string m;
  const uint64_t values[] = {0, 1, 127, 128, 300, uint64_t{1} << 35, ~uint64_t{0}};
  for (uint64_t v : values) wire::AppendVarintField(&m, 7, v);
  wire::AppendBytesField(&m, 536870911, "max field number");
  wire::Reader r(m);
  wire::Reader::Field f;
  for (uint64_t v : values) {
    ASSERT_TRUE(r.Next(&f));
    EXPECT_EQ(f.number, 7u);
    EXPECT_EQ(f.wire_type, 0u);
    EXPECT_EQ(f.varint, v);
  }
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.number, 536870911u);
  EXPECT_EQ(f.bytes, "max field number");
  EXPECT_FALSE(r.Next(&f));
  EXPECT_TRUE(r.ok());
}

TEST(ProtoWire, MalformedBytesStopTheReader) {
  const std::string bad[] = {
      std::string("\x0a\x05"
                  "abc",
                  5),                                                       // a length past the end
      std::string("\x08", 1),                                               // a varint cut short
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),  // 11-byte varint
      std::string("\x00\x01", 2),                                           // field number 0
      std::string("\x0b", 1),                                               // wire type 3 (a group)
      std::string("\x09\x01\x02", 3),                                       // a fixed64 cut short
  };
  for (const std::string& b : bad) {
    wire::Reader r(b);
    wire::Reader::Field f;
    while (r.Next(&f)) {
    }
    EXPECT_FALSE(r.ok()) << ::testing::PrintToString(b);
    EXPECT_FALSE(DecodeErrorDetails(b).has_value());
  }
}

TEST(ErrorDetails, WhatWeWriteIsAStandardStatusWithErrorInfo) {
  const std::string bytes = EncodeErrorDetails(8, "key quota", Quota());
  google::rpc::Status status;
  ASSERT_TRUE(status.ParseFromString(bytes));
  EXPECT_EQ(status.code(), 8);
  EXPECT_EQ(status.message(), "key quota");
  ASSERT_EQ(status.details_size(), 1);
  google::rpc::ErrorInfo info;
  ASSERT_TRUE(status.details(0).Is<google::rpc::ErrorInfo>());
  ASSERT_TRUE(status.details(0).UnpackTo(&info));
  EXPECT_EQ(info.reason(), "KEY_QUOTA_EXCEEDED");
  EXPECT_EQ(info.domain(), kErrorDomain);
  ASSERT_EQ(info.metadata_size(), 3);
  EXPECT_EQ(info.metadata().at("used"), "3");
  EXPECT_EQ(info.metadata().at("limit"), "3");
  EXPECT_EQ(info.metadata().at("long"), std::string(300, 'x'));
}

TEST(ErrorDetails, WhatTheGeneratedCodeWritesDecodes) {
  google::rpc::Status status;
  status.set_code(8);
  status.set_message("m");
  google::rpc::ErrorInfo other;  // another domain's info first: skipped
  other.set_reason("SOMETHING");
  other.set_domain("example.com");
  status.add_details()->PackFrom(other);
  google::rpc::ErrorInfo ours;
  ours.set_reason("MEMORY_QUOTA_EXCEEDED");
  ours.set_domain(std::string(kErrorDomain));
  (*ours.mutable_metadata())["limit_bytes"] = "1048576";
  (*ours.mutable_metadata())["used_bytes"] = "0";
  status.add_details()->PackFrom(ours);
  std::optional<base::ErrorReason> r = DecodeErrorDetails(status.SerializeAsString());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "MEMORY_QUOTA_EXCEEDED");
  ASSERT_EQ(r->metadata.size(), 2u);  // in key order
  EXPECT_EQ(r->metadata[0], (std::pair<std::string, std::string>("limit_bytes", "1048576")));
  EXPECT_EQ(r->metadata[1], (std::pair<std::string, std::string>("used_bytes", "0")));
}

TEST(ErrorDetails, AnyTypeUrlPrefixIsAccepted) {
  google::rpc::Status status;
  google::rpc::ErrorInfo ours;
  ours.set_reason("DRAINING");
  ours.set_domain(std::string(kErrorDomain));
  status.add_details()->PackFrom(ours, "example.com/types");
  ASSERT_EQ(status.details(0).type_url(), "example.com/types/google.rpc.ErrorInfo");
  std::optional<base::ErrorReason> r = DecodeErrorDetails(status.SerializeAsString());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "DRAINING");
}

TEST(ErrorDetails, NoInfoOfOurDomainIsNoReason) {
  google::rpc::Status status;
  status.set_code(5);
  EXPECT_FALSE(DecodeErrorDetails(status.SerializeAsString()).has_value());
  google::rpc::ErrorInfo foreign;
  foreign.set_reason("R");
  foreign.set_domain("example.com");
  status.add_details()->PackFrom(foreign);
  EXPECT_FALSE(DecodeErrorDetails(status.SerializeAsString()).has_value());
  google::rpc::ErrorInfo empty;  // our domain, but no reason
  empty.set_domain(std::string(kErrorDomain));
  status.add_details()->PackFrom(empty);
  EXPECT_FALSE(DecodeErrorDetails(status.SerializeAsString()).has_value());
  EXPECT_FALSE(DecodeErrorDetails("").has_value());
}

TEST(ErrorDetails, EveryTruncationOfAValidStatusIsHandled) {
  const std::string bytes = EncodeErrorDetails(8, "key quota", Quota());
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A prefix may still parse (protobuf has no end marker) but must never yield a reason
    // with a wrong value: either nothing, or the full reason.
    std::optional<base::ErrorReason> r = DecodeErrorDetails(bytes.substr(0, n));
    if (r.has_value()) {
      EXPECT_EQ(r->reason, "KEY_QUOTA_EXCEEDED") << n;
    }
  }
}

}  // namespace
}  // namespace regcache::protocol
