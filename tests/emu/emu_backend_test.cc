// The mlx5 backend against the emulated ConnectX when things go wrong (docs/mlx5.md, UMR queues
// and Keys; docs/mlx5emu.md, Faults on demand): an error CQE at a chosen WQE, a firmware
// failure, a late and a lost completion, a failed ibv_reg_mr, a device that dies; the hardware
// behaviours no source states, absent, with the backend option that does not work around them;
// and a key whose attachments add up to more than 4 GiB. The backend must recover or fail as
// docs/mlx5.md says, and leave nothing behind (TearDown deallocates the PD, which the emulator
// refuses while anything of it remains).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/device.h"
#include "hca/mlx5/mlx5_device.h"
#include "hca/mlx5emu/mlx5emu.h"
#include "hca/status.h"

namespace regcache::hca {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kBytes = 1 << 20;
constexpr uint64_t kKeyBase = 0x7000'0000'0000;

class EmuBackendTest : public ::testing::Test {
 protected:
  // Opens mlx5_0 with emulator `options` and backend `spec_params` (",name=value").
  void Open(const std::string& options, const std::string& spec_params = "") {
    ASSERT_TRUE(mlx5emu::Configure(options).ok());
    mlx5emu::ClearViolations();
    mlx5::RegisterBackend();
    auto d = OpenDevice("mlx5:mlx5_0" + spec_params);
    ASSERT_TRUE(d.ok()) << d.status();
    dev_ = std::move(*d);
    pd_ = dev_->AllocPd().value();
    mem_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    ASSERT_NE(mem_, MAP_FAILED);
    backing_ = dev_->RegisterBacking(pd_, Addr(0), kBytes, kAllAccess, {}).value();
    queue_ = dev_->CreateQueue(pd_, QueueOptions{64}).value();
  }
  void TearDown() override {
    mlx5emu::FailNthUmrWqe(0, 0);
    mlx5emu::DelayUmrCompletions(absl::ZeroDuration());
    if (dev_ == nullptr) return;
    peer_.reset();
    queue_.reset();
    for (Key k : keys_) (void)dev_->DestroyKey(k);
    EXPECT_TRUE(dev_->DestroyKey(backing_.key).ok());
    EXPECT_TRUE(dev_->DeallocPd(pd_).ok()) << "something of the PD was left behind";
    dev_.reset();
    munmap(mem_, kBytes);
    if (expect_clean_) {
      EXPECT_TRUE(mlx5emu::Violations().empty());
    }
  }

  uint64_t Addr(uint64_t offset) const { return reinterpret_cast<uint64_t>(mem_) + offset; }
  Key NewKey(uint32_t capacity = 4) {
    auto k = dev_->CreateIndirectKeys(pd_, capacity, 1, {});
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return 0;
    keys_.push_back(k->front());
    return k->front();
  }
  // A map of `key` onto `klm`, one entry after the other from kKeyBase. The entries are kept in
  // the fixture: the request points at them until it is posted.
  MapRequest MapOf(Key key, std::vector<KlmEntry> klm, uint8_t variant) {
    klm_ = std::move(klm);
    MapRequest r;
    r.key = key;
    r.new_variant = variant;
    r.klm = klm_;
    r.access = kLocalRead | kRemoteRead | kRemoteWrite;
    r.start_addr = kKeyBase;
    for (const KlmEntry& e : klm_) r.length += e.length;
    return r;
  }
  MapRequest MapOf(Key key, const KlmEntry& e, uint8_t variant) {
    return MapOf(key, std::vector<KlmEntry>{e}, variant);
  }
  // A map of a new key with more entries than one WQE carries: it goes by pointer.
  MapRequest LongMap() {
    const uint32_t n = dev_->capabilities().max_inline_klm + 4;
    return MapOf(NewKey(n), std::vector<KlmEntry>(n, KlmEntry{backing_.key, Addr(0), 4096}), 1);
  }
  // Posts, rings, waits; the completion's status.
  absl::Status Run(const MapRequest& r) {
    const uint64_t id = next_id_++;
    if (absl::Status s = queue_->PostMap(id, r); !s.ok()) return s;
    if (absl::Status s = queue_->Doorbell(); !s.ok()) return s;
    if (absl::Status s = queue_->Flush(absl::Seconds(10)); !s.ok()) return s;
    Completion c;
    if (queue_->Poll(absl::MakeSpan(&c, 1)) != 1) return absl::InternalError("no completion");
    EXPECT_EQ(c.request_id, id);
    return c.status;
  }
  absl::Status Map(Key key, uint8_t variant) {
    return Run(MapOf(key, KlmEntry{backing_.key, Addr(0), 4096}, variant));
  }
  Peer& peer() {
    if (peer_ == nullptr) peer_ = dev_->CreatePeer(pd_).value();
    return *peer_;
  }

  std::unique_ptr<Device> dev_;
  Pd pd_;
  uint8_t* mem_ = nullptr;
  Backing backing_;
  std::unique_ptr<Queue> queue_;
  std::unique_ptr<Peer> peer_;
  std::vector<Key> keys_;
  std::vector<KlmEntry> klm_;
  uint64_t next_id_ = 1;
  bool expect_clean_ = true;
};

Syndrome SyndromeOf(const absl::Status& s) {
  const std::optional<ErrorInfo> e = ErrorOf(s);
  return e ? e->syndrome : Syndrome::kNone;
}

TEST_F(EmuBackendTest, AnErrorCqeFailsItsMapFlushesTheNextAndTheQueueRecovers) {
  Open("");
  const Key a = NewKey(), b = NewKey(), c = NewKey();
  mlx5emu::FailNthUmrWqe(1, static_cast<uint8_t>(Syndrome::kMwBind), 0x42);
  ASSERT_TRUE(queue_->PostMap(1, MapOf(a, {backing_.key, Addr(0), 4096}, 1)).ok());
  ASSERT_TRUE(queue_->PostMap(2, MapOf(b, {backing_.key, Addr(0), 4096}, 1)).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(10)).ok());
  Completion done[2];
  ASSERT_EQ(queue_->Poll(absl::MakeSpan(done)), 2u);
  EXPECT_EQ(SyndromeOf(done[0].status), Syndrome::kMwBind) << done[0].status;
  EXPECT_EQ(done[0].vendor_syndrome, 0x42);
  EXPECT_EQ(SyndromeOf(done[1].status), Syndrome::kWrFlush) << done[1].status;
  EXPECT_TRUE(dev_->QueryKey(a).value().free) << "the refused map changed the key";
  // The next post resets and reconnects the queue pair; the map works.
  ASSERT_TRUE(Map(c, 1).ok());
  ASSERT_TRUE(peer().Write(MakeKey(KeyIndex(c), 1), kKeyBase, std::vector<uint8_t>(8, 7)).ok());
  EXPECT_EQ(mem_[0], 7);
}

TEST_F(EmuBackendTest, AFirmwareFailureNamesItsStatusAndSyndrome) {
  Open("");
  mlx5emu::FailNextCommand(0x200, 0x0f /* NO_RESOURCES */, 0xabcd);
  auto k = dev_->CreateIndirectKeys(pd_, 4, 1, {});
  ASSERT_FALSE(k.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(k.status())) << k.status();
  EXPECT_NE(k.status().message().find("NO_RESOURCES"), std::string::npos) << k.status();
  EXPECT_NE(k.status().message().find("0x0000abcd"), std::string::npos) << k.status();
  EXPECT_NE(NewKey(), 0u);  // the next command succeeds
}

TEST_F(EmuBackendTest, AFirmwareFailureOfQueryHcaCapRefusesToOpen) {
  ASSERT_TRUE(mlx5emu::Configure("").ok());
  mlx5::RegisterBackend();
  mlx5emu::FailNextCommand(0x100, 0x01 /* INTERNAL_ERR */, 0x77);
  auto d = OpenDevice("mlx5:mlx5_0");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("QUERY_HCA_CAP"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("INTERNAL_ERR"), std::string::npos) << d.status();
}

TEST_F(EmuBackendTest, ALateCompletionIsWaitedFor) {
  Open("");
  mlx5emu::DelayUmrCompletions(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Map(NewKey(), 1).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
}

// WQEs execute in order and errors always complete: a later CQE completes a WQE whose own CQE
// was lost (the cache's engine counts it done by that order).
TEST_F(EmuBackendTest, ALostCompletionIsCoveredByTheNextOne) {
  Open("");
  const Key k = NewKey();
  mlx5emu::LoseUmrCompletions(1);
  ASSERT_TRUE(queue_->PostMap(1, MapOf(k, {backing_.key, Addr(0), 4096}, 1)).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(10)).ok());  // its NOP's CQE retires the map
  Completion c;
  EXPECT_EQ(queue_->Poll(absl::MakeSpan(&c, 1)), 0u);
  EXPECT_FALSE(dev_->QueryKey(k).value().free) << "the map executed";
  ASSERT_TRUE(Map(NewKey(), 1).ok());
}

// With nothing after it, a lost completion times the flush out; the queue is replaced (as the
// cache's engine does when an operation misses its deadline) and the new one works.
TEST_F(EmuBackendTest, ALostLastCompletionTimesTheFlushOutAndAFreshQueueWorks) {
  Open("");
  const Key k = NewKey();
  mlx5emu::LoseUmrCompletions(2);  // the map's and the flush NOP's
  ASSERT_TRUE(queue_->PostMap(1, MapOf(k, {backing_.key, Addr(0), 4096}, 1)).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  const absl::Status s = queue_->Flush(absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  queue_.reset();
  queue_ = dev_->CreateQueue(pd_, QueueOptions{64}).value();
  ASSERT_TRUE(Map(NewKey(), 1).ok());
}

TEST_F(EmuBackendTest, AFullRingOfWorkNeverOverrunsTheCq) {
  Open("");
  const Key k = NewKey();
  ASSERT_TRUE(Map(k, 1).ok());
  // Invalidations until the ring refuses, without polling: the CQ must hold every completion.
  uint64_t posted = 0;
  while (queue_->PostInvalidate(100 + posted, k, PostOptions{.signaled = true}).ok()) ++posted;
  ASSERT_GT(posted, 16u);
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(10)).ok());
  std::vector<Completion> all(posted);
  size_t got = 0;
  while (got < posted) {
    const size_t n = queue_->Poll(absl::MakeSpan(all).subspan(got));
    ASSERT_GT(n, 0u);
    got += n;
  }
  EXPECT_TRUE(mlx5emu::Violations().empty());
}

TEST_F(EmuBackendTest, AFailedRegistrationIsReportedAndLeavesNothing) {
  Open("");
  mlx5emu::FailNextRegMr(ENOMEM);
  auto b = dev_->RegisterBacking(pd_, Addr(0), 4096, kLocalWrite, {});
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(b.status())) << b.status();
  auto again = dev_->RegisterBacking(pd_, Addr(0), 4096, kLocalWrite, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(dev_->DestroyKey(again->key).ok());
}

// ibv_reg_dmabuf_mr of a descriptor that is not a dma-buf is refused as the kernel refuses it
// (dma_buf_get), with the call named, and leaves nothing in the PD (TearDown deallocates it). A
// real dma-buf's whole path runs in the vm tier (vm_dmabuf), where the kernel can export one.
TEST_F(EmuBackendTest, ADescriptorThatIsNotADmabufIsRefused) {
  Open("");
  ASSERT_TRUE(dev_->capabilities().dmabuf);
  const int memfd = memfd_create("emu-not-a-dmabuf", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, 4096), 0);
  auto b = dev_->RegisterDmabufBacking(pd_, DmabufRange{memfd, 0}, 4096, 0x7000000000, kAllAccess);
  EXPECT_TRUE(absl::IsInvalidArgument(b.status())) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "ibv_reg_dmabuf_mr")) << b.status();
  auto empty = dev_->RegisterDmabufBacking(pd_, DmabufRange{memfd, 0}, 0, 0x7000000000, kAllAccess);
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();
  close(memfd);
}

TEST_F(EmuBackendTest, ADeviceThatDiesFailsEverythingAfterAndReleasesCleanly) {
  Open("");
  const Key k = NewKey();
  ASSERT_TRUE(Map(k, 1).ok());
  EXPECT_TRUE(dev_->Health().ok()) << dev_->Health();
  mlx5emu::KillDevice("mlx5_0");
  // The backend learns it from the device's async event file (IBV_EVENT_DEVICE_FATAL), with no
  // call of its own failing first.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (dev_->Health().ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(absl::IsUnavailable(dev_->Health())) << dev_->Health();
  EXPECT_THAT(std::string(dev_->Health().message()), HasSubstr("IBV_EVENT_DEVICE_FATAL"));
  // Work in flight or posted after completes flushed; nothing new can be made.
  const absl::Status inv = [&] {
    if (absl::Status s = queue_->PostInvalidate(9, k, {}); !s.ok()) return s;
    if (absl::Status s = queue_->Doorbell(); !s.ok()) return s;
    if (absl::Status s = queue_->Flush(absl::Seconds(10)); !s.ok()) return s;
    Completion c;
    return queue_->Poll(absl::MakeSpan(&c, 1)) == 1 ? c.status : absl::InternalError("none");
  }();
  EXPECT_EQ(SyndromeOf(inv), Syndrome::kWrFlush) << inv;
  EXPECT_FALSE(dev_->CreateIndirectKeys(pd_, 4, 1, {}).ok());
  EXPECT_FALSE(dev_->CreateQueue(pd_, QueueOptions{64}).ok());
  EXPECT_FALSE(dev_->RegisterBacking(pd_, Addr(0), 4096, kLocalWrite, {}).ok());
  EXPECT_FALSE(dev_->CreatePeer(pd_).ok());
  // TearDown releases every key, the queue and the PD: destroying still works on a dead device.
}

// The behaviours no source states, absent, with the backend choice that runs into them.
TEST_F(EmuBackendTest, WithoutUmrOnDevxMkeysDevxKeysCannotBeMapped) {
  Open("umr_on_devx_mkey=0", ",mkey_api=devx");
  EXPECT_EQ(SyndromeOf(Map(NewKey(), 1)), Syndrome::kLocalQpOp);
}

TEST_F(EmuBackendTest, WithoutPointerReadsThroughAnMrLongMapsFail) {
  Open("pointer_mr_lkey=0");
  EXPECT_EQ(SyndromeOf(Run(LongMap())), Syndrome::kLocalProt);
}

TEST_F(EmuBackendTest, WithoutVariantChangesOnMlx5dvMkeysARemapFails) {
  Open("variant_on_dv_mkey=0", ",mkey_api=mlx5dv");
  EXPECT_EQ(SyndromeOf(Map(NewKey(), 1)), Syndrome::kLocalQpOp);
}

TEST_F(EmuBackendTest, WithoutDevxMkeysAutoFallsBackToMlx5dv) {
  Open("devx_mkey=0");
  const Key k = NewKey();
  ASSERT_TRUE(Map(k, 1).ok());
  // Keys made by mlx5dv_create_mkey cannot be queried: proof of the fallback.
  EXPECT_FALSE(dev_->QueryKey(k).ok());
  auto devx = OpenDevice("mlx5:mlx5_0,mkey_api=devx");
  ASSERT_TRUE(devx.ok());
  auto pd = (*devx)->AllocPd().value();
  auto refused = (*devx)->CreateIndirectKeys(pd, 4, 1, {});
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE((*devx)->DeallocPd(pd).ok());
}

// A key whose attachments add up to more than 4 GiB, one of them 2^31 bytes (the largest a
// KLM entry's byte count holds for a map): offsets past 4 GiB land where the map says.
TEST_F(EmuBackendTest, AKeyOverMoreThanFourGibTranslatesPastTheThirtyTwoBitLine) {
  Open("");
  constexpr uint64_t kBig = uint64_t{1} << 31;
  constexpr uint64_t kRegion = 3 * kBig + (1 << 20);
  void* m = mmap(nullptr, kRegion, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  const uint64_t base = reinterpret_cast<uint64_t>(m);
  BackingOptions o;
  o.on_demand = true;  // pages come as the peer touches them
  auto b = dev_->RegisterBacking(pd_, base, kRegion, kLocalWrite | kRemoteRead | kRemoteWrite, o);
  ASSERT_TRUE(b.ok()) << b.status();
  // Key offsets [0, 2^31) -> region 2^31.., [2^31, 2^32) -> region 0.., then [2^32, 2^32+2^31)
  // -> region 2^32 + 1 MiB.
  const std::vector<KlmEntry> klm = {{b->key, base + kBig, kBig},
                                     {b->key, base, kBig},
                                     {b->key, base + 2 * kBig + (1 << 20), kBig}};
  const MapRequest r = MapOf(NewKey(4), klm, 1);
  ASSERT_TRUE(Run(r).ok());
  const Key key = MakeKey(KeyIndex(r.key), 1);
  const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint64_t past = (uint64_t{1} << 32) + 4096 + 8;  // in the third attachment
  ASSERT_TRUE(peer().Write(key, kKeyBase + past, data).ok());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(m) + 2 * kBig + (1 << 20) + 4096 + 8, data.data(),
                        data.size()),
            0);
  // Across the 4 GiB line: the last bytes of the second attachment and the first of the third.
  ASSERT_TRUE(peer().Write(key, kKeyBase + (uint64_t{1} << 32) - 4, data).ok());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(m) + kBig - 4, data.data(), 4), 0);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(m) + 2 * kBig + (1 << 20), data.data() + 4, 4), 0);
  std::vector<uint8_t> back(8);
  ASSERT_TRUE(peer().Read(key, kKeyBase + past, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, data);
  EXPECT_TRUE(dev_->DestroyKey(b->key).ok());
  munmap(m, kRegion);
}

// A device the backend cannot make keys on is refused at open, with the reason.
TEST_F(EmuBackendTest, DevicesWithoutWhatTheBackendNeedsAreRefused) {
  mlx5::RegisterBackend();
  const std::pair<const char*, const char*> cases[] = {
      {"umr_indirect_mkey_disabled=1", "umr_indirect_mkey_disabled"},
      {"log_max_klm_list_size=0", "no indirect keys"},
      {"max_wqe_sz_sq=128", "cannot carry a UMR"},
      {"devx=0", "no DevX"}};
  for (const auto& [options, reason] : cases) {
    SCOPED_TRACE(options);
    ASSERT_TRUE(mlx5emu::Configure(options).ok());
    auto d = OpenDevice("mlx5:mlx5_1");
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find(reason), std::string::npos) << d.status();
  }
  // An undefined umr_fence value: the backend takes the strongest fence, and works.
  Open("umr_fence=3");
  ASSERT_TRUE(Map(NewKey(), 1).ok());
}

TEST_F(EmuBackendTest, RequestsTheBackendDoesNotOfferAreRefused) {
  Open("odp=0");
  BackingOptions iova;
  iova.iova = 0x1000;
  EXPECT_TRUE(absl::IsUnimplemented(dev_->RegisterBacking(pd_, Addr(0), 4096, 0, iova).status()));
  BackingOptions huge;
  huge.log_page_size = 21;
  EXPECT_TRUE(absl::IsInvalidArgument(dev_->RegisterBacking(pd_, Addr(0), 4096, 0, huge).status()));
  BackingOptions odp;
  odp.on_demand = true;
  EXPECT_TRUE(absl::IsUnimplemented(dev_->RegisterBacking(pd_, Addr(0), 4096, 0, odp).status()));
  EXPECT_TRUE(absl::IsUnimplemented(dev_->CreateDirectKeys(pd_, 4, 1, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(dev_->CreateQueue(pd_, QueueOptions{3}).status()));
  EXPECT_EQ(dev_->FaultEventFd(), -1);
  EXPECT_TRUE(absl::IsUnimplemented(dev_->NextFaultEvent(absl::ZeroDuration()).status()));
  EXPECT_TRUE(absl::IsUnimplemented(dev_->ResumeFault(1, true)));
  // The emulated provider imports (its probe passes): the export is the context's command fd,
  // and a region handle the context does not have is unknown.
  EXPECT_TRUE(dev_->capabilities().pd_export);
  absl::StatusOr<PdExport> e = dev_->ExportPd(pd_);
  ASSERT_TRUE(e.ok()) << e.status();
  close(e->cmd_fd);
  EXPECT_TRUE(absl::IsNotFound(
      dev_->ImportBacking(pd_, ImportedRegion{0xfffff, Addr(0), 4096, kLocalRead}).status()));
  EXPECT_TRUE(absl::IsAlreadyExists(
      dev_->ImportBacking(pd_, ImportedRegion{KeyIndex(backing_.key), Addr(0), kBytes, kLocalRead})
          .status()));  // the daemon's own memory
  EXPECT_TRUE(
      absl::IsUnimplemented(queue_->PostRewriteTranslation(1, backing_.key, 0, {}, PostOptions{})));
  EXPECT_TRUE(absl::IsInvalidArgument(OpenDevice("mlx5:mlx5_0,mkey_api=bogus").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(OpenDevice("mlx5:mlx5_0,colour=blue").status()));
}

TEST_F(EmuBackendTest, KsmKeysNeedDevxAndUpdatesAndEndpointsWork) {
  Open("", ",mkey_api=mlx5dv");
  IndirectKeyOptions ksm;
  ksm.layout = Layout::kKsm;
  EXPECT_TRUE(absl::IsUnimplemented(dev_->CreateIndirectKeys(pd_, 4, 1, ksm).status()));
  const Key k = NewKey();
  ASSERT_TRUE(Map(k, 1).ok());
  // An update of a live key's rights: reads stop.
  UpdateRequest u;
  u.key = MakeKey(KeyIndex(k), 1);
  u.fields = kUpdateAccess;
  u.access = kLocalRead | kRemoteWrite;
  ASSERT_TRUE(queue_->PostUpdate(7, u).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(10)).ok());
  Completion c;
  ASSERT_EQ(queue_->Poll(absl::MakeSpan(&c, 1)), 1u);
  ASSERT_TRUE(c.status.ok()) << c.status;
  std::vector<uint8_t> out(8);
  EXPECT_EQ(SyndromeOf(peer().Read(u.key, kKeyBase, absl::MakeSpan(out))), Syndrome::kRemoteAccess);
  auto e = dev_->CreateEndpoint(pd_, EndpointOptions{});
  ASSERT_TRUE(e.ok()) << e.status();
}

TEST_F(EmuBackendTest, CompletionsBeyondWhatThePollerTakesWaitForTheNextPoll) {
  Open("");
  const Key k = NewKey();
  ASSERT_TRUE(Map(k, 1).ok());
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(queue_->PostInvalidate(10 + i, k, {}).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(10)).ok());  // harvests all six, hands out none
  for (uint64_t i = 0; i < 6; ++i) {
    Completion c;
    ASSERT_EQ(queue_->Poll(absl::MakeSpan(&c, 1)), 1u);
    EXPECT_EQ(c.request_id, 10 + i);
  }
}

TEST_F(EmuBackendTest, AStagingBufferThatCannotBeRegisteredFailsTheLongMapOnly) {
  Open("");
  mlx5emu::FailNextRegMr(ENOMEM);
  EXPECT_FALSE(Run(LongMap()).ok());
  EXPECT_TRUE(Map(NewKey(), 1).ok());
  EXPECT_TRUE(Run(LongMap()).ok());  // the next long map registers the buffer
}

}  // namespace
}  // namespace regcache::hca
