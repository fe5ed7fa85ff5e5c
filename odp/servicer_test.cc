// The fault servicer against the software HCA: a peer touches absent pages of an on-demand
// backing, the sim raises fault events and parks the access, odp/ serves them with UMRs.
// Every test runs with the sim executing inline and with its own engine threads.
#include "odp/servicer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"

using ::regcache::base::StatusIs;

namespace regcache::odp {
namespace {

constexpr uint64_t kPage = 4096;

// Anonymous memory, page aligned.
struct Memory {
  explicit Memory(size_t n) : length(n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    data = static_cast<uint8_t*>(p);
  }
  ~Memory() { munmap(data, length); }
  uint64_t va() const { return reinterpret_cast<uint64_t>(data); }
  uint8_t* data;
  size_t length;
};

bool IsOdpFault(const absl::Status& s) {
  auto e = hca::ErrorOf(s);
  return e.has_value() && e->vendor_syndrome == hca::kVendorSyndromeOdpFault;
}

class ServicerTest : public ::testing::TestWithParam<hca::sim::ExecutionMode> {
 protected:
  void SetUp() override { Init(ServicerOptions{}); }

  void Init(const ServicerOptions& options, absl::Duration fault_timeout = absl::Seconds(5)) {
    servicer_.reset();
    peer_.reset();
    dev_.reset();
    hca::sim::SimOptions so;
    so.mode = GetParam();
    so.fault_timeout = fault_timeout;
    dev_ = hca::sim::NewSimDevice(so).value();
    pd_ = dev_->AllocPd().value();
    peer_ = dev_->CreatePeer(pd_).value();
    auto s = Servicer::Create(dev_.get(), options, &registry_);
    ASSERT_TRUE(s.ok()) << s.status();
    servicer_ = std::move(*s);
  }

  void TearDown() override {
    for (const cache::BackingEvent& e : tracked_) {
      servicer_->OnBackingRemoving(e);
      EXPECT_TRUE(dev_->DestroyKey(e.device.key).ok());
    }
    tracked_.clear();
    servicer_.reset();
    peer_.reset();
    if (dev_ != nullptr) {
      EXPECT_TRUE(dev_->DeallocPd(pd_).ok());  // no queue of odp/ left
    }
  }

  // Registers an on-demand backing over [addr, +len) and tells the servicer (tenant 0).
  hca::Backing Track(uint64_t addr, uint64_t len, hca::AccessFlags access = hca::kAllAccess) {
    hca::BackingOptions bo;
    bo.on_demand = true;
    hca::Backing b = dev_->RegisterBacking(pd_, addr, len, access, bo).value();
    cache::BackingEvent e;
    e.va = addr;
    e.device = b;
    e.access = access;
    servicer_->OnBackingAdded(e);
    tracked_.push_back(e);
    return b;
  }
  void Untrack(const hca::Backing& b) {
    for (auto it = tracked_.begin(); it != tracked_.end(); ++it) {
      if (it->device.key == b.key) {
        servicer_->OnBackingRemoving(*it);
        tracked_.erase(it);
        return;
      }
    }
  }

  absl::Status Write(const hca::Backing& b, uint64_t addr, absl::string_view text) {
    return peer_->Write(
        b.key, addr,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  hca::MttEntry Entry(const hca::Backing& b, size_t i) {
    return dev_->QueryKey(b.key).value().mtt.at(i);
  }
  // Waits until `n` accesses are parked on faults.
  void WaitParked(int64_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (dev_->stats().parked_accesses.value() < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(dev_->stats().parked_accesses.value(), n);
    // The sim counts an access as parked just before it queues its event; give the last one
    // time to land so the servicer's first drain sees all n.
    absl::SleepFor(absl::Milliseconds(50));
  }

  base::stats::Registry registry_;
  std::unique_ptr<hca::sim::SimDevice> dev_;
  hca::Pd pd_;
  std::unique_ptr<hca::Peer> peer_;
  std::unique_ptr<Servicer> servicer_;
  std::vector<cache::BackingEvent> tracked_;
};

TEST_P(ServicerTest, FaultResumeDataLands) {
  EXPECT_EQ(servicer_->path(), FaultPath::kDaemon);
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  ASSERT_TRUE(Write(b, mem.va() + 3 * kPage + 10, "on demand").ok());
  EXPECT_EQ(std::memcmp(mem.data + 3 * kPage + 10, "on demand", 9), 0);
  EXPECT_EQ(dev_->stats().page_faults.value(), 1u);
  EXPECT_EQ(servicer_->stats().faults.value(), 1u);
  EXPECT_EQ(servicer_->stats().rewrites.value(), 1u);
  EXPECT_EQ(servicer_->stats().resumed_ok.value(), 1u);
  EXPECT_EQ(servicer_->stats().service_ns.Snapshot().count, 1u);
  // Exactly the faulting page became present (its block was rewritten, the rest stays absent).
  EXPECT_EQ(Entry(b, 3), (hca::MttEntry{mem.va() + 3 * kPage, true, true}));
  EXPECT_EQ(Entry(b, 2), hca::MttEntry{});
  EXPECT_EQ(Entry(b, 4), hca::MttEntry{});
  // Reading it back needs no new fault.
  uint8_t out[9];
  ASSERT_TRUE(peer_->Read(b.key, mem.va() + 3 * kPage + 10, absl::MakeSpan(out)).ok());
  EXPECT_EQ(std::memcmp(out, "on demand", 9), 0);
  EXPECT_EQ(dev_->stats().page_faults.value(), 1u);
  // An access spanning pages 6..9 (two blocks) is one fault and one rewrite.
  std::string big(3 * kPage + 2, 'x');
  ASSERT_TRUE(Write(b, mem.va() + 7 * kPage - 1, big).ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 2u);
  EXPECT_EQ(servicer_->stats().rewrites.value(), 2u);
  for (size_t i = 6; i <= 10; ++i) EXPECT_TRUE(Entry(b, i).write) << i;
  EXPECT_EQ(mem.data[10 * kPage], 'x');
  EXPECT_FALSE(registry_.Snapshot().empty());  // registered as "odp"
}

TEST_P(ServicerTest, ReadFaultMapsReadOnlyAndAWriteFaultsAgain) {
  Memory mem(8 * kPage);
  mem.data[2 * kPage] = 42;
  hca::Backing b = Track(mem.va(), 8 * kPage);
  uint8_t out[1];
  ASSERT_TRUE(peer_->Read(b.key, mem.va() + 2 * kPage, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 42);
  EXPECT_EQ(Entry(b, 2), (hca::MttEntry{mem.va() + 2 * kPage, true, false}));
  ASSERT_TRUE(Write(b, mem.va() + 2 * kPage, "w").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 2u);
  EXPECT_TRUE(Entry(b, 2).write);
  EXPECT_EQ(mem.data[2 * kPage], 'w');
}

TEST_P(ServicerTest, PrefetchMeansNoFault) {
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  ASSERT_TRUE(
      servicer_->Prefetch(b.key, mem.va() + kPage, 4 * kPage, true, PrefetchMode::kSync).ok());
  ASSERT_TRUE(Write(b, mem.va() + kPage, std::string(4 * kPage, 'p')).ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 0u);
  // Asynchronous: queued to the thread, present once it has run.
  ASSERT_TRUE(
      servicer_->Prefetch(b.key, mem.va() + 8 * kPage, 8 * kPage, true, PrefetchMode::kAsync).ok());
  ASSERT_TRUE(servicer_->WaitForPrefetches(absl::Seconds(5)).ok());
  ASSERT_TRUE(Write(b, mem.va() + 8 * kPage, std::string(8 * kPage, 'q')).ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 0u);
  EXPECT_EQ(servicer_->stats().prefetches.value(), 2u);
  // A prefetch of what is present already posts nothing.
  const uint64_t wqes = servicer_->stats().rewrite_wqes.value();
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va() + kPage, kPage, false, PrefetchMode::kSync).ok());
  EXPECT_EQ(servicer_->stats().rewrite_wqes.value(), wqes);
  // Read-only prefetch maps read-only: a write still faults.
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), kPage, false, PrefetchMode::kSync).ok());
  EXPECT_EQ(Entry(b, 0), (hca::MttEntry{mem.va(), true, false}));
  ASSERT_TRUE(Write(b, mem.va(), "x").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 1u);
}

TEST_P(ServicerTest, PrefetchErrors) {
  Memory mem(8 * kPage);
  hca::Backing b = Track(mem.va(), 8 * kPage);
  hca::Backing ro = Track(mem.va(), 4 * kPage, hca::kLocalRead | hca::kRemoteRead);
  EXPECT_EQ(
      servicer_->Prefetch(hca::MakeKey(999, 0), mem.va(), 1, false, PrefetchMode::kSync).code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(servicer_->Prefetch(b.key, mem.va() + 7 * kPage, 2 * kPage, false, PrefetchMode::kSync)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(servicer_->Prefetch(ro.key, mem.va(), kPage, true, PrefetchMode::kSync).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(servicer_->Prefetch(ro.key, mem.va(), kPage, false, PrefetchMode::kSync).ok());
  EXPECT_THAT(servicer_->Zap(hca::MakeKey(999, 0), 0, 1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(servicer_->Zap(b.key, mem.va() - 1, 2), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(ServicerTest, AsyncPrefetchQueueIsBounded) {
  ServicerOptions o;
  o.start = false;
  o.max_queued_prefetches = 1;
  Init(o);
  Memory mem(8 * kPage);
  hca::Backing b = Track(mem.va(), 8 * kPage);
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), kPage, true, PrefetchMode::kAsync).ok());
  EXPECT_EQ(servicer_->Prefetch(b.key, mem.va(), kPage, true, PrefetchMode::kAsync).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(servicer_->stats().prefetch_queue_overflow.value(), 1u);
  EXPECT_EQ(servicer_->WaitForPrefetches(absl::Milliseconds(10)).code(),
            absl::StatusCode::kDeadlineExceeded);
  servicer_->Start();
  ASSERT_TRUE(servicer_->WaitForPrefetches(absl::Seconds(5)).ok());
  EXPECT_TRUE(Entry(b, 0).write);
}

TEST_P(ServicerTest, ZapMakesTheNextAccessFault) {
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), 8 * kPage, true, PrefetchMode::kSync).ok());
  // Zap one page: its neighbours in the same block stay present.
  ASSERT_TRUE(servicer_->Zap(b.key, mem.va() + 3 * kPage, kPage).ok());
  EXPECT_EQ(Entry(b, 3), hca::MttEntry{});
  EXPECT_TRUE(Entry(b, 2).read);
  EXPECT_TRUE(Entry(b, 4).read);
  EXPECT_EQ(servicer_->stats().zapped_entries.value(), 1u);
  ASSERT_TRUE(Write(b, mem.va() + 2 * kPage, "no fault").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 0u);
  ASSERT_TRUE(Write(b, mem.va() + 3 * kPage, "faults again").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 1u);
  // Zap everything; a zap of absent entries posts nothing.
  ASSERT_TRUE(servicer_->Zap(b.key, mem.va(), 16 * kPage).ok());
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(Entry(b, i), hca::MttEntry{}) << i;
  const uint64_t wqes = servicer_->stats().rewrite_wqes.value();
  ASSERT_TRUE(servicer_->Zap(b.key, mem.va(), 16 * kPage).ok());
  EXPECT_EQ(servicer_->stats().rewrite_wqes.value(), wqes);
  ASSERT_TRUE(Write(b, mem.va() + 2 * kPage, "faults again").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 2u);
}

TEST_P(ServicerTest, LargeRangesSplitIntoSeveralWqesAndWaitForRingSpace) {
  ServicerOptions o;
  o.queue_depth = 32;  // two full rewrite WQEs fit: the rest waits for completions
  Init(o);
  Memory mem(2 << 20);
  hca::Backing b = Track(mem.va(), 2 << 20);  // 512 entries
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), 2 << 20, true, PrefetchMode::kSync).ok());
  EXPECT_GE(servicer_->stats().rewrite_wqes.value(), 5u);
  hca::KeyInfo info = dev_->QueryKey(b.key).value();
  for (size_t i = 0; i < 512; ++i) {
    ASSERT_EQ(info.mtt[i], (hca::MttEntry{mem.va() + i * kPage, true, true})) << i;
  }
  ASSERT_TRUE(Write(b, mem.va() + (1 << 20), std::string(1 << 20, 'L')).ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 0u);
  ASSERT_TRUE(servicer_->Zap(b.key, mem.va(), 2 << 20).ok());
  info = dev_->QueryKey(b.key).value();
  for (size_t i = 0; i < 512; ++i) ASSERT_EQ(info.mtt[i], hca::MttEntry{}) << i;
  EXPECT_EQ(servicer_->stats().zapped_entries.value(), 512u);
}

TEST_P(ServicerTest, ConcurrentFaultsOnTheSamePagesShareOneRewrite) {
  ServicerOptions o;
  o.start = false;  // stage the faults first
  Init(o);
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  std::vector<std::thread> peers;
  std::vector<absl::Status> results(3);
  std::vector<std::unique_ptr<hca::Peer>> endpoints;
  for (int i = 0; i < 3; ++i) endpoints.push_back(dev_->CreatePeer(pd_).value());
  // Two on page 4, one on page 5 of the same block.
  const uint64_t at[3] = {mem.va() + 4 * kPage, mem.va() + 4 * kPage + 100, mem.va() + 5 * kPage};
  for (int i = 0; i < 3; ++i) {
    peers.emplace_back([&, i] {
      const uint8_t v = static_cast<uint8_t>('a' + i);
      results[i] = endpoints[i]->Write(b.key, at[i], absl::MakeConstSpan(&v, 1));
    });
  }
  WaitParked(3);
  servicer_->Start();
  for (auto& t : peers) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(mem.data[4 * kPage], 'a');
  EXPECT_EQ(mem.data[4 * kPage + 100], 'b');
  EXPECT_EQ(mem.data[5 * kPage], 'c');
  EXPECT_EQ(servicer_->stats().faults.value(), 3u);
  EXPECT_EQ(servicer_->stats().rewrites.value(), 1u);
  EXPECT_EQ(servicer_->stats().rewrite_wqes.value(), 1u);
  EXPECT_EQ(servicer_->stats().coalesced.value(), 2u);
  EXPECT_EQ(servicer_->stats().resumed_ok.value(), 3u);
}

TEST_P(ServicerTest, TooManyPendingFaultsAreResumedWithError) {
  ServicerOptions o;
  o.start = false;
  o.max_pending_faults = 2;
  Init(o);
  Memory mem(32 * kPage);
  hca::Backing b = Track(mem.va(), 32 * kPage);
  std::vector<std::unique_ptr<hca::Peer>> endpoints;
  for (int i = 0; i < 4; ++i) endpoints.push_back(dev_->CreatePeer(pd_).value());
  std::vector<absl::Status> results(4);
  std::vector<std::thread> peers;
  for (int i = 0; i < 4; ++i) {  // one per block
    peers.emplace_back([&, i] {
      const uint8_t v = 1;
      results[i] = endpoints[i]->Write(b.key, mem.va() + i * 8 * kPage, absl::MakeConstSpan(&v, 1));
    });
  }
  WaitParked(4);
  servicer_->Start();
  for (auto& t : peers) t.join();
  int ok = 0, odp_errors = 0;
  for (const absl::Status& s : results) {
    ok += s.ok();
    odp_errors += IsOdpFault(s);
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(odp_errors, 2);
  EXPECT_EQ(servicer_->stats().queue_overflow.value(), 2u);
  EXPECT_EQ(servicer_->stats().resumed_error.value(), 2u);
  // Still serving.
  ASSERT_TRUE(Write(b, mem.va() + 31 * kPage, "after").ok());
}

TEST_P(ServicerTest, FaultOnAKeyThatIsNoBackingIsResumedWithError) {
  Memory mem(8 * kPage);
  hca::BackingOptions bo;
  bo.on_demand = true;
  // Registered with the device behind odp/'s back.
  hca::Backing stranger =
      dev_->RegisterBacking(pd_, mem.va(), 4 * kPage, hca::kAllAccess, bo).value();
  absl::Status s = Write(stranger, mem.va(), "x");
  EXPECT_TRUE(IsOdpFault(s)) << s;
  EXPECT_EQ(servicer_->stats().unknown_key.value(), 1u);
  EXPECT_EQ(servicer_->stats().resumed_error.value(), 1u);
  EXPECT_TRUE(dev_->DestroyKey(stranger.key).ok());
  // The servicer keeps running.
  hca::Backing b = Track(mem.va(), 8 * kPage);
  EXPECT_TRUE(Write(b, mem.va(), "fine").ok());
}

TEST_P(ServicerTest, AFailedResumeFailsTheAccessAndServiceContinues) {
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  dev_->FailNextResumeForTest();
  absl::Status s = Write(b, mem.va(), "x");
  EXPECT_TRUE(IsOdpFault(s)) << s;
  // The pages were published before the resume failed: the retry needs no fault.
  EXPECT_TRUE(Write(b, mem.va(), "y").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 1u);
  EXPECT_TRUE(Write(b, mem.va() + 9 * kPage, "z").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 2u);
}

TEST_P(ServicerTest, AFailedRewriteFailsTheFaultAndTheNextOneRecovers) {
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  dev_->FailNextUmrForTest(hca::Syndrome::kLocalProt);
  absl::Status s = Write(b, mem.va() + kPage, "x");
  EXPECT_TRUE(IsOdpFault(s)) << s;
  EXPECT_EQ(servicer_->stats().rewrite_errors.value(), 1u);
  EXPECT_TRUE(Write(b, mem.va() + kPage, "y").ok());
  EXPECT_EQ(mem.data[kPage], 'y');
  // A zap whose UMR fails reports it; the next zap clears the entries.
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), 16 * kPage, true, PrefetchMode::kSync).ok());
  dev_->FailNextUmrForTest(hca::Syndrome::kLocalProt);
  EXPECT_FALSE(servicer_->Zap(b.key, mem.va(), 16 * kPage).ok());
  EXPECT_EQ(servicer_->stats().zap_errors.value(), 1u);
  ASSERT_TRUE(servicer_->Zap(b.key, mem.va(), 16 * kPage).ok());
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(Entry(b, i), hca::MttEntry{}) << i;
  EXPECT_TRUE(Write(b, mem.va() + 3 * kPage, "z").ok());
}

TEST_P(ServicerTest, RemovalZapsEverythingThenFaultsFail) {
  Memory mem(16 * kPage);
  hca::Backing b = Track(mem.va(), 16 * kPage);
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), 16 * kPage, true, PrefetchMode::kSync).ok());
  EXPECT_EQ(servicer_->stats().tracked_backings.value(), 1);
  Untrack(b);
  hca::KeyInfo info = dev_->QueryKey(b.key).value();
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(info.mtt[i], hca::MttEntry{}) << i;
  EXPECT_EQ(servicer_->stats().tracked_backings.value(), 0);
  EXPECT_EQ(servicer_->stats().zapped_entries.value(), 16u);
  // The key still exists (the cache destroys it next); an access faults and fails.
  absl::Status s = Write(b, mem.va(), "gone");
  EXPECT_TRUE(IsOdpFault(s)) << s;
  EXPECT_EQ(servicer_->Prefetch(b.key, mem.va(), 1, false, PrefetchMode::kSync).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(dev_->DestroyKey(b.key).ok());
  // The PD's rewrite queue went with its last backing: the PD can be deallocated (TearDown).
}

// A shared memfd of 2 pages mapped over 4: pages 2 and 3 cannot be made resident.
class TruncatedMemfd {
 public:
  TruncatedMemfd() {
    fd_ = memfd_create("odp-test", MFD_CLOEXEC);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, 2 * kPage), 0);
    void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(p, MAP_FAILED);
    data_ = static_cast<uint8_t*>(p);
  }
  ~TruncatedMemfd() {
    munmap(data_, 4 * kPage);
    close(fd_);
  }
  uint64_t va() const { return reinterpret_cast<uint64_t>(data_); }
  uint8_t* data() { return data_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  uint8_t* data_ = nullptr;
};

TEST_P(ServicerTest, TruncatedMemfdFaultFailsSafelyWithEitherPopulateMethod) {
  for (PopulateMethod method : {PopulateMethod::kMadvise, PopulateMethod::kTouch}) {
    SCOPED_TRACE(method == PopulateMethod::kMadvise ? "madvise" : "touch");
    tracked_.clear();
    ServicerOptions o;
    o.populate = method;
    Init(o);
    TruncatedMemfd mem;
    hca::Backing b = Track(mem.va(), 4 * kPage);
    absl::Status s = Write(b, mem.va() + 3 * kPage, "beyond EOF");
    EXPECT_TRUE(IsOdpFault(s)) << s;
    EXPECT_EQ(servicer_->stats().populate_errors.value(), 1u);
    EXPECT_EQ(Entry(b, 3), hca::MttEntry{});  // never published
    EXPECT_EQ(
        servicer_->Prefetch(b.key, mem.va() + 2 * kPage, kPage, false, PrefetchMode::kSync).ok(),
        false);
    // The process is fine and the good pages work.
    ASSERT_TRUE(Write(b, mem.va() + kPage, "inside").ok());
    EXPECT_EQ(std::memcmp(mem.data() + kPage, "inside", 6), 0);
    Untrack(b);
    EXPECT_TRUE(dev_->DestroyKey(b.key).ok());
  }
}

TEST_P(ServicerTest, ZapDuringAServiceWinsAndTheMemoryCanGo) {
  // The service makes the page resident; before it publishes, the owner zaps the backing and
  // truncates the memory under it. The service must not publish the stale page: it starts
  // over, cannot make the page resident any more, and fails the access. No SIGBUS anywhere.
  std::atomic<int> calls{0};
  std::unique_ptr<TruncatedMemfd> mem = std::make_unique<TruncatedMemfd>();
  ASSERT_EQ(ftruncate(mem->fd(), 4 * kPage), 0);
  hca::Key key = 0;
  ServicerOptions o;
  o.after_populate_for_test = [&](hca::Key k) {
    if (calls.fetch_add(1) != 0) return;
    ASSERT_TRUE(servicer_->Zap(k, mem->va(), 4 * kPage).ok());
    ASSERT_EQ(ftruncate(mem->fd(), kPage), 0);
  };
  Init(o);
  hca::Backing b = Track(mem->va(), 4 * kPage);
  key = b.key;
  absl::Status s = Write(b, mem->va() + 2 * kPage, "late");
  EXPECT_TRUE(IsOdpFault(s)) << s;
  EXPECT_EQ(servicer_->stats().stale_services.value(), 1u);
  EXPECT_EQ(servicer_->stats().populate_errors.value(), 1u);
  hca::KeyInfo info = dev_->QueryKey(key).value();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(info.mtt[i], hca::MttEntry{}) << i;
  // Without the truncation the retry serves the access.
  calls.store(0);
  ASSERT_EQ(ftruncate(mem->fd(), 4 * kPage), 0);
  o.after_populate_for_test = [&](hca::Key k) {
    if (calls.fetch_add(1) == 0) {
      ASSERT_TRUE(servicer_->Zap(k, mem->va(), 4 * kPage).ok());
    }
  };
  Untrack(b);
  EXPECT_TRUE(dev_->DestroyKey(b.key).ok());
  Init(o);
  b = Track(mem->va(), 4 * kPage);
  ASSERT_TRUE(Write(b, mem->va() + 2 * kPage, "served").ok());
  EXPECT_EQ(servicer_->stats().stale_services.value(), 1u);
  EXPECT_TRUE(Entry(b, 2).write);
  Untrack(b);
  EXPECT_TRUE(dev_->DestroyKey(b.key).ok());
}

TEST_P(ServicerTest, KernelPathPrefetchesThroughTheDevice) {
  ServicerOptions o;
  o.path = FaultPath::kKernel;  // as on mlx5, where the kernel serves faults
  Init(o);
  Memory mem(8 * kPage);
  hca::Backing b = Track(mem.va(), 8 * kPage);
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), 8 * kPage, true, PrefetchMode::kSync).ok());
  EXPECT_EQ(dev_->stats().prefetches.value(), 1u);
  EXPECT_EQ(servicer_->stats().rewrite_wqes.value(), 0u);
  ASSERT_TRUE(Write(b, mem.va(), "kernel").ok());
  EXPECT_EQ(dev_->stats().page_faults.value(), 0u);
  ASSERT_TRUE(servicer_->Prefetch(b.key, mem.va(), kPage, false, PrefetchMode::kAsync).ok());
  ASSERT_TRUE(servicer_->WaitForPrefetches(absl::Seconds(5)).ok());
  EXPECT_EQ(dev_->stats().prefetches.value(), 2u);
  EXPECT_TRUE(servicer_->Zap(b.key, mem.va(), kPage).ok());  // the kernel's job there
}

INSTANTIATE_TEST_SUITE_P(Modes, ServicerTest,
                         ::testing::Values(hca::sim::ExecutionMode::kInline,
                                           hca::sim::ExecutionMode::kThread),
                         [](const ::testing::TestParamInfo<hca::sim::ExecutionMode>& i) {
                           return i.param == hca::sim::ExecutionMode::kInline ? "Inline" : "Thread";
                         });

// A device without ODP (every call forwarded to a sim, but Capabilities::odp is false).
class NoOdpDevice final : public hca::Device {
 public:
  explicit NoOdpDevice(std::unique_ptr<hca::Device> d)
      : d_(std::move(d)), caps_(d_->capabilities()) {
    caps_.odp = false;
  }
  const hca::Capabilities& capabilities() const override { return caps_; }
  absl::StatusOr<hca::Pd> AllocPd() override { return d_->AllocPd(); }
  absl::Status DeallocPd(hca::Pd pd) override { return d_->DeallocPd(pd); }
  absl::StatusOr<hca::Backing> RegisterBacking(hca::Pd pd, uint64_t addr, uint64_t length,
                                               hca::AccessFlags access,
                                               const hca::BackingOptions& o) override {
    if (o.on_demand) return absl::UnimplementedError("no ODP");
    return d_->RegisterBacking(pd, addr, length, access, o);
  }
  absl::StatusOr<std::vector<hca::Key>> CreateIndirectKeys(
      hca::Pd pd, uint32_t c, uint32_t n, const hca::IndirectKeyOptions& o) override {
    return d_->CreateIndirectKeys(pd, c, n, o);
  }
  absl::StatusOr<std::vector<hca::Key>> CreateDirectKeys(hca::Pd pd, uint32_t c, uint32_t n,
                                                         const hca::DirectKeyOptions& o) override {
    return d_->CreateDirectKeys(pd, c, n, o);
  }
  absl::Status DestroyKey(hca::Key k) override { return d_->DestroyKey(k); }
  absl::StatusOr<hca::KeyInfo> QueryKey(hca::Key k) override { return d_->QueryKey(k); }
  absl::StatusOr<std::unique_ptr<hca::Queue>> CreateQueue(hca::Pd pd,
                                                          const hca::QueueOptions& o) override {
    return d_->CreateQueue(pd, o);
  }
  absl::StatusOr<std::unique_ptr<hca::Peer>> CreatePeer(hca::Pd pd) override {
    return d_->CreatePeer(pd);
  }
  absl::StatusOr<std::unique_ptr<hca::Endpoint>> CreateEndpoint(
      hca::Pd pd, const hca::EndpointOptions& o) override {
    return d_->CreateEndpoint(pd, o);
  }
  absl::StatusOr<hca::FaultEvent> NextFaultEvent(absl::Duration) override {
    return absl::UnimplementedError("no ODP");
  }
  int FaultEventFd() override { return -1; }
  absl::Status ResumeFault(uint64_t, bool) override { return absl::UnimplementedError("no ODP"); }
  absl::Status Prefetch(hca::Key, uint64_t, uint64_t, bool) override {
    return absl::UnimplementedError("no ODP");
  }

 private:
  std::unique_ptr<hca::Device> d_;
  hca::Capabilities caps_;
};

TEST(ServicerCreateTest, DeviceWithoutOdpIsUnimplemented) {
  NoOdpDevice dev(hca::sim::NewSimDevice({}).value());
  auto s = Servicer::Create(&dev);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_NE(s.status().message().find("no ODP"), absl::string_view::npos) << s.status();
}

TEST(ServicerCreateTest, BadOptions) {
  auto dev = hca::sim::NewSimDevice({}).value();
  ServicerOptions o;
  o.queue_depth = 100;
  EXPECT_THAT(Servicer::Create(dev.get(), o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = ServicerOptions{};
  o.max_pending_faults = 0;
  EXPECT_THAT(Servicer::Create(dev.get(), o), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace regcache::odp