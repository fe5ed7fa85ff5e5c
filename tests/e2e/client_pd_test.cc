// Clients' own PDs and memory (docs/client_memory.md) through the whole stack — daemon, control
// socket, client library — on the sim. The sim cannot export a PD, so two devices are used:
//   "sim"             as shipped: every step answers kUnimplemented, saying why;
//   "sim_pd_export"   the sim behind a device that plays the import verbs (each opening of it is
//                     one device context: a session of its own context gets one, and what is
//                     registered in one is unknown to the others): ExportPd hands out a
//                     duplicate of /dev/null with the PD's number as its handle, and a "client
//                     region" is a backing the test registers itself (as a client registers
//                     in its imported PD), whose key is its handle. ImportBacking finds it,
//                     DestroyKey of it only forgets it (counted), as ibv_unimport_mr does.
// On a real device the import verbs are the provider's (rdma-core implements them for mlx5).
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/backend.h"
#include "hca/sim/sim_device.h"
#include "regcache/client.h"
#include "regcache/sim_peer.h"
#include "server/control_server.h"
#include "server/grpc_service.h"
#include "service/daemon.h"

using ::regcache::base::StatusIs;

namespace regcache::api {
namespace {

using server::ControlServer;
using server::GrpcServer;
using server::GrpcServerOptions;

constexpr uint64_t kPage = 4096;
constexpr uint32_t kRw = kLocalWrite | kRemoteRead | kRemoteWrite;

class ExportingDevice final : public hca::Device {
 public:
  explicit ExportingDevice(std::unique_ptr<hca::Device> sim) : sim_(std::move(sim)) {
    caps_ = sim_->capabilities();
    caps_.pd_export = true;
    alive.fetch_add(1);
  }
  ~ExportingDevice() override { alive.fetch_sub(1); }
  static ExportingDevice* last;   // the one the daemon opened last
  static std::atomic<int> alive;  // contexts open: the daemon's, and one per own-context session

  // The client's ibv_reg_mr in its imported PD: returns the region's handle.
  uint32_t ClientRegister(hca::Pd pd, void* addr, uint64_t length) {
    auto b =
        sim_->RegisterBacking(pd, reinterpret_cast<uint64_t>(addr), length, hca::kAllAccess, {});
    EXPECT_TRUE(b.ok()) << b.status();
    base::MutexLock l(&mu_);
    regions_[b->key] = *b;
    return b->key;
  }
  int unimports() const { return unimports_->load(); }
  // The count, kept by whoever holds it: an own context's device goes with its session.
  std::shared_ptr<std::atomic<int>> unimport_count() const { return unimports_; }
  // Whether the client's own registration still exists (the daemon must never destroy it).
  bool ClientKeyAlive(uint32_t handle) { return sim_->QueryKey(handle).ok(); }

  const hca::Capabilities& capabilities() const override { return caps_; }
  absl::StatusOr<hca::PdExport> ExportPd(hca::Pd pd) override {
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0) return absl::InternalError("open /dev/null");
    return hca::PdExport{fd, pd.pdn};
  }
  absl::StatusOr<hca::Backing> ImportBacking(hca::Pd pd, const hca::ImportedRegion& r) override {
    base::MutexLock l(&mu_);
    auto it = regions_.find(r.handle);
    if (it == regions_.end()) return absl::NotFoundError("no such region");
    if (!(it->second.pd == pd)) return absl::FailedPreconditionError("region of another PD");
    if (it->second.length != r.length) return absl::InvalidArgumentError("length differs");
    if (!imported_.insert(r.handle).second) return absl::AlreadyExistsError("imported before");
    hca::Backing b = it->second;
    b.addr = r.iova;
    return b;
  }
  absl::Status DestroyKey(hca::Key key) override {
    {
      base::MutexLock l(&mu_);
      if (imported_.erase(key) != 0) {
        unimports_->fetch_add(1);
        return absl::OkStatus();
      }
    }
    return sim_->DestroyKey(key);
  }

  absl::StatusOr<hca::Pd> AllocPd() override { return sim_->AllocPd(); }
  absl::Status DeallocPd(hca::Pd pd) override {
    // The client's registrations in it go first, as the client deregisters before it leaves.
    std::vector<hca::Key> keys;
    {
      base::MutexLock l(&mu_);
      for (auto it = regions_.begin(); it != regions_.end();) {
        if (it->second.pd == pd && !imported_.contains(it->first)) {
          keys.push_back(it->first);
          it = regions_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (hca::Key k : keys) (void)sim_->DestroyKey(k);
    return sim_->DeallocPd(pd);
  }
  absl::StatusOr<hca::Backing> RegisterBacking(hca::Pd pd, uint64_t addr, uint64_t length,
                                               hca::AccessFlags access,
                                               const hca::BackingOptions& o) override {
    return sim_->RegisterBacking(pd, addr, length, access, o);
  }
  absl::StatusOr<std::vector<hca::Key>> CreateIndirectKeys(
      hca::Pd pd, uint32_t capacity, uint32_t count, const hca::IndirectKeyOptions& o) override {
    return sim_->CreateIndirectKeys(pd, capacity, count, o);
  }
  absl::StatusOr<std::vector<hca::Key>> CreateDirectKeys(hca::Pd pd, uint32_t capacity,
                                                         uint32_t count,
                                                         const hca::DirectKeyOptions& o) override {
    return sim_->CreateDirectKeys(pd, capacity, count, o);
  }
  absl::StatusOr<hca::KeyInfo> QueryKey(hca::Key key) override { return sim_->QueryKey(key); }
  absl::StatusOr<std::unique_ptr<hca::Queue>> CreateQueue(hca::Pd pd,
                                                          const hca::QueueOptions& o) override {
    return sim_->CreateQueue(pd, o);
  }
  absl::StatusOr<std::unique_ptr<hca::Peer>> CreatePeer(hca::Pd pd) override {
    return sim_->CreatePeer(pd);
  }
  absl::StatusOr<std::unique_ptr<hca::Endpoint>> CreateEndpoint(
      hca::Pd pd, const hca::EndpointOptions& o) override {
    return sim_->CreateEndpoint(pd, o);
  }
  absl::StatusOr<hca::FaultEvent> NextFaultEvent(absl::Duration t) override {
    return sim_->NextFaultEvent(t);
  }
  int FaultEventFd() override { return sim_->FaultEventFd(); }
  absl::Status ResumeFault(uint64_t token, bool ok) override {
    return sim_->ResumeFault(token, ok);
  }
  absl::Status Prefetch(hca::Key key, uint64_t addr, uint64_t length, bool write) override {
    return sim_->Prefetch(key, addr, length, write);
  }

 private:
  std::unique_ptr<hca::Device> sim_;
  hca::Capabilities caps_;
  base::Mutex mu_;
  std::map<uint32_t, hca::Backing> regions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint32_t> imported_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::atomic<int>> unimports_ = std::make_shared<std::atomic<int>>(0);
};
ExportingDevice* ExportingDevice::last = nullptr;
std::atomic<int> ExportingDevice::alive{0};

void RegisterExportingBackend() {
  hca::sim::RegisterBackend();
  (void)hca::RegisterBackend(
      "sim_pd_export",
      [](const hca::BackendSpec&,
         const hca::OpenOptions& o) -> absl::StatusOr<std::unique_ptr<hca::Device>> {
        auto sim = hca::OpenDevice("sim", o);
        if (!sim.ok()) return sim.status();
        auto d = std::make_unique<ExportingDevice>(std::move(*sim));
        ExportingDevice::last = d.get();
        return std::unique_ptr<hca::Device>(std::move(d));
      });
}

// A daemon in this process with its control socket and gRPC service, and one client.
class ClientPdTest : public ::testing::Test {
 protected:
  // A daemon on `device` and a client with a device context of its own (`own`).
  void Start(const std::string& device, bool allow, bool own = true) {
    RegisterExportingBackend();
    service::DaemonConfig config;
    config.device = device;
    config.allow_pd_export = allow;
    auto d = service::Daemon::Create(config, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    char tmpl[] = "/tmp/regcache-pd-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto control = ControlServer::Start(daemon_.get(), dir_);
    ASSERT_TRUE(control.ok()) << control.status();
    control_ = std::move(*control);
    GrpcServerOptions go;
    go.socket_dir = dir_;
    auto grpc = GrpcServer::Start(daemon_.get(), control_.get(), go);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = std::move(*grpc);
    auto c = Client::Connect(dir_, Own(own));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  static ClientOptions Own(bool own) {
    ClientOptions o;
    o.own_device_context = own;
    return o;
  }
  void TearDown() override {
    // The session ends on this thread, so its own context (the device the test touched) goes
    // here too, not on the control server's closer thread, which TSan sees no order with.
    if (client_ != nullptr && daemon_ != nullptr)
      (void)daemon_->CloseSession(client_->session_id());
    client_.reset();
    if (grpc_ != nullptr) grpc_->Shutdown(absl::Seconds(1));
    grpc_.reset();
    control_.reset();
    daemon_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  hca::Pd SessionPd() {
    auto u = daemon_->Usage(client_->session_id());
    EXPECT_TRUE(u.ok()) << u.status();
    return u->pd;
  }
  // What the client's ibv_reg_mr would return, as far as AttachRegion reads it.
  static ibv_mr FakeMr(uint32_t handle, void* addr, uint64_t length) {
    ibv_mr mr{};
    mr.handle = handle;
    mr.addr = addr;
    mr.length = length;
    return mr;
  }

  std::unique_ptr<service::Daemon> daemon_;
  std::string dir_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientPdTest, TheSimSaysItCannotExportThroughEveryLayer) {
  Start("sim", /*allow=*/true, /*own=*/false);
  absl::StatusOr<std::unique_ptr<Client>> own = Client::Connect(dir_, Own(true));
  ASSERT_THAT(own, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_NE(own.status().message().find("cannot give a session"), std::string::npos)
      << own.status();
  absl::Status daemon_side = daemon_->ExportPd(client_->session_id()).status();
  EXPECT_THAT(daemon_side, StatusIs(absl::StatusCode::kUnimplemented)) << daemon_side;
  absl::StatusOr<ImportedPd> pd = client_->ImportPd();
  ASSERT_THAT(pd, StatusIs(absl::StatusCode::kUnimplemented)) << pd.status();
  EXPECT_NE(pd.status().message().find("cannot export"), std::string::npos) << pd.status();
  std::vector<uint8_t> buf(4 * kPage);
  ibv_mr mr = FakeMr(7, buf.data(), buf.size());
  absl::StatusOr<Memory> m = client_->AttachRegion(&mr);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kUnimplemented)) << m.status();
  // The session is untouched: ordinary memory still works.
  auto mem = client_->AllocateMemory(kPage);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_TRUE(client_->Register(mem->data, kPage, kRw).ok());
}

TEST_F(ClientPdTest, ExportIsOffUnlessTheDaemonAllowsIt) {
  Start("sim_pd_export", /*allow=*/false, /*own=*/false);
  EXPECT_THAT(Client::Connect(dir_, Own(true)), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(ExportingDevice::alive.load(), 1);  // no context was opened for it
  EXPECT_THAT(client_->ImportPd(), StatusIs(absl::StatusCode::kPermissionDenied));
  std::vector<uint8_t> buf(kPage);
  const uint32_t h = ExportingDevice::last->ClientRegister(SessionPd(), buf.data(), buf.size());
  ibv_mr mr = FakeMr(h, buf.data(), buf.size());
  EXPECT_THAT(client_->AttachRegion(&mr), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(ExportingDevice::last->unimports(), 0);
}

TEST_F(ClientPdTest, TheExportTravelsAsAnFdAndTheImportIsTheProvidersToDo) {
  Start("sim_pd_export", /*allow=*/true);
  auto e = daemon_->ExportPd(client_->session_id());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_GE(e->cmd_fd, 0);
  EXPECT_EQ(e->pd_handle, SessionPd().pdn);
  close(e->cmd_fd);
  // The client received the fd and handed it to ibv_import_device, which refuses /dev/null: the
  // error is the verb's, not the daemon's.
  absl::StatusOr<ImportedPd> pd = client_->ImportPd();
  ASSERT_FALSE(pd.ok());
  EXPECT_NE(pd.status().message().find("ibv_import_device"), std::string::npos) << pd.status();
}

TEST_F(ClientPdTest, AClientRegionGivesFastKeysAndIsOnlyForgotten) {
  Start("sim_pd_export", /*allow=*/true);
  ExportingDevice* dev = ExportingDevice::last;
  std::vector<uint8_t> buf(16 * kPage, 0);
  const uint32_t h = dev->ClientRegister(SessionPd(), buf.data(), buf.size());
  ibv_mr mr = FakeMr(h, buf.data(), buf.size());
  // A part of it: pages 4..12.
  auto m = client_->AttachRegion(&mr, buf.data() + 4 * kPage, 8 * kPage, kRw);
  ASSERT_TRUE(m.ok()) << m.status();
  auto k = client_->Register(buf.data() + 5 * kPage, 2 * kPage, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  const uint64_t at = reinterpret_cast<uint64_t>(buf.data()) + 5 * kPage + 8;
  ASSERT_TRUE(SimPeerWrite(*client_, k->rkey, at, "written by the peer").ok());
  EXPECT_EQ(std::memcmp(buf.data() + 5 * kPage + 8, "written by the peer", 19), 0);
  std::memcpy(buf.data() + 6 * kPage, "client data", 11);
  auto read = SimPeerRead(*client_, k->rkey, at - 8 + kPage, 11);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "client data");
  // Outside the attached part: not covered.
  EXPECT_EQ(client_->Register(buf.data() + 2 * kPage, kPage, kRw).status().code(),
            absl::StatusCode::kOutOfRange);
  auto list = daemon_->ListMemory(client_->session_id());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE((*list)[0].client_region);
  EXPECT_EQ((*list)[0].client_va, reinterpret_cast<uint64_t>(buf.data()) + 4 * kPage);
  // Detach: the key stops working, the region is unimported, never destroyed.
  ASSERT_TRUE(client_->DetachMemory(*m).ok());
  EXPECT_FALSE(SimPeerRead(*client_, k->rkey, at, 4).ok());
  EXPECT_EQ(dev->unimports(), 1);
  EXPECT_TRUE(dev->ClientKeyAlive(h));
  // Attached again, then the session ends: forgotten again, still alive.
  ASSERT_TRUE(client_->AttachRegion(&mr).ok());
  const std::shared_ptr<std::atomic<int>> unimports = dev->unimport_count();
  // The session ends (on this thread: see TearDown) and its context, `dev`, goes with it.
  ASSERT_TRUE(daemon_->CloseSession(client_->session_id()).ok());
  client_->Close();
  for (int i = 0; i < 500 && unimports->load() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  // Forgotten before the PD went (the fake then deregisters what the client left in it).
  EXPECT_EQ(unimports->load(), 2);
}

TEST_F(ClientPdTest, EveryFieldIsCheckedAndAFailureLosesNothing) {
  Start("sim_pd_export", /*allow=*/true);
  ExportingDevice* dev = ExportingDevice::last;
  std::vector<uint8_t> buf(8 * kPage, 0);
  const uint32_t h = dev->ClientRegister(SessionPd(), buf.data(), buf.size());
  uint8_t* p = buf.data();
  const auto code = [&](ibv_mr mr, const void* addr, uint64_t length, uint32_t access) {
    return client_->AttachRegion(&mr, addr, length, access).status().code();
  };
  EXPECT_THAT(client_->AttachRegion(nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(code(FakeMr(h + 0x100, p, buf.size()), nullptr, 0, kRw),
            absl::StatusCode::kNotFound);  // no such region
  EXPECT_EQ(code(FakeMr(h, p, buf.size() - kPage), nullptr, 0, kRw),
            absl::StatusCode::kInvalidArgument);  // not the region's length
  EXPECT_EQ(code(FakeMr(h, p, buf.size()), p + 4 * kPage, 8 * kPage, kRw),
            absl::StatusCode::kOutOfRange);  // beyond its end
  EXPECT_EQ(code(FakeMr(h, p, buf.size()), p - kPage, 2 * kPage, kRw),
            absl::StatusCode::kOutOfRange);  // before its start
  EXPECT_EQ(code(FakeMr(h, p, buf.size()), p, 0, kRw), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(FakeMr(h, p, 0), nullptr, 0, kRw), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(FakeMr(h, p, buf.size()), nullptr, 0, 1u << 9),
            absl::StatusCode::kInvalidArgument);  // unknown access bits
  EXPECT_EQ(
      code(FakeMr(h, reinterpret_cast<void*>(~uint64_t{0} - kPage), buf.size()), nullptr, 0, kRw),
      absl::StatusCode::kInvalidArgument);  // wraps
  // Another session's region is in another context: unknown in this one.
  auto other = Client::Connect(dir_, Own(true));
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_NE(ExportingDevice::last, dev);
  std::vector<uint8_t> theirs(kPage);
  auto theirs_pd = daemon_->Usage((*other)->session_id());
  ASSERT_TRUE(theirs_pd.ok());
  // Handles are per context, as the kernel's per uverbs file: take one this context lacks.
  uint32_t t = 0;
  do {
    t = ExportingDevice::last->ClientRegister(theirs_pd->pd, theirs.data(), theirs.size());
  } while (dev->ClientKeyAlive(t));
  const ibv_mr their_mr = FakeMr(t, theirs.data(), kPage);
  EXPECT_THAT(client_->AttachRegion(&their_mr), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE((*other)->AttachRegion(&their_mr).ok());
  // Nothing was lost: the right request works, once.
  const ibv_mr mr = FakeMr(h, p, buf.size());
  auto m = client_->AttachRegion(&mr);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(code(FakeMr(h, p, buf.size()), nullptr, 0, kRw), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(client_->Register(p, buf.size(), kRw).ok());
  EXPECT_EQ(dev->unimports(), 0);
  auto usage = daemon_->Usage(client_->session_id());
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->backings, 1u);
  EXPECT_EQ(usage->backed_bytes, buf.size());
}

TEST_F(ClientPdTest, PrefetchOverAClientRegionTouchesNothing) {
  Start("sim_pd_export", /*allow=*/true);
  ExportingDevice* dev = ExportingDevice::last;
  std::vector<uint8_t> buf(4 * kPage, 0);
  const uint32_t h = dev->ClientRegister(SessionPd(), buf.data(), buf.size());
  ibv_mr mr = FakeMr(h, buf.data(), buf.size());
  ASSERT_TRUE(client_->AttachRegion(&mr).ok());
  // Pinned as far as the daemon knows: nothing to make present, and nothing is read.
  EXPECT_TRUE(client_->Prefetch(buf.data(), buf.size(), true, PrefetchMode::kSync).ok());
  auto k = client_->Register(buf.data(), kPage, kRw, PrefetchMode::kSync);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(dev->unimports(), 0);
}

TEST_F(ClientPdTest, TheDaemonCallNamesTheRegionAndTheRange) {
  Start("sim_pd_export", /*allow=*/true);
  ExportingDevice* dev = ExportingDevice::last;
  std::vector<uint8_t> buf(2 * kPage);
  const uint32_t h = dev->ClientRegister(SessionPd(), buf.data(), buf.size());
  const uint64_t va = reinterpret_cast<uint64_t>(buf.data());
  service::ClientRegion r{h, va, buf.size(), va + kPage, kPage, kRw};
  auto id = daemon_->AttachRegion(client_->session_id(), r);
  ASSERT_TRUE(id.ok()) << id.status();
  auto g = daemon_->Register(client_->session_id(), va + kPage, kPage, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(daemon_->AttachRegion(client_->session_id() + 100, r).status().code(),
            absl::StatusCode::kNotFound);  // no such session
  ASSERT_TRUE(daemon_->DetachMemory(client_->session_id(), *id).ok());
  EXPECT_THAT(daemon_->DetachMemory(client_->session_id(), *id),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(dev->unimports(), 1);
}

TEST_F(ClientPdTest, ASessionSharingTheDaemonsContextCannotExportIt) {
  Start("sim_pd_export", /*allow=*/true, /*own=*/false);
  absl::StatusOr<ImportedPd> pd = client_->ImportPd();
  ASSERT_THAT(pd, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(pd.status().message().find("own_device_context"), std::string::npos) << pd.status();
  std::vector<uint8_t> buf(kPage);
  const uint32_t h = ExportingDevice::last->ClientRegister(SessionPd(), buf.data(), buf.size());
  ibv_mr mr = FakeMr(h, buf.data(), buf.size());
  EXPECT_THAT(client_->AttachRegion(&mr), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ExportingDevice::alive.load(), 1);
}

TEST_F(ClientPdTest, EachExportingSessionHasAContextOfItsOwnThatGoesWithIt) {
  Start("sim_pd_export", /*allow=*/true);
  EXPECT_EQ(ExportingDevice::alive.load(), 2);  // the daemon's and the session's
  ExportingDevice* mine = ExportingDevice::last;
  auto second = Client::Connect(dir_, Own(true));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(ExportingDevice::alive.load(), 3);
  auto plain = Client::Connect(dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(ExportingDevice::alive.load(), 3);
  // Both own-context sessions serve keys from their own contexts, over memory of any kind.
  std::vector<uint8_t> buf(4 * kPage, 0);
  const uint32_t h = mine->ClientRegister(SessionPd(), buf.data(), buf.size());
  ibv_mr mr = FakeMr(h, buf.data(), buf.size());
  ASSERT_TRUE(client_->AttachRegion(&mr).ok());
  auto k = client_->Register(buf.data(), kPage, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_TRUE(SimPeerWrite(*client_, k->rkey, reinterpret_cast<uint64_t>(buf.data()), "own").ok());
  EXPECT_EQ(std::memcmp(buf.data(), "own", 3), 0);
  auto mem = (*second)->AllocateMemory(kPage);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_TRUE((*second)->Register(mem->data, kPage, kRw).ok());
  // The daemon counts them on the device they were opened like.
  auto status = daemon_->Status();
  ASSERT_EQ(status.devices.size(), 1u);
  EXPECT_EQ(status.devices[0].sessions, 3u);
  // A session's end closes its context, whatever the client left in it (ended on this thread:
  // see TearDown).
  for (Client* c : {client_.get(), second->get()}) {
    ASSERT_TRUE(daemon_->CloseSession(c->session_id()).ok());
    c->Close();
  }
  for (int i = 0; i < 500 && ExportingDevice::alive.load() > 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ExportingDevice::alive.load(), 1);
  EXPECT_TRUE((*plain)->Register((*plain)->AllocateMemory(kPage)->data, kPage, kRw).ok());
}

}  // namespace
}  // namespace regcache::api
