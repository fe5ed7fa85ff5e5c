// The sim's send queue + completion queue: a real ring of 64-byte WQEBBs that Post* fill through
// hca::UmrPoster (umr/ builders, the code the mlx5 backend posts with), a doorbell that publishes
// the producer counter, an engine that has the device core execute each WQE from the ring's
// bytes (HcaCore::ExecuteSendWqe, hca/sim/sim_core.h), and a CQ ring of 64-byte CQEs with an owner
// bit: the engine writes them with umr::EncodeCqe (good CQEs and error CQEs with syndrome / vendor
// syndrome) and Poll reads them back with umr::DecodeCqe, so the ring holds the bytes a ConnectX CQ
// would.
//
// Selective signalling: the poster signals every depth/2 WQEs even when the caller did not ask,
// so completions keep retiring ring space; Poll consumes those CQEs silently (the caller asked
// for no completion), reporting only requested successes and every error.
//
// Thread safety: the poster side (Post*, Doorbell, Poll, FreeSlots) is single-threaded as
// hca::Queue says; the engine runs in the doorbell caller (kInline) or in the queue's own
// thread (kThread). Ring bytes are handed over with release/acquire on the published producer
// counter (SQ) and the CQ producer counter (CQ).
#ifndef REGCACHE_HCA_SIM_SIM_QUEUE_H_
#define REGCACHE_HCA_SIM_SIM_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "hca/device.h"
#include "hca/sim/sim_core.h"
#include "hca/sim/sim_options.h"
#include "hca/umr_poster.h"
#include "umr/cqe.h"
#include "umr/sq.h"
#include "umr/wqe_builder.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {

// What a queue needs from its device (injected: the device owns the core and the hooks).
struct QueueContext {
  HcaCore* core = nullptr;  // executes the WQEs, counts in its stats
  SendRules rules;          // what the device enforces on each WQE
  // Pointer-mode maps: registers `bytes` of this process's memory as a backing of `pd` (the
  // queue's staging buffer) and returns its key; destroys it again.
  std::function<absl::StatusOr<Key>(Pd pd, absl::Span<uint8_t> bytes)> register_staging;
  std::function<void(Key key)> destroy_staging;
  // Returns a syndrome to fail the next UMR with (consumed), or kNone.
  std::function<Syndrome()> take_injected_umr_failure;
  // Current completion delay.
  std::function<absl::Duration()> completion_delay;
};

class SimQueue final : public Queue {
 public:
  // REQUIRES: depth a power of two >= 4. Starts the engine thread in kThread mode.
  static absl::StatusOr<std::unique_ptr<SimQueue>> Create(QueueContext ctx, Pd pd, uint32_t sqn,
                                                          uint32_t depth, ExecutionMode mode);
  ~SimQueue() override;

  Pd pd() const override { return pd_; }
  uint32_t FreeSlots() const override;
  absl::Status PostMap(uint64_t request_id, const MapRequest& request) override;
  absl::Status PostUpdate(uint64_t request_id, const UpdateRequest& request) override;
  absl::Status PostInvalidate(uint64_t request_id, Key key, PostOptions options) override;
  absl::Status PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                      absl::Span<const MttEntry> entries,
                                      PostOptions options) override;
  absl::Status Doorbell() override;
  size_t Poll(absl::Span<Completion> out) override;
  absl::Status Flush(absl::Duration timeout) override;

  // A copy of the CQ ring (depth x 64 bytes, slot order), for tests that decode the raw CQEs.
  std::vector<uint8_t> CqRingForTest();

 private:
  SimQueue(QueueContext ctx, Pd pd, uint32_t sqn, uint32_t depth, ExecutionMode mode);

  // Engine: executes everything published and not yet executed.
  void Drain() ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine_mu_);
  // Engine: executes the WQE at `counter`; returns its WQEBB count.
  uint32_t ExecuteOne(uint32_t counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine_mu_);
  void WriteCqe(uint16_t wqe_counter, uint8_t opcode, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine_mu_);
  void EngineLoop();

  const QueueContext ctx_;
  const Pd pd_;
  const uint32_t sqn_;  // the QPN the CQEs carry
  const uint32_t depth_;
  const ExecutionMode mode_;
  struct AlignedDelete {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<uint8_t[], AlignedDelete> ring_;  // depth_ WQEBBs, 64-byte aligned
  // CQ ring: written by the engine (under engine_mu_), read by the poster after the acquire of
  // cq_producer_.
  std::unique_ptr<umr::CqeBytes[]> cq_;
  std::unique_ptr<UmrPoster> poster_;  // poster side: the WQEs, shared with the mlx5 backend
  // The executor's status for an error CQE, by the WQE's slot: a CQE only carries syndromes, the
  // sim adds the reason text to the completion. Written before the CQE is published.
  std::vector<absl::Status> error_status_;
  uint32_t cq_consumer_ = 0;  // poster side

  std::atomic<uint32_t> published_{0};    // doorbell record: producer counter
  std::atomic<uint32_t> cq_producer_{0};  // CQEs written

  base::Mutex engine_mu_;
  base::CondVar engine_cv_;
  uint32_t executed_ ABSL_GUARDED_BY(engine_mu_) = 0;  // WQEBBs executed
  bool stop_ ABSL_GUARDED_BY(engine_mu_) = false;
  umr::WqeScratch scratch_ ABSL_GUARDED_BY(engine_mu_);
  std::thread engine_;
};

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_SIM_QUEUE_H_
