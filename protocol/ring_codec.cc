#include "protocol/ring_codec.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
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

absl::Status Bad(const RingRequest& r, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ring request op ", r.op, ": ", what));
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
  if ((used & kHandle) && r.handle == 0) return Bad(r, "handle 0");
  if ((used & kLength) && r.length == 0) return Bad(r, "length 0");
  if ((used & kLength) && r.va + r.length < r.va) return Bad(r, "range wraps");
  if ((r.access & ~kKnownAccessBits) != 0) {
    return Bad(r, absl::StrCat("unknown access bits ", r.access));
  }
  if (r.prefetch > kPrefetchAsync) return Bad(r, absl::StrCat("prefetch ", r.prefetch));
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

RingCompletion CompletionFor(uint64_t seq, uint16_t op, const absl::Status& status) {
  RingCompletion c{};
  c.seq = seq;
  c.op = op;
  c.code = static_cast<uint32_t>(status.code());
  c.slot = kNoSlot;
  if (status.ok()) return c;  // zero: no reason, an empty message
  if (std::optional<base::ErrorReason> r = base::GetErrorReason(status)) {
    c.reason = ReasonNumber(r->reason);
  }
  const absl::string_view text = status.message();
  const size_t n = std::min(text.size(), kMessageBytes - 1);
  if (n > 0) std::memcpy(c.message, text.data(), n);
  c.message[n] = '\0';
  return c;
}

absl::Status StatusFromCompletion(const RingCompletion& completion) {
  if (completion.code == 0) return absl::OkStatus();
  const char* m = completion.message;
  const size_t n = strnlen(m, kMessageBytes);
  absl::Status status(base::CanonicalCode(completion.code), absl::string_view(m, n));
  const absl::string_view reason = NumberedReason(completion.reason);
  if (reason.empty()) return status;  // none, or a number this build does not know
  return base::WithReason(std::move(status), reason);
}

}  // namespace regcache::protocol::shm
