// The device's floor for a batch of keys made as memory windows (regmr_bench's bind_floor
// rows): K type-1 windows bound by one ibv_post_send list, only the last bind signalled, and
// that one completion awaited — what K keys cost on this device when nothing but the binds
// runs: no daemon, no ring, no cache, no client. The verbs backend makes a batch's keys exactly
// so (docs/verbs.md, "Binds as lists"), so regcache's batch over this floor is what regcache
// itself adds per key, and ibv_reg_mr over this floor is the most any design that binds a
// window per key can gain on this device.
//
// For "verbs[:name]" devices only (the ConnectX backend makes keys by UMR, not binds). Opened
// through the verbs backend's own context, queue-pair helpers and tables.
#ifndef REGCACHE_BENCH_BIND_FLOOR_H_
#define REGCACHE_BENCH_BIND_FLOOR_H_

#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "bench/batch_memory.h"
#include "hca/verbs/context.h"

namespace regcache::bench {

class BindFloor {
 public:
  // Null for a spec other than "verbs[:name[,params]]"; an error where the device cannot be
  // opened or refuses what the floor needs.
  static absl::StatusOr<std::unique_ptr<BindFloor>> Open(const std::string& spec) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 1));
    if (parts[0] != "verbs") return std::unique_ptr<BindFloor>();
    hca::verbs::VerbsOptions o;
    if (parts.size() > 1) o.device_name = parts[1].substr(0, parts[1].find_first_of(":,"));
    auto f = std::unique_ptr<BindFloor>(new BindFloor);
    ASSIGN_OR_RETURN(f->context_, hca::verbs::OpenContext(o));
    f->pd_ = ::ibv_alloc_pd(f->context_->ctx());
    if (f->pd_ == nullptr) return base::ErrnoToStatus(errno, "ibv_alloc_pd");
    return f;
  }
  ~BindFloor() {
    Release();
    if (pd_ != nullptr) ::ibv_dealloc_pd(pd_);
  }

  // Prepares `keys` windows over ranges of `bytes`, range i starting i + 1 pages into memory of
  // its own (as regmr_bench's batches): the memory registered once, the windows allocated once,
  // a queue pair that holds the whole list. Not timed.
  absl::Status Prepare(int keys, uint64_t bytes) {
    Release();
    ASSIGN_OR_RETURN(mem_, BatchMemory::Map(keys, bytes));
    mr_ = ::ibv_reg_mr(pd_, mem_->data(), mem_->length(),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_MW_BIND);
    if (mr_ == nullptr) return base::ErrnoToStatus(errno, "ibv_reg_mr");
    for (int i = 0; i < keys; ++i) {
      ibv_mw* mw = ::ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
      if (mw == nullptr) return base::ErrnoToStatus(errno, "ibv_alloc_mw");
      mws_.push_back(mw);
    }
    cq_ = ::ibv_create_cq(context_->ctx(), 4, nullptr, nullptr, 0);
    if (cq_ == nullptr) return base::ErrnoToStatus(errno, "ibv_create_cq");
    ASSIGN_OR_RETURN(qp_, hca::verbs::CreateRcQp(pd_, cq_, static_cast<uint32_t>(keys) + 1));
    RETURN_IF_ERROR(hca::verbs::ConnectToSelf(*context_, qp_, 0, hca::verbs::RandomPsn()));
    bytes_ = bytes;
    return absl::OkStatus();
  }

  // One batch: every window bound over its range by one list, and its completion awaited (the
  // seconds this took); then, not timed, every window invalidated (zero-length binds, one list)
  // so that the next batch binds free windows again, as regcache's invalidations do.
  absl::StatusOr<double> Run() {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(PostAndWait(/*bind=*/true));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RETURN_IF_ERROR(PostAndWait(/*bind=*/false));
    return secs;
  }

 private:
  BindFloor() = default;

  absl::Status PostAndWait(bool bind) {
    std::vector<ibv_send_wr> wrs(mws_.size());
    for (size_t i = 0; i < mws_.size(); ++i) {
      ibv_send_wr& wr = wrs[i];
      wr.wr_id = i;
      wr.opcode = IBV_WR_BIND_MW;
      wr.send_flags = i + 1 == wrs.size() ? IBV_SEND_SIGNALED : 0;
      wr.next = i + 1 == wrs.size() ? nullptr : &wrs[i + 1];
      wr.bind_mw.mw = mws_[i];
      wr.bind_mw.rkey = ::ibv_inc_rkey(mws_[i]->rkey);
      wr.bind_mw.bind_info.mr = mr_;  // an invalidate's zero-length bind still names one
      if (bind) {
        wr.bind_mw.bind_info.addr = mem_->range(static_cast<int>(i));
        wr.bind_mw.bind_info.length = bytes_;
        wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
      }
    }
    ibv_send_wr* bad = nullptr;
    if (int err = ::ibv_post_send(qp_, wrs.data(), &bad); err != 0) {
      return base::ErrnoToStatus(err, "ibv_post_send of a list of window binds");
    }
    for (size_t i = 0; i < mws_.size(); ++i) mws_[i]->rkey = wrs[i].bind_mw.rkey;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    ibv_wc wc{};
    int n = 0;
    while ((n = ::ibv_poll_cq(cq_, 1, &wc)) == 0) {
      if (absl::Now() > give_up) return absl::DeadlineExceededError("no bind completion in 30 s");
    }
    if (n < 0) return absl::InternalError("ibv_poll_cq failed");
    if (wc.status != IBV_WC_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("a bind of the list failed: ", ::ibv_wc_status_str(wc.status)));
    }
    return absl::OkStatus();
  }

  void Release() {
    hca::verbs::DestroyQpAndCq(qp_, cq_, "bind floor");
    qp_ = nullptr;
    cq_ = nullptr;
    for (ibv_mw* mw : mws_) ::ibv_dealloc_mw(mw);
    mws_.clear();
    if (mr_ != nullptr) ::ibv_dereg_mr(mr_);
    mr_ = nullptr;
    mem_.reset();
  }

  std::unique_ptr<hca::verbs::Context> context_;
  ibv_pd* pd_ = nullptr;  // deallocated here, not through the context's table
  std::unique_ptr<BatchMemory> mem_;
  uint64_t bytes_ = 0;
  ibv_mr* mr_ = nullptr;
  std::vector<ibv_mw*> mws_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
};

}  // namespace regcache::bench
#endif  // REGCACHE_BENCH_BIND_FLOOR_H_
