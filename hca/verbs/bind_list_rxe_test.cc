// Context::PostBindList when ibv_post_send takes only part of a list. The bind queues never
// post more than their queue pair holds, so this cannot happen to them on rxe; a provider may
// still refuse a list midway, and what the table then says must be what the device has. Here
// the refusal is real: a send queue with room for fewer work requests than the list, on the
// device itself (rxe in the `vm` guest). Skips where no device can be opened.
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "hca/verbs/context.h"

namespace regcache::hca::verbs {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int kWindows = 16;

class BindListPostFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = OpenContext(VerbsOptions{});
    if (!c.ok()) GTEST_SKIP() << "no verbs device here: " << c.status();
    c_ = std::move(*c);
    ibv_pd* pd = ibv_alloc_pd(c_->ctx());
    ASSERT_NE(pd, nullptr);
    auto p = c_->AddPd(pd);
    ASSERT_TRUE(p.ok()) << p.status();
    pd_ = *p;
    mem_ = mmap(nullptr, kWindows * kPage, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    ASSERT_NE(mem_, MAP_FAILED);
    mr_ = ibv_reg_mr(pd, mem_, kWindows * kPage,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
    ASSERT_NE(mr_, nullptr);
    MrRecord r;
    r.mr = mr_;
    r.pd = pd_;
    r.addr = r.iova = reinterpret_cast<uint64_t>(mem_);
    r.length = kWindows * kPage;
    r.access = kRemoteRead;
    ASSERT_TRUE(c_->AddMr(r).ok());
    for (int i = 0; i < kWindows; ++i) {
      ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
      ASSERT_NE(mw, nullptr) << "ibv_alloc_mw " << i;
      ASSERT_TRUE(c_->AddMw(mw, pd_).ok());
      mws_.push_back(mw);
    }
    cq_ = ibv_create_cq(c_->ctx(), 4 * kWindows, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    // Room for 2 asked: the provider may round it up; ibv_query_qp says what it holds.
    auto qp = CreateRcQp(pd, cq_, 2);
    ASSERT_TRUE(qp.ok()) << qp.status();
    qp_ = *qp;
    ASSERT_TRUE(ConnectToSelf(*c_, qp_, 0, RandomPsn()).ok());
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(qp_, &attr, IBV_QP_CAP, &init), 0);
    room_ = static_cast<int>(attr.cap.max_send_wr);
    ASSERT_GT(room_, 0);
    ASSERT_LT(room_, kWindows) << "a send queue this small was not granted";
  }
  void TearDown() override {
    // The context releases the windows, the region and the PD when it closes.
    if (c_ != nullptr) DestroyQpAndCq(qp_, cq_, "test queue pair");
    if (mem_ != nullptr && mem_ != MAP_FAILED) munmap(mem_, kWindows * kPage);
  }

  // A map of window i over page i, with remote read; the window must be free.
  BindRequest MapOf(int i) const {
    BindRequest r;
    r.key = mws_[i]->rkey;
    r.entry = KlmEntry{mr_->lkey, reinterpret_cast<uint64_t>(mem_) + i * kPage, kPage};
    r.new_variant = static_cast<uint8_t>(KeyVariant(NextVariant(r.key)));
    r.access = kRemoteRead;
    r.require_free = true;
    return r;
  }
  // Waits (bounded) for n completions; how many were successes.
  int AwaitSuccesses(int n) {
    int got = 0, ok = 0;
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (got < n && absl::Now() < give_up) {
      ibv_wc wc[8];
      const int k = ibv_poll_cq(cq_, 8, wc);
      EXPECT_GE(k, 0);
      for (int i = 0; i < k; ++i) ok += wc[i].status == IBV_WC_SUCCESS;
      got += k > 0 ? k : 0;
    }
    EXPECT_EQ(got, n) << "completions within 20 s";
    return ok;
  }

  std::unique_ptr<Context> c_;
  Pd pd_;
  void* mem_ = nullptr;
  ibv_mr* mr_ = nullptr;  // owned by the context once added
  std::vector<ibv_mw*> mws_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  int room_ = 0;  // work requests the send queue holds
};

// A list longer than the send queue: the provider posts what fits and refuses the rest. The
// posted binds complete and hold; each refused one (and every item after the list, unplanned)
// fails with the post's errno, and its window is as it was: free, its old key, bindable again.
TEST_F(BindListPostFailureTest, ARefusedTailLeavesItsWindowsAsTheyWere) {
  const int n = room_ + 3;
  ASSERT_LE(n, kWindows);
  std::vector<BindRequest> requests;
  std::vector<Key> before;
  for (int i = 0; i < n; ++i) {
    requests.push_back(MapOf(i));
    before.push_back(mws_[i]->rkey);
  }
  // After the list, window 0 again: the list goes first, and its failure refuses this too.
  BindRequest again = MapOf(0);
  again.invalidate = true;
  requests.push_back(again);
  std::vector<BindPlan> plans(requests.size());
  std::vector<absl::Status> statuses(requests.size());
  std::vector<Context::BindItem> items;
  for (size_t i = 0; i < requests.size(); ++i) {
    items.push_back({&requests[i], i + 1, true, &plans[i], &statuses[i]});
  }
  const uint64_t errors = c_->stats().bind_errors.value();
  const uint64_t posted = c_->stats().binds_posted.value();

  c_->PostBindList(qp_, pd_, items);
  int ok = 0;
  while (ok < n && statuses[ok].ok()) ++ok;
  ASSERT_EQ(ok, room_) << "the provider took more or fewer than its queue holds";
  for (size_t i = ok; i < statuses.size(); ++i) {
    ASSERT_FALSE(statuses[i].ok()) << "item " << i << " after the refusal";
    EXPECT_TRUE(absl::StrContains(statuses[i].message(), "ibv_post_send")) << statuses[i];
  }
  EXPECT_EQ(c_->stats().bind_errors.value() - errors, items.size() - ok);
  EXPECT_EQ(c_->stats().binds_posted.value() - posted, static_cast<uint64_t>(ok));

  // The refused ones: as before the call, on the device's side (mw->rkey) and in the table.
  for (int i = ok; i < n; ++i) {
    EXPECT_EQ(mws_[i]->rkey, before[i]) << i;
    auto info = c_->QueryKey(before[i]);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->key, before[i]) << i;
    EXPECT_TRUE(info->free) << i;
  }
  // The posted ones: live under their next variant, and the device did them all.
  for (int i = 0; i < ok; ++i) {
    EXPECT_EQ(mws_[i]->rkey, NextVariant(before[i])) << i;
    auto info = c_->QueryKey(before[i]);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->key, NextVariant(before[i])) << i;
    EXPECT_FALSE(info->free) << "the invalidate after the list was refused: " << i;
  }
  EXPECT_EQ(AwaitSuccesses(ok), ok);
  for (int i = 0; i < ok; ++i) c_->BindDone(plans[i]);

  // Now that the queue is empty, the refused maps go as they were first asked.
  std::vector<BindRequest> retry;
  for (int i = ok; i < n && static_cast<int>(retry.size()) < room_; ++i) retry.push_back(MapOf(i));
  std::vector<BindPlan> replans(retry.size());
  std::vector<absl::Status> restatuses(retry.size());
  std::vector<Context::BindItem> retried;
  for (size_t i = 0; i < retry.size(); ++i) {
    retried.push_back({&retry[i], 100 + i, true, &replans[i], &restatuses[i]});
  }
  c_->PostBindList(qp_, pd_, retried);
  for (size_t i = 0; i < retry.size(); ++i) {
    ASSERT_TRUE(restatuses[i].ok()) << restatuses[i];
    EXPECT_EQ(replans[i].after.key, NextVariant(before[ok + i]));
  }
  EXPECT_EQ(AwaitSuccesses(static_cast<int>(retry.size())), static_cast<int>(retry.size()));
  for (const BindPlan& plan : replans) c_->BindDone(plan);
}

}  // namespace
}  // namespace regcache::hca::verbs
