#include "protocol/ring_codec.h"

#include <cstring>
#include <string>

#include "base/error_reason.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "protocol/reason_numbers.h"

using ::regcache::base::StatusIs;

namespace regcache::protocol::shm {
namespace {

RingRequest Good() {
  RingRequest r{};
  r.seq = 7;
  r.op = static_cast<uint16_t>(RingOp::kRegister);
  r.va = 0x1000;
  r.length = 4096;
  r.access = 2;  // local write
  r.prefetch = kPrefetchSync;
  return r;
}

TEST(RingCodec, DecodesAGoodRegister) {
  absl::StatusOr<DecodedRequest> d = DecodeRequest(Good());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->seq, 7u);
  EXPECT_EQ(d->op, RingOp::kRegister);
  EXPECT_EQ(d->va, 0x1000u);
  EXPECT_EQ(d->length, 4096u);
  EXPECT_EQ(d->prefetch, kPrefetchSync);
}

TEST(RingCodec, EveryBadFieldIsNamed) {
  struct Case {
    const char* name;
    void (*mutate)(RingRequest&);
    const char* says;
  };
  const Case cases[] = {
      {"op 0", [](RingRequest& r) { r.op = 0; }, "unknown op"},
      {"op past the last", [](RingRequest& r) { r.op = kMaxRingOp + 1; }, "unknown op"},
      {"reserved0", [](RingRequest& r) { r.reserved0 = 1; }, "reserved"},
      {"reserved1", [](RingRequest& r) { r.reserved1 = 1; }, "reserved"},
      {"handle on register", [](RingRequest& r) { r.handle = 5; }, "handle must be 0"},
      {"flags on register", [](RingRequest& r) { r.flags = kFlagWrite; }, "flags"},
      {"length 0", [](RingRequest& r) { r.length = 0; }, "length 0"},
      {"wraps", [](RingRequest& r) { r.va = ~uint64_t{0} - 10; }, "wraps"},
      {"access bits", [](RingRequest& r) { r.access = 1u << 9; }, "access"},
      {"prefetch 3", [](RingRequest& r) { r.prefetch = 3; }, "prefetch mode 3"},
  };
  for (const Case& c : cases) {
    RingRequest r = Good();
    c.mutate(r);
    absl::StatusOr<DecodedRequest> d = DecodeRequest(r);
    ASSERT_FALSE(d.ok()) << c.name;
    EXPECT_THAT(d, StatusIs(absl::StatusCode::kInvalidArgument)) << c.name;
    EXPECT_NE(std::string(d.status().message()).find(c.says), std::string::npos)
        << c.name << ": " << d.status();
  }
}

TEST(RingCodec, HandleOpsNeedAHandleAndNothingElse) {
  for (RingOp op : {RingOp::kRelease, RingOp::kInvalidate, RingOp::kQuery}) {
    RingRequest r{};
    r.op = static_cast<uint16_t>(op);
    EXPECT_FALSE(DecodeRequest(r).ok()) << "handle 0";
    r.handle = 9;
    EXPECT_TRUE(DecodeRequest(r).ok());
    r.length = 1;
    EXPECT_FALSE(DecodeRequest(r).ok()) << "length on a handle op";
  }
  RingRequest nop{};
  nop.op = static_cast<uint16_t>(RingOp::kNop);
  EXPECT_TRUE(DecodeRequest(nop).ok());
  nop.va = 1;
  EXPECT_FALSE(DecodeRequest(nop).ok());
}

TEST(RingCodec, PrefetchTakesTheWriteFlag) {
  RingRequest r{};
  r.op = static_cast<uint16_t>(RingOp::kPrefetch);
  r.va = 0x2000;
  r.length = 8192;
  r.flags = kFlagWrite;
  r.prefetch = kPrefetchAsync;
  absl::StatusOr<DecodedRequest> d = DecodeRequest(r);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->write);
  EXPECT_EQ(d->prefetch, kPrefetchAsync);
  r.flags = 2;
  EXPECT_FALSE(DecodeRequest(r).ok());
}

TEST(RingCodec, CompletionStatusRoundTripsAndTruncates) {
  const std::string long_text(200, 'x');
  RingCompletion c = CompletionFor(3, 1, absl::NotFoundError(long_text));
  EXPECT_EQ(c.seq, 3u);
  EXPECT_EQ(c.slot, kNoSlot);
  absl::Status s = StatusFromCompletion(c);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(s.message().size(), kMessageBytes - 1);
  EXPECT_TRUE(StatusFromCompletion(CompletionFor(1, 1, absl::OkStatus())).ok());
}

TEST(RingCodec, ALongMessageTravelsWholeBesideTheCompletion) {
  const std::string long_text =
      "range [0x1000, +0x1000) is not attached memory: " + std::string(300, 'y');
  std::string slot;
  RingCompletion c = CompletionFor(5, 1, absl::OutOfRangeError(long_text), &slot);
  EXPECT_EQ(c.flags & kFlagLongMessage, kFlagLongMessage);
  EXPECT_EQ(slot, long_text);
  EXPECT_EQ(StatusFromCompletion(c, slot).message(), long_text);
  // Without the slot (a reader that has none): the completion's own start.
  EXPECT_EQ(StatusFromCompletion(c).message(), long_text.substr(0, kMessageBytes - 1));
  // A short message needs no slot and sets no flag.
  std::string unused = "stale";
  RingCompletion s = CompletionFor(6, 1, absl::NotFoundError("short"), &unused);
  EXPECT_EQ(s.flags, 0u);
  EXPECT_EQ(StatusFromCompletion(s, unused).message(), "short") << "the flag decides, not the slot";
  // Longer than a slot: cut at kLongMessageBytes - 1; a slot without a NUL stays bounded.
  const std::string huge(5000, 'z');
  RingCompletion h = CompletionFor(7, 1, absl::InternalError(huge), &slot);
  EXPECT_EQ(slot.size(), kLongMessageBytes - 1);
  EXPECT_EQ(StatusFromCompletion(h, huge).message().size(), kLongMessageBytes - 1);
}

TEST(RingCodec, TheReasonCrossesAsANumber) {
  absl::Status quota = base::WithReason(absl::ResourceExhaustedError("key quota"),
                                        base::reason::kKeyQuotaExceeded, {{"limit", "3"}});
  RingCompletion c = CompletionFor(4, 1, quota);
  EXPECT_EQ(c.reason, ReasonNumber(base::reason::kKeyQuotaExceeded));
  absl::Status back = StatusFromCompletion(c);
  EXPECT_THAT(back, StatusIs(absl::StatusCode::kResourceExhausted));
  std::optional<base::ErrorReason> r = base::GetErrorReason(back);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "KEY_QUOTA_EXCEEDED");
  EXPECT_TRUE(r->metadata.empty()) << "the numbers travel over gRPC only";
  // No reason, and a number this build does not know: none.
  EXPECT_EQ(CompletionFor(4, 1, absl::NotFoundError("x")).reason, 0u);
  c.reason = 100000;
  EXPECT_FALSE(base::GetErrorReason(StatusFromCompletion(c)).has_value());
  EXPECT_EQ(CompletionFor(4, 1, absl::OkStatus()).reason, 0u);
}

TEST(RingCodec, GarbageCompletionsStayBounded) {
  RingCompletion c;
  std::memset(&c, 0x7f, sizeof(c));  // no NUL anywhere, an unknown code
  absl::Status s = StatusFromCompletion(c);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnknown));
  EXPECT_EQ(s.message().size(), kMessageBytes);
}

}  // namespace
}  // namespace regcache::protocol::shm
