// The emulator's fabric (docs/mlx5emu.md, "The fabric"): verbs RC queue pairs on
// two emulated devices reach each other through the fabric's sockets, as two hosts' would, and
// a responder is as strict as a real one: it answers only the queue pair it is connected to, in
// PSN order, with the rights of the key and of its queue pair. Both devices live in this
// process; verbs_peer_e2e_test under the emu tier does the same across processes.
#include <infiniband/verbs.h>

#include <cstring>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "hca/mlx5emu/mlx5emu.h"

namespace regcache::hca::mlx5emu {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

// One host's end: a context on emulated device `index`, a PD, a CQ, an RC queue pair and 64 KiB
// registered with every right.
struct Node {
  explicit Node(int index) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    EXPECT_EQ(n, 2);
    ctx = ibv_open_device(list[index]);
    ibv_free_device_list(list);
    EXPECT_NE(ctx, nullptr);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    EXPECT_NE(cq, nullptr);
    buf.assign(1 << 16, 0);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), kRemoteAll);
    EXPECT_NE(mr, nullptr);
    EXPECT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
    NewQp();
  }
  ~Node() {
    if (qp != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
  }
  void NewQp() {
    if (qp != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_send_sge = 1;
    qp = ibv_create_qp(pd, &a);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    init.port_num = 1;
    init.qp_access_flags =
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    ASSERT_EQ(ibv_modify_qp(qp, &init,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
  }
  // INIT -> RTR -> RTS towards `qpn` at `dgid`, expecting its PSNs `rq_psn` and sending from
  // `sq_psn`.
  void Connect(uint32_t qpn, const ibv_gid& dgid, uint32_t rq_psn, uint32_t sq_psn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.sq_psn = sq_psn;
    r.timeout = 14;
    r.retry_cnt = 7;
    r.rnr_retry = 7;
    r.max_rd_atomic = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &r,
                            IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }
  // Posts one signalled operation from `offset` of the local buffer and waits for its
  // completion (nullopt: none within 10 s).
  std::optional<ibv_wc> Post(ibv_wr_opcode op, uint32_t rkey, uint64_t remote, size_t offset,
                             uint32_t len, uint64_t compare_add = 0, uint64_t swap = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data() + offset), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = ++ids;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = remote;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = compare_add;
      wr.wr.atomic.swap = swap;
    } else {
      wr.wr.rdma.remote_addr = remote;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) return std::nullopt;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    ibv_wc wc{};
    while (absl::Now() < deadline) {
      if (ibv_poll_cq(cq, 1, &wc) == 1) {
        EXPECT_EQ(wc.wr_id, ids);
        return wc;
      }
      absl::SleepFor(absl::Microseconds(50));
    }
    return std::nullopt;
  }
  uint64_t Addr(size_t offset) const { return reinterpret_cast<uint64_t>(buf.data() + offset); }

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  ibv_gid gid{};
  std::vector<uint8_t> buf;
  uint64_t ids = 0;
};

class FabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Configure("").ok());
    ClearViolations();
  }
  void TearDown() override { EXPECT_TRUE(Violations().empty()); }
  // Connects a and b to each other with consistent PSNs.
  static void Link(Node& a, Node& b) {
    a.Connect(b.qp->qp_num, b.gid, 0x100, 0x200);
    b.Connect(a.qp->qp_num, a.gid, 0x200, 0x100);
  }
};

TEST_F(FabricTest, TwoDevicesAreTwoHostsWhoseQueuePairsReachEachOther) {
  Node a(0), b(1);
  ASSERT_NE(std::memcmp(a.gid.raw, b.gid.raw, 16), 0);
  ASSERT_NO_FATAL_FAILURE(Link(a, b));
  std::memcpy(a.buf.data(), "over the fabric", 15);
  auto wc = a.Post(IBV_WR_RDMA_WRITE, b.mr->rkey, b.Addr(4096), 0, 15);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc->status);
  EXPECT_EQ(std::memcmp(b.buf.data() + 4096, "over the fabric", 15), 0);
  // A READ longer than the path MTU (several PSNs), then more work in sequence.
  for (size_t i = 0; i < 5000; ++i) b.buf[8192 + i] = static_cast<uint8_t>(i * 7);
  wc = a.Post(IBV_WR_RDMA_READ, b.mr->rkey, b.Addr(8192), 16384, 5000);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc->status);
  EXPECT_EQ(std::memcmp(a.buf.data() + 16384, b.buf.data() + 8192, 5000), 0);
  uint64_t v = 40;
  std::memcpy(b.buf.data() + 512, &v, 8);
  wc = a.Post(IBV_WR_ATOMIC_FETCH_AND_ADD, b.mr->rkey, b.Addr(512), 64, 8, 2);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  std::memcpy(&v, a.buf.data() + 64, 8);
  EXPECT_EQ(v, 40u);
  wc = a.Post(IBV_WR_ATOMIC_CMP_AND_SWP, b.mr->rkey, b.Addr(512), 64, 8, 42, 7);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  std::memcpy(&v, b.buf.data() + 512, 8);
  EXPECT_EQ(v, 7u);
  // And the other way round.
  std::memcpy(b.buf.data() + 100, "back", 4);
  wc = b.Post(IBV_WR_RDMA_WRITE, a.mr->rkey, a.Addr(30000), 100, 4);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a.buf.data() + 30000, "back", 4), 0);
}

TEST_F(FabricTest, ABadKeyIsARemoteAccessErrorAndTheQueuePairFlushesWhatFollows) {
  Node a(0), b(1);
  ASSERT_NO_FATAL_FAILURE(Link(a, b));
  auto wc = a.Post(IBV_WR_RDMA_WRITE, b.mr->rkey ^ 0xff, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc->status);
  wc = a.Post(IBV_WR_RDMA_WRITE, b.mr->rkey, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc->status);
  // Past the region's end.
  a.NewQp();
  b.NewQp();
  ASSERT_NO_FATAL_FAILURE(Link(a, b));
  wc = a.Post(IBV_WR_RDMA_READ, b.mr->rkey, b.Addr(b.buf.size() - 4), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc->status);
}

TEST_F(FabricTest, AResponderAnswersOnlyTheQueuePairItIsConnectedTo) {
  Node a(0), b(1), c(0);
  ASSERT_NO_FATAL_FAILURE(Link(a, b));
  // c sends to b's queue pair, which is connected to a: nothing answers.
  c.Connect(b.qp->qp_num, b.gid, 0x200, 0x100);
  auto wc = c.Post(IBV_WR_RDMA_WRITE, b.mr->rkey, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc->status);
  // a still reaches b.
  wc = a.Post(IBV_WR_RDMA_WRITE, b.mr->rkey, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc->status);
}

TEST_F(FabricTest, APsnOutOfSequenceIsNeverAnswered) {
  Node a(0), b(1);
  a.Connect(b.qp->qp_num, b.gid, 0x100, 0x300);  // b expects 0x200
  b.Connect(a.qp->qp_num, a.gid, 0x200, 0x100);
  auto wc = a.Post(IBV_WR_RDMA_WRITE, b.mr->rkey, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc->status);
}

TEST_F(FabricTest, AQueuePairThatIsGoneOrAHostThatIsNotThereDoesNotAnswer) {
  Node a(0), b(1);
  ASSERT_NO_FATAL_FAILURE(Link(a, b));
  b.NewQp();  // a's peer queue pair is destroyed
  auto wc = a.Post(IBV_WR_RDMA_WRITE, b.mr->rkey, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc->status);
  // A GID no process answers for.
  Node c(0);
  ibv_gid nowhere = b.gid;
  nowhere.raw[13] ^= 0x80;
  c.Connect(b.qp->qp_num, nowhere, 0, 0);
  wc = c.Post(IBV_WR_RDMA_READ, b.mr->rkey, b.Addr(0), 0, 8);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc->status);
}

TEST_F(FabricTest, RoceNeedsAGrhToConnect) {
  Node a(0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = a.qp->qp_num;
  attr.ah_attr.port_num = 1;  // is_global = 0
  EXPECT_EQ(ibv_modify_qp(a.qp, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            EINVAL);
}

}  // namespace
}  // namespace regcache::hca::mlx5emu
