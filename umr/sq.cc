#include "umr/sq.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace regcache::umr {

absl::StatusOr<FenceMode> FenceForUmrCap(uint8_t cap) {
  switch (cap) {
    case 0:
      return FenceMode::kStrongOrdering;
    case 1:
      return FenceMode::kInitiatorSmall;
    case 2:
      return FenceMode::kNone;
    default:
      return absl::InvalidArgumentError(absl::StrCat("cap umr_fence=", cap, " is not defined"));
  }
}

absl::StatusOr<SqRing> SqRing::Create(absl::Span<uint8_t> ring, const Options& o) {
  const size_t n = ring.size() / kWqebb;
  if (ring.size() % kWqebb != 0 || n == 0 || (n & (n - 1)) != 0 || n > (size_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SQ ring of ", ring.size(), " B is not a power-of-two number of 64-B WQEBBs"));
  }
  if (o.sqn > 0xffffff) {
    return absl::InvalidArgumentError(absl::StrCat("sqn=", o.sqn, " does not fit 24 bits"));
  }
  return SqRing(ring, o);
}

SqRing::SqRing(absl::Span<uint8_t> ring, const Options& o)
    : ring_(ring.data()), mask_(static_cast<uint32_t>(ring.size() / kWqebb - 1)), options_(o) {
  if (options_.signal_wqebbs == 0) options_.signal_wqebbs = std::max<uint32_t>(1, (mask_ + 1) / 2);
}

absl::StatusOr<absl::Span<uint8_t>> SqRing::Begin(uint32_t consumer, unsigned max_wqebbs) {
  if (max_wqebbs == 0 || max_wqebbs > kMaxWqebbsPerWqe || max_wqebbs > num_wqebbs()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reservation of ", max_wqebbs, " WQEBBs (1..16, ring ", num_wqebbs(), ")"));
  }
  const uint32_t free = FreeWqebbs(consumer);
  if (free < max_wqebbs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("SQ full: ", free, " WQEBBs free, ", max_wqebbs, " needed"));
  }
  reserved_wqebbs_ = max_wqebbs;
  const uint32_t slot = Slot(producer_);
  in_scratch_ = slot + max_wqebbs > num_wqebbs();
  if (in_scratch_) return absl::Span<uint8_t>(scratch_.data(), max_wqebbs * kWqebb);
  return absl::Span<uint8_t>(ring_ + size_t{slot} * kWqebb, max_wqebbs * kWqebb);
}

absl::StatusOr<uint32_t> SqRing::Commit(const WqeSize& size, const WqeHeader& header, bool is_umr) {
  if (reserved_wqebbs_ == 0) return absl::FailedPreconditionError("Commit without Begin");
  if (size.wqebbs == 0 || size.wqebbs > reserved_wqebbs_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "WQE of ", size.wqebbs, " WQEBBs does not fit the reservation of ", reserved_wqebbs_));
  }
  const uint32_t slot = Slot(producer_);
  if (in_scratch_) {
    const size_t bytes = size.bytes();
    const size_t first = std::min(bytes, size_t{num_wqebbs() - slot} * kWqebb);
    std::memcpy(ring_ + size_t{slot} * kWqebb, scratch_.data(), first);
    std::memcpy(ring_, scratch_.data() + first, bytes - first);
  }
  const uint32_t posted = producer_;
  producer_ += size.wqebbs;
  unsignaled_wqebbs_ = header.signaled ? 0 : unsignaled_wqebbs_ + size.wqebbs;
  small_fence_pending_ = is_umr;
  reserved_wqebbs_ = 0;
  return posted;
}

absl::StatusOr<absl::Span<const uint8_t>> GatherWqe(absl::Span<const uint8_t> ring, uint32_t slot,
                                                    WqeScratch* scratch) {
  const size_t n = ring.size() / kWqebb;
  if (ring.size() % kWqebb != 0 || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring of ", ring.size(), " B is not a whole number of WQEBBs"));
  }
  if (slot >= n) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " outside a ring of ", n));
  }
  const uint8_t* first = ring.data() + size_t{slot} * kWqebb;
  const unsigned ds = first[offsetof(CtrlSegLayout, qpn_ds) + 3] & 0x3f;
  if (ds == 0) return absl::InvalidArgumentError(absl::StrCat("WQE at slot ", slot, " has DS=0"));
  const size_t bytes = size_t{ds} * kOctoword;
  const unsigned wqebbs = WqebbsForDs(ds);
  if (wqebbs > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("WQE of ", wqebbs, " WQEBBs is larger than the ring (", n, ")"));
  }
  if (slot + wqebbs <= n) return absl::Span<const uint8_t>(first, bytes);
  const size_t head = (n - slot) * kWqebb;
  std::memcpy(scratch->data(), first, head);
  std::memcpy(scratch->data() + head, ring.data(), bytes - head);
  return absl::Span<const uint8_t>(scratch->data(), bytes);
}

}  // namespace regcache::umr