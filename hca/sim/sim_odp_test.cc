// ODP in the sim: absent MTT entries fault, the access parks, the test plays fault servicer.
#include <poll.h>

#include <thread>
#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"

using ::regcache::base::StatusIs;

namespace regcache::hca::sim {
namespace {

constexpr uint64_t kPage = 4096;

class SimOdpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimOptions o;
    o.fault_timeout = absl::Seconds(5);
    dev_ = NewSimDevice(o).value();
    pd_ = dev_->AllocPd().value();
    q_ = dev_->CreateQueue(pd_, QueueOptions{64}).value();
    peer_ = dev_->CreatePeer(pd_).value();
    mem_.assign(9 * kPage, 0);
    base_ = (reinterpret_cast<uint64_t>(mem_.data()) + kPage - 1) & ~(kPage - 1);
    BackingOptions bo;
    bo.on_demand = true;
    backing_ = dev_->RegisterBacking(pd_, base_, 8 * kPage, kAllAccess, bo).value();
  }

  // Services one fault the way odp/ will: rewrite the MTT block with a UMR, then resume.
  void ServiceOne(bool ok) {
    absl::StatusOr<FaultEvent> ev = dev_->NextFaultEvent(absl::Seconds(5));
    ASSERT_TRUE(ev.ok()) << ev.status();
    EXPECT_EQ(ev->key, backing_.key);
    if (ok) {
      const uint64_t first = ((ev->address - base_) / kPage) / 8 * 8;
      std::vector<MttEntry> e(8);
      for (uint64_t i = 0; i < 8; ++i) e[i] = MttEntry{base_ + (first + i) * kPage, true, true};
      ASSERT_TRUE(q_->PostRewriteTranslation(1, backing_.key, first, e, {}).ok());
      ASSERT_TRUE(q_->Doorbell().ok());
      ASSERT_TRUE(q_->Flush(absl::Seconds(5)).ok());
      Completion c[1];
      ASSERT_EQ(q_->Poll(absl::MakeSpan(c)), 1u);
      ASSERT_TRUE(c[0].status.ok()) << c[0].status;
    }
    ASSERT_TRUE(dev_->ResumeFault(ev->token, ok).ok());
  }

  std::unique_ptr<SimDevice> dev_;
  Pd pd_;
  std::unique_ptr<Queue> q_;
  std::unique_ptr<Peer> peer_;
  std::vector<uint8_t> mem_;
  uint64_t base_ = 0;
  Backing backing_;
};

TEST_F(SimOdpTest, FaultResumeDataArrives) {
  const std::vector<uint8_t> data(100, 0x5c);
  absl::Status write_status;
  std::thread writer(
      [&] { write_status = peer_->Write(backing_.key, base_ + 3 * kPage + 10, data); });
  // The fd becomes readable when the event is pending.
  struct pollfd pfd = {dev_->FaultEventFd(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ServiceOne(true);
  writer.join();
  ASSERT_TRUE(write_status.ok()) << write_status;
  EXPECT_EQ(mem_[base_ - reinterpret_cast<uint64_t>(mem_.data()) + 3 * kPage + 10], 0x5c);
  EXPECT_EQ(dev_->stats().page_faults.value(), 1u);
  EXPECT_EQ(dev_->stats().faults_resumed_ok.value(), 1u);
}

TEST_F(SimOdpTest, ResumeWithErrorFailsWithVendorSyndrome) {
  std::vector<uint8_t> out(8);
  absl::Status st;
  std::thread reader([&] { st = peer_->Read(backing_.key, base_, absl::MakeSpan(out)); });
  ServiceOne(false);
  reader.join();
  ASSERT_TRUE(ErrorOf(st).has_value());
  EXPECT_EQ(ErrorOf(st)->vendor_syndrome, kVendorSyndromeOdpFault);
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(SimOdpTest, InjectedResumeFailure) {
  dev_->FailNextResumeForTest();
  std::vector<uint8_t> out(8);
  absl::Status st;
  std::thread reader([&] { st = peer_->Read(backing_.key, base_, absl::MakeSpan(out)); });
  ServiceOne(true);  // resumes ok, but the hook turns it into an error
  reader.join();
  EXPECT_EQ(ErrorOf(st)->vendor_syndrome, kVendorSyndromeOdpFault);
}

TEST_F(SimOdpTest, PrefetchAvoidsFaultAndTimeoutIsBounded) {
  ASSERT_TRUE(dev_->Prefetch(backing_.key, base_ + kPage, 2 * kPage, true).ok());
  std::vector<uint8_t> out(kPage);
  EXPECT_TRUE(
      peer_->Write(backing_.key, base_ + kPage + 5, absl::MakeSpan(out).subspan(0, kPage)).ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 0u);
  // A non-ODP key cannot be prefetched.
  EXPECT_THAT(dev_->Prefetch(MakeKey(1, 0), 0, 1, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Nobody services: the access gives up after the timeout.
  SimOptions o;
  o.fault_timeout = absl::Milliseconds(30);
  auto dev = NewSimDevice(o).value();
  Pd pd = dev->AllocPd().value();
  BackingOptions bo;
  bo.on_demand = true;
  Backing b = dev->RegisterBacking(pd, base_, kPage, kAllAccess, bo).value();
  auto peer = dev->CreatePeer(pd).value();
  EXPECT_EQ(peer->Read(b.key, base_, absl::MakeSpan(out).subspan(0, 8)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(dev->NextFaultEvent(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace regcache::hca::sim