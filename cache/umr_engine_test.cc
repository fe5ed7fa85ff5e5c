// Direct tests of the UMR engine (cache/umr_engine.h) over the sim device: maps and
// invalidations take effect on the device, batches resolve every op, fenced ops order after
// what came before, device errors and post errors reach the op they belong to, timeouts are
// reported, and concurrent callers each get their own results.
#include "cache/umr_engine.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/test_util.h"
#include "cache/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"

using ::regcache::base::StatusIs;

namespace regcache::cache {
namespace {

using ::regcache::cache::testing::Memory;

constexpr uint64_t kPage = 4096;

EngineOptions TestEngineOptions() {
  EngineOptions o;
  o.queues_per_tenant = 2;
  o.queue_depth = 256;
  return o;
}

class UmrEngineTest : public ::testing::Test {
 protected:
  void Init(const EngineOptions& options = TestEngineOptions(),
            hca::sim::ExecutionMode mode = hca::sim::ExecutionMode::kInline) {
    hca::sim::SimOptions sim;
    sim.mode = mode;
    ASSERT_NO_FATAL_FAILURE(::regcache::cache::testing::OpenSimWithPd(sim, &device_, &pd_));
    auto backing = device_->RegisterBacking(pd_, mem_.va(), mem_.size(), hca::kAllAccess, {});
    ASSERT_TRUE(backing.ok()) << backing.status();
    backing_ = *backing;
    auto engine = UmrEngine::Create(device_.get(), pd_, options, &stats_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    auto peer = device_->CreatePeer(pd_);
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = std::move(*peer);
  }

  std::vector<hca::Key> MakeKeys(uint32_t count, hca::Pd pd) {
    auto keys = device_->CreateIndirectKeys(pd, 4, count, {});
    EXPECT_TRUE(keys.ok()) << keys.status();
    return keys.ok() ? *keys : std::vector<hca::Key>{};
  }

  // A map of `key` (currently `key`'s full value) over page `page` of the test memory.
  UmrOp Map(hca::Key key, uint8_t new_variant, uint64_t page, bool fence = false) {
    UmrOp op;
    op.kind = UmrOp::Kind::kMap;
    op.klm = {hca::KlmEntry{backing_.key, mem_.va() + page * kPage, kPage}};
    op.map.key = key;
    op.map.new_variant = new_variant;
    op.map.layout = hca::Layout::kKlm;
    op.map.access = hca::kAllAccess;
    op.map.start_addr = mem_.va() + page * kPage;
    op.map.length = kPage;
    op.map.require_free = true;
    op.fence = fence;
    return op;
  }

  void Execute(std::vector<UmrOp>& ops) {
    std::vector<UmrOp*> ptrs;
    for (UmrOp& op : ops) ptrs.push_back(&op);
    engine_->Execute(ptrs);
  }

  absl::Status PeerWrite(hca::Key rkey, uint64_t page, const std::string& text) {
    return peer_->Write(
        rkey, mem_.va() + page * kPage,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  // `count` new keys, each mapped over one page (key i over page i) in one batch; every map
  // must succeed.
  void MapBatch(uint32_t count, std::vector<hca::Key>* keys, std::vector<UmrOp>* maps) {
    *keys = MakeKeys(count, pd_);
    ASSERT_EQ(keys->size(), count);
    for (uint32_t i = 0; i < count; ++i) maps->push_back(Map((*keys)[i], 1, i));
    Execute(*maps);
    for (uint32_t i = 0; i < count; ++i) {
      ASSERT_TRUE((*maps)[i].result.ok()) << i << ": " << (*maps)[i].result;
    }
  }
  std::string PageText(uint64_t page, size_t length) {
    return std::string(reinterpret_cast<const char*>(mem_.data() + page * kPage), length);
  }

  hca::KeyInfo Query(hca::Key key) {
    auto info = device_->QueryKey(key);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : hca::KeyInfo{};
  }

  CacheStats stats_;
  Memory mem_{64 * kPage};
  std::unique_ptr<hca::sim::SimDevice> device_;
  hca::Pd pd_;
  hca::Backing backing_;
  std::unique_ptr<UmrEngine> engine_;
  std::unique_ptr<hca::Peer> peer_;
};

TEST_F(UmrEngineTest, CreateRefusesZeroQueues) {
  Init();
  EngineOptions o = TestEngineOptions();
  o.queues_per_tenant = 0;
  auto engine = UmrEngine::Create(device_.get(), pd_, o, &stats_);
  EXPECT_THAT(engine, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(UmrEngineTest, MapThenInvalidate) {
  Init();
  const hca::Key key = MakeKeys(1, pd_)[0];
  std::vector<UmrOp> map = {Map(key, 1, /*page=*/3)};
  Execute(map);
  ASSERT_TRUE(map[0].result.ok()) << map[0].result;

  // OK means the device completed it: the key is live with the new variant and carries data.
  const hca::Key mapped = hca::MakeKey(hca::KeyIndex(key), 1);
  hca::KeyInfo info = Query(mapped);
  EXPECT_FALSE(info.free);
  EXPECT_EQ(info.key, mapped);
  EXPECT_EQ(info.start_addr, mem_.va() + 3 * kPage);
  EXPECT_EQ(info.length, kPage);
  ASSERT_TRUE(PeerWrite(mapped, 3, "through the map").ok());
  EXPECT_EQ(PageText(3, 15), "through the map");
  EXPECT_THAT(PeerWrite(key, 3, "old variant"), StatusIs(absl::StatusCode::kPermissionDenied));

  std::vector<UmrOp> inv = {UmrOp::Invalidate(mapped, /*fence=*/true)};
  Execute(inv);
  ASSERT_TRUE(inv[0].result.ok()) << inv[0].result;
  EXPECT_TRUE(Query(mapped).free);
  EXPECT_THAT(PeerWrite(mapped, 3, "refused"), StatusIs(absl::StatusCode::kPermissionDenied));

  EXPECT_EQ(stats_.umr_posted.value(), 2u);
  EXPECT_EQ(stats_.umr_batches.value(), 2u);
  EXPECT_EQ(stats_.umr_failed.value(), 0u);
  EXPECT_EQ(stats_.umr_timeouts.value(), 0u);
  EXPECT_EQ(stats_.umr_latency_ns.Snapshot().count, 2u);
}

TEST_F(UmrEngineTest, EmptyBatchDoesNothing) {
  Init();
  engine_->Execute({});
  EXPECT_EQ(stats_.umr_batches.value(), 0u);
  EXPECT_EQ(stats_.umr_latency_ns.Snapshot().count, 0u);
}

TEST_F(UmrEngineTest, ABatchOfManyOpsGetsEveryResult) {
  Init();
  constexpr uint32_t kOps = 60;
  std::vector<hca::Key> keys;
  std::vector<UmrOp> maps;
  ASSERT_NO_FATAL_FAILURE(MapBatch(kOps, &keys, &maps));
  for (uint32_t i = 0; i < kOps; ++i) {
    const hca::Key mapped = hca::MakeKey(hca::KeyIndex(keys[i]), 1);
    ASSERT_FALSE(Query(mapped).free) << i;
    ASSERT_TRUE(PeerWrite(mapped, i, "page " + std::to_string(i)).ok()) << i;
  }
  EXPECT_EQ(PageText(7, 6), "page 7");
  EXPECT_EQ(PageText(59, 7), "page 59");

  std::vector<UmrOp> invs;
  for (uint32_t i = 0; i < kOps; ++i) {
    invs.push_back(UmrOp::Invalidate(hca::MakeKey(hca::KeyIndex(keys[i]), 1), i == 0));
  }
  Execute(invs);
  for (uint32_t i = 0; i < kOps; ++i) {
    ASSERT_TRUE(invs[i].result.ok()) << i << ": " << invs[i].result;
    ASSERT_TRUE(Query(keys[i]).free) << i;
  }
  EXPECT_EQ(stats_.umr_posted.value(), 2 * kOps);
  EXPECT_EQ(stats_.umr_batches.value(), 2u);
  EXPECT_EQ(stats_.umr_failed.value(), 0u);
}

TEST_F(UmrEngineTest, ABatchLargerThanTheRingRetiresItsHeadWhileItPosts) {
  EngineOptions small = TestEngineOptions();
  small.queues_per_tenant = 1;
  small.queue_depth = 64;  // 21 single-entry maps of 3 basic blocks each
  Init(small, hca::sim::ExecutionMode::kThread);
  std::vector<hca::Key> keys;
  std::vector<UmrOp> maps;
  ASSERT_NO_FATAL_FAILURE(MapBatch(60, &keys, &maps));
  // The queue is still healthy: a later single op goes through.
  std::vector<UmrOp> inv;
  inv.push_back(UmrOp::Invalidate(hca::MakeKey(hca::KeyIndex(keys[0]), 1), /*fence=*/true));
  Execute(inv);
  EXPECT_TRUE(inv[0].result.ok()) << inv[0].result;
  EXPECT_EQ(stats_.umr_failed.value(), 0u);
}

// The largest inline maps (52 KLM entries: 15 basic blocks each) in the smallest rings that hold
// one (16 blocks) or two (32): signalling follows ring space, so each full ring has a signalled
// WQE in it and the batch goes through instead of waiting out its deadline.
TEST_F(UmrEngineTest, ABatchOfTheLargestInlineMapsGoesThroughTheSmallestRing) {
  for (uint32_t depth : {16u, 32u}) {
    SCOPED_TRACE(depth);
    engine_.reset();  // before the device it posts to
    peer_.reset();
    EngineOptions small = TestEngineOptions();
    small.queues_per_tenant = 1;
    small.queue_depth = depth;
    Init(small, hca::sim::ExecutionMode::kThread);
    constexpr uint32_t kEntries = 52;
    constexpr uint32_t kMaps = 24;
    auto keys = device_->CreateIndirectKeys(pd_, kEntries, kMaps, {});
    ASSERT_TRUE(keys.ok()) << keys.status();
    std::vector<UmrOp> maps;
    for (uint32_t i = 0; i < kMaps; ++i) {
      UmrOp op = Map((*keys)[i], 1, i);
      op.klm.clear();
      for (uint32_t e = 0; e < kEntries; ++e) {
        op.klm.push_back(hca::KlmEntry{backing_.key, mem_.va() + i * kPage + e * 64, 64});
      }
      op.map.length = kEntries * 64;
      maps.push_back(std::move(op));
    }
    Execute(maps);
    for (uint32_t i = 0; i < kMaps; ++i) {
      ASSERT_TRUE(maps[i].result.ok()) << i << ": " << maps[i].result;
    }
    EXPECT_EQ(stats_.umr_failed.value(), 0u);
    const hca::Key last = hca::MakeKey(hca::KeyIndex((*keys)[kMaps - 1]), 1);
    ASSERT_TRUE(PeerWrite(last, kMaps - 1, "far").ok());
    EXPECT_EQ(PageText(kMaps - 1, 3), "far");
  }
}

TEST_F(UmrEngineTest, FencedOpsStartAfterEverythingBefore) {
  // With an engine thread per queue, so the requests really run apart from the poster. Each
  // op needs the one before it complete: the invalidate needs the map's key live, the second
  // map needs the key free again (require_free).
  Init(TestEngineOptions(), hca::sim::ExecutionMode::kThread);
  const hca::Key key = MakeKeys(1, pd_)[0];
  const uint32_t index = hca::KeyIndex(key);
  for (int round = 0; round < 10; ++round) {
    const uint8_t v = static_cast<uint8_t>(2 * round);
    std::vector<UmrOp> ops;
    ops.push_back(Map(hca::MakeKey(index, v), v + 1, 0));
    ops.push_back(UmrOp::Invalidate(hca::MakeKey(index, v + 1), /*fence=*/true));
    ops.push_back(Map(hca::MakeKey(index, v + 1), v + 2, 1, /*fence=*/true));
    Execute(ops);
    for (const UmrOp& op : ops) ASSERT_TRUE(op.result.ok()) << round << ": " << op.result;
    const hca::KeyInfo info = Query(hca::MakeKey(index, v + 2));
    ASSERT_FALSE(info.free);
    ASSERT_EQ(hca::KeyVariant(info.key), v + 2);
    ASSERT_EQ(info.start_addr, mem_.va() + kPage);
    // Free it for the next round.
    std::vector<UmrOp> inv = {UmrOp::Invalidate(hca::MakeKey(index, v + 2), true)};
    Execute(inv);
    ASSERT_TRUE(inv[0].result.ok()) << inv[0].result;
  }
  EXPECT_EQ(stats_.umr_failed.value(), 0u);
}

TEST_F(UmrEngineTest, InvalidatingAKeyThatDoesNotExistReportsTheDeviceError) {
  Init();
  // No key was ever created at this index: the device refuses the UMR (MW_BIND).
  std::vector<UmrOp> ops = {UmrOp::Invalidate(hca::MakeKey(60000, 0), false)};
  Execute(ops);
  EXPECT_THAT(ops[0].result, StatusIs(absl::StatusCode::kFailedPrecondition)) << ops[0].result;
  const auto error = hca::ErrorOf(ops[0].result);
  ASSERT_TRUE(error.has_value()) << ops[0].result;
  EXPECT_EQ(error->syndrome, hca::Syndrome::kMwBind);
  EXPECT_EQ(stats_.umr_failed.value(), 1u);
  EXPECT_EQ(stats_.umr_posted.value(), 1u);
}

TEST_F(UmrEngineTest, MappingAKeyOfAnotherPdReportsTheDeviceError) {
  Init();
  auto other_pd = device_->AllocPd();
  ASSERT_TRUE(other_pd.ok());
  const hca::Key foreign = MakeKeys(1, *other_pd)[0];
  std::vector<UmrOp> ops = {Map(foreign, 1, 0)};
  Execute(ops);
  EXPECT_THAT(ops[0].result, StatusIs(absl::StatusCode::kFailedPrecondition)) << ops[0].result;
  const auto error = hca::ErrorOf(ops[0].result);
  ASSERT_TRUE(error.has_value()) << ops[0].result;
  EXPECT_EQ(error->syndrome, hca::Syndrome::kMwBind);
  EXPECT_TRUE(Query(foreign).free);  // unchanged
}

TEST_F(UmrEngineTest, MappingAKeyThatIsNotFreeReportsTheDeviceError) {
  Init();
  const hca::Key key = MakeKeys(1, pd_)[0];
  std::vector<UmrOp> first = {Map(key, 1, 0)};
  Execute(first);
  ASSERT_TRUE(first[0].result.ok()) << first[0].result;
  // Mapped again without an invalidation in between: the free check refuses it.
  std::vector<UmrOp> again = {Map(hca::MakeKey(hca::KeyIndex(key), 1), 2, 1)};
  Execute(again);
  EXPECT_THAT(again[0].result, StatusIs(absl::StatusCode::kFailedPrecondition)) << again[0].result;
  const hca::KeyInfo info = Query(key);
  EXPECT_EQ(hca::KeyVariant(info.key), 1);  // the first map stands
  EXPECT_EQ(info.start_addr, mem_.va());
}

TEST_F(UmrEngineTest, AFailureInTheMiddleOfABatchIsThatOpsAlone) {
  Init();
  const std::vector<hca::Key> keys = MakeKeys(2, pd_);
  std::vector<UmrOp> ops;
  ops.push_back(Map(keys[0], 1, 0));
  ops.push_back(UmrOp::Invalidate(hca::MakeKey(60000, 0), false));  // no such key
  ops.push_back(Map(keys[1], 1, 1));
  Execute(ops);
  EXPECT_TRUE(ops[0].result.ok()) << ops[0].result;
  EXPECT_THAT(ops[1].result, StatusIs(absl::StatusCode::kFailedPrecondition)) << ops[1].result;
  EXPECT_TRUE(ops[2].result.ok()) << ops[2].result;
  EXPECT_FALSE(Query(keys[0]).free);
  EXPECT_FALSE(Query(keys[1]).free);
  EXPECT_EQ(stats_.umr_posted.value(), 3u);
  EXPECT_EQ(stats_.umr_failed.value(), 1u);
  EXPECT_EQ(stats_.umr_batches.value(), 1u);
}

TEST_F(UmrEngineTest, AnOpThatCannotBePostedFailsAloneAndTheRestComplete) {
  Init();
  const std::vector<hca::Key> keys = MakeKeys(2, pd_);
  std::vector<UmrOp> ops;
  ops.push_back(Map(keys[0], 1, 0));
  // A zero-length KLM entry breaks PostMap's REQUIRES: refused at post, nothing reaches the
  // ring. As the batch's last op it was to be the signalled one, so the engine must still find
  // out that the op before it completed.
  ops.push_back(Map(keys[1], 1, 1));
  ops.back().klm[0].length = 0;
  Execute(ops);
  EXPECT_TRUE(ops[0].result.ok()) << ops[0].result;
  EXPECT_THAT(ops[1].result, StatusIs(absl::StatusCode::kInvalidArgument)) << ops[1].result;
  EXPECT_NE(ops[1].result.message().find("post UMR"), absl::string_view::npos) << ops[1].result;
  EXPECT_FALSE(Query(keys[0]).free);
  EXPECT_TRUE(Query(keys[1]).free);
  EXPECT_EQ(stats_.umr_posted.value(), 1u);
  EXPECT_EQ(stats_.umr_failed.value(), 1u);

  // The queue is still good.
  std::vector<UmrOp> next = {Map(keys[1], 1, 1)};
  Execute(next);
  EXPECT_TRUE(next[0].result.ok()) << next[0].result;
  EXPECT_FALSE(Query(keys[1]).free);
}

TEST_F(UmrEngineTest, AnOpWithoutACompletionInTimeReportsDeadlineExceeded) {
  EngineOptions o = TestEngineOptions();
  o.completion_timeout = absl::Milliseconds(50);
  Init(o, hca::sim::ExecutionMode::kThread);
  const hca::Key key = MakeKeys(1, pd_)[0];
  device_->DelayCompletionsForTest(absl::Milliseconds(300));
  std::vector<UmrOp> ops = {Map(key, 1, 0)};
  Execute(ops);
  device_->DelayCompletionsForTest(absl::ZeroDuration());
  EXPECT_THAT(ops[0].result, StatusIs(absl::StatusCode::kDeadlineExceeded)) << ops[0].result;
  EXPECT_EQ(stats_.umr_timeouts.value(), 1u);
  EXPECT_EQ(stats_.umr_latency_ns.Snapshot().count, 1u);
  // The engine forgot the op: destroying it with the late completion still due is fine.
}

TEST_F(UmrEngineTest, ConcurrentCallersEachGetTheirOwnResults) {
  Init(TestEngineOptions(), hca::sim::ExecutionMode::kThread);
  constexpr int kThreads = 4, kKeysPerThread = 4, kRounds = 20;
  std::vector<std::vector<hca::Key>> keys;
  for (int t = 0; t < kThreads; ++t) keys.push_back(MakeKeys(kKeysPerThread, pd_));
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const uint8_t v = static_cast<uint8_t>(round);
        std::vector<UmrOp> maps, invs;
        for (int k = 0; k < kKeysPerThread; ++k) {
          const uint32_t index = hca::KeyIndex(keys[t][k]);
          maps.push_back(Map(hca::MakeKey(index, v), v + 1, t * kKeysPerThread + k));
          invs.push_back(UmrOp::Invalidate(hca::MakeKey(index, v + 1), k == 0));
        }
        Execute(maps);
        for (const UmrOp& op : maps) failures[t] += !op.result.ok();
        Execute(invs);
        for (const UmrOp& op : invs) failures[t] += !op.result.ok();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  // Every key went through every round: free again, at the last round's variant.
  for (int t = 0; t < kThreads; ++t) {
    for (hca::Key key : keys[t]) {
      const hca::KeyInfo info = Query(key);
      EXPECT_TRUE(info.free);
      EXPECT_EQ(hca::KeyVariant(info.key), kRounds);
    }
  }
  constexpr uint64_t kBatches = uint64_t{kThreads} * kRounds * 2;
  EXPECT_EQ(stats_.umr_posted.value(), kBatches * kKeysPerThread);
  EXPECT_EQ(stats_.umr_batches.value(), kBatches);
  EXPECT_EQ(stats_.umr_failed.value(), 0u);
  EXPECT_EQ(stats_.umr_latency_ns.Snapshot().count, kBatches);
}

}  // namespace
}  // namespace regcache::cache