// Send-queue ring arithmetic for posting WQEs built by wqe_builder.h (docs/prm.md, WQEBBs and the
// send queue; Fence modes).
//
// Geometry: the ring is N WQEBBs of 64 B, N a power of two. The producer counter counts WQEBBs
// (free-running uint32); a WQE's slot is counter mod N and the control segment's WQE index is
// counter mod 2^16. A WQE of DS 16-byte units takes ceil(DS/4) WQEBBs and may run past the ring
// end, continuing at slot 0: SqRing::Begin hands out the ring slot itself when the WQE fits before
// the end and a scratch buffer otherwise, and Commit copies the scratch across the wrap.
//
// Ordering policy (NextHeader), the rdma-core / kernel rules restated:
//   - a UMR WQE carries the fence the device asks for in cap umr_fence (FenceForUmrCap);
//   - the WQE after a UMR gets at least INITIATOR_SMALL, so it sees the new translation;
//   - an explicit fence request becomes FENCE, or SMALL_AND_FENCE when a small fence is pending;
//   - selective signalling by ring space: a WQE is signalled when asked, or when it would make
//     the WQEBBs posted since the last signalled WQE reach `signal_wqebbs` (half the ring by
//     default). The unsignalled run before any signalled WQE is then under half the ring, so a
//     full ring always holds a signalled WQE whose completion gives the space back — however
//     large the WQEs (a count of WQEs would not: 8 of the largest inline maps fill 128 WQEBBs).
// Doorbell writes and memory barriers are the backend's business (hca/mlx5), not this file's.
//
// Thread safety: SqRing is not thread-safe; one poster owns it. GatherWqe is a pure function.
#ifndef REGCACHE_UMR_SQ_H_
#define REGCACHE_UMR_SQ_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "umr/prm.h"
#include "umr/segments.h"
#include "umr/wqe_builder.h"

namespace regcache::umr {

inline constexpr size_t kMaxWqeBytes = kMaxWqebbsPerWqe * kWqebb;  // 1024
using WqeScratch = std::array<uint8_t, kMaxWqeBytes>;

// Fence for UMR WQEs from cap umr_fence: 0 strong -> STRONG_ORDERING, 1 small ->
// INITIATOR_SMALL, 2 none -> NONE. Fails (kInvalidArgument) for 3.
absl::StatusOr<FenceMode> FenceForUmrCap(uint8_t umr_fence_cap);

class SqRing {
 public:
  struct Options {
    uint32_t sqn = 0;  // 24 bits
    FenceMode umr_fence = FenceMode::kInitiatorSmall;
    uint32_t signal_wqebbs = 0;  // 0: N / 2 (at least 1)
  };

  // `ring` must be a power-of-two number (>= 1) of WQEBBs and outlive the SqRing.
  // Fails (kInvalidArgument) otherwise, or for sqn >= 2^24.
  static absl::StatusOr<SqRing> Create(absl::Span<uint8_t> ring, const Options& options);

  uint32_t num_wqebbs() const { return mask_ + 1; }
  uint32_t producer() const { return producer_; }  // WQEBBs posted, free-running
  uint16_t wqe_index() const { return static_cast<uint16_t>(producer_); }
  uint32_t Slot(uint32_t counter) const { return counter & mask_; }
  // WQEBBs free given the consumer counter (WQEBBs completed, free-running).
  uint32_t FreeWqebbs(uint32_t consumer) const { return num_wqebbs() - (producer_ - consumer); }

  // The control fields of the next WQE, applying the ordering policy above. `is_umr` for UMR
  // WQEs; `wqebbs`: the WQE's size (at most, as reserved with Begin). Does not change state:
  // Commit does. Inline: returned in registers, it costs nothing on the posting path.
  WqeHeader NextHeader(bool is_umr, bool want_signal, bool want_fence, unsigned wqebbs) const {
    WqeHeader h;
    h.wqe_index = wqe_index();
    h.sqn = options_.sqn;
    FenceMode f = is_umr ? options_.umr_fence : FenceMode::kNone;
    if (small_fence_pending_ && f == FenceMode::kNone) f = FenceMode::kInitiatorSmall;
    if (want_fence && f != FenceMode::kStrongOrdering) {
      f = small_fence_pending_ ? FenceMode::kSmallAndFence : FenceMode::kFence;
    }
    h.fence = f;
    h.signaled = want_signal || unsignaled_wqebbs_ + wqebbs >= options_.signal_wqebbs;
    return h;
  }

  // Buffer for a WQE of at most `max_wqebbs` (1..16) WQEBBs at the producer position: the ring
  // slot when it fits before the ring end, else the internal scratch buffer.
  // Fails: kResourceExhausted when fewer than max_wqebbs are free; kInvalidArgument for
  // max_wqebbs outside 1..16 or larger than the ring.
  absl::StatusOr<absl::Span<uint8_t>> Begin(uint32_t consumer, unsigned max_wqebbs);

  // Publishes the WQE written into the last Begin's buffer: copies it from scratch across the
  // ring end if needed and advances the producer by size.wqebbs. `header` is the one the WQE was
  // built with (its signalled / UMR state feeds the policy). Returns the WQE's producer counter.
  // Fails (kFailedPrecondition) without a Begin, or when the WQE is larger than reserved.
  absl::StatusOr<uint32_t> Commit(const WqeSize& size, const WqeHeader& header, bool is_umr);

 private:
  SqRing(absl::Span<uint8_t> ring, const Options& o);

  uint8_t* ring_ = nullptr;
  uint32_t mask_ = 0;
  Options options_;
  uint32_t producer_ = 0;
  uint32_t unsignaled_wqebbs_ = 0;  // posted since the last signalled WQE
  bool small_fence_pending_ = false;
  unsigned reserved_wqebbs_ = 0;  // from the last Begin; 0 = none
  bool in_scratch_ = false;
  alignas(64) WqeScratch scratch_{};
};

// The bytes of the WQE whose first WQEBB is ring slot `slot`, reading its DS from the control
// segment and following the ring end back to slot 0. Returns a view into `ring` when contiguous,
// else into `*scratch` (copied). Fails (kInvalidArgument) when the ring is not a whole number of
// WQEBBs, slot is outside it, DS is 0, or the WQE is larger than the ring.
absl::StatusOr<absl::Span<const uint8_t>> GatherWqe(absl::Span<const uint8_t> ring, uint32_t slot,
                                                    WqeScratch* scratch);

}  // namespace regcache::umr
#endif  // REGCACHE_UMR_SQ_H_
