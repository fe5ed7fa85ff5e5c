// Context's bind planning (docs/verbs.md, "Binds and their completions"): the checks a window
// bind must pass against the table, its effect on the window's record, and with cut backings
// (docs/key_bounds.md) the region of the key's own each map is bound on.
#include <cerrno>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "hca/status.h"
#include "hca/verbs/context.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

absl::Status Refuse(absl::string_view why) { return DeviceError(Syndrome::kMwBind, why); }

bool Within(uint64_t addr, uint64_t length, uint64_t lo, uint64_t len) {
  return addr >= lo && length <= len && addr - lo <= len - length;
}

}  // namespace

const MrRecord* Context::BaseOf(const KlmEntry& e) const {
  Key base = e.key;
  if (auto p = mws_.find(KeyIndex(e.key)); p != mws_.end()) {
    if (!p->second.live || p->second.key != e.key) return nullptr;
    base = p->second.base;
  }
  auto m = mrs_.find(KeyIndex(base));
  return m == mrs_.end() || m->second.mr->lkey != base ? nullptr : &m->second;
}

absl::StatusOr<ibv_mr*> Context::PrepareCut(Pd queue_pd, const BindRequest& rq) {
  if (!cut_backings_ || rq.invalidate) return nullptr;
  const KlmEntry& e = rq.entry;
  ibv_pd* vpd = nullptr;
  uint64_t addr = 0;
  int flags = IBV_ACCESS_MW_BIND;
  {
    base::MutexLock lock(&mu_);
    const MrRecord* r = BaseOf(e);
    auto pd = pds_.find(queue_pd.pdn);
    if (r == nullptr || pd == pds_.end() || !Within(e.addr, e.length, r->iova, r->length)) {
      return nullptr;  // Plan refuses it, saying why
    }
    if (r->imported || r->dmabuf) {
      return Refuse(absl::StrFormat(
          "strict key bounds: region 0x%08x %s, so the daemon has no mapping to cut a region "
          "of the key's own from",
          r->mr->lkey, r->imported ? "was registered by its client" : "is a dma-buf's"));
    }
    vpd = pd->second;
    addr = r->addr + (e.addr - r->iova);
    if (r->access & (kLocalWrite | kRemoteWrite | kRemoteAtomic)) flags |= IBV_ACCESS_LOCAL_WRITE;
  }
  ibv_mr* cut = ibv_reg_mr_iova2(vpd, reinterpret_cast<void*>(addr), e.length, e.addr,
                                 static_cast<unsigned>(flags));
  if (cut == nullptr) {
    return base::Annotate(
        ErrnoStatus(errno, "ibv_reg_mr"),
        absl::StrFormat("region cut at key edges [0x%x, +0x%x)", e.addr, e.length));
  }
  stats_.cuts_registered.Inc();
  stats_.cut_bytes.Inc(e.length);
  stats_.live_cuts.Add();
  return cut;
}

void Context::ReleaseCut(ibv_mr* cut) {
  if (int err = ibv_dereg_mr(cut); err != 0) {
    // Still bound (the device disagrees with the table): keeping it registered is safe, since
    // the window's own rkey moved on; it goes when the device closes.
    stats_.cut_release_errors.Inc();
    RC_LOG(ERROR) << ErrnoStatus(err, "ibv_dereg_mr of a region cut at key edges");
    return;
  }
  stats_.live_cuts.Sub();
}

void Context::PlanInvalidate(Pd queue_pd, const MwRecord& w, BindPlan* plan) {
  // The device ignores the region of a zero-length bind, but rdma-core's rxe provider reads
  // it: name the window's last region, or any region of the PD. A cut region goes once the
  // bind completed: the record keeps the backing beneath instead (or none, if it went).
  ibv_mr* bind_mr = w.mr;
  if (w.cut != nullptr) {
    auto m = mrs_.find(KeyIndex(w.base));
    plan->after.mr = m == mrs_.end() ? nullptr : m->second.mr;
    plan->after.cut = nullptr;
  }
  if (bind_mr == nullptr) {
    for (const auto& [index, r] : mrs_) {
      if (r.pd == queue_pd) {
        bind_mr = plan->after.mr = r.mr;
        break;
      }
    }
  }
  if (bind_mr == nullptr) {
    plan->mw = nullptr;  // never bound, and nothing to bind it with: already invalid
    plan->after.key = w.key;
    return;
  }
  plan->bind.bind_info.mr = bind_mr;
  plan->after.live = false;
  plan->after.parent = plan->after.base = 0;
  plan->after.start = plan->after.length = 0;
  plan->after.access = 0;
}

absl::Status Context::Plan(Pd queue_pd, const BindRequest& rq, ibv_mr* cut, BindPlan* out,
                           MwRecord** record) {
  auto it = mws_.find(KeyIndex(rq.key));
  if (it == mws_.end()) return Refuse(absl::StrFormat("no window with key 0x%08x", rq.key));
  MwRecord& w = it->second;
  if (record != nullptr) *record = &w;
  if (!(w.pd == queue_pd)) {
    return Refuse(absl::StrFormat("window 0x%08x is in pd %d, the queue in pd %d", rq.key, w.pd.pdn,
                                  queue_pd.pdn));
  }
  BindPlan& plan = *out;
  plan.mw = w.mw;
  plan.before = w;
  plan.after = w;
  plan.after.key = NextVariant(w.key);
  if (rq.invalidate) {  // a zero-length bind: no range, no rights
    PlanInvalidate(queue_pd, w, &plan);
    return absl::OkStatus();
  }
  if (rq.require_free && w.live) return Refuse(absl::StrFormat("window 0x%08x is live", w.key));
  if (rq.new_variant != KeyVariant(plan.after.key)) {
    return Refuse(absl::StrFormat(
        "window 0x%08x can only take variant 0x%02x next (a bind advances it by one), not 0x%02x",
        w.key, KeyVariant(plan.after.key), rq.new_variant));
  }
  const KlmEntry& e = rq.entry;
  ibv_mr* mr = nullptr;
  AccessFlags allowed = 0;
  const MrRecord* base = nullptr;  // the backing beneath (BaseOf)
  if (auto m = mrs_.find(KeyIndex(e.key)); m != mrs_.end()) {
    const MrRecord& r = m->second;
    if (r.mr->lkey != e.key || !(r.pd == queue_pd)) {
      return Refuse(
          absl::StrFormat("backing 0x%08x is not in this pd or has another variant", e.key));
    }
    if (!Within(e.addr, e.length, r.iova, r.length)) {
      return Refuse(
          absl::StrFormat("[0x%x, +0x%x) is outside backing 0x%08x", e.addr, e.length, e.key));
    }
    mr = r.mr;
    allowed = r.access;
    base = &r;  // a backing is its own base: BaseOf's answer without its two lookups
  } else if (auto p = mws_.find(KeyIndex(e.key)); p != mws_.end()) {
    const MwRecord& parent = p->second;
    if (!parent.live || parent.key != e.key || !(parent.pd == queue_pd)) {
      return Refuse(absl::StrFormat("parent window 0x%08x is not live in this pd", e.key));
    }
    if (!Within(e.addr, e.length, parent.start, parent.length)) {
      return Refuse(absl::StrFormat("[0x%x, +0x%x) is outside parent window 0x%08x", e.addr,
                                    e.length, e.key));
    }
    mr = parent.mr;
    allowed = parent.access;
  } else {
    return Refuse(absl::StrFormat("entry key 0x%08x is neither a backing nor a window", e.key));
  }
  const AccessFlags remote = rq.access & (kRemoteRead | kRemoteWrite | kRemoteAtomic);
  if ((remote & ~allowed) != 0) {
    return Refuse(absl::StrFormat("rights %s exceed the %s of 0x%08x", AccessToString(remote),
                                  AccessToString(allowed), e.key));
  }
  if (base == nullptr) base = BaseOf(e);
  if (base == nullptr) return Refuse(absl::StrFormat("no backing beneath 0x%08x", e.key));
  if (cut_backings_) {
    if (cut == nullptr || cut->length != e.length) {
      return Refuse("strict key bounds: no region cut at the key's edges for this map");
    }
    mr = cut;  // the window spans it whole: the device's region check is the key's range
  }
  plan.bind.bind_info.mr = mr;
  plan.bind.bind_info.addr = e.addr;
  plan.bind.bind_info.length = e.length;
  plan.bind.bind_info.mw_access_flags = RemoteAccessFlags(remote);
  plan.after.live = true;
  plan.after.mr = mr;
  plan.after.cut = cut_backings_ ? cut : nullptr;
  plan.after.base = base->mr->lkey;
  plan.after.parent = e.key;
  plan.after.start = e.addr;
  plan.after.length = e.length;
  plan.after.access = remote;
  return absl::OkStatus();
}

absl::StatusOr<BindPlan> Context::PostBind(ibv_qp* qp, Pd queue_pd, const BindRequest& rq,
                                           uint64_t wr_id, ibv_mr* cut, bool signaled) {
  base::MutexLock lock(&mu_);
  absl::StatusOr<BindPlan> plan(absl::in_place);
  if (absl::Status s = Plan(queue_pd, rq, cut, &*plan); !s.ok()) {
    stats_.bind_errors.Inc();
    return s;
  }
  if (plan->mw == nullptr) return plan;  // nothing to post (see Plan)
  plan->bind.wr_id = wr_id;
  plan->bind.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  if (int err = ibv_bind_mw(qp, plan->mw, &plan->bind); err != 0) {
    stats_.bind_errors.Inc();
    return ErrnoStatus(err, absl::StrFormat("ibv_bind_mw of window 0x%08x", rq.key));
  }
  // The provider has moved mw->rkey on already; the record follows it.
  plan->after.key = plan->mw->rkey;
  plan->after.seq = next_seq_++;
  mws_[KeyIndex(rq.key)] = plan->after;
  stats_.binds_posted.Inc();
  return plan;
}

void Context::PostBindList(ibv_qp* qp, Pd queue_pd, absl::Span<const BindItem> items) {
  std::vector<ibv_send_wr> wrs;  // the list being built: wrs[k] posts items[list[k]]
  std::vector<size_t> list;
  wrs.reserve(items.size());
  list.reserve(items.size());
  absl::Status failed;  // a post failed: so does every request after it
  base::MutexLock lock(&mu_);
  uint64_t number = next_list_++;  // the windows in the list being built carry it (listed)
  const auto send = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    number = next_list_++;  // whatever happens, the next list is a new one
    if (wrs.empty()) return;
    for (size_t k = 0; k + 1 < wrs.size(); ++k) wrs[k].next = &wrs[k + 1];
    wrs.back().next = nullptr;
    ibv_send_wr* bad = nullptr;
    const int err = ibv_post_send(qp, wrs.data(), &bad);
    // On a failure the provider points `bad` at the first work request it did not post.
    size_t posted = wrs.size();
    if (err != 0) posted = bad == nullptr ? 0 : static_cast<size_t>(bad - wrs.data());
    for (size_t k = 0; k < posted; ++k) {
      items[list[k]].plan->mw->rkey =
          wrs[k].bind_mw.rkey;  // ibv_post_send leaves that to the caller
    }
    stats_.binds_posted.Inc(posted);
    if (posted > 0) stats_.bind_lists_posted.Inc();
    if (posted < wrs.size()) {
      failed = ErrnoStatus(err, "ibv_post_send of a list of window binds");
      for (size_t k = wrs.size(); k-- > posted;) {  // newest first: each record as it was
        (void)RestoreWindow(*items[list[k]].plan);
        *items[list[k]].status = failed;
        stats_.bind_errors.Inc();
      }
    }
    wrs.clear();
    list.clear();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const BindItem& item = items[i];
    if (!failed.ok()) {
      stats_.bind_errors.Inc();
      *item.status = failed;
      continue;
    }
    // The plan reads the window's record only (never mw->rkey), which already holds the effect
    // of a bind of it earlier in this list: planning before that list is sent is the same.
    MwRecord* w = nullptr;
    BindPlan* plan = item.plan;
    *item.status = Plan(queue_pd, *item.request, /*cut=*/nullptr, plan, &w);
    if (!item.status->ok()) stats_.bind_errors.Inc();
    if (!item.status->ok() || plan->mw == nullptr) continue;
    if (w->listed == number) {  // this window is in the list already: send that list first
      send();
      if (!failed.ok()) {
        stats_.bind_errors.Inc();
        *item.status = failed;
        continue;
      }
    }
    ibv_send_wr wr{};
    wr.wr_id = item.wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = item.signaled ? IBV_SEND_SIGNALED : 0;
    wr.bind_mw.mw = plan->mw;
    wr.bind_mw.rkey = ibv_inc_rkey(plan->mw->rkey);
    wr.bind_mw.bind_info = plan->bind.bind_info;
    plan->bind.wr_id = wr.wr_id;
    plan->bind.send_flags = wr.send_flags;
    plan->after.key = wr.bind_mw.rkey;
    plan->after.seq = next_seq_++;
    *w = plan->after;  // w still points into mws_: nothing was added to or erased from it since
    w->listed = number;
    list.push_back(i);
    wrs.push_back(wr);
  }
  send();
}

void Context::BindDone(const BindPlan& plan) {
  if (plan.before.cut != nullptr && plan.before.cut != plan.after.cut) ReleaseCut(plan.before.cut);
}

bool Context::RestoreWindow(const BindPlan& plan) {
  auto it = mws_.find(KeyIndex(plan.before.key));
  if (it == mws_.end() || it->second.seq != plan.after.seq) return false;
  it->second = plan.before;
  it->second.seq = next_seq_++;
  plan.mw->rkey = plan.before.key;  // advanced at post (or, in a list, not yet): as it was
  return true;
}

void Context::UndoBind(const BindPlan& plan) {
  ibv_mr* unbound = nullptr;
  {
    base::MutexLock lock(&mu_);
    stats_.bind_errors.Inc();
    // Changed since: the window was destroyed (and its cut released with it).
    if (!RestoreWindow(plan)) return;
    if (plan.after.cut != nullptr && plan.after.cut != plan.before.cut) unbound = plan.after.cut;
  }
  if (unbound != nullptr) ReleaseCut(unbound);
}

}  // namespace regcache::hca::verbs
