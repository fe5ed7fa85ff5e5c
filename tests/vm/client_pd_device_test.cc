// Clients' own PDs and memory (docs/client_memory.md) on a real device: the `vm` tier runs it on
// Soft-RoCE (--device=verbs, rxe0), the `hw` tier on a ConnectX (REGCACHE_TEST_DEVICE=mlx5).
// Exits 77 (skipped) when the device does not open here, saying why.
//
// What each device proves. rdma-core implements ibv_import_device / ibv_import_pd /
// ibv_import_mr for mlx5 only; rxe's provider answers EOPNOTSUPP. So on rxe this checks that
// the refusal is found at open (Capabilities::pd_export false, the provider's reason kept), that
// every layer says so (device, daemon, control socket, client) and that the session is
// untouched. Where the provider imports, it runs the client's side for real: the client, in a
// session with a device context of its own, imports the session's PD, registers its own heap
// buffer in it, attaches it, and gets keys over it; a second such session's region is nothing
// the first can attach.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hca/device.h"
#include "hca/mlx5/mlx5_device.h"
#include "hca/verbs/verbs_device.h"
#include "regcache/client.h"
#include "server/control_server.h"
#include "server/grpc_service.h"
#include "service/daemon.h"

namespace regcache::api {
namespace {

using server::ControlServer;
using server::GrpcServer;
using server::GrpcServerOptions;

constexpr uint64_t kPage = 4096;
constexpr uint32_t kRw = kLocalWrite | kRemoteRead | kRemoteWrite;

std::string DeviceSpec() {
  const char* d = std::getenv("REGCACHE_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "verbs";
}

// A memory region in a context of this test's own (not the daemon's): what a client that did
// not import the PD would hold.
struct OwnRegion {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4 * kPage);
  OwnRegion() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list != nullptr && n > 0) ctx = ibv_open_device(list[0]);
    if (list != nullptr) ibv_free_device_list(list);
    if (ctx != nullptr) pd = ibv_alloc_pd(ctx);
    if (pd != nullptr) {
      mr = ibv_reg_mr(pd, buf.data(), buf.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
    }
  }
  ~OwnRegion() {
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

TEST(ClientPdDevice, TheDeviceKnowsWhetherItsProviderImports) {
  auto dev = hca::OpenDevice(DeviceSpec());
  ASSERT_TRUE(dev.ok()) << dev.status();
  const hca::Capabilities& caps = (*dev)->capabilities();
  auto pd = (*dev)->AllocPd();
  ASSERT_TRUE(pd.ok()) << pd.status();
  OwnRegion own;
  ASSERT_NE(own.mr, nullptr);
  // The provider's own answer, asked directly: the capability must agree with it.
  ibv_pd* probe = ibv_import_pd(own.ctx, own.pd->handle);
  const bool provider_imports = probe != nullptr;
  if (probe != nullptr) ibv_unimport_pd(probe);
  EXPECT_EQ(caps.pd_export, provider_imports) << caps.backend << ":" << caps.device_name;
  if (!caps.pd_export) {
    absl::StatusOr<hca::PdExport> e = (*dev)->ExportPd(*pd);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << e.status();
    EXPECT_NE(e.status().message().find("ibv_import_pd"), std::string::npos) << e.status();
    hca::ImportedRegion r{own.mr->handle, reinterpret_cast<uint64_t>(own.buf.data()),
                          own.buf.size(), hca::kLocalRead};
    EXPECT_EQ((*dev)->ImportBacking(*pd, r).status().code(), absl::StatusCode::kUnimplemented);
  } else {
    absl::StatusOr<hca::PdExport> e = (*dev)->ExportPd(*pd);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_GE(e->cmd_fd, 0);
    close(e->cmd_fd);
  }
  EXPECT_TRUE((*dev)->DeallocPd(*pd).ok());
}

class ClientPdStack : public ::testing::Test {
 protected:
  void SetUp() override {
    service::DaemonConfig config;
    config.device = DeviceSpec();
    config.allow_pd_export = true;
    auto d = service::Daemon::Create(config, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    char tmpl[] = "/run/regcache-pd-XXXXXX";  // unix sockets cannot be bound on the guest's 9p
    if (mkdtemp(tmpl) == nullptr) {
      std::snprintf(tmpl, sizeof(tmpl), "/tmp/regcache-pd-XXXXXX");
      ASSERT_NE(mkdtemp(tmpl), nullptr);
    }
    dir_ = tmpl;
    auto control = ControlServer::Start(daemon_.get(), dir_);
    ASSERT_TRUE(control.ok()) << control.status();
    control_ = std::move(*control);
    GrpcServerOptions go;
    go.socket_dir = dir_;
    auto grpc = GrpcServer::Start(daemon_.get(), control_.get(), go);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = std::move(*grpc);
    // Where the device exports, the session imports its own device context.
    ClientOptions o;
    o.own_device_context = daemon_->Status().capabilities.pd_export;
    auto c = Client::Connect(dir_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  void TearDown() override {
    client_.reset();
    if (grpc_ != nullptr) grpc_->Shutdown(absl::Seconds(1));
    grpc_.reset();
    control_.reset();
    daemon_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<service::Daemon> daemon_;
  std::string dir_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientPdStack, AClientImportsThePdAndAttachesItsOwnMemory) {
  const bool exports = daemon_->Status().capabilities.pd_export;
  absl::StatusOr<ImportedPd> pd = client_->ImportPd();
  if (!exports) {
    // Every layer says why, and the session goes on as before.
    ASSERT_EQ(pd.status().code(), absl::StatusCode::kUnimplemented) << pd.status();
    EXPECT_NE(pd.status().message().find("ibv_import_pd"), std::string::npos) << pd.status();
    ClientOptions with_context;
    with_context.own_device_context = true;
    EXPECT_EQ(Client::Connect(dir_, with_context).status().code(),
              absl::StatusCode::kUnimplemented);
    OwnRegion own;
    ASSERT_NE(own.mr, nullptr);
    EXPECT_EQ(client_->AttachRegion(own.mr).status().code(), absl::StatusCode::kUnimplemented);
    auto mem = client_->AllocateMemory(4 * kPage);
    ASSERT_TRUE(mem.ok()) << mem.status();
    auto k = client_->Register(mem->data, kPage, kRw);
    EXPECT_TRUE(k.ok()) << k.status();
    auto list = daemon_->ListMemory(client_->session_id());
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->size(), 1u);
    return;
  }
  ASSERT_TRUE(pd.ok()) << pd.status();
  std::vector<uint8_t> heap(16 * kPage, 0);
  ibv_mr* mr = ibv_reg_mr(pd->pd, heap.data(), heap.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(mr, nullptr) << "ibv_reg_mr in the imported PD: errno " << errno;
  auto m = client_->AttachRegion(mr);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(client_->AttachRegion(mr).status().code(), absl::StatusCode::kAlreadyExists);
  auto k = client_->Register(heap.data() + kPage, 2 * kPage, kRw);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_TRUE(client_->Release(k->handle).ok());
  ASSERT_TRUE(client_->DetachMemory(*m).ok());
  EXPECT_EQ(ibv_dereg_mr(mr), 0);  // still the client's: the daemon only forgot it

  // Another session's context is another device context: its region is nothing this session
  // can attach (whatever its handle names in this context, it is not that region).
  ClientOptions o;
  o.own_device_context = true;
  auto other = Client::Connect(dir_, o);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<ImportedPd> other_pd = (*other)->ImportPd();
  ASSERT_TRUE(other_pd.ok()) << other_pd.status();
  EXPECT_NE(other_pd->context, pd->context);
  std::vector<uint8_t> theirs(4 * kPage, 0);
  ibv_mr* their_mr = ibv_reg_mr(other_pd->pd, theirs.data(), theirs.size(),
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(their_mr, nullptr) << "errno " << errno;
  EXPECT_FALSE(client_->AttachRegion(their_mr).ok());
  auto theirs_attached = (*other)->AttachRegion(their_mr);
  ASSERT_TRUE(theirs_attached.ok()) << theirs_attached.status();
  ASSERT_TRUE((*other)->DetachMemory(*theirs_attached).ok());
  EXPECT_EQ(ibv_dereg_mr(their_mr), 0);
}

}  // namespace
}  // namespace regcache::api

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  regcache::hca::verbs::RegisterBackend();
  regcache::hca::mlx5::RegisterBackend();
  const std::string spec = regcache::api::DeviceSpec();
  auto dev = regcache::hca::OpenDevice(spec);
  if (!dev.ok()) {
    std::printf("skipped: device %s does not open here: %s\n", spec.c_str(),
                std::string(dev.status().message()).c_str());
    return 77;
  }
  dev->reset();
  return RUN_ALL_TESTS();
}
