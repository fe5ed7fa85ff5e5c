// The device core on its own (sim_core.h): the QUERY_HCA_CAP answers it gives from capability
// images, the checks it makes of a CREATE_MKEY when it checks PDs and list lengths, the rules
// it applies to each send WQE when a face asks for them, and the kernel's ODP policy. The sim's
// own tests cover what the core does under the sim's defaults.
#include "hca/sim/sim_core.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "hca/prm_convert.h"
#include "hca/status.h"
#include "hca/umr_poster.h"
#include "umr/caps.h"
#include "umr/mailbox.h"
#include "umr/prm.h"

namespace regcache::hca::sim {
namespace {

constexpr uint32_t kDepth = 16;
constexpr uint32_t kSqn = 0x123;

umr::HcaCaps GeneralCaps() {
  umr::HcaCaps c;
  c.log_max_mkey = 24;
  c.max_indirection = 4;
  c.fixed_buffer_size = true;
  c.log_max_klm_list_size = 16;
  c.umr_fence = 1;
  c.atomic = true;
  c.max_wqe_sz_sq = 1024;
  return c;
}

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoreOptions o;
    o.general_caps = GeneralCaps();
    o.odp_caps = umr::OdpCaps{};
    o.odp_caps->rc = {.send = true, .write = true, .read = true};
    o.check_pd_on_create = true;
    o.max_klm_entries = 64;
    core_ = HcaCore::Create(o).value();
    pd_ = core_->AllocPd();
    buf_.assign(2 * 4096, 0);
    const uint64_t addr = reinterpret_cast<uint64_t>(buf_.data());
    auto mailbox = HcaCore::MttKeyMailbox(pd_, addr, buf_.size(),
                                          kLocalWrite | kRemoteRead | kRemoteWrite, 12, false);
    ASSERT_TRUE(mailbox.ok()) << mailbox.status();
    backing_ = MakeKey(core_->CreateMkey(*mailbox).value(), 0);
    pool_key_ = MakeKey(core_->CreateMkey(PoolMailbox(pd_, 8).value()).value(), 0);
  }

  absl::StatusOr<std::vector<uint8_t>> PoolMailbox(uint32_t pdn, uint32_t capacity) {
    auto p = IndirectKeyParams(Pd{pdn}, capacity, 1u << 16, {});
    if (!p.ok()) return p.status();
    return PoolKeyMailbox(*p);
  }

  // Posts a map of the pool key over the backing with a poster of `o`, at producer position 0.
  void PostMap(UmrPosterOptions o) {
    poster_.reset();
    std::memset(ring_, 0, sizeof(ring_));
    poster_ = UmrPoster::Create(absl::MakeSpan(ring_, sizeof(ring_)), std::move(o)).value();
    klm_ = {KlmEntry{backing_, reinterpret_cast<uint64_t>(buf_.data()), 4096}};
    MapRequest r;
    r.key = pool_key_;
    r.new_variant = 1;
    r.klm = klm_;
    r.access = kLocalRead | kRemoteRead;
    r.length = 4096;
    const absl::Status s = poster_->PostMap(1, r);
    EXPECT_TRUE(s.ok()) << s;
  }
  UmrPosterOptions Poster() const {
    UmrPosterOptions o;
    o.sqn = kSqn;
    o.umr_fence = umr::FenceMode::kInitiatorSmall;
    return o;
  }
  WqeResult Execute(uint32_t counter, const SendRules& rules) {
    return core_->ExecuteSendWqe(pd_, absl::MakeConstSpan(ring_, sizeof(ring_)), counter, rules,
                                 nullptr, &scratch_);
  }
  bool Mapped() {
    Segments segs;
    return core_
        ->Translate(pd_, 0, MakeKey(KeyIndex(pool_key_), 1), 0, 64, AccessKind::kRemoteRead,
                    FaultPolicy::kPark, &segs)
        .ok();
  }

  std::unique_ptr<HcaCore> core_;
  uint32_t pd_ = 0;
  std::vector<uint8_t> buf_;
  Key backing_ = 0;
  Key pool_key_ = 0;
  alignas(64) uint8_t ring_[kDepth * umr::kWqebb] = {};
  std::unique_ptr<UmrPoster> poster_;
  std::vector<KlmEntry> klm_;
  umr::WqeScratch scratch_{};
};

TEST_F(CoreTest, QueryHcaCapAnswersFromTheImages) {
  std::vector<uint8_t> out;
  const umr::Mailbox16 in = umr::EncodeQueryHcaCapIn({}).value();
  ASSERT_TRUE(core_->RunCommand(in, &out).ok());
  EXPECT_EQ(umr::DecodeHcaCaps(out).value(), GeneralCaps());
  const umr::Mailbox16 odp = umr::EncodeQueryHcaCapIn({.cap_type = umr::kCapTypeOdp}).value();
  ASSERT_TRUE(core_->RunCommand(odp, &out).ok());
  EXPECT_TRUE(umr::DecodeOdpCaps(out).value().rc.read);
  // A capability type without an image, and another function's, are refused.
  const umr::Mailbox16 other = umr::EncodeQueryHcaCapIn({.cap_type = 0x11}).value();
  absl::Status s = core_->RunCommand(other, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, umr::kCmdStatusBadParam);
  s = core_->RunCommand(umr::EncodeQueryHcaCapIn({.other_function = true}).value(), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_F(CoreTest, CreateMkeyOfAnUnknownPdIsBadParam) {
  std::vector<uint8_t> out;
  absl::Status s = core_->RunCommand(PoolMailbox(pd_ + 7, 8).value(), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(umr::DecodeCmdStatusOut(out).value().status, umr::kCmdStatusBadParam);
  ASSERT_TRUE(core_->DeallocPd(pd_ + 7).code() == absl::StatusCode::kNotFound);
}

TEST_F(CoreTest, AListLongerThanTheDeviceAllowsIsRefused) {
  std::vector<uint8_t> out;
  absl::Status s = core_->RunCommand(PoolMailbox(pd_, 128).value(), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(core_->RunCommand(PoolMailbox(pd_, 64).value(), &out).ok());
}

TEST_F(CoreTest, AWqeWithinEveryRuleExecutes) {
  PostMap(Poster());
  SendRules rules;
  rules.max_wqe_bytes = 1024;
  rules.min_umr_fence = umr::FenceMode::kInitiatorSmall;
  rules.qpn = kSqn;
  rules.check_wqe_index = true;
  rules.indirect_umr = true;
  const WqeResult r = Execute(0, rules);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.opcode, umr::kOpcodeUmr);
  EXPECT_TRUE(Mapped());
}

// Each rule, broken alone, fails the WQE with LOCAL_QP_OP and leaves the key free.
TEST_F(CoreTest, EachBrokenRuleIsALocalQpOperationError) {
  struct Case {
    const char* what;
    SendRules rules;
    uint32_t counter;
    const char* reason;
  };
  std::vector<Case> cases;
  cases.push_back({"too large", {.max_wqe_bytes = 128}, 0, "max_wqe_sz_sq"});
  cases.push_back(
      {"weak fence", {.min_umr_fence = umr::FenceMode::kStrongOrdering}, 0, "umr_fence"});
  cases.push_back({"other qp", {.qpn = kSqn + 1}, 0, "names QP"});
  cases.push_back({"wrong index", {.check_wqe_index = true}, kDepth, "wqe_index"});
  cases.push_back({"indirect", {.indirect_umr = false}, 0, "umr_indirect_mkey_disabled"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    PostMap(Poster());
    const WqeResult r = Execute(c.counter, c.rules);
    ASSERT_FALSE(r.status.ok());
    EXPECT_EQ(ErrorOf(r.status)->syndrome, Syndrome::kLocalQpOp) << r.status;
    EXPECT_NE(r.status.message().find(c.reason), std::string::npos) << r.status;
    EXPECT_FALSE(Mapped());
  }
}

TEST_F(CoreTest, TheKernelPolicyMakesOnDemandPagesPresentWithoutAnEvent) {
  const uint64_t addr = reinterpret_cast<uint64_t>(buf_.data());
  auto mailbox =
      HcaCore::MttKeyMailbox(pd_, addr, buf_.size(), kLocalWrite | kRemoteWrite, 12, true);
  const Key odp = MakeKey(core_->CreateMkey(*mailbox, true).value(), 0);
  Segments segs;
  ASSERT_TRUE(core_
                  ->Translate(pd_, 0, odp, addr + 4096, 16, AccessKind::kRemoteWrite,
                              FaultPolicy::kResolve, &segs)
                  .ok());
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].addr, addr + 4096);
  EXPECT_FALSE(core_->NextFaultEvent(absl::ZeroDuration()).ok()) << "no event was raised";
  EXPECT_EQ(core_->stats().page_faults.value(), 1);
}

}  // namespace
}  // namespace regcache::hca::sim
