// The two QUERY_HCA_CAP bits that forbid a UMR to change a key's A bit or its entity size
// (umr_modify_atomic_disabled, umr_modify_entity_size_disabled; docs/prm.md, HCA capabilities), in
// both settings: the sim refuses a WQE whose mkey_mask selects a forbidden field, as a device
// reporting the bit does, and the sim's queue derives its masks from the capabilities so that
// what it posts is accepted.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "hca/sim/internal/mkey_table.h"
#include "hca/sim/internal/umr_executor.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"
#include "umr/wqe_builder.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::sim {
namespace {

constexpr uint64_t kPage = 4096;

// One UMR WQE as the device receives it, built with `modify`, executed against a one-key table
// whose device allows `allowed`.
class UmrMaskTest : public ::testing::Test {
 protected:
  UmrMaskTest() : table_(16) {}
  void SetUp() override {
    index_ = table_.Allocate().value();
    MkeySlot* s = table_.Slot(index_);
    base::MutexLock lock(&s->mu);
    s->exists = true;
    s->state.umr_en = true;
    s->state.pd = 3;
    s->state.free = true;
    s->state.translations_octword_size = 8;
    s->klm.resize(16);
    s->klm_end.resize(16);
  }
  void SetMode(uint8_t mode, uint8_t log_entity_size) {
    MkeySlot* s = table_.Slot(index_);
    base::MutexLock lock(&s->mu);
    s->state.access_mode = mode;
    s->state.log_entity_size = log_entity_size;
  }
  absl::Status Execute(const umr::MapKeyRequest& r, umr::UmrModifyCaps allowed) {
    std::vector<uint8_t> wqe(1024);
    auto size = umr::BuildMapKey({}, r, 16, absl::MakeSpan(wqe));
    if (!size.ok()) return size.status();
    auto desc = umr::DecodeWqe(absl::MakeConstSpan(wqe.data(), size->bytes()));
    if (!desc.ok()) return desc.status();
    UmrOutcome outcome;
    return ExecuteUmr(&table_, 3, *desc, allowed, &outcome);
  }
  umr::MapKeyRequest Klm(umr::UmrModifyCaps modify) const {
    umr::MapKeyRequest r;
    r.key = umr::MakeKey(index_, 1);
    r.mode = umr::AccessMode::kKlm;
    r.access = {true, true, true, true, false};
    r.length = kPage;
    r.klm.push_back({static_cast<uint32_t>(kPage), 0x500, 0});
    r.modify = modify;
    return r;
  }
  bool Free() const {
    MkeySlot* s = table_.Slot(index_);
    base::MutexLock lock(&s->mu);
    return s->state.free;
  }

  MkeyTable table_;
  uint32_t index_ = 0;
};

TEST_F(UmrMaskTest, AMaskSelectingAIsRefusedWhereTheDeviceForbidsIt) {
  SetMode(umr::kAccessModeKlm, 0);
  absl::Status s = Execute(Klm({}), {.atomic = false});
  EXPECT_EQ(ErrorOf(s)->syndrome, Syndrome::kLocalQpOp) << s;
  EXPECT_NE(s.message().find("umr_modify_atomic_disabled"), std::string::npos) << s;
  EXPECT_TRUE(Free()) << "a refused UMR changed the key";
  // The mask the builder derives for such a device is accepted.
  EXPECT_TRUE(Execute(Klm({.atomic = false}), {.atomic = false}).ok());
  EXPECT_FALSE(Free());
}

TEST_F(UmrMaskTest, BothMasksAreAcceptedWhereTheDeviceAllowsThem) {
  SetMode(umr::kAccessModeKlm, 0);
  EXPECT_TRUE(Execute(Klm({}), {}).ok());
}

TEST_F(UmrMaskTest, AMaskSelectingPageSizeIsRefusedWhereTheDeviceForbidsIt) {
  SetMode(umr::kAccessModeKsm, 12);
  umr::MapKeyRequest r;
  r.key = umr::MakeKey(index_, 1);
  r.mode = umr::AccessMode::kKsm;
  r.log_entity_size = 12;
  r.length = kPage;
  r.ksm.push_back({0x500, 0});
  absl::Status s = Execute(r, {.atomic = true, .entity_size = false});
  EXPECT_EQ(ErrorOf(s)->syndrome, Syndrome::kLocalQpOp) << s;
  EXPECT_NE(s.message().find("umr_modify_entity_size_disabled"), std::string::npos) << s;
  EXPECT_TRUE(Free());
  r.modify.entity_size = false;  // the key keeps its creation entity size
  EXPECT_TRUE(Execute(r, {.atomic = true, .entity_size = false}).ok());
}

// Through the device: the capabilities say it, the queue's maps are accepted, atomics are
// refused at post and the key really has no atomic right.
class SimNoUmrAtomicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec =
        ParseBackendSpec("sim:umr_modify_atomic_disabled=1,umr_modify_entity_size_disabled=1");
    ASSERT_TRUE(spec.ok());
    auto o = SimOptionsFromSpec(*spec);
    ASSERT_TRUE(o.ok()) << o.status();
    dev_ = NewSimDevice(*o).value();
    pd_ = dev_->AllocPd().value();
    q_ = dev_->CreateQueue(pd_, QueueOptions{64}).value();
    mem_.assign(3 * kPage, 0);
    base_ = (reinterpret_cast<uint64_t>(mem_.data()) + kPage - 1) & ~(kPage - 1);
    backing_ = dev_->RegisterBacking(pd_, base_, kPage, kAllAccess, {}).value();
    key_ = dev_->CreateIndirectKeys(pd_, 4, 1, {}).value()[0];
  }
  MapRequest Map(AccessFlags access) const {
    MapRequest r;
    r.key = key_;
    r.new_variant = static_cast<uint8_t>(KeyVariant(NextVariant(key_)));
    entry_ = KlmEntry{backing_.key, base_, kPage};
    r.klm = absl::MakeConstSpan(&entry_, 1);
    r.access = access;
    r.start_addr = 0x10000;
    r.length = kPage;
    return r;
  }

  std::unique_ptr<SimDevice> dev_;
  Pd pd_;
  std::unique_ptr<Queue> q_;
  std::vector<uint8_t> mem_;
  uint64_t base_ = 0;
  Backing backing_;
  Key key_ = 0;
  mutable KlmEntry entry_;
};

TEST_F(SimNoUmrAtomicTest, MapsWithoutAtomicsWorkAndAtomicsAreRefused) {
  EXPECT_FALSE(dev_->capabilities().umr_modify_atomic);
  EXPECT_FALSE(dev_->capabilities().umr_modify_entity_size);
  EXPECT_TRUE(absl::IsInvalidArgument(q_->PostMap(1, Map(kAllAccess))));
  ASSERT_TRUE(q_->PostMap(2, Map(kLocalWrite | kRemoteRead | kRemoteWrite)).ok());
  ASSERT_TRUE(q_->Doorbell().ok());
  ASSERT_TRUE(q_->Flush(absl::Seconds(5)).ok());
  Completion c;
  ASSERT_EQ(q_->Poll(absl::MakeSpan(&c, 1)), 1u);
  ASSERT_TRUE(c.status.ok()) << c.status;
  const Key mapped = MakeKey(KeyIndex(key_), KeyVariant(NextVariant(key_)));
  auto peer = dev_->CreatePeer(pd_).value();
  const uint8_t x[] = {1, 2, 3};
  EXPECT_TRUE(peer->Write(mapped, 0x10000, x).ok());
  EXPECT_EQ(mem_[base_ - reinterpret_cast<uint64_t>(mem_.data()) + 2], 3);
  auto add = peer->FetchAdd(mapped, 0x10008, 1);
  EXPECT_TRUE(absl::IsPermissionDenied(add.status())) << add.status();
}

TEST(SimUmrCapsSpec, ParsesAndRefusesBadValues) {
  auto spec = ParseBackendSpec("sim:umr_modify_atomic_disabled=2");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(SimOptionsFromSpec(*spec).status()));
  auto d = NewSimDevice(SimOptions{}).value();
  EXPECT_TRUE(d->capabilities().umr_modify_atomic);
  EXPECT_TRUE(d->capabilities().umr_modify_entity_size);
}

}  // namespace
}  // namespace regcache::hca::sim

namespace regcache::hca::sim {
namespace {

// Maps longer than one WQE carries travel by pointer: the queue stages the list in registered
// memory and the sim's UMR reads it through that lkey. Every byte of the translation is checked
// by reading the whole key back through a peer, for lists of 49 entries up to the device's most.
TEST(SimPointerMapTest, LongListsTranslateEveryByte) {
  SimOptions so;
  so.log_max_klm_list_size = 16;
  auto dev = NewSimDevice(so).value();
  EXPECT_TRUE(dev->capabilities().umr_pointer_translation);
  const Pd pd = dev->AllocPd().value();
  auto q = dev->CreateQueue(pd, QueueOptions{64}).value();
  auto peer = dev->CreatePeer(pd).value();
  constexpr uint64_t kPiece = 64;
  // A UMR's klm_octowords is 16 bits: one map loads at most 65532 KLM entries (whole 64-byte
  // blocks), however many the key could hold.
  const uint32_t most = std::min<uint32_t>(dev->capabilities().max_klm_entries, 65532);
  std::vector<uint8_t> mem(size_t{most} * kPiece);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<uint8_t>(i * 131 + i / 251);
  const uint64_t base = reinterpret_cast<uint64_t>(mem.data());
  const Backing b = dev->RegisterBacking(pd, base, mem.size(), kAllAccess, {}).value();
  uint64_t id = 1;
  for (uint32_t n : {49u, 53u, 1000u, 4096u, most}) {
    const Key key = dev->CreateIndirectKeys(pd, n, 1, {}).value()[0];
    // Entry i takes piece (i * 7919) mod n: scattered, so a misplaced entry shows.
    std::vector<KlmEntry> klm(n);
    for (uint32_t i = 0; i < n; ++i) {
      klm[i] = KlmEntry{b.key, base + (uint64_t{i} * 7919 % n) * kPiece, kPiece};
    }
    MapRequest r;
    r.key = key;
    r.new_variant = 1;
    r.klm = klm;
    r.access = kRemoteRead;
    r.start_addr = 0x100000;
    r.length = uint64_t{n} * kPiece;
    absl::Status posted = q->PostMap(id, r);
    ASSERT_TRUE(posted.ok()) << n << ": " << posted;
    ASSERT_TRUE(q->Doorbell().ok());
    ASSERT_TRUE(q->Flush(absl::Seconds(10)).ok());
    Completion c;
    ASSERT_EQ(q->Poll(absl::MakeSpan(&c, 1)), 1u);
    ASSERT_EQ(c.request_id, id++);
    ASSERT_TRUE(c.status.ok()) << n << ": " << c.status;
    const Key mapped = MakeKey(KeyIndex(key), 1);
    std::vector<uint8_t> got(r.length);
    ASSERT_TRUE(peer->Read(mapped, 0x100000, absl::MakeSpan(got)).ok()) << n;
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(got.data() + uint64_t{i} * kPiece,
                            mem.data() + (uint64_t{i} * 7919 % n) * kPiece, kPiece),
                0)
          << "entry " << i << " of " << n;
    }
    auto info = dev->QueryKey(mapped);
    ASSERT_TRUE(info.ok());
    ASSERT_GE(info->klm.size(), n);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(info->klm[i], klm[i]) << i;
    ASSERT_TRUE(dev->DestroyKey(mapped).ok());
  }
  // One entry more than a UMR loads is refused at post, before anything reaches the device.
  const Key big = dev->CreateIndirectKeys(pd, most + 4, 1, {}).value()[0];
  std::vector<KlmEntry> klm(most + 4, KlmEntry{b.key, base, kPiece});
  MapRequest r;
  r.key = big;
  r.new_variant = 1;
  r.klm = klm;
  r.access = kRemoteRead;
  r.length = uint64_t{most + 4} * kPiece;
  EXPECT_TRUE(absl::IsInvalidArgument(q->PostMap(id, r)));
  ASSERT_TRUE(dev->DestroyKey(big).ok());
  q.reset();
  peer.reset();
  ASSERT_TRUE(dev->DestroyKey(b.key).ok());
}

}  // namespace
}  // namespace regcache::hca::sim
