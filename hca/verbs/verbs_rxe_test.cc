// The verbs backend on a real verbs device (Soft-RoCE in the VM tier, tests/vm; any RDMA device
// elsewhere): windows bound and invalidated by the bind queue, and a peer in a PD of its own
// whose RDMA WRITE / READ / atomics go through the tenant's rkeys over real queue pairs.
// Skips, saying why, where no device can be opened. Run in the guest by the `vm` label.
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/status.h"
#include "hca/verbs/verbs_device.h"

namespace regcache::hca::verbs {
namespace {

class VerbsRxeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OpenOptions open;
    open.strict_key_bounds = strict_;
    open.stats_registry = &stats_;
    VerbsOptions o;
    o.bind_lists = bind_lists_;
    auto d = NewVerbsDevice(o, open);
    if (!d.ok()) GTEST_SKIP() << "no verbs device here: " << d.status();
    dev_ = std::move(*d);
    auto pd = dev_->AllocPd();
    ASSERT_TRUE(pd.ok()) << pd.status();
    pd_ = *pd;
    mem_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    ASSERT_NE(mem_, MAP_FAILED);
    BackingOptions bo;
    bo.iova = kTenantVa;  // the tenant's addresses, as the cache registers backings
    auto b = dev_->RegisterBacking(pd_, reinterpret_cast<uint64_t>(mem_), kBytes, kAllAccess, bo);
    ASSERT_TRUE(b.ok()) << b.status();
    backing_ = *b;
    auto q = dev_->CreateQueue(pd_, QueueOptions{64});
    ASSERT_TRUE(q.ok()) << q.status();
    queue_ = std::move(*q);
    auto keys = dev_->CreateIndirectKeys(pd_, 1, 4, {});
    ASSERT_TRUE(keys.ok()) << keys.status();
    keys_ = *keys;
  }
  void TearDown() override {
    if (dev_ == nullptr) return;
    queue_.reset();
    for (Key k : keys_) EXPECT_TRUE(dev_->DestroyKey(k).ok());
    EXPECT_TRUE(dev_->DestroyKey(backing_.key).ok());
    EXPECT_TRUE(dev_->DeallocPd(pd_).ok());
    munmap(mem_, kBytes);
  }

  // Posts one request, rings, waits; the request's completion status.
  absl::Status Run(const std::function<absl::Status(uint64_t)>& post) {
    const uint64_t id = next_id_++;
    if (absl::Status s = post(id); !s.ok()) return s;
    if (absl::Status s = queue_->Doorbell(); !s.ok()) return s;
    if (absl::Status s = queue_->Flush(absl::Seconds(20)); !s.ok()) return s;
    Completion c;
    if (queue_->Poll(absl::MakeSpan(&c, 1)) != 1) return absl::InternalError("no completion");
    EXPECT_EQ(c.request_id, id);
    return c.status;
  }
  // Maps `key` (free) over [kTenantVa + offset, +length) of the backing, or of `parent`.
  absl::StatusOr<Key> Map(Key key, uint64_t offset, uint64_t length, AccessFlags access,
                          Key parent = 0) {
    const KlmEntry e{parent != 0 ? parent : backing_.key, kTenantVa + offset, length};
    MapRequest r;
    r.key = key;
    r.new_variant = static_cast<uint8_t>(KeyVariant(NextVariant(key)));
    r.klm = absl::MakeConstSpan(&e, 1);
    r.access = access;
    r.start_addr = e.addr;
    r.length = length;
    r.require_free = parent == 0;
    absl::Status s = Run([&](uint64_t id) { return queue_->PostMap(id, r); });
    if (!s.ok()) return s;
    return MakeKey(KeyIndex(key), r.new_variant);
  }
  // Unsignalled maps of keys_[0, n), free ones, each over page i of the backing with `access`;
  // `entries` receives their translations (it must outlive the requests).
  std::vector<MapRequest> PageMaps(size_t n, AccessFlags access, std::vector<KlmEntry>& entries) {
    entries.resize(n);
    std::vector<MapRequest> maps(n);
    for (size_t i = 0; i < n; ++i) {
      entries[i] = KlmEntry{backing_.key, kTenantVa + i * 4096, 4096};
      MapRequest& r = maps[i];
      r.key = keys_[i];
      r.new_variant = static_cast<uint8_t>(KeyVariant(NextVariant(keys_[i])));
      r.klm = absl::MakeConstSpan(&entries[i], 1);
      r.access = access;
      r.start_addr = entries[i].addr;
      r.length = 4096;
      r.require_free = true;
      r.options.signaled = false;
    }
    return maps;
  }
  absl::StatusOr<Key> Invalidate(Key key) {
    absl::Status s = Run([&](uint64_t id) { return queue_->PostInvalidate(id, key, {}); });
    if (!s.ok()) return s;
    return NextVariant(key);
  }
  std::unique_ptr<Peer> NewPeer() {
    auto p = dev_->CreatePeer(pd_);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  int64_t Stat(absl::string_view name) const {
    for (const base::stats::Sample& s : stats_.Snapshot()) {
      if (s.component == "hca_verbs" && s.name == name) return s.value;
    }
    ADD_FAILURE() << "no stat hca_verbs/" << name;
    return -1;
  }
  // Whether a fresh peer's 8-byte read through `key` at `va` is served (false: refused as a
  // remote access error; anything else fails the test).
  bool PeerReads(Key key, uint64_t va) {
    auto peer = NewPeer();
    if (peer == nullptr) return false;
    std::vector<uint8_t> got(8);
    absl::Status s = peer->Read(key, va, absl::MakeSpan(got));
    EXPECT_TRUE(s.ok() || absl::IsPermissionDenied(s)) << s;
    return s.ok();
  }

  static constexpr uint64_t kBytes = 1 << 20;
  static constexpr uint64_t kTenantVa = 0x7f0000000000;
  bool strict_ = false;     // OpenOptions::strict_key_bounds
  bool bind_lists_ = true;  // VerbsOptions::bind_lists
  base::stats::Registry stats_;
  std::unique_ptr<Device> dev_;
  Pd pd_;
  uint8_t* mem_ = nullptr;
  Backing backing_;
  std::unique_ptr<Queue> queue_;
  std::vector<Key> keys_;
  uint64_t next_id_ = 1;
};

TEST_F(VerbsRxeTest, CapabilitiesSayWhatTheBackendIs) {
  const Capabilities& c = dev_->capabilities();
  EXPECT_EQ(c.backend, "verbs");
  EXPECT_TRUE(c.memory_windows);
  EXPECT_FALSE(c.umr);
  EXPECT_FALSE(c.odp);
  EXPECT_EQ(c.max_klm_entries, 1u);
  EXPECT_TRUE(c.endpoints);
}

TEST_F(VerbsRxeTest, AWindowCarriesAPeersWriteAndReadUntilItIsInvalidated) {
  auto key = Map(keys_[0], 4096, 8192, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(key.ok()) << key.status();
  auto peer = NewPeer();
  ASSERT_NE(peer, nullptr);
  const std::vector<uint8_t> hello = {'h', 'e', 'l', 'l', 'o'};
  ASSERT_TRUE(peer->Write(*key, kTenantVa + 4096 + 100, hello).ok());
  EXPECT_EQ(std::memcmp(mem_ + 4096 + 100, hello.data(), hello.size()), 0);
  std::memcpy(mem_ + 4096 + 200, "world", 5);
  std::vector<uint8_t> got(5);
  ASSERT_TRUE(peer->Read(*key, kTenantVa + 4096 + 200, absl::MakeSpan(got)).ok());
  EXPECT_EQ(std::string(got.begin(), got.end()), "world");

  auto after = Invalidate(*key);
  ASSERT_TRUE(after.ok()) << after.status();
  absl::Status refused = peer->Write(*key, kTenantVa + 4096 + 100, hello);
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_EQ(ErrorOf(refused)->syndrome, Syndrome::kRemoteAccess);
  // The window maps again under the next variant; the old rkey stays dead.
  auto again = Map(*after, 0, 4096, kRemoteWrite);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, *key);
  auto fresh = NewPeer();
  EXPECT_TRUE(fresh->Write(*again, kTenantVa + 10, hello).ok());
  auto stale = NewPeer();
  EXPECT_TRUE(absl::IsPermissionDenied(stale->Write(*key, kTenantVa + 4096, hello)));
}

TEST_F(VerbsRxeTest, RightsOfAWindowAreEnforced) {
  auto key = Map(keys_[0], 0, 4096, kRemoteRead);
  ASSERT_TRUE(key.ok()) << key.status();
  auto peer = NewPeer();
  std::vector<uint8_t> got(8);
  EXPECT_TRUE(peer->Read(*key, kTenantVa, absl::MakeSpan(got)).ok());
  absl::Status s = peer->Write(*key, kTenantVa, got);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

TEST_F(VerbsRxeTest, AtomicsGoThroughAWindow) {
  if (!dev_->capabilities().atomics) GTEST_SKIP() << "device without atomics";
  auto key = Map(keys_[0], 0, 4096, kRemoteAtomic | kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(key.ok()) << key.status();
  uint64_t v = 41;
  std::memcpy(mem_ + 64, &v, 8);
  auto peer = NewPeer();
  auto before = peer->FetchAdd(*key, kTenantVa + 64, 1);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, 41u);
  std::memcpy(&v, mem_ + 64, 8);
  EXPECT_EQ(v, 42u);
  auto cas = peer->CompareSwap(*key, kTenantVa + 64, 42, 7);
  ASSERT_TRUE(cas.ok()) << cas.status();
  std::memcpy(&v, mem_ + 64, 8);
  EXPECT_EQ(v, 7u);
}

TEST_F(VerbsRxeTest, AWindowOnAWindowStaysInsideItsParent) {
  auto parent = Map(keys_[0], 0, 65536, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(parent.ok()) << parent.status();
  auto child = Map(keys_[1], 4096, 4096, kRemoteWrite, *parent);
  ASSERT_TRUE(child.ok()) << child.status();
  auto peer = NewPeer();
  const std::vector<uint8_t> x = {1, 2, 3};
  EXPECT_TRUE(peer->Write(*child, kTenantVa + 4096, x).ok());
  EXPECT_EQ(mem_[4096 + 2], 3);
  // Refused before posting: outside the parent, or more rights than the parent has.
  auto outside = Map(keys_[2], 65536, 4096, kRemoteWrite, *parent);
  EXPECT_TRUE(absl::IsFailedPrecondition(outside.status())) << outside.status();
  auto wider = Map(keys_[2], 0, 4096, kRemoteAtomic, *parent);
  EXPECT_TRUE(absl::IsFailedPrecondition(wider.status())) << wider.status();
  // Invalidating the child first, then the parent, as the cache does.
  ASSERT_TRUE(Invalidate(*child).ok());
  ASSERT_TRUE(Invalidate(*parent).ok());
  auto late = NewPeer();
  EXPECT_TRUE(absl::IsPermissionDenied(late->Write(*child, kTenantVa + 4096, x)));
}

TEST_F(VerbsRxeTest, RefusedBindsCompleteWithMwBindAndLeaveTheQueueWorking) {
  MapRequest r;
  const KlmEntry e{backing_.key, kTenantVa, 4096};
  r.key = keys_[0];
  r.new_variant = static_cast<uint8_t>(KeyVariant(keys_[0]) + 5);  // not the next variant
  r.klm = absl::MakeConstSpan(&e, 1);
  r.access = kRemoteWrite;
  r.start_addr = kTenantVa;
  r.length = 4096;
  absl::Status s = Run([&](uint64_t id) { return queue_->PostMap(id, r); });
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(ErrorOf(s)->syndrome, Syndrome::kMwBind);
  auto key = Map(keys_[0], 0, 4096, kRemoteWrite);
  ASSERT_TRUE(key.ok()) << key.status();
  auto info = dev_->QueryKey(*key);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->key, *key);
  EXPECT_FALSE(info->free);
  // A live key refuses a map that requires a free one.
  auto twice = Map(*key, 0, 4096, kRemoteWrite);
  EXPECT_TRUE(absl::IsFailedPrecondition(twice.status())) << twice.status();
}

// Selective signalling: only signalled requests complete, a completion covers the unsignalled
// binds before it, and a refusal with nothing signalled behind it is covered by a marker.
TEST_F(VerbsRxeTest, ABatchCompletesOnceAndARefusalAtItsEndIsCoveredByAMarker) {
  std::vector<KlmEntry> entries;
  std::vector<MapRequest> maps = PageMaps(4, kRemoteRead | kRemoteWrite, entries);
  maps[3].new_variant = static_cast<uint8_t>(maps[3].new_variant + 5);  // refused
  maps[3].options.signaled = true;
  const int64_t posted = Stat("binds_posted");
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(queue_->PostMap(100 + i, maps[i]).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(20)).ok());
  Completion c[4];
  ASSERT_EQ(queue_->Poll(absl::MakeSpan(c)), 1u);
  EXPECT_EQ(c[0].request_id, 103u);
  EXPECT_EQ(c[0].syndrome, Syndrome::kMwBind) << c[0].status;
  EXPECT_EQ(Stat("binds_posted"), posted + 3);
  EXPECT_EQ(Stat("bind_markers"), 1);
  std::vector<Key> live(3);
  for (size_t i = 0; i < 3; ++i) {
    live[i] = MakeKey(KeyIndex(keys_[i]), maps[i].new_variant);
    auto info = dev_->QueryKey(live[i]);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_FALSE(info->free);
    EXPECT_TRUE(PeerReads(live[i], kTenantVa + i * 4096));
  }

  // Invalidations: three unsignalled, the last signalled: one completion, no marker.
  for (size_t i = 0; i < 3; ++i) {
    PostOptions o;
    o.signaled = i == 2;
    ASSERT_TRUE(queue_->PostInvalidate(200 + i, live[i], o).ok());
  }
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(20)).ok());
  ASSERT_EQ(queue_->Poll(absl::MakeSpan(c)), 1u);
  EXPECT_EQ(c[0].request_id, 202u);
  EXPECT_TRUE(c[0].status.ok()) << c[0].status;
  EXPECT_EQ(Stat("bind_markers"), 1);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(PeerReads(live[i], kTenantVa + i * 4096));

  // An unsignalled bind alone: a list of one, whose last bind is always posted signalled (its
  // completion covers the list), so no marker is needed; nothing is reported.
  MapRequest again = maps[0];
  again.key = NextVariant(live[0]);
  again.new_variant = static_cast<uint8_t>(KeyVariant(NextVariant(again.key)));
  ASSERT_TRUE(queue_->PostMap(300, again).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(20)).ok());
  EXPECT_EQ(queue_->Poll(absl::MakeSpan(c)), 0u);
  EXPECT_EQ(Stat("bind_markers"), 1);
  const Key remapped = MakeKey(KeyIndex(again.key), again.new_variant);
  auto info = dev_->QueryKey(remapped);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->free);
  EXPECT_TRUE(PeerReads(remapped, kTenantVa));
}

TEST_F(VerbsRxeTest, MalformedRequestsAreRefusedAtPost) {
  MapRequest r;
  r.key = keys_[0];
  r.layout = Layout::kKsm;
  EXPECT_TRUE(absl::IsInvalidArgument(queue_->PostMap(1, r)));
  r.layout = Layout::kKlm;
  const KlmEntry two[2] = {{backing_.key, kTenantVa, 4096}, {backing_.key, kTenantVa + 4096, 4096}};
  r.klm = absl::MakeConstSpan(two);
  EXPECT_TRUE(absl::IsInvalidArgument(queue_->PostMap(1, r)));
  r.klm = absl::MakeConstSpan(two, 1);
  r.start_addr = kTenantVa + 1;  // not the entry's address
  r.length = 4096;
  EXPECT_TRUE(absl::IsInvalidArgument(queue_->PostMap(1, r)));
  UpdateRequest u;
  EXPECT_TRUE(absl::IsUnimplemented(queue_->PostUpdate(1, u)));
  EXPECT_TRUE(absl::IsUnimplemented(dev_->RegisterBacking(pd_, reinterpret_cast<uint64_t>(mem_),
                                                          4096, kAllAccess, {.on_demand = true})
                                        .status()));
}

TEST_F(VerbsRxeTest, AnEndpointConnectsOnlyOnceAndChecksTheAddress) {
  auto ep = dev_->CreateEndpoint(pd_, EndpointOptions{});
  ASSERT_TRUE(ep.ok()) << ep.status();
  EndpointAddress bad = (*ep)->local();
  bad.qpn = 1u << 24;
  EXPECT_TRUE(absl::IsInvalidArgument((*ep)->Connect(bad)));
  bad = (*ep)->local();
  bad.mtu = 1500;
  EXPECT_TRUE(absl::IsInvalidArgument((*ep)->Connect(bad)));
  auto other = dev_->CreateEndpoint(pd_, EndpointOptions{});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*ep)->Connect((*other)->local()).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*ep)->Connect((*other)->local())));
}

}  // namespace
}  // namespace regcache::hca::verbs

namespace regcache::hca::verbs {
namespace {

// The self-test's answer is what a peer finds: a read just outside a one-page key, inside its
// backing, is refused exactly when the device says it enforces the key's range.
TEST_F(VerbsRxeTest, TheReportedKeyBoundsAreWhatAPeerFinds) {
  const Capabilities& c = dev_->capabilities();
  ASSERT_NE(c.key_bounds, KeyBounds::kUnknown) << c.key_bounds_detail;
  ASSERT_NE(c.key_bounds, KeyBounds::kCut);  // not asked for
  EXPECT_TRUE(absl::StrContains(c.key_bounds_detail, "self-test")) << c.key_bounds_detail;
  auto key = Map(keys_[0], 8192, 4096, kRemoteRead);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(PeerReads(*key, kTenantVa + 8192));
  const bool enforced = c.key_bounds == KeyBounds::kKey;
  EXPECT_EQ(PeerReads(*key, kTenantVa + 8192 - 8), !enforced) << c.key_bounds_detail;
  EXPECT_EQ(PeerReads(*key, kTenantVa + 8192 + 4096), !enforced) << c.key_bounds_detail;
  RecordProperty("key_bounds", KeyBoundsName(c.key_bounds));
  std::printf("key bounds of %s: %s (%s)\n", c.device_name.c_str(), KeyBoundsName(c.key_bounds),
              c.key_bounds_detail.c_str());
}

// A batch's binds go as lists (rxe takes them: the self-test at open says so): one
// ibv_post_send for the batch, split where a window comes back in it (its work request names
// the rkey the window has when its turn comes). Each bind still does what it says.
TEST_F(VerbsRxeTest, ABatchsBindsArePostedAsListsSplitWhereAWindowComesBack) {
  ASSERT_EQ(Stat("bind_lists"), 1) << "the self-test at open found lists unusable here";
  std::vector<KlmEntry> entries;
  std::vector<MapRequest> maps = PageMaps(3, kRemoteRead, entries);
  const Key first = MakeKey(KeyIndex(keys_[0]), maps[0].new_variant);
  const int64_t lists = Stat("bind_lists_posted");
  const int64_t posted = Stat("binds_posted");
  // Map 0 and 1, invalidate 0 again (its window comes back: a second list), map 2 (signalled).
  ASSERT_TRUE(queue_->PostMap(1, maps[0]).ok());
  ASSERT_TRUE(queue_->PostMap(2, maps[1]).ok());
  PostOptions quiet;
  quiet.signaled = false;
  ASSERT_TRUE(queue_->PostInvalidate(3, first, quiet).ok());
  maps[2].options.signaled = true;
  ASSERT_TRUE(queue_->PostMap(4, maps[2]).ok());
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(20)).ok());
  Completion c[4];
  ASSERT_EQ(queue_->Poll(absl::MakeSpan(c)), 1u);
  EXPECT_EQ(c[0].request_id, 4u);
  EXPECT_TRUE(c[0].status.ok()) << c[0].status;
  EXPECT_EQ(Stat("binds_posted"), posted + 4);
  EXPECT_EQ(Stat("bind_lists_posted"), lists + 2);
  EXPECT_FALSE(PeerReads(first, kTenantVa)) << "invalidated in the same batch";
  EXPECT_TRUE(PeerReads(MakeKey(KeyIndex(keys_[1]), maps[1].new_variant), kTenantVa + 4096));
  EXPECT_TRUE(PeerReads(MakeKey(KeyIndex(keys_[2]), maps[2].new_variant), kTenantVa + 8192));
  auto info = dev_->QueryKey(first);
  EXPECT_FALSE(info.ok() && !info->free) << "the window moved past the invalidated variant";
}

class VerbsRxeOneByOneTest : public VerbsRxeTest {
 protected:
  VerbsRxeOneByOneTest() { bind_lists_ = false; }
};

// Every request of a list asks for its completion: each gets one, but the device completes only
// the list's last bind, whose completion covers the rest.
TEST_F(VerbsRxeTest, AListCompletesOnceHoweverManyOfItsBindsAskForACompletion) {
  ASSERT_EQ(Stat("bind_lists"), 1) << "the self-test at open found lists unusable here";
  std::vector<KlmEntry> entries;
  std::vector<MapRequest> maps = PageMaps(4, kRemoteRead, entries);
  const int64_t completions = Stat("bind_completions");
  const int64_t markers = Stat("bind_markers");
  for (size_t i = 0; i < 4; ++i) {
    maps[i].options.signaled = true;
    ASSERT_TRUE(queue_->PostMap(10 + i, maps[i]).ok());
  }
  ASSERT_TRUE(queue_->Doorbell().ok());
  ASSERT_TRUE(queue_->Flush(absl::Seconds(20)).ok());
  Completion c[8];
  ASSERT_EQ(queue_->Poll(absl::MakeSpan(c)), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c[i].request_id, 10 + i) << "in posting order";
    EXPECT_TRUE(c[i].status.ok()) << c[i].status;
    EXPECT_TRUE(PeerReads(MakeKey(KeyIndex(keys_[i]), maps[i].new_variant), kTenantVa + i * 4096));
  }
  EXPECT_EQ(Stat("bind_completions"), completions + 1);
  EXPECT_EQ(Stat("bind_markers"), markers);
}

TEST_F(VerbsRxeOneByOneTest, WithListsOffEveryBindIsItsOwnPost) {
  const int64_t posted = Stat("binds_posted");
  auto k0 = Map(keys_[0], 0, 4096, kRemoteRead);
  ASSERT_TRUE(k0.ok()) << k0.status();
  auto k1 = Map(keys_[1], 4096, 4096, kRemoteRead);
  ASSERT_TRUE(k1.ok()) << k1.status();
  EXPECT_TRUE(PeerReads(*k0, kTenantVa));
  EXPECT_TRUE(PeerReads(*k1, kTenantVa + 4096));
  EXPECT_EQ(Stat("binds_posted"), posted + 2);
  EXPECT_EQ(Stat("bind_lists_posted"), 0);
  EXPECT_EQ(Stat("bind_lists"), 0);
}

class VerbsRxeStrictTest : public VerbsRxeTest {
 protected:
  VerbsRxeStrictTest() { strict_ = true; }
};

TEST_F(VerbsRxeStrictTest, APeerCannotReachPastAKeyInsideItsBacking) {
  const Capabilities& c = dev_->capabilities();
  ASSERT_TRUE(KeyRangeEnforced(c.key_bounds)) << KeyBoundsName(c.key_bounds);
  auto key = Map(keys_[0], 8192, 4096, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(PeerReads(*key, kTenantVa + 8192));
  EXPECT_TRUE(PeerReads(*key, kTenantVa + 8192 + 4096 - 8));
  EXPECT_FALSE(PeerReads(*key, kTenantVa + 8192 - 8));
  EXPECT_FALSE(PeerReads(*key, kTenantVa + 8192 + 4096));
  // Eight bytes past the end: refused, and the next page of the backing keeps its bytes.
  std::memset(mem_ + 8192 + 4096, 0x5a, 8);
  auto peer = NewPeer();
  ASSERT_NE(peer, nullptr);
  const std::vector<uint8_t> bytes(8, 0x11);
  EXPECT_TRUE(absl::IsPermissionDenied(peer->Write(*key, kTenantVa + 8192 + 4096, bytes)));
  EXPECT_EQ(mem_[8192 + 4096], 0x5a);
  EXPECT_EQ(mem_[8192 + 4096 + 7], 0x5a);
  auto writer = NewPeer();
  ASSERT_NE(writer, nullptr);
  EXPECT_TRUE(writer->Write(*key, kTenantVa + 8192 + 4096 - 8, bytes).ok());
  EXPECT_EQ(mem_[8192 + 4096 - 1], 0x11);
}

TEST_F(VerbsRxeStrictTest, EveryCutRegionGoesWithItsKey) {
  if (dev_->capabilities().key_bounds != KeyBounds::kCut) {
    GTEST_SKIP() << "the device enforces a key's own range: nothing is cut";
  }
  auto key = Map(keys_[0], 0, 65536, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(Stat("live_cuts"), 1);
  // A window on it gets a region of its own too, and is confined to it.
  auto child = Map(keys_[1], 4096, 4096, kRemoteRead, *key);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(Stat("live_cuts"), 2);
  EXPECT_TRUE(PeerReads(*child, kTenantVa + 4096));
  EXPECT_FALSE(PeerReads(*child, kTenantVa + 8192));
  // The backing cannot go while keys are bound on regions cut from it.
  absl::Status busy = dev_->DestroyKey(backing_.key);
  EXPECT_TRUE(absl::IsFailedPrecondition(busy)) << busy;
  auto child_now = Invalidate(*child);
  ASSERT_TRUE(child_now.ok()) << child_now.status();
  auto key_now = Invalidate(*key);
  ASSERT_TRUE(key_now.ok()) << key_now.status();
  EXPECT_EQ(Stat("live_cuts"), 0);
  EXPECT_EQ(Stat("cuts_registered"), 2);
  EXPECT_EQ(Stat("cut_release_errors"), 0);
  // A refused map releases the region it had cut: a window's range outside its parent.
  auto again = Map(*key_now, 0, 4096, kRemoteRead);
  ASSERT_TRUE(again.ok()) << again.status();
  auto outside = Map(*child_now, 8192, 4096, kRemoteRead, *again);
  EXPECT_FALSE(outside.ok());
  EXPECT_EQ(Stat("live_cuts"), 1);
  // TearDown destroys the window still bound: its region goes with it.
}

}  // namespace
}  // namespace regcache::hca::verbs
