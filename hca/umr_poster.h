// hca::UmrPoster — the posting half of a UMR send queue, shared by every backend that posts PRM
// WQEs: the sim (which executes them) and mlx5 (whose ConnectX executes them). It turns the
// device boundary's requests (hca::Queue's Post*) into umr/ WQEs in a ring of 64-byte WQEBBs,
// stages translations too long to travel inline (pointer mode), remembers what each WQE was
// posted for, and turns the CQEs the backend reads back into hca::Completions, retiring ring and
// staging space. What stays with the backend: where the ring and the CQ live, the doorbell, and
// reading a CQE once it is valid (hardware: the owner bit; the sim: its producer counter).
//
// So the bytes the mlx5 backend writes into a ConnectX send queue are, by construction, the
// bytes the sim decodes and executes in its tests (docs/prm.md, UMR WQE).
//
// Thread safety: none; one thread (or one lock) per queue, as hca::Queue requires.
#ifndef REGCACHE_HCA_UMR_POSTER_H_
#define REGCACHE_HCA_UMR_POSTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hca/device.h"
#include "umr/caps.h"
#include "umr/cqe.h"
#include "umr/sq.h"
#include "umr/wqe_builder.h"

namespace regcache::hca {

struct UmrPosterOptions {
  uint32_t sqn = 0;  // the QP number every control segment carries (24 bits)
  // The fence the device asks of a UMR (QUERY_HCA_CAP umr_fence).
  umr::FenceMode umr_fence = umr::FenceMode::kInitiatorSmall;
  umr::UmrModifyCaps modify;  // what the device lets a UMR change
  // Translation offsets wider than 16 bits (umr_extended_translation_offset).
  bool extended_translation_offset = true;
  // KLM/KSM entries one inline map may carry (the device's largest send WQE); longer maps go by
  // pointer. MTT maps carry twice as many (8-byte entries).
  uint32_t max_inline_klm = umr::kMaxInlineKlms;
  // Pointer-mode maps: registers `bytes` of this process's memory for local read in the queue's
  // PD and returns its lkey; `release_staging` undoes it. Without them, a map carries at most
  // the inline limit.
  std::function<absl::StatusOr<Key>(absl::Span<uint8_t> bytes)> register_staging;
  std::function<void(Key lkey)> release_staging;
  size_t staging_bytes = size_t{1} << 20;  // 65536 KLM entries
  // The reason text of an error CQE for the WQE at `slot` (the sim's executor knows it; a real
  // device reports syndromes only). Null: none.
  std::function<std::string(uint32_t slot)> error_reason;
};

class UmrPoster {
 public:
  // `ring`: the send queue's buffer, a power of two >= 4 of 64-byte WQEBBs; it must outlive the
  // poster. kInvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<UmrPoster>> Create(absl::Span<uint8_t> ring,
                                                           UmrPosterOptions options);
  ~UmrPoster();
  UmrPoster(const UmrPoster&) = delete;
  UmrPoster& operator=(const UmrPoster&) = delete;

  // hca::Queue's Post* (same contracts).
  absl::Status PostMap(uint64_t request_id, const MapRequest& request);
  absl::Status PostUpdate(uint64_t request_id, const UpdateRequest& request);
  absl::Status PostInvalidate(uint64_t request_id, Key key, PostOptions options);
  absl::Status PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                      absl::Span<const MttEntry> entries, PostOptions options);
  // A signalled NOP: once its completion is seen, every WQE posted before it has executed.
  absl::Status PostNop(uint64_t request_id);

  uint32_t FreeSlots() const { return sq_->FreeWqebbs(retired_); }
  // WQEBBs posted, free-running: what the doorbell record publishes (low 16 bits on hardware).
  uint32_t producer() const { return sq_->producer(); }
  // The counter of the last WQE posted (its first WQEBB); the doorbell writes its control
  // segment's first 8 bytes. Meaningful once something was posted.
  uint32_t last_wqe() const { return last_wqe_; }
  uint32_t depth() const { return sq_->num_wqebbs(); }
  // Every WQE posted has completed (been retired by Retire).
  bool Idle() const { return retired_ == sq_->producer(); }

  // Retires the WQEs a CQE completes (the WQE it names and every earlier unsignalled one).
  // Returns true and fills `out` when the caller asked for this completion or it is an error;
  // false for a completion the poster forced (selective signalling), which only frees space.
  bool Retire(const umr::Cqe& cqe, Completion* out);

 private:
  struct Shadow {
    uint64_t request_id = 0;
    bool want_completion = false;
    uint8_t wqebbs = 0;
  };
  struct Staging {
    std::vector<uint8_t> bytes;
    Key lkey = 0;
    uint64_t head = 0;  // bytes handed out, ever (the buffer's position is head % size)
    uint64_t tail = 0;  // bytes given back, ever
    std::deque<std::pair<uint32_t, uint64_t>> in_use;  // (WQE counter, head after it), in order
  };

  UmrPoster(std::unique_ptr<umr::SqRing> sq, UmrPosterOptions options);
  absl::Status Post(uint64_t request_id, const PostOptions& options, unsigned max_wqebbs,
                    bool is_umr,
                    const std::function<absl::StatusOr<umr::WqeSize>(const umr::WqeHeader&,
                                                                     absl::Span<uint8_t>)>& build);
  absl::StatusOr<umr::TranslationStaging> ReserveStaging(size_t n);
  void ReleaseStaging();

  const UmrPosterOptions options_;
  std::unique_ptr<umr::SqRing> sq_;
  std::vector<Shadow> shadow_;  // by slot of a WQE's first WQEBB
  uint32_t retired_ = 0;        // WQEBBs whose completion was seen
  uint32_t last_wqe_ = 0;
  Staging staging_;
  uint64_t staging_pending_ = 0;  // head after the reservation of the WQE being built
};

}  // namespace regcache::hca
#endif  // REGCACHE_HCA_UMR_POSTER_H_
