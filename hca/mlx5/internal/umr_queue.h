// A ConnectX UMR queue (docs/mlx5.md, UMR queues): an RC queue pair connected to itself, in RTS,
// created through mlx5dv with RAW_WQE among its send ops, whose send queue buffer, doorbell
// record and UAR register come from mlx5dv_init_obj. hca::UmrPoster writes umr/'s WQEs straight
// into that buffer (the bytes the sim executes); Doorbell publishes them in the order mmio.h
// spells out; Poll reads the CQ buffer's CQEs by their owner bit and hands them to the poster.
//
// Errors: a WQE the device refuses completes with an error CQE and moves the queue pair to the
// error state, which flushes everything after it (WR_FLUSH_ERR, kAborted). Once every
// outstanding WQE has completed, the next post resets the queue pair and reconnects it
// (RESET -> INIT -> RTR -> RTS) and starts a fresh ring; until then Post* answer kUnavailable,
// and the cache replaces the queue.
//
// Thread safety: as hca::Queue (one poster thread). Doorbells of queues that share a UAR page
// are serialized by the device's doorbell lock.
#ifndef REGCACHE_HCA_MLX5_INTERNAL_UMR_QUEUE_H_
#define REGCACHE_HCA_MLX5_INTERNAL_UMR_QUEUE_H_

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "hca/device.h"
#include "hca/umr_poster.h"
#include "hca/verbs/context.h"

namespace regcache::hca::mlx5 {

struct UmrQueueParams {
  umr::FenceMode umr_fence = umr::FenceMode::kStrongOrdering;
  umr::UmrModifyCaps modify;
  uint32_t max_inline_klm = 0;
  bool pointer_umr = true;
  base::Mutex* doorbell_mu = nullptr;  // the device's; REQUIRED
};

class UmrQueue final : public Queue {
 public:
  // A queue of at least `depth` WQEBBs in `pd` (the device's `vpd`).
  static absl::StatusOr<std::unique_ptr<UmrQueue>> Create(verbs::Context* c, Pd pd, ibv_pd* vpd,
                                                          uint32_t depth,
                                                          const UmrQueueParams& params);
  ~UmrQueue() override;

  Pd pd() const override { return pd_; }
  uint32_t FreeSlots() const override { return broken_ ? 0 : poster_->FreeSlots(); }
  absl::Status PostMap(uint64_t request_id, const MapRequest& request) override;
  absl::Status PostUpdate(uint64_t request_id, const UpdateRequest& request) override;
  absl::Status PostInvalidate(uint64_t request_id, Key key, PostOptions options) override;
  absl::Status PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                      absl::Span<const MttEntry> entries,
                                      PostOptions options) override;
  absl::Status Doorbell() override;
  size_t Poll(absl::Span<Completion> out) override;
  absl::Status Flush(absl::Duration timeout) override;

 private:
  UmrQueue(verbs::Context* c, Pd pd, ibv_pd* vpd, const UmrQueueParams& params)
      : c_(c), pd_(pd), vpd_(vpd), params_(params) {}
  absl::Status Connect();
  absl::Status MakePoster();
  // Resets and reconnects the queue pair after an error, once nothing is outstanding.
  absl::Status Ready();
  // Reads CQEs into the poster; completions the caller wants go to `out` first, then to
  // pending_ (Flush collects them there for the next Poll).
  size_t Harvest(absl::Span<Completion> out);

  verbs::Context* const c_;
  const Pd pd_;
  ibv_pd* const vpd_;
  const UmrQueueParams params_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  mlx5dv_qp dv_qp_{};
  mlx5dv_cq dv_cq_{};
  uint32_t psn_ = 0;
  std::unique_ptr<UmrPoster> poster_;
  uint32_t published_ = 0;  // producer counter last written to the doorbell record
  uint32_t bf_offset_ = 0;  // BlueFlame registers alternate between two halves
  uint32_t cq_consumer_ = 0;
  bool broken_ = false;
  std::deque<Completion> pending_;
  ibv_mr* staging_mr_ = nullptr;
};

}  // namespace regcache::hca::mlx5
#endif  // REGCACHE_HCA_MLX5_INTERNAL_UMR_QUEUE_H_
