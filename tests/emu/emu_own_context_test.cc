// Sessions with a device context of their own (Daemon::OpenSession's own_context,
// docs/client_memory.md) on the emulated ConnectX, with the import verbs a client calls run in
// this process as the client library runs them: what a session's exported command fd reaches
// (its own PD and regions, nothing of another session's or of the daemon's), that keys over a
// region the client registered carry a peer's RDMA into it, and that objects a client leaves in
// the context go with it, whichever side lets go last. mlx5emu::CensusOf counts what the device
// holds; the emulator's uverbs files destroy what is left in them as the kernel's do.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/stats.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/mlx5/mlx5_device.h"
#include "hca/mlx5emu/mlx5emu.h"
#include "service/daemon.h"
#include "service/sim_peer.h"

namespace regcache::hca::mlx5emu {
std::ostream& operator<<(std::ostream& o, const Census& c) {
  return o << "{contexts " << c.contexts << ", files " << c.files << ", pds " << c.pds << ", mrs "
           << c.mrs << ", cqs " << c.cqs << ", qps " << c.qps << "}";
}
}  // namespace regcache::hca::mlx5emu

namespace regcache::service {
namespace {

using ::regcache::base::StatusIs;

// The daemon's cache stat `name`, summed over its devices (component "cache" or
// "cache{device=...}"); -1 when it has none.
int64_t CacheStat(Daemon* daemon, const std::string& name) {
  int64_t n = -1;
  for (const base::stats::Sample& s : daemon->Stats()) {
    if ((s.component == "cache" || absl::StartsWith(s.component, "cache{")) && s.name == name) {
      n = std::max<int64_t>(n, 0) + s.value;
    }
  }
  return n;
}

// A closed session's pool keys, queues and PD go after the close, on the cache's maintenance
// thread: waits until they have (or failed to), for at most 10 s.
void WaitReaped(Daemon* daemon) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (CacheStat(daemon, "tenants_reaping") != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(CacheStat(daemon, "tenants_reaping"), 0);
}

constexpr char kDevice[] = "mlx5_0";
constexpr uint64_t kPage = 4096;
constexpr int kRemoteRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// The whole of `mr`, as Client::AttachRegion describes it.
ClientRegion RegionOf(const ibv_mr* mr) {
  const uint64_t at = reinterpret_cast<uint64_t>(mr->addr);
  return ClientRegion{mr->handle, at, mr->length, at, mr->length, hca::kAllAccess};
}

// A client's side of an exported PD: the daemon's fd imported here, as Client::ImportPd does.
struct Imported {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  uint32_t handle = 0;
};

class EmuOwnContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(hca::mlx5emu::Configure("").ok());
    hca::mlx5emu::ClearViolations();
    hca::mlx5::RegisterBackend();
    DaemonConfig config;
    config.device = std::string("mlx5:") + kDevice;
    config.allow_pd_export = true;
    config.peer_on_any_device = true;
    auto d = Daemon::Create(config, &registry_);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    idle_ = hca::mlx5emu::CensusOf(kDevice);
  }
  void TearDown() override {
    daemon_.reset();
    EXPECT_EQ(hca::mlx5emu::CensusOf(kDevice), hca::mlx5emu::Census{});
    EXPECT_TRUE(hca::mlx5emu::Violations().empty());
  }

  SessionId Open(bool own_context) {
    auto g = daemon_->OpenSession({::getpid(), ::getuid(), ::getgid()}, {}, own_context);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return 0;
    ::close(g->channel_fd);
    ::close(g->state_fd);
    return g->id;
  }
  Imported Import(SessionId s) {
    auto e = daemon_->ExportPd(s);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return {};
    Imported out;
    out.ctx = ibv_import_device(e->cmd_fd);
    EXPECT_NE(out.ctx, nullptr) << "ibv_import_device: errno " << errno;
    if (out.ctx == nullptr) return {};
    out.pd = ibv_import_pd(out.ctx, e->pd_handle);
    EXPECT_NE(out.pd, nullptr) << "ibv_import_pd: errno " << errno;
    out.handle = e->pd_handle;
    return out;
  }
  base::stats::Registry registry_;  // before the daemon, which registers in it
  std::unique_ptr<Daemon> daemon_;
  hca::mlx5emu::Census idle_;
};

TEST_F(EmuOwnContextTest, EachContextIsASessionsOwnAndTheSharedOneIsNeverExported) {
  const SessionId plain = Open(false);
  EXPECT_THAT(daemon_->ExportPd(plain), StatusIs(absl::StatusCode::kFailedPrecondition));
  const SessionId a = Open(true);
  const SessionId b = Open(true);
  // Two more device contexts, each on a uverbs file of its own.
  EXPECT_EQ(hca::mlx5emu::CensusOf(kDevice).contexts, idle_.contexts + 2);
  EXPECT_EQ(hca::mlx5emu::CensusOf(kDevice).files, idle_.files + 2);
  Imported ia = Import(a);
  Imported ib = Import(b);
  ASSERT_NE(ia.pd, nullptr);
  ASSERT_NE(ib.pd, nullptr);
  // B's PD is no handle of A's file.
  errno = 0;
  EXPECT_EQ(ibv_import_pd(ia.ctx, ib.handle), nullptr);
  EXPECT_EQ(errno, EINVAL);

  // B registers its buffer in its PD; through A's session the region is unknown.
  std::vector<uint8_t> buf_b(8 * kPage, 0);
  ibv_mr* mr_b = ibv_reg_mr(ib.pd, buf_b.data(), buf_b.size(), kRemoteRw);
  ASSERT_NE(mr_b, nullptr) << "errno " << errno;
  absl::StatusOr<MemoryId> wrong = daemon_->AttachRegion(a, RegionOf(mr_b));
  EXPECT_THAT(wrong, StatusIs(absl::StatusCode::kNotFound)) << wrong.status();
  // A's context cannot name B's objects either: a queue pair on B's CQ is refused.
  ibv_cq* cq_b = ibv_create_cq(ib.ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq_b, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq_b;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_send_sge = 1;
  EXPECT_EQ(ibv_create_qp(ia.pd, &qa), nullptr);
  EXPECT_EQ(ibv_destroy_cq(cq_b), 0);

  // Through B's own session it is B's memory: a peer's write lands in B's buffer.
  absl::StatusOr<MemoryId> m = daemon_->AttachRegion(b, RegionOf(mr_b));
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t va = reinterpret_cast<uint64_t>(buf_b.data());
  auto g = daemon_->Register(b, va + kPage, 2 * kPage, hca::kAllAccess);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = "landed in the client's own region";
  ASSERT_NE(daemon_->sim_peer(), nullptr);
  ASSERT_TRUE(daemon_->sim_peer()
                  ->PeerWrite(b, g->rkey, va + kPage + 16,
                              {reinterpret_cast<const uint8_t*>(text.data()), text.size()})
                  .ok());
  EXPECT_EQ(std::memcmp(buf_b.data() + kPage + 16, text.data(), text.size()), 0);
  // Detached: the key stops, and the region is still B's to deregister.
  ASSERT_TRUE(daemon_->DetachMemory(b, *m).ok());
  EXPECT_FALSE(daemon_->sim_peer()->PeerRead(b, g->rkey, va + kPage, 8).ok());
  // Attached again and B's session closed with a key held: the region sits behind a gate (a
  // DevX KLM key over B's own MR; the write above went through one), which the close shuts and
  // the reaper destroys after the key. B deregisters its MR meanwhile; the census at the end
  // finds nothing left.
  m = daemon_->AttachRegion(b, RegionOf(mr_b));
  ASSERT_TRUE(m.ok()) << m.status();
  g = daemon_->Register(b, va + kPage, kPage, hca::kAllAccess);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(daemon_->CloseSession(b).ok());
  EXPECT_EQ(ibv_dereg_mr(mr_b), 0);

  for (Imported* i : {&ia, &ib}) {
    ibv_unimport_pd(i->pd);
    EXPECT_EQ(ibv_close_device(i->ctx), 0);
  }
  for (SessionId s : {plain, a}) EXPECT_TRUE(daemon_->CloseSession(s).ok());
  WaitReaped(daemon_.get());
  EXPECT_EQ(CacheStat(daemon_.get(), "reap_errors"), 0);
  EXPECT_EQ(hca::mlx5emu::CensusOf(kDevice), idle_);
}

// What a client that dies leaves: its queue pair, CQ and region in the imported context, its
// handles gone with its process (the import closed). Order `session_first`: the session ends
// before the client dies, else after.
void DieWithObjectsOpen(Daemon* daemon, SessionId s, const Imported& i, bool session_first,
                        const hca::mlx5emu::Census& idle) {
  const hca::mlx5emu::Census open = hca::mlx5emu::CensusOf(kDevice);  // the session's context
  std::vector<uint8_t> buf(4 * kPage, 0);
  ibv_mr* mr = ibv_reg_mr(i.pd, buf.data(), buf.size(), kRemoteRw);
  ASSERT_NE(mr, nullptr);
  ibv_cq* cq = ibv_create_cq(i.ctx, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 8;
  qa.cap.max_send_sge = 1;
  ibv_qp* qp = ibv_create_qp(i.pd, &qa);
  ASSERT_NE(qp, nullptr);
  ASSERT_TRUE(daemon->AttachRegion(s, RegionOf(mr)).ok());
  ASSERT_TRUE(
      daemon->Register(s, reinterpret_cast<uint64_t>(buf.data()), kPage, hca::kAllAccess).ok());
  const auto die = [&] {
    ibv_unimport_pd(i.pd);
    EXPECT_EQ(ibv_close_device(i.ctx), 0);
  };
  if (session_first) {
    // The daemon lets go of its context; the client's objects (and the PD they are in) stay
    // while the client's import is open.
    // Its PD cannot be freed while the client's objects are in it: the close revokes the keys
    // and returns; the session's cache, which goes with its context, is refused the PD and logs
    // it; the context's end takes them all.
    EXPECT_TRUE(daemon->CloseSession(s).ok());
    WaitReaped(daemon);
    const hca::mlx5emu::Census held = hca::mlx5emu::CensusOf(kDevice);
    EXPECT_EQ(held.files, idle.files + 1) << held;
    EXPECT_EQ(held.qps, idle.qps + 1) << held;
    die();
  } else {
    die();
    EXPECT_EQ(hca::mlx5emu::CensusOf(kDevice).qps, open.qps + 1);  // the session's file holds it
    EXPECT_TRUE(daemon->CloseSession(s).ok());  // the PD's refusal is logged, as above
    WaitReaped(daemon);
  }
  EXPECT_EQ(hca::mlx5emu::CensusOf(kDevice), idle);
}

TEST_F(EmuOwnContextTest, AClientThatDiesAfterItsSessionLeavesNothingBehind) {
  const SessionId s = Open(true);
  Imported i = Import(s);
  ASSERT_NE(i.pd, nullptr);
  DieWithObjectsOpen(daemon_.get(), s, i, /*session_first=*/true, idle_);
}

TEST_F(EmuOwnContextTest, AClientThatDiesBeforeItsSessionLeavesNothingBehind) {
  const SessionId s = Open(true);
  Imported i = Import(s);
  ASSERT_NE(i.pd, nullptr);
  DieWithObjectsOpen(daemon_.get(), s, i, /*session_first=*/false, idle_);
}

}  // namespace
}  // namespace regcache::service
