// The Proof list of issue 4, against the sim through hca::Device: every key check of the
// memory-key path (docs/prm.md), and every umr/ builder's WQE executed from the ring.
#include "hca/sim/sim_device.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/backend.h"

using ::regcache::base::StatusIs;

namespace regcache::hca::sim {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;

class SimDeviceTest : public ::testing::TestWithParam<ExecutionMode> {
 protected:
  void SetUp() override {
    SimOptions o;
    o.mode = GetParam();
    o.max_indirection = 2;
    o.max_keys = 1024;
    dev_ = NewSimDevice(o).value();
    pd_ = dev_->AllocPd().value();
    q_ = dev_->CreateQueue(pd_, QueueOptions{64}).value();
    peer_ = dev_->CreatePeer(pd_).value();
    // 64 KiB, page aligned, plus one page so we can start unaligned.
    mem_.assign(17 * kPage, 0);
    base_ = (reinterpret_cast<uint64_t>(mem_.data()) + kPage - 1) & ~(kPage - 1);
    for (uint64_t i = 0; i < 16 * kPage; ++i) At(i) = static_cast<uint8_t>(i * 7);
    backing_ = dev_->RegisterBacking(pd_, base_, 16 * kPage, kAllAccess, {}).value();
  }

  uint8_t& At(uint64_t off) { return *reinterpret_cast<uint8_t*>(base_ + off); }

  // Posts with `post`, rings, waits, and returns the single completion's status.
  absl::Status Run(const std::function<absl::Status(Queue&)>& post) {
    absl::Status s = post(*q_);
    if (!s.ok()) return s;
    EXPECT_TRUE(q_->Doorbell().ok());
    EXPECT_TRUE(q_->Flush(absl::Seconds(5)).ok());
    Completion c[2];
    size_t n = q_->Poll(absl::MakeSpan(c));
    EXPECT_EQ(n, 1u);
    if (n == 0) return absl::InternalError("no completion");
    EXPECT_EQ(c[0].request_id, 7u);
    return c[0].status;
  }
  absl::Status Map(const MapRequest& r) {
    return Run([&](Queue& q) { return q.PostMap(7, r); });
  }
  absl::Status Invalidate(Key k) {
    return Run([&](Queue& q) { return q.PostInvalidate(7, k, {}); });
  }
  Key NewIndirect(uint32_t cap = 16, IndirectKeyOptions o = {}) {
    return dev_->CreateIndirectKeys(pd_, cap, 1, o).value()[0];
  }
  // Maps `key` (free) as a KLM key over `entries`, start_addr `start`, new variant `v`.
  absl::Status MapKlm(Key key, uint8_t v, std::vector<KlmEntry> entries, AccessFlags access,
                      uint64_t start = 0x10000, bool rinval = false) {
    uint64_t len = 0;
    for (const auto& e : entries) len += e.length;
    MapRequest r;
    r.key = key;
    r.new_variant = v;
    r.klm = entries;
    r.access = access;
    r.start_addr = start;
    r.length = len;
    r.remote_invalidate = rinval;
    return Map(r);
  }
  static Syndrome Syn(const absl::Status& s) {
    auto e = ErrorOf(s);
    return e ? e->syndrome : Syndrome::kNone;
  }

  std::unique_ptr<SimDevice> dev_;
  Pd pd_;
  std::unique_ptr<Queue> q_;
  std::unique_ptr<Peer> peer_;
  std::vector<uint8_t> mem_;
  uint64_t base_ = 0;
  Backing backing_;
};

TEST_P(SimDeviceTest, BackingReadWriteMovesRealBytes) {
  std::vector<uint8_t> out(100);
  ASSERT_TRUE(peer_->Read(backing_.key, base_ + 10, absl::MakeSpan(out)).ok());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(out[i], static_cast<uint8_t>((10 + i) * 7));
  const std::vector<uint8_t> data(5000, 0xab);  // crosses a page
  ASSERT_TRUE(peer_->Write(backing_.key, base_ + kPage - 100, data).ok());
  EXPECT_EQ(At(kPage - 100), 0xab);
  EXPECT_EQ(At(2 * kPage + 4899 - kPage), 0xab);
  EXPECT_GE(dev_->stats().translations.value(), 2u);
}

TEST_P(SimDeviceTest, UnalignedMttStartAndPageCount) {
  // S = base+100, len = 2*P: ceil((100 + 2P)/P) = 3 pages.
  const uint64_t s = base_ + 100;
  Backing b = dev_->RegisterBacking(pd_, s, 2 * kPage, kAllAccess, {}).value();
  EXPECT_EQ(b.num_entries, 3u);
  // V = S + P - 50: u = (P - 50) + 100 = P + 50 -> i = 1, delta = 50.
  std::vector<uint8_t> out(1);
  ASSERT_TRUE(peer_->Read(b.key, s + kPage - 50, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(kPage + 50));
  // The last byte of the range is in page 2; one past it is out of range.
  ASSERT_TRUE(peer_->Read(b.key, s + 2 * kPage - 1, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(2 * kPage + 99));
  EXPECT_EQ(Syn(peer_->Read(b.key, s + 2 * kPage, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
  KeyInfo info = dev_->QueryKey(b.key).value();
  ASSERT_GE(info.mtt.size(), 3u);
  EXPECT_EQ(info.mtt[2].dma_addr, base_ + 2 * kPage);
  EXPECT_TRUE(info.mtt[2].read);
  EXPECT_FALSE(info.mtt[3].read);  // capacity padding: absent
}

TEST_P(SimDeviceTest, KlmSplitAcrossEntries) {
  Key k = NewIndirect();
  // Two pieces of 3000 and 5000 bytes from non-adjacent places.
  ASSERT_TRUE(MapKlm(k, 1,
                     {{backing_.key, base_ + 8 * kPage, 3000}, {backing_.key, base_ + 100, 5000}},
                     kAllAccess)
                  .ok());
  k = MakeKey(KeyIndex(k), 1);
  std::vector<uint8_t> out(200);
  // d = 2900: 100 bytes from entry 0 at offset 2900, 100 from entry 1 at offset 0.
  ASSERT_TRUE(peer_->Read(k, 0x10000 + 2900, absl::MakeSpan(out)).ok());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(out[i], At(8 * kPage + 2900 + i));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(out[100 + i], At(100 + i));
  // Past the total length: range error.
  EXPECT_EQ(Syn(peer_->Read(k, 0x10000 + 7950, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
}

TEST_P(SimDeviceTest, FixedBufferKsmMode) {
  IndirectKeyOptions o;
  o.layout = Layout::kKsm;
  o.log_entity_size = 12;
  Key k = NewIndirect(8, o);
  MapRequest r;
  r.key = k;
  r.new_variant = 3;
  r.layout = Layout::kKsm;
  r.log_entity_size = 12;
  std::vector<KlmEntry> e = {{backing_.key, base_ + 5 * kPage, 0},
                             {backing_.key, base_ + 2 * kPage, 0}};
  r.klm = e;
  r.access = kAllAccess;
  r.start_addr = 0;
  r.length = 2 * kPage;
  ASSERT_TRUE(Map(r).ok());
  k = MakeKey(KeyIndex(k), 3);
  std::vector<uint8_t> out(16);
  // d = P + 8: j = 1, offset 8 -> base + 2P + 8. Crossing from entry 0 into entry 1 too.
  ASSERT_TRUE(peer_->Read(k, kPage + 8, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(2 * kPage + 8));
  ASSERT_TRUE(peer_->Read(k, kPage - 8, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(6 * kPage - 8));
  EXPECT_EQ(out[8], At(2 * kPage));
  EXPECT_EQ(dev_->QueryKey(k).value().layout, Layout::kKsm);
}

TEST_P(SimDeviceTest, NestedDepthLimit) {
  // max_indirection = 2: window -> parent -> backing is fine, one more level fails.
  Key parent = NewIndirect(), win = NewIndirect(), win2 = NewIndirect();
  ASSERT_TRUE(MapKlm(parent, 1, {{backing_.key, base_, 8192}}, kAllAccess, 0).ok());
  parent = MakeKey(KeyIndex(parent), 1);
  ASSERT_TRUE(MapKlm(win, 1, {{parent, 4096, 100}}, kRemoteRead, 0).ok());
  win = MakeKey(KeyIndex(win), 1);
  ASSERT_TRUE(MapKlm(win2, 1, {{win, 0, 50}}, kRemoteRead, 0).ok());
  win2 = MakeKey(KeyIndex(win2), 1);
  std::vector<uint8_t> out(10);
  ASSERT_TRUE(peer_->Read(win, 5, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(4096 + 5));
  absl::Status s = peer_->Read(win2, 5, absl::MakeSpan(out));
  EXPECT_EQ(Syn(s), Syndrome::kRemoteAccess);
  EXPECT_THAT(s.message(), HasSubstr("max_indirection"));
}

TEST_P(SimDeviceTest, StaleVariantAfterReuse) {
  Key k = NewIndirect();
  ASSERT_TRUE(MapKlm(k, 1, {{backing_.key, base_, 100}}, kAllAccess).ok());
  const Key old_key = MakeKey(KeyIndex(k), 1);
  ASSERT_TRUE(Invalidate(old_key).ok());
  ASSERT_TRUE(MapKlm(old_key, 2, {{backing_.key, base_, 100}}, kAllAccess).ok());
  std::vector<uint8_t> out(4);
  absl::Status s = peer_->Read(old_key, 0x10000, absl::MakeSpan(out));
  EXPECT_EQ(Syn(s), Syndrome::kRemoteAccess);
  EXPECT_THAT(s.message(), HasSubstr("variant"));
  EXPECT_TRUE(peer_->Read(MakeKey(KeyIndex(k), 2), 0x10000, absl::MakeSpan(out)).ok());
}

TEST_P(SimDeviceTest, AccessThroughFreeKeyFails) {
  Key k = NewIndirect();
  std::vector<uint8_t> out(4);
  absl::Status s = peer_->Read(k, 0, absl::MakeSpan(out));
  EXPECT_EQ(Syn(s), Syndrome::kRemoteAccess);
  EXPECT_THAT(s.message(), HasSubstr("free"));
  EXPECT_EQ(Syn(peer_->LocalRead(k, 0, absl::MakeSpan(out))), Syndrome::kLocalProt);
}

TEST_P(SimDeviceTest, PdMismatchFails) {
  Pd other = dev_->AllocPd().value();
  std::unique_ptr<Peer> p2 = dev_->CreatePeer(other).value();
  std::vector<uint8_t> out(4);
  absl::Status s = p2->Read(backing_.key, base_, absl::MakeSpan(out));
  EXPECT_EQ(Syn(s), Syndrome::kRemoteAccess);
  EXPECT_THAT(s.message(), HasSubstr("PD"));
  // A UMR from a queue of another PD is refused too.
  std::unique_ptr<Queue> q2 = dev_->CreateQueue(other, QueueOptions{16}).value();
  Key k = NewIndirect();
  MapRequest r;
  r.key = k;
  std::vector<KlmEntry> e = {{backing_.key, base_, 64}};
  r.klm = e;
  r.length = 64;
  ASSERT_TRUE(q2->PostMap(9, r).ok());
  ASSERT_TRUE(q2->Doorbell().ok());
  ASSERT_TRUE(q2->Flush(absl::Seconds(5)).ok());
  Completion c[1];
  ASSERT_EQ(q2->Poll(absl::MakeSpan(c)), 1u);
  EXPECT_EQ(c[0].syndrome, Syndrome::kMwBind);
  EXPECT_TRUE(dev_->QueryKey(k).value().free);
}

TEST_P(SimDeviceTest, RangeOverflowAndWrap) {
  std::vector<uint8_t> out(16);
  EXPECT_EQ(Syn(peer_->Read(backing_.key, base_ - 1, absl::MakeSpan(out))),
            Syndrome::kRemoteAccess);
  EXPECT_EQ(Syn(peer_->Read(backing_.key, base_ + 16 * kPage - 8, absl::MakeSpan(out))),
            Syndrome::kRemoteAccess);
  // length64 key starting high: an access running past 2^64 must not wrap around.
  Key k = NewIndirect();
  MapRequest r;
  r.key = k;
  r.new_variant = 1;
  std::vector<KlmEntry> e = {{backing_.key, base_, 4096}};
  r.klm = e;
  r.access = kAllAccess;
  r.start_addr = ~uint64_t{0} - 4095;  // the entry covers [2^64-4096, 2^64)
  r.length = 0;
  r.length64 = true;
  ASSERT_TRUE(Map(r).ok());
  k = MakeKey(KeyIndex(k), 1);
  ASSERT_TRUE(peer_->Read(k, ~uint64_t{0} - 15, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[15], At(4095));
  absl::Status s = peer_->Read(k, ~uint64_t{0} - 7, absl::MakeSpan(out));
  EXPECT_EQ(Syn(s), Syndrome::kRemoteAccess);
  EXPECT_THAT(s.message(), HasSubstr("outside"));
}

TEST_P(SimDeviceTest, DenialForEachAccessBit) {
  struct Case {
    AccessFlags granted;
    std::function<absl::Status()> op;
    Syndrome want;
  };
  std::vector<uint8_t> buf(8);
  auto key_with = [&](AccessFlags a) {
    Key k = NewIndirect();
    EXPECT_TRUE(MapKlm(k, 1, {{backing_.key, base_, 64}}, a, 0).ok());
    return MakeKey(KeyIndex(k), 1);
  };
  const Key no_lw = key_with(kLocalRead | kRemoteRead | kRemoteWrite | kRemoteAtomic);
  EXPECT_EQ(Syn(peer_->LocalWrite(no_lw, 0, buf)), Syndrome::kLocalProt);
  EXPECT_TRUE(peer_->LocalRead(no_lw, 0, absl::MakeSpan(buf)).ok());
  const Key no_rr = key_with(kLocalRead | kLocalWrite | kRemoteWrite | kRemoteAtomic);
  EXPECT_EQ(Syn(peer_->Read(no_rr, 0, absl::MakeSpan(buf))), Syndrome::kRemoteAccess);
  const Key no_rw = key_with(kLocalRead | kLocalWrite | kRemoteRead | kRemoteAtomic);
  EXPECT_EQ(Syn(peer_->Write(no_rw, 0, buf)), Syndrome::kRemoteAccess);
  const Key no_a = key_with(kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite);
  EXPECT_EQ(Syn(peer_->FetchAdd(no_a, 0, 1).status()), Syndrome::kRemoteAccess);
  // lr is always required: a key updated to drop lr refuses even remote reads.
  const Key all = key_with(kAllAccess);
  UpdateRequest u;
  u.key = all;
  u.fields = kUpdateAccess;
  u.access = kRemoteRead;  // PostUpdate adds lr; build the "no lr" state via the mask instead
  ASSERT_TRUE(Run([&](Queue& q) { return q.PostUpdate(7, u); }).ok());
  EXPECT_TRUE(peer_->Read(all, 0, absl::MakeSpan(buf)).ok());
  EXPECT_EQ(Syn(peer_->Write(all, 0, buf)), Syndrome::kRemoteAccess);
}

TEST_P(SimDeviceTest, AtomicsAndAlignment) {
  uint64_t* word = reinterpret_cast<uint64_t*>(base_ + 64);
  *word = 5;
  EXPECT_EQ(peer_->FetchAdd(backing_.key, base_ + 64, 3).value(), 5u);
  EXPECT_EQ(*word, 8u);
  EXPECT_EQ(peer_->CompareSwap(backing_.key, base_ + 64, 8, 42).value(), 8u);
  EXPECT_EQ(*word, 42u);
  EXPECT_EQ(peer_->CompareSwap(backing_.key, base_ + 64, 8, 1).value(), 42u);  // no swap
  EXPECT_EQ(*word, 42u);
  EXPECT_EQ(Syn(peer_->FetchAdd(backing_.key, base_ + 60, 1).status()), Syndrome::kRemoteInvalReq);
}

TEST_P(SimDeviceTest, RemoteInvalidateNeedsEnRinvalAndLeavesParent) {
  Key parent = NewIndirect(), win = NewIndirect(16, IndirectKeyOptions{true});
  ASSERT_TRUE(MapKlm(parent, 1, {{backing_.key, base_, 4096}}, kAllAccess, 0).ok());
  parent = MakeKey(KeyIndex(parent), 1);
  ASSERT_TRUE(MapKlm(win, 1, {{parent, 0, 100}}, kRemoteRead, 0, /*rinval=*/true).ok());
  win = MakeKey(KeyIndex(win), 1);
  // The parent was mapped without en_rinval: refused.
  EXPECT_EQ(Syn(peer_->SendWithInvalidate(parent)), Syndrome::kRemoteInvalReq);
  EXPECT_EQ(dev_->stats().remote_invalidations_refused.value(), 1u);
  ASSERT_TRUE(peer_->SendWithInvalidate(win).ok());
  std::vector<uint8_t> out(4);
  EXPECT_EQ(Syn(peer_->Read(win, 0, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
  EXPECT_TRUE(peer_->Read(parent, 0, absl::MakeSpan(out)).ok());
  EXPECT_FALSE(dev_->QueryKey(parent).value().free);
}

TEST_P(SimDeviceTest, LocalInvalidateOfWindowLeavesParent) {
  Key parent = NewIndirect(), win = NewIndirect();
  ASSERT_TRUE(MapKlm(parent, 1, {{backing_.key, base_, 4096}}, kAllAccess, 0).ok());
  parent = MakeKey(KeyIndex(parent), 1);
  ASSERT_TRUE(MapKlm(win, 1, {{parent, 0, 100}}, kRemoteRead, 0).ok());
  win = MakeKey(KeyIndex(win), 1);
  ASSERT_TRUE(Invalidate(win).ok());
  std::vector<uint8_t> out(4);
  EXPECT_EQ(Syn(peer_->Read(win, 0, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
  EXPECT_TRUE(peer_->Read(parent, 0, absl::MakeSpan(out)).ok());
  EXPECT_EQ(dev_->stats().local_invalidations.value(), 1u);
}

TEST_P(SimDeviceTest, MustBeFreeUmrOnLiveKeyFailsAndChangesNothing) {
  Key k = NewIndirect();
  ASSERT_TRUE(MapKlm(k, 1, {{backing_.key, base_, 100}}, kRemoteRead).ok());
  k = MakeKey(KeyIndex(k), 1);
  const KeyInfo before = dev_->QueryKey(k).value();
  absl::Status s = MapKlm(k, 2, {{backing_.key, base_ + 4096, 300}}, kAllAccess, 0x9000);
  EXPECT_EQ(Syn(s), Syndrome::kMwBind);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(s.message(), HasSubstr("must-be-free"));
  const KeyInfo after = dev_->QueryKey(k).value();
  EXPECT_EQ(after.key, before.key);
  EXPECT_EQ(after.start_addr, before.start_addr);
  EXPECT_EQ(after.length, before.length);
  EXPECT_EQ(after.access, before.access);
  EXPECT_EQ(after.klm, before.klm);
  std::vector<uint8_t> out(4);
  EXPECT_TRUE(peer_->Read(k, 0x10000, absl::MakeSpan(out)).ok());
}

TEST_P(SimDeviceTest, CapacityAndUmrEnChecks) {
  Key k = NewIndirect(4);
  std::vector<KlmEntry> e(5, KlmEntry{backing_.key, base_, 64});
  MapRequest r;
  r.key = k;
  r.klm = e;
  r.length = 5 * 64;
  EXPECT_EQ(Syn(Map(r)), Syndrome::kMwBind);  // 5 entries (8 padded) > capacity 4
  // The backing was created umr_en; an update that makes it miss the PD is covered above. Here:
  // a map on a destroyed index is refused.
  ASSERT_TRUE(dev_->DestroyKey(k).ok());
  r.klm = absl::MakeSpan(e).subspan(0, 1);
  r.length = 64;
  EXPECT_EQ(Syn(Map(r)), Syndrome::kMwBind);
  EXPECT_THAT(dev_->QueryKey(k), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(SimDeviceTest, UpdateRewriteAndInjectedFailure) {
  // Update: narrow the range and change the variant of a live key.
  Key k = NewIndirect();
  ASSERT_TRUE(MapKlm(k, 1, {{backing_.key, base_, 1000}}, kAllAccess, 0).ok());
  UpdateRequest u;
  u.key = MakeKey(KeyIndex(k), 1);
  u.fields = kUpdateRange | kUpdateVariant;
  u.start_addr = 0;
  u.length = 10;
  u.new_variant = 9;
  ASSERT_TRUE(Run([&](Queue& q) { return q.PostUpdate(7, u); }).ok());
  k = MakeKey(KeyIndex(k), 9);
  std::vector<uint8_t> out(20);
  EXPECT_EQ(Syn(peer_->Read(k, 0, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
  EXPECT_TRUE(peer_->Read(k, 0, absl::MakeSpan(out).subspan(0, 10)).ok());
  // Update of a free key fails (must not be free).
  Key f = NewIndirect();
  u.key = f;
  EXPECT_EQ(Syn(Run([&](Queue& q) { return q.PostUpdate(7, u); })), Syndrome::kMwBind);
  // Injected failure: the next UMR fails with the given syndrome and changes nothing.
  dev_->FailNextUmrForTest(Syndrome::kLocalQpOp);
  EXPECT_EQ(Syn(Invalidate(k)), Syndrome::kLocalQpOp);
  EXPECT_FALSE(dev_->QueryKey(k).value().free);
  EXPECT_EQ(dev_->stats().injected_failures.value(), 1u);
}

TEST_P(SimDeviceTest, SelectiveSignallingAndRingWrap) {
  // 64-WQEBB ring; 3-WQEBB maps wrap the ring many times. Unsignalled successes are silent.
  const std::vector<KlmEntry> e = {{backing_.key, base_, 64}};
  std::vector<Key> keys = dev_->CreateIndirectKeys(pd_, 4, 8, {}).value();
  int completions = 0;
  for (int round = 0; round < 40; ++round) {
    for (size_t i = 0; i < keys.size(); ++i) {
      MapRequest r;
      r.key = keys[i];
      r.new_variant = static_cast<uint8_t>(round);
      r.klm = e;
      r.length = 64;
      r.require_free = false;
      r.options.signaled = (i == keys.size() - 1);
      while (q_->FreeSlots() < 4) {
        ASSERT_TRUE(q_->Flush(absl::Seconds(5)).ok());
        Completion c[8];
        completions += q_->Poll(absl::MakeSpan(c));
      }
      ASSERT_TRUE(q_->PostMap(round * 100 + i, r).ok());
    }
    ASSERT_TRUE(q_->Doorbell().ok());
  }
  ASSERT_TRUE(q_->Flush(absl::Seconds(5)).ok());
  Completion c[64];
  completions += q_->Poll(absl::MakeSpan(c));
  EXPECT_EQ(completions, 40);
  EXPECT_EQ(dev_->stats().umrs_executed.value(), 40u * 8 + 0u + 0u);
  EXPECT_EQ(dev_->QueryKey(keys[3]).value().key, MakeKey(KeyIndex(keys[3]), 39));
}

TEST_P(SimDeviceTest, ErrorsCompleteEvenUnsignalled) {
  Key live = NewIndirect();
  ASSERT_TRUE(MapKlm(live, 1, {{backing_.key, base_, 64}}, kAllAccess).ok());
  MapRequest r;
  r.key = live;
  std::vector<KlmEntry> e = {{backing_.key, base_, 64}};
  r.klm = e;
  r.length = 64;
  r.options.signaled = false;
  ASSERT_TRUE(q_->PostMap(77, r).ok());
  ASSERT_TRUE(q_->Doorbell().ok());
  ASSERT_TRUE(q_->Flush(absl::Seconds(5)).ok());
  Completion c[2];
  ASSERT_EQ(q_->Poll(absl::MakeSpan(c)), 1u);
  EXPECT_EQ(c[0].request_id, 77u);
  EXPECT_EQ(c[0].syndrome, Syndrome::kMwBind);
}

TEST_P(SimDeviceTest, DelayedCompletions) {
  dev_->DelayCompletionsForTest(absl::Milliseconds(20));
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(Invalidate(backing_.key).ok());
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(20));
}

TEST_P(SimDeviceTest, MttDirectKeyMapAndRewrite) {
  Key d = dev_->CreateDirectKeys(pd_, 16, 1, {}).value()[0];
  std::vector<MttEntry> m(2);
  m[0] = MttEntry{base_ + 3 * kPage, true, true};
  m[1] = MttEntry{base_ + 1 * kPage, true, false};
  MapRequest r;
  r.key = d;
  r.new_variant = 4;
  r.layout = Layout::kMtt;
  r.mtt = m;
  r.log_entity_size = 12;
  r.access = kAllAccess;
  r.start_addr = 0x100000;
  r.length = 2 * kPage;
  ASSERT_TRUE(Map(r).ok());
  d = MakeKey(KeyIndex(d), 4);
  std::vector<uint8_t> out(8);
  ASSERT_TRUE(peer_->Read(d, 0x100000 + kPage + 3, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(kPage + 3));
  // Per-entry wr_en: page 1 is read-only.
  EXPECT_EQ(Syn(peer_->Write(d, 0x100000 + kPage, out)), Syndrome::kRemoteAccess);
  EXPECT_TRUE(peer_->Write(d, 0x100000, out).ok());
  // Rewrite entries [0, 8): page 0 now points at page 5.
  std::vector<MttEntry> rw(8);
  rw[0] = MttEntry{base_ + 5 * kPage, true, true};
  ASSERT_TRUE(Run([&](Queue& q) { return q.PostRewriteTranslation(7, d, 0, rw, {}); }).ok());
  ASSERT_TRUE(peer_->Read(d, 0x100000 + 1, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], At(5 * kPage + 1));
  EXPECT_EQ(Syn(peer_->Read(d, 0x100000 + kPage, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
  EXPECT_THAT(q_->PostRewriteTranslation(7, d, 4, rw, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(SimDeviceTest, ConcurrentAccessesDuringRemaps) {
  // Readers translate through a key while the engine remaps and invalidates it: every read
  // either succeeds with the bytes of one of the two layouts or fails a key check (TSAN-clean).
  Key k = NewIndirect();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      std::vector<uint8_t> out(32);
      for (int i = 0; i < 300; ++i) {  // bounded, independent of the writer
        for (int v = 0; v < 4; ++v) {
          if (peer_->Read(MakeKey(KeyIndex(k), v), 0, absl::MakeSpan(out)).ok()) {
            EXPECT_TRUE(out[0] == At(0) || out[0] == At(kPage));
            ok.fetch_add(1);
          }
        }
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    const uint64_t src = (round % 2) ? base_ + kPage : base_;
    ASSERT_TRUE(
        MapKlm(k, static_cast<uint8_t>(round % 4), {{backing_.key, src, 64}}, kAllAccess, 0).ok());
    ASSERT_TRUE(Invalidate(MakeKey(KeyIndex(k), round % 4)).ok());
  }
  stop.store(true);
  for (auto& r : readers) r.join();
  EXPECT_EQ(dev_->stats().translation_errors.value() + ok.load(), 2u * 300 * 4);
}

INSTANTIATE_TEST_SUITE_P(Modes, SimDeviceTest,
                         ::testing::Values(ExecutionMode::kInline, ExecutionMode::kThread),
                         [](const auto& info) {
                           return info.param == ExecutionMode::kInline ? "Inline" : "Thread";
                         });

TEST(SimBackendTest, OpenByNameAndSpec) {
  RegisterBackend();
  RegisterBackend();  // idempotent
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice("sim:mode=thread,max_indirection=3");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->capabilities().backend, "sim");
  EXPECT_EQ((*d)->capabilities().max_indirection, 3u);
  EXPECT_THAT(OpenDevice("sim:bogus=1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(OpenDevice("nosuch"), StatusIs(absl::StatusCode::kNotFound));
}

// --device=auto: mlx5, else verbs, else sim — here a verbs that cannot open and no mlx5 in the
// build, so the sim, with the reasons for the others.
TEST(SimBackendTest, AutoFallsBackToTheSimAndSaysWhy) {
  RegisterBackend();
  (void)hca::RegisterBackend(
      "verbs",
      [](const BackendSpec&, const OpenOptions&) -> absl::StatusOr<std::unique_ptr<Device>> {
        return absl::UnavailableError("verbs: no RDMA devices on this machine");
      });
  std::string why;
  OpenOptions o;
  o.selection = &why;
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice("auto", o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->capabilities().backend, "sim");
  EXPECT_THAT(why, ::testing::HasSubstr("auto chose sim (sim0)"));
  EXPECT_THAT(why, ::testing::HasSubstr("not mlx5: no hca backend 'mlx5'"));
  EXPECT_THAT(why, ::testing::HasSubstr("not verbs: verbs: no RDMA devices on this machine"));
  EXPECT_THAT(OpenDevice("auto:x"), StatusIs(absl::StatusCode::kInvalidArgument));
  // auto:rdma never falls back to the sim: with no RDMA device here (the sim registered and
  // openable) it opens nothing, and says why for each real backend.
  absl::Status rdma = OpenDevice("auto:rdma", o).status();
  EXPECT_THAT(rdma, StatusIs(absl::StatusCode::kNotFound)) << rdma;
  EXPECT_THAT(rdma.message(), ::testing::HasSubstr("device 'auto:rdma' found nothing to open"));
  EXPECT_THAT(rdma.message(), ::testing::HasSubstr("verbs: no RDMA devices on this machine"));
  ASSERT_TRUE(OpenDevice("sim", o).ok());
  EXPECT_EQ(why, "named sim");
}

TEST(SimBackendTest, StatsRegistered) {
  base::stats::Registry registry;
  OpenOptions open;
  open.stats_registry = &registry;
  auto dev = NewSimDevice(SimOptions{}, open).value();
  bool found = false;
  for (const auto& s : registry.Snapshot()) found |= (s.component == "hca_sim");
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace regcache::hca::sim