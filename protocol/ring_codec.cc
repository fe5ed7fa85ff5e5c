#include "protocol/ring_codec.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/error_reason.h"
#include "base/status_code.h"
#include "base/status_macros.h"
#include "protocol/reason_numbers.h"

namespace regcache::protocol::shm {
namespace {

// The fields each op reads; every other one must be zero.
enum Field : uint32_t {
  kHandle = 1u << 0,
  kVa = 1u << 1,
  kLength = 1u << 2,
  kAccess = 1u << 3,
  kPrefetch = 1u << 4,
};

uint32_t FieldsOf(RingOp op) {
  switch (op) {
    case RingOp::kRegister:
      return kVa | kLength | kAccess | kPrefetch;
    case RingOp::kWindow:
    case RingOp::kReregister:
      return kHandle | kVa | kLength | kAccess;
    case RingOp::kRelease:
    case RingOp::kInvalidate:
    case RingOp::kQuery:
      return kHandle;
    case RingOp::kPrefetch:
      return kVa | kLength | kPrefetch;
    case RingOp::kNop:
      return 0;
  }
  return 0;
}

// A request the client library never sends (a raw client's mistake), naming the field.
absl::Status Bad(const RingRequest& r, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed request (op ", r.op, "): ", what));
}

absl::Status CheckUnused(const RingRequest& r, uint32_t used) {
  if (r.reserved0 != 0 || r.reserved1 != 0) {
    return Bad(r, "reserved fields must be 0");
  }
  if (!(used & kHandle) && r.handle != 0) return Bad(r, "handle must be 0 for this op");
  if (!(used & kVa) && r.va != 0) return Bad(r, "va must be 0 for this op");
  if (!(used & kLength) && r.length != 0) return Bad(r, "length must be 0 for this op");
  if (!(used & kAccess) && r.access != 0) return Bad(r, "access must be 0 for this op");
  if (!(used & kPrefetch) && r.prefetch != 0) return Bad(r, "prefetch must be 0 for this op");
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeRequest(const RingRequest& copy, DecodedRequest& d) {
  const RingRequest& r = copy;
  if (r.op == 0 || r.op > kMaxRingOp) return Bad(r, "unknown op");
  const RingOp op = static_cast<RingOp>(r.op);
  const uint32_t used = FieldsOf(op);
  if (absl::Status s = CheckUnused(r, used); !s.ok()) return s;
  const uint16_t allowed_flags = op == RingOp::kPrefetch ? kKnownRequestFlags : 0;
  if ((r.flags & ~allowed_flags) != 0) return Bad(r, absl::StrCat("unknown flags ", r.flags));
  // What a caller of the library can get wrong: worded as the daemon words it over gRPC.
  if ((used & kHandle) && r.handle == 0) {
    return absl::InvalidArgumentError("handle 0 is never valid");
  }
  if ((used & kLength) && r.length == 0) return absl::InvalidArgumentError("length 0");
  if ((used & kLength) && r.va + r.length < r.va) {
    return absl::InvalidArgumentError(
        absl::StrFormat("range [0x%x, +0x%x) wraps around the address space", r.va, r.length));
  }
  if ((r.access & ~kKnownAccessBits) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown access bits 0x%x", r.access & ~kKnownAccessBits));
  }
  if (r.prefetch > kPrefetchAsync) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown prefetch mode %d", r.prefetch));
  }
  d = DecodedRequest{};
  d.seq = r.seq;
  d.op = op;
  d.handle = r.handle;
  d.va = r.va;
  d.length = r.length;
  d.access = r.access;
  d.write = (r.flags & kFlagWrite) != 0;
  d.prefetch = r.prefetch;
  d.deadline_ns = r.deadline_ns;
  return absl::OkStatus();
}

absl::StatusOr<DecodedRequest> DecodeRequest(const RingRequest& copy) {
  DecodedRequest d;
  RETURN_IF_ERROR(DecodeRequest(copy, d));
  return d;
}

RingCompletion CompletionFor(uint64_t seq, uint16_t op, const absl::Status& status,
                             std::string* long_message) {
  RingCompletion c{};
  c.seq = seq;
  c.op = op;
  c.slot = kNoSlot;
  if (status.ok()) return c;  // code zero: no reason, an empty message
  c.code = static_cast<uint32_t>(status.code());
  if (std::optional<base::ErrorReason> r = base::GetErrorReason(status)) {
    c.reason = ReasonNumber(r->reason);
  }
  const absl::string_view text = status.message();
  const size_t n = std::min(text.size(), kMessageBytes - 1);
  if (n > 0) std::memcpy(c.message, text.data(), n);
  c.message[n] = '\0';
  if (n < text.size() && long_message != nullptr) {
    c.flags = kFlagLongMessage;
    long_message->assign(std::string(text.substr(0, kLongMessageBytes - 1)));
  }
  return c;
}

absl::Status StatusFromCompletion(const RingCompletion& completion,
                                  absl::string_view long_message) {
  if (completion.code == 0) return absl::OkStatus();
  absl::string_view text(completion.message, strnlen(completion.message, kMessageBytes));
  if ((completion.flags & kFlagLongMessage) != 0 && !long_message.empty()) {
    text = long_message.substr(0, std::min(long_message.find('\0'), kLongMessageBytes - 1));
  }
  absl::Status status(base::CanonicalCode(completion.code), text);
  const absl::string_view reason = NumberedReason(completion.reason);
  if (reason.empty()) return status;  // none, or a number this build does not know
  return base::WithReason(std::move(status), reason);
}

}  // namespace regcache::protocol::shm
