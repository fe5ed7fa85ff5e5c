#include "service/daemon.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "hca/status.h"

using ::regcache::base::StatusIs;

namespace regcache::service {
namespace {

constexpr hca::AccessFlags kRw = hca::kLocalWrite | hca::kRemoteWrite | hca::kRemoteRead;

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hca::sim::RegisterBackend();
    DaemonConfig config;
    config.cache.background_maintenance = false;
    config.cache.pool.low_watermark = 2;
    config.cache.pool.high_watermark = 4;
    auto d = Daemon::Create(config, &registry_);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }

  SessionGrant Open(uid_t uid = 0) {
    auto g = daemon_->OpenSession(PeerCredentials{::getpid(), uid, 0});
    EXPECT_TRUE(g.ok()) << g.status();
    if (g.ok()) {
      ::close(g->channel_fd);  // the fast path's files: not used here (service/ring_test.cc)
      ::close(g->state_fd);
    }
    return g.ok() ? *g : SessionGrant{};
  }

  int64_t Stat(absl::string_view component, absl::string_view name) {
    absl::StatusOr<int64_t> v = base::stats::FindValue(daemon_->Stats(), component, name);
    if (v.ok()) return *v;
    ADD_FAILURE() << v.status();
    return -1;
  }

  // Allocates memory in the daemon and maps it "client-side" at a different address, the way a
  // client process would after receiving the fd.
  struct ClientMemory {
    MemoryId id = 0;
    uint8_t* client = nullptr;
    uint64_t length = 0;
  };
  ClientMemory Allocate(SessionId s, uint64_t length) {
    auto m = daemon_->AllocateMemory(s, length, false);
    EXPECT_TRUE(m.ok()) << m.status();
    ClientMemory cm;
    cm.id = m->id;
    cm.length = length;
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    ::close(m->fd);
    cm.client = static_cast<uint8_t*>(p);
    EXPECT_TRUE(daemon_->AttachMemory(s, cm.id, reinterpret_cast<uint64_t>(cm.client), false).ok());
    return cm;
  }

  base::stats::Registry registry_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, PeerWriteLandsInTheClientsOwnMapping) {
  SessionGrant s = Open();
  ClientMemory cm = Allocate(s.id, 1 << 16);
  const uint64_t va = reinterpret_cast<uint64_t>(cm.client);
  auto g = daemon_->Register(s.id, va + 4096, 4096, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  const char text[] = "through the client's own address";
  ASSERT_TRUE(
      daemon_->sim_peer()
          ->PeerWrite(s.id, g->rkey, va + 4096,
                      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text), sizeof(text)))
          .ok());
  EXPECT_STREQ(reinterpret_cast<const char*>(cm.client + 4096), text);
  auto back = daemon_->sim_peer()->PeerRead(s.id, g->rkey, va + 4096, sizeof(text));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->data(), text, sizeof(text)), 0);
  ASSERT_TRUE(daemon_->Invalidate(s.id, g->handle).ok());
  absl::Status refused = daemon_->sim_peer()->PeerWrite(
      s.id, g->rkey, va + 4096, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>("x"), 1));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(hca::ErrorOf(refused)->syndrome, hca::Syndrome::kRemoteAccess);
  auto keys = daemon_->ListKeys(s.id);
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);  // the revoked handle, still held
  EXPECT_TRUE((*keys)[0].revoked);
  ::munmap(cm.client, cm.length);
}

TEST_F(DaemonTest, AllowListAndTokens) {
  auto refused = daemon_->OpenSession(PeerCredentials{1, 65534, 65534});
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kPermissionDenied));
  SessionGrant s = Open();
  EXPECT_FALSE(s.admin) << "root is not admin unless --admin_uids or --admin_gids says so";
  EXPECT_EQ(s.token.size(), 32u);
  auto id = daemon_->Authenticate(s.token);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, s.id);
  EXPECT_THAT(daemon_->Authenticate("nope"), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(daemon_->Authenticate(std::string(32, '0')).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Stat("daemon", "sessions_refused"), 1);
}

TEST_F(DaemonTest, SessionsAreIsolated) {
  SessionGrant a = Open(), b = Open();
  ClientMemory am = Allocate(a.id, 1 << 16);
  auto g = daemon_->Register(a.id, reinterpret_cast<uint64_t>(am.client), 4096, kRw);
  ASSERT_TRUE(g.ok());
  // b can neither use nor invalidate a's key, nor see it.
  EXPECT_THAT(daemon_->Invalidate(b.id, g->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->Release(b.id, g->handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(daemon_->sim_peer()
                ->PeerWrite(b.id, g->rkey, reinterpret_cast<uint64_t>(am.client),
                            absl::MakeConstSpan(reinterpret_cast<const uint8_t*>("x"), 1))
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(daemon_->ListKeys(b.id)->empty());
  EXPECT_THAT(daemon_->AttachMemory(b.id, am.id, 0x10000, false),
              StatusIs(absl::StatusCode::kNotFound));
  ::munmap(am.client, am.length);
}

TEST_F(DaemonTest, ClosingASessionReturnsEverything) {
  const int64_t keys_before = Stat("cache", "keys_in_use");
  SessionGrant s = Open();
  ClientMemory cm = Allocate(s.id, 1 << 16);
  const uint64_t va = reinterpret_cast<uint64_t>(cm.client);
  auto g = daemon_->Register(s.id, va, 4096, kRw);
  auto w = daemon_->CreateWindow(s.id, g->handle, 0, 64, kRw);
  ASSERT_TRUE(g.ok() && w.ok());
  EXPECT_EQ(Stat("daemon", "memory_mapped_bytes"), 1 << 16);
  EXPECT_EQ(Stat("cache", "live_registrations"), 2);
  ASSERT_TRUE(daemon_->CloseSession(s.id).ok());
  EXPECT_EQ(Stat("cache", "live_registrations"), 0);
  EXPECT_EQ(Stat("cache", "backed_bytes"), 0);
  EXPECT_EQ(Stat("daemon", "memory_mapped_bytes"), 0);
  EXPECT_EQ(Stat("daemon", "sessions_open"), 0);
  EXPECT_EQ(Stat("cache", "keys_in_use"), keys_before);
  EXPECT_THAT(daemon_->Register(s.id, va, 64, kRw), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->Authenticate(s.token), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(daemon_->CloseSession(s.id), StatusIs(absl::StatusCode::kNotFound));
  ::munmap(cm.client, cm.length);
}

TEST_F(DaemonTest, ImportedMemoryAndDetach) {
  SessionGrant s = Open();
  const int fd = ::memfd_create("client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(fd, 1 << 16), 0);
  void* client = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  auto id = daemon_->ImportMemory(s.id, ::dup(fd), 0, 1 << 16);
  ASSERT_TRUE(id.ok()) << id.status();
  const uint64_t va = reinterpret_cast<uint64_t>(client);
  ASSERT_TRUE(daemon_->AttachMemory(s.id, *id, va, false).ok());
  EXPECT_THAT(daemon_->AttachMemory(s.id, *id, va, false),
              StatusIs(absl::StatusCode::kAlreadyExists));
  auto g = daemon_->Register(s.id, va, 8192, kRw);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(daemon_->sim_peer()
                  ->PeerWrite(s.id, g->rkey, va + 10,
                              absl::MakeConstSpan(reinterpret_cast<const uint8_t*>("imp"), 3))
                  .ok());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(client) + 10, "imp", 3), 0);
  ASSERT_TRUE(daemon_->DetachMemory(s.id, *id).ok());
  EXPECT_TRUE(daemon_->Query(s.id, g->handle)->revoked);
  EXPECT_EQ(daemon_->sim_peer()
                ->PeerWrite(s.id, g->rkey, va,
                            absl::MakeConstSpan(reinterpret_cast<const uint8_t*>("x"), 1))
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(daemon_->ListMemory(s.id)->empty());
  EXPECT_THAT(daemon_->DetachMemory(s.id, *id), StatusIs(absl::StatusCode::kNotFound));
  ::munmap(client, 1 << 16);
  ::close(fd);
}

TEST_F(DaemonTest, MemoryQuotasAndBadLengths) {
  DaemonConfig config;
  config.max_bytes_per_session = 1 << 16;
  config.cache.background_maintenance = false;
  auto d = Daemon::Create(config, nullptr);
  ASSERT_TRUE(d.ok());
  auto s = (*d)->OpenSession(PeerCredentials{::getpid(), 0, 0});
  ASSERT_TRUE(s.ok());
  auto a = (*d)->AllocateMemory(s->id, 1 << 16, false);
  ASSERT_TRUE(a.ok());
  ::close(a->fd);
  EXPECT_EQ((*d)->AllocateMemory(s->id, 4096, false).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*d)->AllocateMemory(s->id, 0, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT((*d)->AttachMemory(s->id, a->id, 0, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ((*d)->AttachMemory(s->id, a->id, ~uint64_t{0} - 100, false).code(),
            absl::StatusCode::kInvalidArgument);  // wraps
}

TEST_F(DaemonTest, DrainClosesEverySessionAndRefusesNewWork) {
  SessionGrant a = Open();
  ClientMemory am = Allocate(a.id, 1 << 16);
  ASSERT_TRUE(daemon_->Register(a.id, reinterpret_cast<uint64_t>(am.client), 4096, kRw).ok());
  ASSERT_TRUE(daemon_->Drain().ok());
  EXPECT_TRUE(daemon_->draining());
  EXPECT_EQ(Stat("cache", "live_registrations"), 0);
  EXPECT_EQ(daemon_->OpenSession(PeerCredentials{1, 0, 0}).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_THAT(daemon_->Register(a.id, 0, 1, kRw), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(daemon_->Drain().ok());  // idempotent
  ::munmap(am.client, am.length);
}

TEST_F(DaemonTest, SessionsIsAdminOnly) {
  DaemonConfig config;
  config.allow_uids = {0, 4242};
  config.admin_uids = {0};
  config.cache.background_maintenance = false;
  auto d = Daemon::Create(config, nullptr);
  ASSERT_TRUE(d.ok());
  auto user = (*d)->OpenSession(PeerCredentials{1, 4242, 4242});
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_FALSE(user->admin);
  EXPECT_THAT((*d)->Sessions(user->id), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT((*d)->RequireAdmin(user->id, "Drain"), StatusIs(absl::StatusCode::kPermissionDenied));
  auto root = (*d)->OpenSession(PeerCredentials{2, 0, 0});
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->admin);
  EXPECT_TRUE((*d)->RequireAdmin(root->id, "Drain").ok());
  auto all = (*d)->Sessions(root->id);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].peer.uid, 4242u);
}

TEST_F(DaemonTest, RootIsNotAdminUnlessListed) {
  SessionGrant root = Open(0);  // the default config: no admin at all
  EXPECT_FALSE(root.admin);
  EXPECT_THAT(daemon_->Sessions(root.id), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(daemon_->RequireAdmin(root.id, "Drain"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(DaemonTest, AdminByGid) {
  DaemonConfig config;
  config.allow_gids = {77, 78};
  config.admin_gids = {77};
  config.cache.background_maintenance = false;
  auto d = Daemon::Create(config, nullptr);
  ASSERT_TRUE(d.ok());
  auto op = (*d)->OpenSession(PeerCredentials{1, 5000, 77});
  auto user = (*d)->OpenSession(PeerCredentials{2, 5001, 78});
  auto root = (*d)->OpenSession(PeerCredentials{3, 0, 0});
  ASSERT_TRUE(op.ok() && user.ok());
  EXPECT_THAT(root, StatusIs(absl::StatusCode::kPermissionDenied))
      << "root is not on an allow-list of gids";
  EXPECT_TRUE(op->admin);
  EXPECT_FALSE(user->admin);
  EXPECT_TRUE((*d)->Sessions(op->id).ok());
}

TEST_F(DaemonTest, OnDemandMemoryIsServedAndPrefetched) {
  SessionGrant s = Open();
  auto m = daemon_->AllocateMemory(s.id, 1 << 20, false);
  ASSERT_TRUE(m.ok());
  void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
  ::close(m->fd);
  const uint64_t va = reinterpret_cast<uint64_t>(p);
  ASSERT_TRUE(daemon_->AttachMemory(s.id, m->id, va, /*on_demand=*/true).ok());
  const uint8_t byte = 7;
  // No prefetch: the peer's write faults, the daemon's servicer makes the page present.
  auto cold = daemon_->Register(s.id, va, 65536, kRw);
  ASSERT_TRUE(cold.ok()) << cold.status();
  ASSERT_TRUE(daemon_->sim_peer()
                  ->PeerWrite(s.id, cold->rkey, va + 100, absl::MakeConstSpan(&byte, 1))
                  .ok());
  EXPECT_EQ(static_cast<uint8_t*>(p)[100], 7);
  EXPECT_GE(Stat("odp", "faults"), 1);
  // Prefetch on register: no fault at all for the next range.
  const int64_t faults = Stat("odp", "faults");
  auto warm = daemon_->Register(s.id, va + 65536, 65536, kRw, odp::PrefetchMode::kSync);
  ASSERT_TRUE(warm.ok()) << warm.status();
  ASSERT_TRUE(daemon_->sim_peer()
                  ->PeerWrite(s.id, warm->rkey, va + 65536 + 5, absl::MakeConstSpan(&byte, 1))
                  .ok());
  EXPECT_EQ(Stat("odp", "faults"), faults);
  // An explicit prefetch, and its errors.
  EXPECT_TRUE(daemon_->Prefetch(s.id, va + 131072, 4096, true, odp::PrefetchMode::kSync).ok());
  EXPECT_EQ(daemon_->Prefetch(s.id, va + (1 << 20), 4096, true, odp::PrefetchMode::kSync).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(daemon_->Prefetch(s.id, va, 0, true, odp::PrefetchMode::kSync).code(),
            absl::StatusCode::kInvalidArgument);
  // Detaching zaps before the memory goes: the keys die, the daemon keeps running.
  ASSERT_TRUE(daemon_->DetachMemory(s.id, m->id).ok());
  EXPECT_GE(Stat("odp", "zaps"), 1);
  ::munmap(p, 1 << 20);
}

TEST(DaemonCreateTest, UnknownDeviceIsAClearError) {
  DaemonConfig config;
  config.device = "nosuch";
  auto d = Daemon::Create(config, nullptr);
  EXPECT_THAT(d, StatusIs(absl::StatusCode::kNotFound)) << d.status();
}

TEST_F(DaemonTest, ReregisterGrowsInPlaceAndIsBoundToTheSession) {
  SessionGrant s = Open(), other = Open();
  ClientMemory cm = Allocate(s.id, 1 << 16);
  const uint64_t va = reinterpret_cast<uint64_t>(cm.client);
  auto g = daemon_->Register(s.id, va + 4096, 4096, kRw);
  ASSERT_TRUE(g.ok()) << g.status();
  auto r = daemon_->Reregister(s.id, g->handle, va, 3 * 4096, kRw);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->same_key);
  EXPECT_EQ(r->rkey, g->rkey);
  ASSERT_TRUE(daemon_->sim_peer()
                  ->PeerWrite(s.id, g->rkey, va + 10,
                              absl::MakeConstSpan(reinterpret_cast<const uint8_t*>("grown"), 5))
                  .ok());
  EXPECT_EQ(std::memcmp(cm.client + 10, "grown", 5), 0);
  // Another session's handle, a closed session: refused, nothing changed.
  EXPECT_EQ(daemon_->Reregister(other.id, g->handle, va, 4096, kRw).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(daemon_->Reregister(999999, g->handle, va, 4096, kRw).status().code(),
            absl::StatusCode::kNotFound);
  auto info = daemon_->Query(s.id, g->handle);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->holders, 1u);
  EXPECT_EQ(info->length, 3u * 4096);
  EXPECT_EQ(Stat("cache", "reregisters_in_place"), 1);
  ::munmap(cm.client, cm.length);
}

// An observer: a token for the read-only calls, no device resources, in no session count;
// every call that would change or hold something is refused with kPermissionDenied.
TEST_F(DaemonTest, ObserverReadsButHoldsAndChangesNothing) {
  SessionGrant s = Open();
  ClientMemory cm = Allocate(s.id, 1 << 16);
  const uint64_t va = reinterpret_cast<uint64_t>(cm.client);
  ASSERT_TRUE(daemon_->Register(s.id, va, 4096, kRw).ok());
  const int64_t opened = Stat("daemon", "sessions_opened");

  auto o = daemon_->OpenObserver(PeerCredentials{::getpid(), 0, 0});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->observer);
  EXPECT_FALSE(o->admin) << "root is admin only if listed, observer or not";
  EXPECT_EQ(o->channel_fd, -1) << "no fast path files";
  EXPECT_EQ(o->state_fd, -1);
  EXPECT_NE(o->id, s.id);
  auto auth = daemon_->Authenticate(o->token);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(*auth, o->id);

  EXPECT_EQ(daemon_->Status().sessions, 1u) << "an observer is not a session";
  EXPECT_EQ(Stat("daemon", "sessions_opened"), opened);
  EXPECT_EQ(Stat("daemon", "sessions_open"), 1);
  EXPECT_THAT(daemon_->Sessions(o->id), StatusIs(absl::StatusCode::kPermissionDenied))
      << "an observer not on the admin list lists no sessions";
  auto own = daemon_->ListKeys(o->id);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_TRUE(own->empty());
  auto theirs = daemon_->ListKeys(s.id);  // the transport's admin check picked the target
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(theirs->size(), 1u);
  EXPECT_TRUE(daemon_->Usage(o->id).ok());
  EXPECT_TRUE(daemon_->ListEndpoints(o->id).ok());
  EXPECT_TRUE(daemon_->ListMemory(o->id).ok());

  const auto denied = [](const absl::Status& st) {
    return st.code() == absl::StatusCode::kPermissionDenied &&
           st.message().find("observer") != absl::string_view::npos;
  };
  EXPECT_TRUE(denied(daemon_->Register(o->id, va, 4096, kRw).status()));
  EXPECT_TRUE(denied(daemon_->AllocateMemory(o->id, 1 << 16, false).status()));
  EXPECT_TRUE(denied(daemon_->Release(o->id, 1)));
  EXPECT_TRUE(denied(daemon_->Invalidate(o->id, 1)));
  EXPECT_TRUE(denied(daemon_->AttachMemory(o->id, 1, va, false)));
  EXPECT_TRUE(denied(daemon_->DetachMemory(o->id, 1)));
  EXPECT_TRUE(denied(daemon_->sim_peer()->PeerWrite(o->id, 1, va, {})));
  EXPECT_TRUE(denied(daemon_->ExportPd(o->id).status()));
  EXPECT_TRUE(denied(daemon_->CheckMayChange(o->id)));
  EXPECT_TRUE(daemon_->CheckMayChange(s.id).ok());

  EXPECT_TRUE(daemon_->CloseSession(o->id).ok());
  EXPECT_THAT(daemon_->Authenticate(o->token), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(daemon_->Status().sessions, 1u);
  EXPECT_EQ(Stat("daemon", "sessions_closed"), 0) << "closing an observer closes no session";
}

TEST_F(DaemonTest, ObserverNeedsTheAllowListAndAKnownDevice) {
  auto stranger = daemon_->OpenObserver(PeerCredentials{::getpid(), 12345, 12345});
  EXPECT_THAT(stranger, StatusIs(absl::StatusCode::kPermissionDenied)) << stranger.status();
  auto nosuch = daemon_->OpenObserver(PeerCredentials{::getpid(), 0, 0}, "nosuch");
  EXPECT_THAT(nosuch, StatusIs(absl::StatusCode::kNotFound)) << nosuch.status();
}

}  // namespace
}  // namespace regcache::service