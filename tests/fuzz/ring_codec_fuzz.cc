// Fuzz target: the ring messages' codec (protocol/ring_codec.h) — what the daemon does with a
// request it copied out of a session's ring, and what the client makes of a completion.
//
//   input[0..64)    a RingRequest (zero-padded): DecodeRequest must refuse it with
//                   kInvalidArgument or return a request whose fields obey the header's rules
//   input[0..128)   a RingCompletion (zero-padded): StatusFromCompletion must return a canonical
//                   code and a message within the field
//   input           a status message: CompletionFor must truncate and terminate it, and the
//                   completion must give back the same code
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "protocol/ring_codec.h"
#include "protocol/shm_protocol.h"

namespace shm = ::regcache::protocol::shm;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ring_codec_fuzz: %s\n", what);
    std::abort();
  }
}

bool TakesRange(shm::RingOp op) {
  return op == shm::RingOp::kRegister || op == shm::RingOp::kWindow ||
         op == shm::RingOp::kReregister || op == shm::RingOp::kPrefetch;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shm::RingRequest r{};
  std::memcpy(&r, data, std::min(size, sizeof(r)));
  absl::StatusOr<shm::DecodedRequest> d = shm::DecodeRequest(r);
  if (d.ok()) {
    const uint16_t op = static_cast<uint16_t>(d->op);
    Check(op >= 1 && op <= shm::kMaxRingOp, "decoded an unknown op");
    Check(d->seq == r.seq, "seq not carried");
    Check(r.reserved0 == 0 && r.reserved1 == 0, "reserved not zero");
    Check((d->access & ~shm::kKnownAccessBits) == 0, "unknown access bits");
    if (TakesRange(d->op)) {
      Check(d->length != 0, "empty range accepted");
      if (d->op != shm::RingOp::kWindow) Check(d->va + d->length >= d->va, "wrapping range");
    }
    Check(!d->write || d->op == shm::RingOp::kPrefetch, "write flag outside prefetch");
    Check(d->prefetch <= shm::kPrefetchAsync, "unknown prefetch value");
  } else {
    Check(d.status().code() == absl::StatusCode::kInvalidArgument, "refusal not kInvalidArgument");
    Check(!d.status().message().empty(), "refusal without a message");
  }

  shm::RingCompletion c{};
  std::memcpy(&c, data, std::min(size, sizeof(c)));
  absl::Status s = shm::StatusFromCompletion(c);
  Check(static_cast<int>(s.code()) >= 0 &&
            static_cast<int>(s.code()) <= static_cast<int>(absl::StatusCode::kUnauthenticated),
        "non-canonical code");
  Check(s.message().size() < shm::kMessageBytes + 1, "message beyond its field");

  const int code = size > 0 ? data[0] % 17 : 2;
  std::string message(reinterpret_cast<const char*>(data), size);
  absl::Status in(static_cast<absl::StatusCode>(code == 0 ? 2 : code), message);
  shm::RingCompletion out = shm::CompletionFor(7, 1, in);
  Check(std::memchr(out.message, '\0', sizeof(out.message)) != nullptr, "message not terminated");
  absl::Status back = shm::StatusFromCompletion(out);
  Check(back.code() == in.code(), "code lost");
  Check(out.seq == 7 && out.op == 1 && out.slot == shm::kNoSlot, "completion fields");
  return 0;
}
