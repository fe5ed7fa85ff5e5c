// A real remote node against regcached on a real verbs device (Soft-RoCE in the VM tier): the
// daemon runs with --device=verbs, a client allocates shared memory and registers it, and a
// separate peer process (regcache_rdma_peer: its own verbs context, PD and queue pair, as a
// remote node would have) connects to a target endpoint the client asked for and RDMA-WRITEs,
// READs and FETCH_ADDs through the client's rkeys. The bytes land in the client's mapping; an
// invalidated key, a window whose parent went, and a crashed client's keys and endpoints all
// refuse the peer afterwards; regcachectl works against that daemon. Skips without a device.
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "regcache/client.h"
#include "tests/e2e/rdma_peer_process.h"
#include "tests/e2e/regcached_process.h"

namespace {

namespace rc = regcache::api;
using regcache::testing::Regcached;

constexpr uint32_t kRemoteAll =
    rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite | rc::kRemoteAtomic;

using Peer = regcache::testing::RdmaPeer;

class VerbsPeerE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string device = regcache::testing::TestDevice();
    if (device.rfind("verbs", 0) != 0 && device.rfind("mlx5", 0) != 0) {
      GTEST_SKIP() << "needs REGCACHE_TEST_DEVICE=verbs or mlx5 (the vm and hw tiers set it)";
    }
  }
  std::unique_ptr<rc::Client> Connect(const Regcached& d) {
    auto c = rc::Client::Connect(d.dir());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // A daemon, a client of it and 1 MiB of the client's shared memory at base_.
  void Start(std::vector<std::string> flags = {}) {
    daemon_ = std::make_unique<Regcached>(std::move(flags));
    client_ = Connect(*daemon_);
    ASSERT_NE(client_, nullptr);
    auto mem = client_->AllocateMemory(1 << 20);
    ASSERT_TRUE(mem.ok()) << mem.status();
    base_ = static_cast<uint8_t*>(mem->data);
  }
  std::unique_ptr<Regcached> daemon_;
  std::unique_ptr<rc::Client> client_;
  uint8_t* base_ = nullptr;

  // An endpoint for `peer` and the peer connected to it.
  void Link(rc::Client& c, Peer& peer) {
    auto ep = c.CreateEndpoint(peer.address());
    ASSERT_TRUE(ep.ok()) << ep.status();
    ASSERT_EQ(peer.Connect(ep->local), "ok");
  }
};

TEST_F(VerbsPeerE2e, APeersRdmaLandsInTheClientsMappingUntilTheKeyIsInvalidated) {
  ASSERT_NO_FATAL_FAILURE(Start());
  rc::Client* c = client_.get();
  uint8_t* base = base_;
  auto k = c->Register(base + 8192, 65536, kRemoteAll);
  ASSERT_TRUE(k.ok()) << k.status();
  Peer peer;
  Link(*c, peer);

  EXPECT_EQ(peer.Write(k->rkey, base + 8192 + 100, "remote bytes"), "ok");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(base) + 8192 + 100, 12), "remote bytes");
  std::memcpy(base + 8192 + 4000, "from the client", 15);
  EXPECT_EQ(peer.Read(k->rkey, base + 8192 + 4000, 15),
            "ok " + absl::BytesToHexString("from the client"));
  uint64_t counter = 5;
  std::memcpy(base + 8192 + 512, &counter, 8);
  EXPECT_EQ(peer.Ask(absl::StrFormat("fadd %x %x 3", k->rkey,
                                     reinterpret_cast<uint64_t>(base + 8192 + 512))),
            "ok 5");
  std::memcpy(&counter, base + 8192 + 512, 8);
  EXPECT_EQ(counter, 8u);

  ASSERT_TRUE(c->Invalidate(k->handle).ok());
  const std::string refused = peer.Write(k->rkey, base + 8192 + 100, "late");
  EXPECT_TRUE(absl::StartsWith(refused, "err PERMISSION_DENIED REMOTE_ACCESS")) << refused;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(base) + 8192 + 100, 4), "remo");
  (void)c->Release(k->handle);
}

TEST_F(VerbsPeerE2e, AWindowsRkeyWorksAndDiesWithItsParent) {
  ASSERT_NO_FATAL_FAILURE(Start());
  rc::Client* c = client_.get();
  uint8_t* base = base_;
  auto parent = c->Register(base, 1 << 20, kRemoteAll);
  ASSERT_TRUE(parent.ok()) << parent.status();
  auto window = c->Window(parent->handle, 65536, 4096, rc::kLocalWrite | rc::kRemoteWrite);
  ASSERT_TRUE(window.ok()) << window.status();
  EXPECT_NE(window->rkey, parent->rkey);
  Peer peer;
  Link(*c, peer);
  EXPECT_EQ(peer.Write(window->rkey, base + 65536 + 8, "in window"), "ok");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(base) + 65536 + 8, 9), "in window");
  // Write-only: a READ through the window is refused (and breaks the peer's queue pair).
  const std::string read = peer.Read(window->rkey, base + 65536, 8);
  EXPECT_TRUE(absl::StartsWith(read, "err PERMISSION_DENIED")) << read;

  ASSERT_TRUE(c->Invalidate(parent->handle).ok());
  peer.Renew();
  Link(*c, peer);
  const std::string late = peer.Write(window->rkey, base + 65536 + 8, "late");
  EXPECT_TRUE(absl::StartsWith(late, "err PERMISSION_DENIED REMOTE_ACCESS")) << late;
}

TEST_F(VerbsPeerE2e, AClientCrashTearsDownItsKeysAndEndpoints) {
  Regcached d({regcache::testing::AdminSelfFlag()});  // Sessions
  Peer peer;
  const rc::RemoteQp peer_qp = peer.address();
  int up[2];
  ASSERT_EQ(pipe(up), 0);
  const pid_t child = fork();
  if (child == 0) {  // the client that crashes: registers, asks for an endpoint, reports, waits
    close(up[0]);
    auto c = rc::Client::Connect(d.dir());
    if (!c.ok()) _exit(2);
    auto mem = (*c)->AllocateMemory(1 << 20);
    if (!mem.ok()) _exit(3);
    auto k = (*c)->Register(mem->data, 4096, kRemoteAll);
    auto ep = (*c)->CreateEndpoint(peer_qp);
    if (!k.ok() || !ep.ok()) _exit(4);
    const rc::RemoteQp& a = ep->local;
    const std::string report = absl::StrFormat(
        "%x %x %d %d %s %d %d\n", k->rkey, reinterpret_cast<uint64_t>(mem->data), a.qpn, a.psn,
        absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(a.gid.data()), 16)),
        a.lid, a.mtu);
    if (write(up[1], report.data(), report.size()) != static_cast<ssize_t>(report.size())) {
      _exit(5);
    }
    pause();
    _exit(0);
  }
  close(up[1]);
  char buf[256] = {};
  ssize_t n = 0;
  pollfd p{up[0], POLLIN, 0};
  if (poll(&p, 1, 30000) == 1) n = read(up[0], buf, sizeof(buf) - 1);
  close(up[0]);
  ASSERT_GT(n, 0) << "the crashing client did not report";
  std::istringstream in(buf);
  std::string rkey_hex, addr_hex, gid;
  rc::RemoteQp ep;
  uint32_t lid = 0;
  in >> rkey_hex >> addr_hex >> ep.qpn >> ep.psn >> gid >> lid >> ep.mtu;
  const std::string raw = absl::HexStringToBytes(gid);
  std::memcpy(ep.gid.data(), raw.data(), 16);
  ep.lid = static_cast<uint16_t>(lid);
  ASSERT_EQ(peer.Connect(ep), "ok");
  EXPECT_EQ(peer.Ask(absl::StrCat("write ", rkey_hex, " ", addr_hex, " 6869")), "ok");

  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  // The daemon notices the control socket close and tears the session down.
  auto admin = Connect(d);
  ASSERT_NE(admin, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  size_t sessions = 2;
  while (absl::Now() < deadline) {
    auto s = admin->Sessions();
    ASSERT_TRUE(s.ok()) << s.status();
    sessions = s->size();
    if (sessions == 1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(sessions, 1u) << "the crashed client's session is still there";
  const std::string after = peer.Ask(absl::StrCat("write ", rkey_hex, " ", addr_hex, " 6869"));
  EXPECT_TRUE(absl::StartsWith(after, "err ")) << after;
  // Nothing of it is left: no endpoint open, no registration live (the admin session has none).
  auto stats = admin->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  auto open = stats->Get("endpoints", "endpoints_open");
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(*open, 0);
  auto live = stats->Get("cache", "live_registrations");
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(*live, 0) << "the crashed session's keys outlived it";
}

// What the session's device reports (Welcome) is what a remote node finds: a read just before a
// one-page key, inside the client's attachment, is refused exactly when the key's range is said
// to be enforced. A client that requires key bounds is refused where they do not hold.
TEST_F(VerbsPeerE2e, ThePeerReachesWhatTheReportedKeyBoundsSay) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const rc::DeviceInfo& dev = client_->device();
  ASSERT_NE(dev.key_bounds, rc::KeyBounds::kUnknown);
  auto k = client_->Register(base_ + 8192, 4096, kRemoteAll);
  ASSERT_TRUE(k.ok()) << k.status();
  Peer peer;
  Link(*client_, peer);
  std::memcpy(base_ + 8192, "inside!!", 8);
  EXPECT_EQ(peer.Read(k->rkey, base_ + 8192, 8), "ok " + absl::BytesToHexString("inside!!"));
  const std::string before = peer.Read(k->rkey, base_ + 8192 - 8, 8);
  if (dev.key_range_enforced()) {
    EXPECT_TRUE(absl::StartsWith(before, "err PERMISSION_DENIED")) << before;
  } else {
    EXPECT_TRUE(absl::StartsWith(before, "ok ")) << before;
  }
  std::printf("key bounds of %s: %s\n", dev.name.c_str(), rc::KeyBoundsName(dev.key_bounds));

  rc::ClientOptions o;
  o.require_key_bounds = true;
  auto strict = rc::Client::Connect(daemon_->dir(), o);
  EXPECT_EQ(strict.ok(), dev.key_range_enforced()) << strict.status();
  if (!strict.ok()) {
    EXPECT_TRUE(absl::IsFailedPrecondition(strict.status())) << strict.status();
    EXPECT_TRUE(absl::StrContains(strict.status().message(), "key bounds: attachment"))
        << strict.status();
  }
}

// --strict_key_bounds: a remote node holding a one-page key reads and writes it, and nothing of
// the attachment around it; regcachectl says the range is enforced.
TEST_F(VerbsPeerE2e, StrictKeyBoundsKeepARemoteNodeInsideItsKey) {
  ASSERT_NO_FATAL_FAILURE(Start({"--strict_key_bounds"}));
  ASSERT_TRUE(client_->device().key_range_enforced())
      << rc::KeyBoundsName(client_->device().key_bounds);
  rc::ClientOptions o;
  o.require_key_bounds = true;
  auto required = rc::Client::Connect(daemon_->dir(), o);
  EXPECT_TRUE(required.ok()) << required.status();
  auto k = client_->Register(base_ + 8192, 4096, kRemoteAll);
  ASSERT_TRUE(k.ok()) << k.status();
  Peer peer;
  Link(*client_, peer);
  EXPECT_EQ(peer.Write(k->rkey, base_ + 8192 + 4096 - 8, "lastword"), "ok");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(base_) + 8192 + 4096 - 8, 8), "lastword");
  std::memcpy(base_ + 8192 + 4096, "next pg!", 8);
  const std::string past = peer.Write(k->rkey, base_ + 8192 + 4096, "overflow");
  EXPECT_TRUE(absl::StartsWith(past, "err PERMISSION_DENIED")) << past;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(base_) + 8192 + 4096, 8), "next pg!");
  peer.Renew();
  Link(*client_, peer);
  const std::string before = peer.Read(k->rkey, base_ + 8192 - 8, 8);
  EXPECT_TRUE(absl::StartsWith(before, "err PERMISSION_DENIED")) << before;

  const std::string line =
      absl::StrCat(REGCACHECTL_PATH, " --socket_dir=", daemon_->dir(), " status 2>&1");
  FILE* f = popen(line.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof(buf), f)) out.append(buf, got);
  pclose(f);
  EXPECT_TRUE(absl::StrContains(out, "key_range_enforced=1")) << out;
}

TEST_F(VerbsPeerE2e, RegcachectlWorksAgainstTheDaemon) {
  Regcached d({regcache::testing::AdminSelfFlag()});  // regcachectl sessions
  auto c = Connect(d);
  ASSERT_NE(c, nullptr);
  for (const char* cmd : {"status", "stats", "sessions"}) {
    const std::string line =
        absl::StrCat(REGCACHECTL_PATH, " --socket_dir=", d.dir(), " ", cmd, " 2>&1");
    FILE* f = popen(line.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[4096];
    while (size_t got = fread(buf, 1, sizeof(buf), f)) out.append(buf, got);
    const int rcode = pclose(f);
    EXPECT_EQ(WEXITSTATUS(rcode), 0) << cmd << ": " << out;
    if (std::string(cmd) == "status") {
      const std::string device = regcache::testing::TestDevice();
      EXPECT_TRUE(absl::StrContains(out, device.substr(0, device.find(':')))) << out;
    }
  }
}

}  // namespace
