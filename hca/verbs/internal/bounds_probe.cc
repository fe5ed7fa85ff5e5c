#include "hca/verbs/internal/bounds_probe.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "hca/status.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 4;  // 0 and 2: around the window; 1: the window; 3: where reads land
constexpr uint32_t kRead = 8;
constexpr absl::Duration kWait = absl::Seconds(5);

// Everything the test creates, released in reverse order whatever happens.
struct Scratch {
  void* buf = MAP_FAILED;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_qp* qp2 = nullptr;  // ProbeBindLists: the queue pair that reads
  ibv_mw* mw = nullptr;
  ibv_mw* mw2 = nullptr;
  ~Scratch() {
    if (mw != nullptr) (void)ibv_dealloc_mw(mw);
    if (mw2 != nullptr) (void)ibv_dealloc_mw(mw2);
    DestroyQpAndCq(qp2, nullptr, "destroying the bind-list self-test's second queue pair");
    DestroyQpAndCq(qp, cq, "destroying the bounds self-test's queue pair");
    if (mr != nullptr) (void)ibv_dereg_mr(mr);
    if (pd != nullptr) (void)ibv_dealloc_pd(pd);
    if (buf != MAP_FAILED) munmap(buf, kPage * kPages);
  }
  uint64_t at(size_t offset) const { return reinterpret_cast<uint64_t>(buf) + offset; }
};

absl::StatusOr<ibv_wc> Await(ibv_cq* cq, const char* what) {
  const absl::Time deadline = absl::Now() + kWait;
  for (;;) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return absl::InternalError(absl::StrFormat("ibv_poll_cq failed (%s)", what));
    if (n == 1) return wc;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("%s: no completion within %s", what, absl::FormatDuration(kWait)));
    }
    std::this_thread::yield();
  }
}

// Reads kRead bytes at `remote` through `rkey` into page 3 over `qp` (default s.qp); the work
// completion's status.
absl::StatusOr<ibv_wc_status> Read(const Scratch& s, uint32_t rkey, uint64_t remote,
                                   const char* what, ibv_qp* qp = nullptr) {
  ibv_sge sge{};
  sge.addr = s.at(3 * kPage);
  sge.length = kRead;
  sge.lkey = s.mr->lkey;
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  if (int err = ibv_post_send(qp != nullptr ? qp : s.qp, &wr, &bad); err != 0) {
    return ErrnoStatus(err, absl::StrFormat("ibv_post_send (%s)", what));
  }
  ASSIGN_OR_RETURN(ibv_wc wc, Await(s.cq, what));
  return wc.status;
}

// The scratch pages (page p filled with 0xa0 + p), their PD and region, a CQ and a queue pair
// connected to itself, and a type-1 window.
absl::Status Prepare(const Context& c, Scratch& s) {
  s.buf = mmap(nullptr, kPage * kPages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s.buf == MAP_FAILED) return ErrnoStatus(errno, "mmap of the scratch pages");
  for (size_t p = 0; p < kPages; ++p) {
    std::memset(static_cast<char*>(s.buf) + p * kPage, 0xa0 + static_cast<int>(p), kPage);
  }
  s.pd = ibv_alloc_pd(c.ctx());
  if (s.pd == nullptr) return ErrnoStatus(errno, "ibv_alloc_pd");
  s.mr = ibv_reg_mr(s.pd, s.buf, kPage * kPages, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  if (s.mr == nullptr) return ErrnoStatus(errno, "ibv_reg_mr of the scratch pages");
  s.cq = ibv_create_cq(c.ctx(), 8, nullptr, nullptr, 0);
  if (s.cq == nullptr) return ErrnoStatus(errno, "ibv_create_cq");
  ASSIGN_OR_RETURN(s.qp, CreateRcQp(s.pd, s.cq, 4));
  RETURN_IF_ERROR(ConnectToSelf(c, s.qp, IBV_ACCESS_REMOTE_READ, RandomPsn()));
  s.mw = ibv_alloc_mw(s.pd, IBV_MW_TYPE_1);
  if (s.mw == nullptr) return ErrnoStatus(errno, "ibv_alloc_mw");
  return absl::OkStatus();
}

absl::StatusOr<BoundsProbe> Run(const Context& c) {
  Scratch s;
  RETURN_IF_ERROR(Prepare(c, s));

  ibv_mw_bind bind{};
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = s.mr;
  bind.bind_info.addr = s.at(kPage);
  bind.bind_info.length = kPage;
  bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  if (int err = ibv_bind_mw(s.qp, s.mw, &bind); err != 0) return ErrnoStatus(err, "ibv_bind_mw");
  ASSIGN_OR_RETURN(ibv_wc bound, Await(s.cq, "the window's bind"));
  if (bound.status != IBV_WC_SUCCESS) {
    return absl::InternalError(
        absl::StrFormat("the window's bind completed with %s", ibv_wc_status_str(bound.status)));
  }
  const uint32_t rkey = s.mw->rkey;

  ASSIGN_OR_RETURN(ibv_wc_status inside, Read(s, rkey, s.at(kPage), "a read inside the window"));
  const auto* landed = static_cast<const unsigned char*>(s.buf) + 3 * kPage;
  if (inside != IBV_WC_SUCCESS || landed[0] != 0xa1 || landed[kRead - 1] != 0xa1) {
    return absl::InternalError(
        absl::StrFormat("a read inside the window was not served (%s)", ibv_wc_status_str(inside)));
  }
  struct Outside {
    const char* where;
    uint64_t addr;
    ibv_wc_status status = IBV_WC_SUCCESS;
  } outside[] = {{"before", s.at(kPage - kRead)}, {"after", s.at(2 * kPage)}};
  int served = 0;
  for (Outside& o : outside) {
    ASSIGN_OR_RETURN(o.status, Read(s, rkey, o.addr, "a read outside the window"));
    if (o.status == IBV_WC_SUCCESS) {
      ++served;
      continue;
    }
    if (o.status != IBV_WC_REM_ACCESS_ERR) {
      return absl::InternalError(absl::StrFormat("a read %s the window completed with %s", o.where,
                                                 ibv_wc_status_str(o.status)));
    }
    // The refusal left the queue pair in error.
    RETURN_IF_ERROR(ConnectToSelf(c, s.qp, IBV_ACCESS_REMOTE_READ, RandomPsn()));
  }
  BoundsProbe p;
  if (served == 0) {
    p.bounds = KeyBounds::kKey;
    p.detail =
        "self-test at open: reads just before and just after a one-page window, inside its "
        "memory region, were refused (remote access error)";
  } else {
    p.bounds = KeyBounds::kAttachment;
    p.detail = absl::StrFormat(
        "self-test at open: a read just before a one-page window was %s and one just after it "
        "was %s: the device checks a window against its memory region only",
        outside[0].status == IBV_WC_SUCCESS ? "served" : "refused",
        outside[1].status == IBV_WC_SUCCESS ? "served" : "refused");
  }
  return p;
}

absl::Status RunBindLists(const Context& c) {
  Scratch s;
  RETURN_IF_ERROR(Prepare(c, s));
  ASSIGN_OR_RETURN(s.qp2, CreateRcQp(s.pd, s.cq, 4));
  RETURN_IF_ERROR(ConnectToSelf(c, s.qp2, IBV_ACCESS_REMOTE_READ, RandomPsn()));
  s.mw2 = ibv_alloc_mw(s.pd, IBV_MW_TYPE_1);
  if (s.mw2 == nullptr) return ErrnoStatus(errno, "ibv_alloc_mw");
  ibv_mw* const mws[2] = {s.mw, s.mw2};
  ibv_send_wr wr[2] = {};
  for (int k = 0; k < 2; ++k) {
    wr[k].wr_id = k + 1;
    wr[k].opcode = IBV_WR_BIND_MW;
    wr[k].bind_mw.mw = mws[k];
    wr[k].bind_mw.rkey = ibv_inc_rkey(mws[k]->rkey);
    wr[k].bind_mw.bind_info.mr = s.mr;
    wr[k].bind_mw.bind_info.addr = s.at((k + 1) * kPage);  // pages 1 and 2
    wr[k].bind_mw.bind_info.length = kPage;
    wr[k].bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  }
  wr[0].next = &wr[1];
  wr[1].send_flags = IBV_SEND_SIGNALED;  // covers both
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(s.qp, wr, &bad); err != 0) {
    return ErrnoStatus(err, "ibv_post_send of two window binds");
  }
  ASSIGN_OR_RETURN(ibv_wc bound, Await(s.cq, "a list of two window binds"));
  if (bound.status != IBV_WC_SUCCESS || bound.wr_id != 2) {
    return absl::InternalError(absl::StrFormat("the list's completion was work request %d with %s",
                                               bound.wr_id, ibv_wc_status_str(bound.status)));
  }
  for (int k = 0; k < 2; ++k) {
    mws[k]->rkey = wr[k].bind_mw.rkey;
    ASSIGN_OR_RETURN(ibv_wc_status st, Read(s, mws[k]->rkey, s.at((k + 1) * kPage),
                                            "a read through a window bound by the list", s.qp2));
    const auto* landed = static_cast<const unsigned char*>(s.buf) + 3 * kPage;
    if (st != IBV_WC_SUCCESS || landed[0] != 0xa1 + k || landed[kRead - 1] != 0xa1 + k) {
      return absl::InternalError(absl::StrFormat(
          "a read through window %d of the list over another queue pair was not served (%s)", k + 1,
          ibv_wc_status_str(st)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

BindListProbe ProbeBindLists(const Context& c) {
  BindListProbe p;
  absl::Status s = RunBindLists(c);
  p.usable = s.ok();
  p.detail = s.ok()
                 ? "self-test at open: two type-1 windows bound by one ibv_post_send list "
                   "served reads over another queue pair of their PD"
                 : absl::StrCat("self-test at open: a list of binds did not work: ", s.message());
  return p;
}

BoundsProbe ProbeWindowBounds(const Context& c) {
  absl::StatusOr<BoundsProbe> p = Run(c);
  if (p.ok()) return *p;
  BoundsProbe unknown;
  unknown.detail = absl::StrCat("self-test at open could not tell: ", p.status().message());
  return unknown;
}

}  // namespace regcache::hca::verbs
