// The emulator's strictness, driven through rdma-core's entry points the way a caller would,
// each rule tripped by a deliberately wrong WQE, doorbell, mailbox or verb (docs/mlx5emu.md,
// Strictness). WQEs are written into the send queue with hca::UmrPoster, as the backend does.
#include "hca/mlx5emu/mlx5emu.h"

#include <endian.h>
#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "hca/prm_convert.h"
#include "hca/umr_poster.h"
#include "umr/cqe.h"
#include "umr/mailbox.h"
#include "umr/prm.h"

namespace regcache::hca::mlx5emu {
namespace {

class EmuTest : public ::testing::Test {
 protected:
  void TearDown() override {
    poster_.reset();
    if (qp_ != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp_), 0);
    }
    if (cq_ != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq_), 0);
    }
    if (mr_ != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(mr_), 0);
    }
    if (key_ != nullptr) {
      EXPECT_EQ(mlx5dv_devx_obj_destroy(key_), 0);
    }
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (expect_clean_) {
      EXPECT_TRUE(Violations().empty());
    }
  }

  // Opens device `index` with DevX (or without), with emulator `options`.
  void Open(const char* options = "", int index = 0, bool devx = true) {
    ASSERT_TRUE(Configure(options).ok());
    ClearViolations();
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_EQ(n, 2);
    mlx5dv_context_attr a{};
    a.flags = devx ? MLX5DV_CONTEXT_FLAGS_DEVX : 0;
    ctx_ = mlx5dv_open_device(list[index], &a);
    ibv_free_device_list(list);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    pdn_ = PdnOf(pd_);
  }
  // The PD number the device knows `pd` by (mlx5dv_init_obj), 0 on failure.
  static uint32_t PdnOf(ibv_pd* pd) {
    mlx5dv_pd dv{};
    mlx5dv_obj obj{};
    obj.pd.in = pd;
    obj.pd.out = &dv;
    EXPECT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD), 0);
    return dv.pdn;
  }
  // The CREATE_MKEY input of a free KLM pool key of PD `pdn` with `capacity` entries.
  static std::vector<uint8_t> PoolMailbox(uint32_t pdn, uint32_t capacity = 16) {
    return PoolKeyMailbox(IndirectKeyParams(Pd{pdn}, capacity, 1u << 20, {}).value()).value();
  }
  // A free pool key of PD `pdn` made by DevX CREATE_MKEY; its index in *index.
  mlx5dv_devx_obj* NewPoolKey(uint32_t pdn, uint32_t* index) {
    const std::vector<uint8_t> in = PoolMailbox(pdn);
    umr::Mailbox16 out{};
    mlx5dv_devx_obj* key =
        mlx5dv_devx_obj_create(ctx_, in.data(), in.size(), out.data(), out.size());
    EXPECT_NE(key, nullptr);
    if (key != nullptr) *index = umr::DecodeCreateMkeyOut(out).value().mkey_index;
    return key;
  }
  // A raw-WQE queue pair of `depth` WQEs over a CQ of `cqe` entries, left in RESET.
  void MakeQp(uint32_t depth = 16, int cqe = 16) {
    cq_ = ibv_create_cq(ctx_, cqe, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = a.recv_cq = cq_;
    a.pd = pd_;
    a.cap.max_send_wr = depth;
    a.cap.max_send_sge = 1;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
    mlx5dv_qp_init_attr dv{};
    dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    dv.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
    qp_ = mlx5dv_create_qp(ctx_, &a, &dv);
    ASSERT_NE(qp_, nullptr);
    mlx5dv_obj obj{};
    obj.qp.in = qp_;
    obj.qp.out = &dv_qp_;
    obj.cq.in = cq_;
    obj.cq.out = &dv_cq_;
    ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ), 0);
  }
  // One step of the queue pair's state machine with the attributes IB requires for it
  // (RESET -> INIT -> RTR -> RTS; RTR connects it to itself).
  void MoveTo(ibv_qp_state state) {
    ibv_qp_attr a{};
    a.qp_state = state;
    int mask = IBV_QP_STATE;
    if (state == IBV_QPS_INIT) {
      a.port_num = 1;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    } else if (state == IBV_QPS_RTR) {
      a.dest_qp_num = qp_->qp_num;
      a.path_mtu = IBV_MTU_1024;
      a.ah_attr.is_global = 1;  // RoCE: a GRH, to this device's own GID
      a.ah_attr.port_num = 1;
      ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &a.ah_attr.grh.dgid), 0);
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    } else if (state == IBV_QPS_RTS) {
      mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
              IBV_QP_MAX_QP_RD_ATOMIC;
    }
    ASSERT_EQ(ibv_modify_qp(qp_, &a, mask), 0);
  }
  void ToRts() {
    MoveTo(IBV_QPS_INIT);
    MoveTo(IBV_QPS_RTR);
    MoveTo(IBV_QPS_RTS);
  }
  // A pool key and a region to map it over; a poster over the send queue with `o` (sqn and
  // fence of this queue unless set).
  void MakePoster(UmrPosterOptions o = {}, bool own_sqn = true) {
    buf_.assign(1 << 16, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
    ASSERT_NE(mr_, nullptr);
    key_ = NewPoolKey(pdn_, &key_index_);
    ASSERT_NE(key_, nullptr);
    if (own_sqn) o.sqn = qp_->qp_num;
    poster_ = UmrPoster::Create(absl::MakeSpan(static_cast<uint8_t*>(dv_qp_.sq.buf),
                                               size_t{dv_qp_.sq.wqe_cnt} * dv_qp_.sq.stride),
                                std::move(o))
                  .value();
  }
  absl::Status PostMap(uint32_t entries = 1) {
    klm_.assign(entries, KlmEntry{mr_->lkey, reinterpret_cast<uint64_t>(buf_.data()), 64});
    MapRequest r;
    r.key = MakeKey(key_index_, 0);
    r.new_variant = 1;
    r.klm = klm_;
    r.length = 64 * entries;
    return poster_->PostMap(next_id_++, r);
  }
  void Ring(uint32_t producer) {
    std::atomic_thread_fence(std::memory_order_release);
    dv_qp_.dbrec[1] = htobe32(producer & 0xffff);
  }
  // The CQE at `index` once the device wrote it (owner bit of its pass), within `wait`.
  std::optional<umr::Cqe> Cqe(uint32_t index, absl::Duration wait = absl::Seconds(5)) {
    const absl::Time deadline = absl::Now() + wait;
    const uint8_t* slot = static_cast<uint8_t*>(dv_cq_.buf) + (index & (dv_cq_.cqe_cnt - 1)) * 64;
    do {
      const uint8_t op_own = *static_cast<const volatile uint8_t*>(slot + 63);
      if ((op_own >> 4) != umr::kCqeOpInvalid &&
          ((op_own & 1) != 0) == ((index & dv_cq_.cqe_cnt) != 0)) {
        std::atomic_thread_fence(std::memory_order_acquire);
        umr::CqeBytes b;
        std::memcpy(b.data(), slot, b.size());
        return umr::DecodeCqe(b).value();
      }
      absl::SleepFor(absl::Microseconds(100));
    } while (absl::Now() < deadline);
    return std::nullopt;
  }
  void ExpectError(uint8_t syndrome) {
    std::optional<umr::Cqe> c = Cqe(0);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(c->is_error());
    EXPECT_EQ(c->syndrome, syndrome);
  }

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  uint32_t pdn_ = 0;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  mlx5dv_qp dv_qp_{};
  mlx5dv_cq dv_cq_{};
  ibv_mr* mr_ = nullptr;
  mlx5dv_devx_obj* key_ = nullptr;
  uint32_t key_index_ = 0;
  std::vector<uint8_t> buf_;
  std::vector<KlmEntry> klm_;
  std::unique_ptr<UmrPoster> poster_;
  uint64_t next_id_ = 1;
  bool expect_clean_ = true;
};

TEST_F(EmuTest, AWqeWrittenAfterTheDoorbellDoesNotRunUntilTheNext) {
  Open();
  MakeQp();
  ToRts();
  MakePoster();
  ASSERT_TRUE(PostMap().ok());
  const uint32_t first = poster_->producer();
  ASSERT_TRUE(poster_->PostNop(99).ok());
  Ring(first);
  ASSERT_TRUE(Cqe(0).has_value());
  EXPECT_FALSE(Cqe(1, absl::Milliseconds(50)).has_value()) << "a WQE past the doorbell ran";
  Ring(poster_->producer());
  std::optional<umr::Cqe> nop = Cqe(1);
  ASSERT_TRUE(nop.has_value());
  EXPECT_EQ(nop->wqe_opcode, umr::kOpcodeNop);
}

TEST_F(EmuTest, WqesWaitWhileTheQueuePairIsNotYetReadyToSend) {
  Open();
  MakeQp();
  MoveTo(IBV_QPS_INIT);
  MakePoster();
  ASSERT_TRUE(PostMap().ok());
  Ring(poster_->producer());
  EXPECT_FALSE(Cqe(0, absl::Milliseconds(50)).has_value()) << "a WQE ran in INIT";
  MoveTo(IBV_QPS_RTR);
  EXPECT_FALSE(Cqe(0, absl::Milliseconds(50)).has_value()) << "a WQE ran in RTR";
  MoveTo(IBV_QPS_RTS);
  std::optional<umr::Cqe> c = Cqe(0);
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(c->is_error());
}

TEST_F(EmuTest, AUmrOnAKeyOfAnotherPdIsRefused) {
  Open();
  MakeQp();
  ToRts();
  // The key is made in a second PD; the queue pair is in the first.
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  MakePoster();
  mlx5dv_devx_obj* foreign = NewPoolKey(PdnOf(other), &key_index_);
  ASSERT_NE(foreign, nullptr);
  ASSERT_TRUE(PostMap().ok());
  Ring(poster_->producer());
  ExpectError(umr::kCqeSyndMwBind);
  EXPECT_EQ(mlx5dv_devx_obj_destroy(foreign), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

TEST_F(EmuTest, AControlSegmentNamingAnotherQueuePairFailsAndFlushesTheRest) {
  Open();
  MakeQp();
  ToRts();
  UmrPosterOptions o;
  o.sqn = 0x777;
  MakePoster(o, /*own_sqn=*/false);
  ASSERT_TRUE(PostMap().ok());
  ASSERT_TRUE(poster_->PostNop(99).ok());
  Ring(poster_->producer());
  ExpectError(umr::kCqeSyndLocalQpOp);
  std::optional<umr::Cqe> flushed = Cqe(1);
  ASSERT_TRUE(flushed.has_value());
  EXPECT_EQ(flushed->syndrome, umr::kCqeSyndWrFlush);
}

TEST_F(EmuTest, AUmrWithAWeakerFenceThanTheDeviceAsksFails) {
  Open("umr_fence=0");  // strong ordering
  MakeQp();
  ToRts();
  UmrPosterOptions o;
  o.umr_fence = umr::FenceMode::kInitiatorSmall;
  MakePoster(o);
  ASSERT_TRUE(PostMap().ok());
  Ring(poster_->producer());
  ExpectError(umr::kCqeSyndLocalQpOp);
}

TEST_F(EmuTest, AWqeLargerThanMaxWqeSzSqFails) {
  Open("max_wqe_sz_sq=256");
  MakeQp();
  ToRts();
  MakePoster();
  ASSERT_TRUE(PostMap(16).ok());  // 128 bytes of segments and 256 of entries
  Ring(poster_->producer());
  ExpectError(umr::kCqeSyndLocalQpOp);
}

TEST_F(EmuTest, ADoorbellRungInResetIsAViolation) {
  Open();
  MakeQp();
  Ring(1);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_EQ(Violations().size(), 1u);
  EXPECT_NE(Violations()[0].find("RESET"), std::string::npos);
  expect_clean_ = false;
}

TEST_F(EmuTest, ACqTooSmallForItsWorkOverrunsAndPollingItByVerbsIsAViolation) {
  Open();
  MakeQp(/*depth=*/8, /*cqe=*/1);  // two CQEs for up to sixteen WQEs
  ToRts();
  MakePoster();
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(poster_->PostNop(i).ok());
  Ring(poster_->producer());
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_FALSE(Violations().empty());
  EXPECT_NE(Violations()[0].find("overrun"), std::string::npos);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(cq_, 1, &wc), -1);  // the CQ belongs to its DV owner
  expect_clean_ = false;
}

TEST_F(EmuTest, MailboxesAreCheckedAsFirmwareAndTheKernelCheckThem) {
  Open();
  MakeQp();
  MakePoster();
  // QUERY_MKEY with an outbox too small for the list: BAD_OUTPUT_LEN.
  const umr::Mailbox16 q = umr::EncodeQueryMkeyIn({.mkey_index = key_index_}).value();
  std::vector<uint8_t> small(64);
  EXPECT_EQ(mlx5dv_devx_obj_query(key_, q.data(), q.size(), small.data(), small.size()), EREMOTEIO);
  EXPECT_EQ(umr::DecodeCmdStatusOut(small).value().status, 0x51);
  // A query of another index through this object, an object command through general_cmd.
  const umr::Mailbox16 other = umr::EncodeQueryMkeyIn({.mkey_index = key_index_ + 1}).value();
  std::vector<uint8_t> out(4096);
  EXPECT_EQ(mlx5dv_devx_obj_query(key_, other.data(), other.size(), out.data(), out.size()),
            EINVAL);
  const std::vector<uint8_t> create = PoolMailbox(pdn_);
  EXPECT_EQ(mlx5dv_devx_general_cmd(ctx_, create.data(), create.size(), out.data(), 16), EINVAL);
  // CREATE_MKEY of a PD the device never allocated, and of a list past log_max_klm_list_size.
  const std::vector<uint8_t> no_pd = PoolMailbox(pdn_ + 99);
  EXPECT_EQ(mlx5dv_devx_obj_create(ctx_, no_pd.data(), no_pd.size(), out.data(), 16), nullptr);
  EXPECT_EQ(errno, EREMOTEIO);
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, umr::kCmdStatusBadParam);
  const std::vector<uint8_t> long_list = PoolMailbox(pdn_, 1u << 17);
  EXPECT_EQ(mlx5dv_devx_obj_create(ctx_, long_list.data(), long_list.size(), out.data(), 16),
            nullptr);
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, umr::kCmdStatusLimit);
}

// A device's fatal error reaches every open context through its async event file, as the
// kernel's does: nothing before it (EAGAIN on a non-blocking fd), then IBV_EVENT_DEVICE_FATAL,
// once; every later verb fails with EIO.
TEST_F(EmuTest, AFatalErrorIsAnAsyncEventOfEveryOpenContext) {
  Open("", 1);
  const int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  ibv_async_event event{};
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(ctx_, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
  KillDevice("mlx5_1");
  pollfd p{ctx_->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  ASSERT_EQ(ibv_get_async_event(ctx_, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL);
  ibv_ack_async_event(&event);
  EXPECT_EQ(ibv_get_async_event(ctx_, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(ibv_alloc_pd(ctx_), nullptr);
  EXPECT_EQ(errno, EIO);
}

TEST_F(EmuTest, DevxNeedsAContextOpenedForIt) {
  Open("", 1, /*devx=*/false);
  const umr::Mailbox16 in = umr::EncodeQueryHcaCapIn({}).value();
  std::vector<uint8_t> out(umr::kQueryHcaCapOutBytes);
  EXPECT_EQ(mlx5dv_devx_general_cmd(ctx_, in.data(), in.size(), out.data(), out.size()),
            EOPNOTSUPP);
}

TEST_F(EmuTest, VerbsRefuseWhatTheKernelRefuses) {
  Open();
  std::vector<uint8_t> buf(4096);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf.data(), buf.size(), static_cast<int>(IBV_ACCESS_REMOTE_WRITE)),
            nullptr);
  EXPECT_EQ(errno, EINVAL);  // remote write needs local write
  MakeQp();
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);  // a queue pair is in it
  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);  // a queue pair uses it
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(qp_, &a, IBV_QP_STATE), EINVAL);  // RESET -> RTS
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  EXPECT_EQ(ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);  // attributes missing
  ibv_mr* plain = ibv_reg_mr(pd_, buf.data(), buf.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(plain, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 4096, plain->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1),
            ENOENT);  // not an on-demand region
  EXPECT_EQ(ibv_dereg_mr(plain), 0);
}

// ibv_import_device / ibv_import_pd / ibv_import_mr: a duplicate of a context's command fd
// imports that context's uverbs file, whose handles and nothing else it then reaches; what is
// left in the file goes when its last context closes, whichever closes last.
TEST_F(EmuTest, ImportReachesOnlyTheFileOfTheCommandFdAndTheLastCloseTakesWhatIsLeft) {
  Open();
  ibv_context* other = ibv_open_device(ctx_->device);
  ASSERT_NE(other, nullptr);
  ibv_pd* other_pd = ibv_alloc_pd(other);
  ASSERT_NE(other_pd, nullptr);
  const Census before = CensusOf("mlx5_0");
  EXPECT_EQ(before.files, 2);

  ibv_context* imported = ibv_import_device(fcntl(ctx_->cmd_fd, F_DUPFD_CLOEXEC, 0));
  ASSERT_NE(imported, nullptr) << "errno " << errno;
  EXPECT_EQ(CensusOf("mlx5_0").files, 2);  // the same file, one more context
  errno = 0;
  EXPECT_EQ(ibv_import_pd(imported, other_pd->handle), nullptr);  // another file's PD
  EXPECT_EQ(errno, EINVAL);
  ibv_pd* pd = ibv_import_pd(imported, pd_->handle);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(PdnOf(pd), pdn_);
  EXPECT_EQ(ibv_dealloc_pd(pd), EINVAL);  // an import's handle is unimported, not destroyed
  // A region registered through the import is the file's: the first context imports it.
  std::vector<uint8_t> buf(2 * 4096);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(mr, nullptr);
  ibv_mr* seen = ibv_import_mr(pd_, mr->handle);
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(seen->lkey, mr->lkey);
  EXPECT_EQ(seen->length, mr->length);
  EXPECT_EQ(ibv_dereg_mr(seen), EINVAL);
  ibv_unimport_mr(seen);
  ibv_pd* other_import = ibv_import_pd(other, pd_->handle);
  EXPECT_EQ(other_import, nullptr);  // not through another file's context
  errno = 0;
  EXPECT_EQ(ibv_import_mr(other_pd, mr->handle), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // An object of one file cannot be used through another's context.
  ibv_cq* cq = ibv_create_cq(other, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_send_sge = 1;
  EXPECT_EQ(ibv_create_qp(pd, &qa), nullptr);
  ASSERT_EQ(ibv_destroy_cq(cq), 0);
  // The import leaves a queue pair and the region behind, and closes.
  ibv_cq* own_cq = ibv_create_cq(imported, 4, nullptr, nullptr, 0);
  ASSERT_NE(own_cq, nullptr);
  qa.send_cq = qa.recv_cq = own_cq;
  ASSERT_NE(ibv_create_qp(pd, &qa), nullptr);
  ibv_unimport_pd(pd);
  EXPECT_EQ(ibv_close_device(imported), 0);
  Census held = CensusOf("mlx5_0");
  EXPECT_EQ(held.qps, 1);
  EXPECT_EQ(held.mrs, 1);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);  // they are in the first context's PD
  // The file's last context closes: everything in it goes, the PD included.
  EXPECT_EQ(ibv_close_device(ctx_), 0);
  ctx_ = nullptr;
  pd_ = nullptr;
  held = CensusOf("mlx5_0");
  EXPECT_EQ(held.files, 1);
  EXPECT_EQ(held.qps, 0);
  EXPECT_EQ(held.mrs, 0);
  EXPECT_EQ(held.cqs, 0);
  EXPECT_EQ(held.pds, 1);  // the other file's
  EXPECT_EQ(ibv_dealloc_pd(other_pd), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
  // Not a command fd: EINVAL.
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  errno = 0;
  EXPECT_EQ(ibv_import_device(null_fd), nullptr);
  EXPECT_EQ(errno, EINVAL);
  close(null_fd);
}

}  // namespace
}  // namespace regcache::hca::mlx5emu
