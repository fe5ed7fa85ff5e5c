// The verbs backend's hca::Queue: an RC queue pair connected to itself on which window binds are
// posted (ibv_bind_mw), with its completion queue.
//
// Post* check the request's form and hold it; Doorbell() plans and posts each held request in
// order (Context::PostBind: the key-state checks run there, in posting order, as a device would
// run them); a refused request becomes an error completion in its place. A bind is posted
// signalled only if its request was (PostOptions::signaled): a batch of binds costs one
// completion. A completion covers every bind posted before it (the requester executes them in
// order, and a failed bind always completes): those succeeded. A refusal waits for its turn,
// so a refusal with only unsignalled binds before it and none signalled after would wait
// forever: the queue then posts a marker, a signalled zero-length bind of a window of its own
// (bound to nothing, so it changes nothing), whose completion covers them; Flush does the same.
//
// A bind that completes with an error leaves the queue pair in the error state: the binds
// behind it are flushed and undone (Context::UndoBind, newest first), and the queue pair is
// reset and reconnected before the next bind is posted.
//
// Fences: the queue pair carries only binds, executed in order by the requester, so a request
// always starts after the earlier ones completed; PostOptions::fence needs no flag.
#ifndef REGCACHE_HCA_VERBS_INTERNAL_BIND_QUEUE_H_
#define REGCACHE_HCA_VERBS_INTERNAL_BIND_QUEUE_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <deque>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hca/device.h"
#include "hca/verbs/context.h"

namespace regcache::hca::verbs {

// A first-in first-out queue over one vector: pop_front moves a head index on, and the storage
// is reused once the queue has drained (a bind queue drains at the end of every batch). A
// std::deque of entries as large as a bind's (a BindPlan is two window records) allocates a
// node per entry; this allocates only while it grows.
template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == v_.size(); }
  size_t size() const { return v_.size() - head_; }
  T& front() { return v_[head_]; }
  void push_back(T&& x) { v_.push_back(std::move(x)); }
  T& emplace_back() { return v_.emplace_back(); }
  void pop_front() {
    if (++head_ == v_.size()) {
      v_.clear();
      head_ = 0;
    } else if (head_ >= kCompactAt && 2 * head_ >= v_.size()) {  // never drains: bounded
      v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  auto begin() { return v_.begin() + static_cast<std::ptrdiff_t>(head_); }
  auto end() { return v_.end(); }
  auto begin() const { return v_.begin() + static_cast<std::ptrdiff_t>(head_); }
  auto end() const { return v_.end(); }
  auto rbegin() { return std::make_reverse_iterator(end()); }
  auto rend() { return std::make_reverse_iterator(begin()); }

 private:
  static constexpr size_t kCompactAt = 1024;
  std::vector<T> v_;
  size_t head_ = 0;
};

class BindQueue final : public Queue {
 public:
  // REQUIRES: depth is a power of two smaller than the device's max_qp_wr (the queue pair holds
  // one work request more, for a marker).
  static absl::StatusOr<std::unique_ptr<BindQueue>> Create(Context* c, Pd pd, uint32_t depth);
  ~BindQueue() override;

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

 private:
  struct Held {  // posted, not yet rung
    uint64_t id = 0;
    bool signaled = true;
    BindRequest request;
  };
  struct InFlight {  // rung: a posted bind, or a refusal waiting for its turn to complete
    uint64_t id = 0;
    uint64_t wr = 0;          // the work request id the completion carries (posted ones)
    bool signaled = true;     // the request asked for its completion
    bool wr_signaled = true;  // posted signalled: the device completes it (posted ones)
    bool posted = false;
    bool marker = false;  // the queue's own signalled bind (no request)
    bool undone = false;
    absl::Status refusal;
    BindPlan plan;
  };

  BindQueue(Context* c, Pd pd, uint32_t depth) : c_(c), pd_(pd), depth_(depth) {}
  absl::Status Connect();  // RESET -> INIT -> RTR -> RTS, to itself
  absl::Status Hold(uint64_t id, PostOptions options, const BindRequest& request);
  // Moves work completions into ready_ and delivers refusals that reached the front.
  void Pump();
  void Complete(uint64_t id, absl::Status status);
  // Retires the front entry, which a later completion covered: a refusal is delivered, a bind
  // posted unsignalled succeeded (or, undone after an error, failed).
  void RetireCovered();
  // Posts a marker when the newest posted bind is unsignalled and anything (with `always`) or a
  // request not posted (without) is behind it: a completion then covers them all.
  absl::Status CoverTail(bool always);
  // After an error: undoes every posted bind still in flight (newest first).
  void UndoInFlight();
  // Waits (bounded) until nothing posted is in flight, then resets and reconnects the queue pair.
  absl::Status Recover();
  size_t posted_in_flight() const;

  Context* const c_;
  const Pd pd_;
  const uint32_t depth_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::unique_ptr<char[]> marker_buf_;  // the marker's region: a zero-length bind still names one
  ibv_mr* marker_mr_ = nullptr;
  ibv_mw* marker_mw_ = nullptr;
  uint32_t psn_ = 0;
  bool broken_ = false;  // an error completion was seen: recover before posting
  uint64_t next_wr_ = 1;
  std::vector<Held> held_;
  Fifo<InFlight> in_flight_;  // in posting order; front is the oldest
  std::deque<Completion> ready_;
};

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_INTERNAL_BIND_QUEUE_H_
