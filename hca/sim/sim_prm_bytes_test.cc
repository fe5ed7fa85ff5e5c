// The sim speaks PRM bytes: its CQ ring, its command mailboxes and its page-fault event ring are
// read and written here with umr/'s decoders and encoders directly, bypassing hca::Device where
// the point is the bytes.
#include <poll.h>

#include <cstring>
#include <thread>
#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/internal/sim_queue.h"
#include "hca/sim/sim_device.h"
#include "umr/cqe.h"
#include "umr/mailbox.h"
#include "umr/odp_event.h"
#include "umr/prm.h"

using ::regcache::base::StatusIs;

namespace regcache::hca::sim {
namespace {

constexpr uint64_t kPage = 4096;

class SimPrmBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = NewSimDevice(SimOptions{}).value();
    pd_ = dev_->AllocPd().value();
    q_ = dev_->CreateQueue(pd_, QueueOptions{64}).value();
    mem_.assign(9 * kPage, 0);
    base_ = (reinterpret_cast<uint64_t>(mem_.data()) + kPage - 1) & ~(kPage - 1);
    backing_ = dev_->RegisterBacking(pd_, base_, 8 * kPage, kAllAccess, {}).value();
  }

  // Posts, rings, flushes and polls `n` completions.
  void RunAndPoll(size_t n) {
    ASSERT_TRUE(q_->Doorbell().ok());
    ASSERT_TRUE(q_->Flush(absl::Seconds(5)).ok());
    std::vector<Completion> c(n + 1);
    ASSERT_EQ(q_->Poll(absl::MakeSpan(c)), n);
  }

  // An on-demand backing over the same memory, and a peer.
  Backing OdpBacking() {
    BackingOptions bo;
    bo.on_demand = true;
    return dev_->RegisterBacking(pd_, base_, 8 * kPage, kAllAccess, bo).value();
  }
  void WaitForFault() {
    struct pollfd pfd = {dev_->FaultEventFd(), POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  }
  umr::PageFaultEvent EqeAt(size_t slot) {
    const std::vector<uint8_t> ring = dev_->EventRingForTest();
    absl::StatusOr<umr::PageFaultEvent> e =
        umr::DecodePageFaultEqe(absl::MakeConstSpan(ring).subspan(slot * 64, 64));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.value_or(umr::PageFaultEvent{});
  }
  // Executes `in` as raw PAGE_FAULT_RESUME bytes; returns the outbox status byte.
  absl::Status RawResume(const umr::PageFaultResumeIn& in, uint8_t* outbox_status) {
    std::vector<uint8_t> out;
    absl::Status s = dev_->ExecuteCommandForTest(umr::EncodePageFaultResumeIn(in).value(), &out);
    *outbox_status = umr::DecodeCmdStatusOut(out).value().status;
    return s;
  }

  umr::Cqe CqeAt(const std::vector<uint8_t>& ring, size_t slot) {
    absl::StatusOr<umr::Cqe> c = umr::DecodeCqe(absl::MakeConstSpan(ring).subspan(slot * 64, 64));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.value_or(umr::Cqe{});
  }

  std::unique_ptr<SimDevice> dev_;
  Pd pd_;
  std::unique_ptr<Queue> q_;
  std::vector<uint8_t> mem_;
  uint64_t base_ = 0;
  Backing backing_;
};

TEST_F(SimPrmBytesTest, CqRingHoldsGoodAndErrorCqes) {
  auto* sq = dynamic_cast<SimQueue*>(q_.get());
  ASSERT_NE(sq, nullptr);
  // Before anything completes every CQE is invalid (opcode 0xf) with owner 0.
  std::vector<uint8_t> ring = sq->CqRingForTest();
  ASSERT_EQ(ring.size(), 64u * 64);
  EXPECT_EQ(CqeAt(ring, 0).opcode, 0xf);
  EXPECT_FALSE(CqeAt(ring, 0).owner);

  // WQE 0: a good map (3 WQEBBs); WQE 3: the same map on the now live key with require_free,
  // refused with MW_BIND.
  const Key k = dev_->CreateIndirectKeys(pd_, 4, 1, {}).value()[0];
  const std::vector<KlmEntry> e = {{backing_.key, base_, 64}};
  MapRequest r;
  r.key = k;
  r.new_variant = 1;
  r.klm = e;
  r.length = 64;
  ASSERT_TRUE(q_->PostMap(1, r).ok());
  ASSERT_TRUE(q_->PostMap(2, r).ok());
  RunAndPoll(2);

  ring = sq->CqRingForTest();
  const umr::Cqe good = CqeAt(ring, 0);
  EXPECT_EQ(good.opcode, umr::kCqeOpReq);
  EXPECT_FALSE(good.is_error());
  EXPECT_FALSE(good.owner);
  EXPECT_EQ(good.wqe_counter, 0);
  EXPECT_EQ(good.wqe_opcode, umr::kOpcodeUmr);
  EXPECT_NE(good.qpn, 0u);  // the queue's SQ number
  const umr::Cqe bad = CqeAt(ring, 1);
  EXPECT_EQ(bad.opcode, umr::kCqeOpReqErr);
  EXPECT_EQ(bad.syndrome, umr::kCqeSyndMwBind);
  EXPECT_EQ(bad.vendor_err_synd, 0);
  EXPECT_EQ(bad.wqe_counter, 3);
  EXPECT_EQ(bad.qpn, good.qpn);
  // The syndrome sits at byte 55 of the raw error CQE (mlx5_err_cqe).
  EXPECT_EQ(ring[64 + umr::kCqeSyndromeByte], umr::kCqeSyndMwBind);
  EXPECT_EQ(CqeAt(ring, 2).opcode, 0xf);  // not written yet

  // Past one pass over the 64-entry CQ the owner bit flips: slot 0 is rewritten with owner 1.
  for (int i = 0; i < 63; ++i) {
    ASSERT_TRUE(q_->PostInvalidate(10 + i, k, {}).ok());
    RunAndPoll(1);
  }
  ring = sq->CqRingForTest();
  EXPECT_TRUE(CqeAt(ring, 0).owner);
  EXPECT_EQ(CqeAt(ring, 0).opcode, umr::kCqeOpReq);
  EXPECT_FALSE(CqeAt(ring, 1).owner);  // CQE 65 not written yet: still the first pass's
  EXPECT_EQ(CqeAt(ring, 1).opcode, umr::kCqeOpReqErr);
}

TEST_F(SimPrmBytesTest, ExecutesDevxMailboxes) {
  // CREATE_MKEY exactly as the DevX backend builds a pool key.
  umr::FreeMkeyParams p;
  p.mode = umr::AccessMode::kKlm;
  p.capacity_entries = 6;  // rounded up to 8 entries (two 64-byte blocks)
  p.pd = pd_.pdn;
  p.variant = 0x2a;
  p.en_rinval = true;
  const std::vector<uint8_t> create =
      umr::EncodeCreateMkeyIn(umr::BuildCreateFreeMkey(p).value()).value();
  std::vector<uint8_t> out;
  ASSERT_TRUE(dev_->ExecuteCommandForTest(create, &out).ok());
  const umr::CreateMkeyOut created = umr::DecodeCreateMkeyOut(out).value();
  EXPECT_EQ(created.status, umr::CmdStatus{});
  const Key key = MakeKey(created.mkey_index, 0x2a);

  // The device's decoded view and the raw QUERY_MKEY output agree with the request.
  const KeyInfo info = dev_->QueryKey(key).value();
  EXPECT_EQ(info.key, key);
  EXPECT_TRUE(info.free && info.umr_en && info.remote_invalidate);
  EXPECT_EQ(info.capacity_entries, 8u);
  umr::QueryMkeyIn q;
  q.mkey_index = created.mkey_index;
  ASSERT_TRUE(dev_->ExecuteCommandForTest(umr::EncodeQueryMkeyIn(q).value(), &out).ok());
  const umr::QueryMkeyOut queried = umr::DecodeQueryMkeyOut(out).value();
  umr::FreeMkeyParams want = p;
  want.capacity_entries = 8;
  want.access.local_read = true;  // implied on every key
  EXPECT_EQ(umr::DecodeCreateFreeMkey(umr::CreateMkeyIn{.mkc = queried.mkc}).value(), want);
  EXPECT_EQ(queried.translation.size(), 8u * 16);

  // DESTROY_MKEY; a second one fails in the outbox (BAD_RESOURCE) and as kNotFound.
  const umr::Mailbox16 destroy =
      umr::EncodeDestroyMkeyIn(umr::DestroyMkeyIn{0, 0, created.mkey_index}).value();
  ASSERT_TRUE(dev_->ExecuteCommandForTest(destroy, &out).ok());
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, 0);
  EXPECT_THAT(dev_->ExecuteCommandForTest(destroy, &out), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, 0x05);
  EXPECT_NE(umr::DecodeCmdStatusOut(out).value().syndrome, 0u);

  // An opcode the sim does not model, and a truncated mailbox: BAD_PARAM.
  std::vector<uint8_t> cap(16, 0);
  cap[0] = 0x01;  // QUERY_HCA_CAP 0x100
  EXPECT_THAT(dev_->ExecuteCommandForTest(cap, &out), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, 0x03);
  EXPECT_EQ(dev_->ExecuteCommandForTest(absl::MakeConstSpan(create).subspan(0, 100), &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, 0x03);
}

TEST_F(SimPrmBytesTest, PeerWriteFaultIsAnRdmaEqe) {
  const Backing odp = OdpBacking();
  auto peer = dev_->CreatePeer(pd_).value();
  const std::vector<uint8_t> data(100, 0x5c);
  absl::Status st;
  std::thread writer([&] { st = peer->Write(odp.key, base_ + 3 * kPage + 10, data); });
  WaitForFault();
  // The raw EQE: type 0x0c, RDMA-responder subtype, r_key / rdma_va / length / WRITE flag.
  const std::vector<uint8_t> ring = dev_->EventRingForTest();
  EXPECT_EQ(ring[1], umr::kEventTypePageFault);
  EXPECT_EQ(ring[63], 0);  // owner bit of the first pass; unwritten entries keep the init 1
  EXPECT_EQ(ring[64 + 63], 1);
  const umr::PageFaultEvent e = EqeAt(0);
  EXPECT_EQ(e.subtype, umr::PageFaultSubtype::kRdma);
  EXPECT_EQ(e.type, umr::kPageFaultRdma | umr::kPageFaultWrite);
  EXPECT_EQ(e.rkey, odp.key);
  EXPECT_EQ(e.rdma_va, base_ + 3 * kPage + 10);
  EXPECT_EQ(e.rdma_op_len, 100u);
  // NextFaultEvent is that EQE decoded; the token is its wq_number.
  const FaultEvent ev = dev_->NextFaultEvent(absl::Seconds(5)).value();
  EXPECT_EQ(ev.token, e.wq_number);
  EXPECT_EQ(ev.key, odp.key);
  EXPECT_EQ(ev.address, e.rdma_va);
  EXPECT_EQ(ev.length, 100u);
  EXPECT_TRUE(ev.write);
  ASSERT_TRUE(dev_->Prefetch(odp.key, base_ + 3 * kPage, kPage, true).ok());
  ASSERT_TRUE(dev_->ResumeFault(ev.token, true).ok());
  writer.join();
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_THAT(dev_->ResumeFault(ev.token, true), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(dev_->stats().faults_resumed_ok.value(), 1u);
}

TEST_F(SimPrmBytesTest, LocalFaultIsAWqeEqeAndRawErrorResumeFailsIt) {
  const Backing odp = OdpBacking();
  auto peer = dev_->CreatePeer(pd_).value();
  std::vector<uint8_t> out(16);
  absl::Status st;
  std::thread reader([&] { st = peer->LocalRead(odp.key, base_ + kPage, absl::MakeSpan(out)); });
  WaitForFault();
  const umr::PageFaultEvent e = EqeAt(0);
  EXPECT_EQ(e.subtype, umr::PageFaultSubtype::kWqe);
  EXPECT_EQ(e.type, umr::kPageFaultRequestor);  // reads local memory: no WRITE
  EXPECT_NE(e.wq_number, 0u);                   // the peer's QP
  EXPECT_EQ(e.rkey, 0u);

  // The servicer's answer, as raw mailbox bytes. A resume naming another QP is refused and
  // leaves the access parked.
  umr::PageFaultResumeIn wrong = umr::ResumeFor(e, /*error=*/true);
  wrong.wq_number ^= 1;
  uint8_t outbox = 0;
  EXPECT_THAT(RawResume(wrong, &outbox), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(outbox, 0x03);
  // error = 1: the parked access fails with LOCAL_PROT and vendor syndrome 0x93.
  EXPECT_TRUE(RawResume(umr::ResumeFor(e, /*error=*/true), &outbox).ok());
  EXPECT_EQ(outbox, 0);
  reader.join();
  ASSERT_TRUE(ErrorOf(st).has_value()) << st;
  EXPECT_EQ(ErrorOf(st)->syndrome, Syndrome::kLocalProt);
  EXPECT_EQ(ErrorOf(st)->vendor_syndrome, kVendorSyndromeOdpFault);
  EXPECT_EQ(dev_->stats().faults_resumed_error.value(), 1u);
  // Nothing is parked on the token any more; its EQE is stale and NextFaultEvent skips it.
  EXPECT_THAT(RawResume(umr::ResumeFor(e, true), &outbox), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(outbox, 0x05);
  EXPECT_EQ(dev_->NextFaultEvent(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(SimPrmBytesTest, LocalWriteFaultDecodesFromTheFaultingWqe) {
  const Backing odp = OdpBacking();
  auto peer = dev_->CreatePeer(pd_).value();
  const std::vector<uint8_t> data(kPage + 8, 0x77);  // spans pages 2 and 3
  absl::Status st;
  std::thread writer([&] { st = peer->LocalWrite(odp.key, base_ + 2 * kPage + 4, data); });
  const FaultEvent ev = dev_->NextFaultEvent(absl::Seconds(5)).value();
  const umr::PageFaultEvent e = EqeAt(0);
  EXPECT_EQ(e.subtype, umr::PageFaultSubtype::kWqe);
  EXPECT_EQ(e.type, umr::kPageFaultRequestor | umr::kPageFaultWrite);
  EXPECT_EQ(ev.token, e.token);
  // Key, address and length come from the data segment of the WQE at e.wqe_index.
  EXPECT_EQ(ev.key, odp.key);
  EXPECT_EQ(ev.address, base_ + 2 * kPage + 4);
  EXPECT_EQ(ev.length, kPage + 8);
  EXPECT_TRUE(ev.write);
  ASSERT_TRUE(dev_->Prefetch(odp.key, ev.address, ev.length, true).ok());
  ASSERT_TRUE(dev_->ResumeFault(ev.token, true).ok());
  writer.join();
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(mem_[base_ - reinterpret_cast<uint64_t>(mem_.data()) + 3 * kPage], 0x77);
}

}  // namespace
}  // namespace regcache::hca::sim