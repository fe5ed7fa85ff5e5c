#include "service/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "protocol/reason_numbers.h"
#include "service/internal/access_policy.h"
#include "service/internal/attach_memory.h"
#include "service/internal/backing_page.h"
#include "service/internal/client_regions.h"
#include "service/internal/daemon_stats.h"
#include "service/internal/device_set.h"
#include "service/internal/endpoints.h"
#include "service/internal/grant_table.h"
#include "service/internal/memory_budget.h"
#include "service/internal/observers.h"
#include "service/internal/ring_server.h"
#include "service/internal/session_keys.h"
#include "service/internal/session_shm.h"
#include "service/internal/session_table.h"
#include "service/internal/shared_memory.h"
#include "service/internal/sim_peer_port.h"
#include "service/internal/tenant_stats.h"

namespace regcache::service {
namespace {

absl::Status Draining() {
  return base::WithReason(absl::UnavailableError("regcached is draining"), base::reason::kDraining);
}

using internal::GrantOf;
using internal::Memory;
using internal::RingServer;
using internal::Session;
using internal::SessionRef;
using internal::SlottedGrant;

class DaemonImpl final : public Daemon {
 public:
  DaemonImpl(const DaemonConfig& config, base::stats::Registry* registry)
      : config_(config), registry_(registry), started_(absl::Now()), access_(config, ::getuid()) {
    if (registry_ != nullptr) {
      stats_registration_ = {*registry_, "daemon", &stats_};
      ring_stats_registration_ = {*registry_, "ring", &ring_stats_};
      endpoint_stats_registration_ = {*registry_, "endpoints", &endpoint_stats_};
      tenant_registration_ = {*registry_, [this] { return TenantStats(); }};
    }
    RC_LOG(INFO) << access_.DescribeAdmins();
  }

  ~DaemonImpl() override {
    absl::Status s = Drain();
    if (!s.ok()) RC_LOG(WARNING) << "drain at destruction: " << s;
    tenant_registration_ = {};
    stats_registration_ = {};
    ring_stats_registration_ = {};
    endpoint_stats_registration_ = {};
    devices_.reset();  // each: its cache, then the servicer observing it, then the device
  }

  // Opens the devices (Create, before anyone can call in).
  absl::Status OpenDevices() {
    ASSIGN_OR_RETURN(devices_, internal::DeviceSet::Open(config_, registry_, &draining_));
    return absl::OkStatus();
  }

  absl::StatusOr<SessionGrant> OpenSession(const PeerCredentials& peer, absl::string_view device,
                                           bool own_context) override;
  absl::StatusOr<SessionGrant> OpenObserver(const PeerCredentials& peer,
                                            absl::string_view device) override {
    if (absl::Status may = access_.CheckMayOpenSession(peer); !may.ok()) {
      refusals_.Refused(peer, "observer", may.message());
      return may;
    }
    return observers_.Open(sessions_.NewId(), peer, access_.IsAdmin(peer), devices_->Find(device));
  }
  absl::Status CheckMayChange(SessionId session) override {
    return observers_.Find(session) ? internal::ObserverRefusal(session) : absl::OkStatus();
  }
  absl::StatusOr<DeviceIdentity> SessionDevice(SessionId session) override {
    return WithSession(session, [&](Session& s) -> absl::StatusOr<DeviceIdentity> {
      return s.device->Identity();
    });
  }
  absl::StatusOr<SessionId> Authenticate(absl::string_view token) override;
  absl::Status CloseSession(SessionId session) override;
  absl::Status RequireAdmin(SessionId session, absl::string_view action) override;

  absl::StatusOr<AllocatedMemory> AllocateMemory(SessionId session, uint64_t length,
                                                 bool hugetlb) override;
  absl::StatusOr<MemoryId> ImportMemory(SessionId session, int fd, uint64_t offset,
                                        uint64_t length) override;
  absl::Status AttachMemory(SessionId session, MemoryId memory, uint64_t client_va,
                            bool on_demand) override;
  absl::Status DetachMemory(SessionId session, MemoryId memory) override;
  absl::StatusOr<std::vector<MemoryInfo>> ListMemory(SessionId session) override;
  absl::StatusOr<hca::PdExport> ExportPd(SessionId session) override {
    return WithSession(session, [&](Session& s) { return internal::ExportSessionPd(config_, s); });
  }
  absl::StatusOr<MemoryId> AttachRegion(SessionId session, const ClientRegion& region) override {
    return WithSession(
        session, [&](Session& s) { return internal::AttachClientRegion(config_, s, region); });
  }

  // The key calls: the session pinned, then the same code as the session's ring worker runs.
  absl::StatusOr<cache::KeyGrant> Register(SessionId session, uint64_t va, uint64_t length,
                                           hca::AccessFlags access,
                                           std::optional<odp::PrefetchMode> prefetch) override {
    return GrantOf(WithSession(
        session, [&](Session& s) { return Keys(s).Register(s, va, length, access, prefetch); }));
  }
  absl::StatusOr<std::vector<absl::StatusOr<cache::KeyGrant>>> RegisterBatch(
      SessionId session, absl::Span<const RegisterCall> calls) override {
    ASSIGN_OR_RETURN(std::unique_ptr<SessionRef> pin, Pin(session));
    return internal::GrantsOf(Keys(**pin).RegisterBatch(**pin, calls));
  }
  absl::Status Prefetch(SessionId session, uint64_t va, uint64_t length, bool write,
                        std::optional<odp::PrefetchMode> mode) override {
    return WithSession(session,
                       [&](Session& s) { return Keys(s).Prefetch(s, va, length, write, mode); });
  }
  absl::StatusOr<cache::KeyGrant> CreateWindow(SessionId session, cache::Handle parent,
                                               uint64_t offset, uint64_t length,
                                               hca::AccessFlags access) override {
    return GrantOf(WithSession(
        session, [&](Session& s) { return Keys(s).Window(s, parent, offset, length, access); }));
  }
  absl::StatusOr<cache::KeyGrant> Reregister(SessionId session, cache::Handle handle, uint64_t va,
                                             uint64_t length, hca::AccessFlags access) override {
    return GrantOf(WithSession(
        session, [&](Session& s) { return Keys(s).Reregister(s, handle, va, length, access); }));
  }
  absl::Status Release(SessionId session, cache::Handle handle) override {
    return WithSession(session, [&](Session& s) { return Keys(s).Release(s, handle); });
  }
  absl::Status Invalidate(SessionId session, cache::Handle handle) override {
    return WithSession(session, [&](Session& s) { return Keys(s).Invalidate(s, handle); });
  }
  absl::StatusOr<cache::RegistrationInfo> Query(SessionId session, cache::Handle handle) override {
    return WithSession(session, [&](Session& s) { return Keys(s).Query(s, handle); });
  }
  absl::StatusOr<std::vector<cache::RegistrationInfo>> ListKeys(SessionId session) override {
    if (observers_.Find(session)) return std::vector<cache::RegistrationInfo>{};
    return WithSession(session, [&](Session& s) { return s.device->cache->List(s.tenant); });
  }
  absl::StatusOr<cache::TenantUsage> Usage(SessionId session) override {
    if (observers_.Find(session)) return cache::TenantUsage{};
    return WithSession(session, [&](Session& s) { return s.device->cache->Usage(s.tenant); });
  }

  absl::StatusOr<EndpointInfo> CreateEndpoint(SessionId session, const hca::EndpointAddress& remote,
                                              hca::AccessFlags access) override {
    return WithSession(session, [&](Session& s) -> absl::StatusOr<EndpointInfo> {
      ASSIGN_OR_RETURN(cache::TenantUsage u, s.device->cache->Usage(s.tenant));
      base::MutexLock lock(&s.mu);
      return s.endpoints->Create(s.device->device.get(), u.pd, remote, access,
                                 config_.max_endpoints);
    });
  }
  absl::Status DestroyEndpoint(SessionId session, EndpointId endpoint) override {
    return WithSession(session, [&](Session& s) {
      base::MutexLock lock(&s.mu);
      return s.endpoints->Destroy(endpoint);
    });
  }
  absl::StatusOr<std::vector<EndpointInfo>> ListEndpoints(SessionId session) override {
    if (observers_.Find(session)) return std::vector<EndpointInfo>{};
    return WithSession(session, [&](Session& s) -> absl::StatusOr<std::vector<EndpointInfo>> {
      base::MutexLock lock(&s.mu);
      return s.endpoints->List();
    });
  }

  SimPeerPort* sim_peer() override { return devices_->SimulatesPeer() ? &sim_peer_ : nullptr; }

  DaemonStatus Status() override;
  absl::StatusOr<std::vector<SessionInfo>> Sessions(SessionId caller) override;
  std::vector<base::stats::Sample> Stats() override {
    return registry_ != nullptr ? registry_->Snapshot() : base::stats::SnapshotOf("daemon", stats_);
  }
  absl::Status Drain() override;
  bool draining() const override { return draining_.load(std::memory_order_acquire); }

 private:
  // The session, pinned against closing for the caller's scope. kNotFound if unknown or closed,
  // kUnavailable while draining.
  absl::StatusOr<std::unique_ptr<SessionRef>> Pin(SessionId id);
  // fn(Session&) with the session pinned (Pin) for the call; Pin's error without calling it.
  template <typename Fn>
  auto WithSession(SessionId id, Fn&& fn) -> decltype(fn(std::declval<Session&>())) {
    ASSIGN_OR_RETURN(std::unique_ptr<SessionRef> pin, Pin(id));
    return fn(**pin);
  }
  // The key calls of the session's device.
  static internal::SessionKeys& Keys(Session& s) { return *s.device->keys; }
  // Every open session's info, in id order.
  std::vector<SessionInfo> AllSessions();
  // The per-tenant samples: from the sessions' own records, never waiting on the cache.
  std::vector<base::stats::Sample> TenantStats();
  // Counts and logs (rate-limited) a refused OpenSession; returns `why`.
  absl::Status RefuseSession(const PeerCredentials& peer, absl::Status why);
  absl::Status CloseLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.ops);
  // Length limits, the session's quota and the daemon's budget for a new mapping (its charge).
  absl::StatusOr<internal::MemoryCharge> AdmitMemory(const Session& s, uint64_t length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  const DaemonConfig config_;
  base::stats::Registry* const registry_;
  std::unique_ptr<internal::DeviceSet> devices_;  // set by OpenDevices, constant after
  const absl::Time started_;
  internal::MemoryBudget budget_{config_.max_bytes_total};  // outlives every session's memory
  internal::DaemonStats stats_;
  internal::RingStats ring_stats_;
  base::stats::Registration stats_registration_;
  base::stats::Registration ring_stats_registration_;
  internal::EndpointStats endpoint_stats_;
  base::stats::Registration endpoint_stats_registration_;
  std::atomic<bool> draining_{false};
  const internal::AccessPolicy access_;
  internal::RefusalLog refusals_;
  internal::SessionTable sessions_;
  base::stats::Registration tenant_registration_;  // reads sessions_: unregistered first
  internal::ObserverTable observers_;              // ids from sessions_
  internal::SessionsSimPeer sim_peer_{&sessions_, &config_.remote_node,
                                      [this](SessionId id) { return Pin(id); }};
};

absl::Status DaemonImpl::RefuseSession(const PeerCredentials& peer, absl::Status why) {
  stats_.sessions_refused.Inc();
  refusals_.Refused(peer, "session", why.message());
  return why;
}

absl::StatusOr<std::unique_ptr<SessionRef>> DaemonImpl::Pin(SessionId id) {
  if (draining()) return Draining();
  absl::StatusOr<std::unique_ptr<SessionRef>> pin = sessions_.Pin(id);
  if (!pin.ok() && observers_.Find(id)) return internal::ObserverRefusal(id);
  return pin;
}

absl::StatusOr<SessionGrant> DaemonImpl::OpenSession(const PeerCredentials& peer,
                                                     absl::string_view device, bool own_context) {
  if (draining()) return RefuseSession(peer, Draining());
  if (absl::Status may = access_.CheckMayOpenSession(peer); !may.ok()) {
    return RefuseSession(peer, may);
  }
  if (sessions_.size() >= config_.max_sessions) {
    return RefuseSession(peer, internal::SessionLimitReached(config_.max_sessions, ""));
  }
  absl::StatusOr<internal::DeviceSlot*> slot =
      devices_->FindForSession(device, config_.max_sessions_per_device);
  if (!slot.ok()) return RefuseSession(peer, slot.status());
  auto s = std::make_shared<Session>();
  s->device = *slot;
  if (own_context) {
    auto own = internal::OpenOwnContext(**slot, config_, &draining_);
    if (!own.ok()) return RefuseSession(peer, own.status());
    s->device = (s->own_device = *std::move(own)).get();
  }
  s->peer = peer;
  s->admin = access_.IsAdmin(peer);
  s->opened = absl::Now();
  ASSIGN_OR_RETURN(s->token, internal::NewToken());
  s->id = sessions_.NewId();
  // The grant table before the tenant: the cache may tell it about reclaimed keys at once.
  ASSIGN_OR_RETURN(s->shm,
                   internal::SessionShm::Create(s->id, config_.ring_channels, config_.grant_slots));
  s->grants = std::make_unique<internal::GrantTable>(s->shm.get());
  cache::TenantOptions to;
  to.max_keys = config_.max_keys_per_session;
  to.max_backed_bytes = config_.max_bytes_per_session;
  to.max_attached = config_.max_memories_per_session;
  to.reclaiming = s->grants->Reclaimer();
  ASSIGN_OR_RETURN(s->tenant, s->device->cache->OpenTenant(to));
  {
    base::MutexLock lock(&s->mu);
    s->endpoints = std::make_unique<internal::SessionEndpoints>(&endpoint_stats_);
  }
  absl::StatusOr<std::unique_ptr<RingServer>> ring =
      RingServer::Start(s.get(), &Keys(*s), &ring_stats_);
  if (ring.ok()) s->ring = std::move(*ring);
  absl::StatusOr<int> channel_fd = ring.ok() ? s->shm->DupChannelFd() : ring.status();
  absl::StatusOr<int> state_fd = channel_fd.ok() ? s->shm->DupStateFd() : channel_fd.status();
  if (!state_fd.ok()) {
    if (channel_fd.ok()) ::close(*channel_fd);
    s->ring.reset();
    (void)s->device->cache->CloseTenant(s->tenant);
    stats_.sessions_refused.Inc();
    return state_fd.status();
  }
  SessionGrant grant{sessions_.Add(s), s->token, s->admin};
  grant.channel_fd = *channel_fd;
  grant.state_fd = *state_fd;
  grant.ring_channels = s->shm->channels();
  grant.grant_slots = s->shm->slots();
  grant.device = s->device->Identity();
  s->device->Home().sessions.fetch_add(1);
  stats_.sessions_opened.Inc();
  stats_.sessions_open.Add();
  RC_LOG(INFO) << "session " << grant.id << " opened: pid " << peer.pid << " uid " << peer.uid
               << (grant.admin ? " (admin)" : "") << " on " << grant.device.name;
  return grant;
}

absl::StatusOr<SessionId> DaemonImpl::Authenticate(absl::string_view token) {
  std::optional<SessionId> id = sessions_.FindToken(token);
  if (!id.has_value()) id = observers_.FindToken(token);
  if (token.size() != 32 || !id.has_value()) {
    // A drain closes every session: their tokens are unknown now for that reason.
    if (draining()) return Draining();
    stats_.auth_failures.Inc();
    return base::WithReason(absl::UnauthenticatedError("missing or unknown session token"),
                            base::reason::kSessionUnknown);
  }
  return *id;
}

absl::Status DaemonImpl::RequireAdmin(SessionId session, absl::string_view action) {
  PeerCredentials peer;
  if (std::optional<internal::Observer> o = observers_.Find(session)) {
    if (o->admin) return absl::OkStatus();
    peer = o->peer;
  } else {
    ASSIGN_OR_RETURN(std::shared_ptr<Session> s, sessions_.Find(session));
    if (s->admin) return absl::OkStatus();
    peer = s->peer;
  }
  const std::string why = absl::StrFormat(
      "%s needs an admin session (uid %d / gid %d is not on --admin_uids / --admin_gids)", action,
      peer.uid, peer.gid);
  refusals_.Refused(peer, "admin call", absl::StrFormat("session %d: %s", session, why));
  return base::WithReason(absl::PermissionDeniedError(why), base::reason::kAdminRequired);
}

absl::Status DaemonImpl::CloseLocked(Session& s) {
  const absl::Time start = base::MonotonicNow();
  s.closed = true;
  absl::Status first;
  {
    base::MutexLock lock(&s.mu);
    s.peer_port.reset();  // before its PD goes, and so are the endpoints
    s.endpoints->Clear();
  }
  // Every key through the lifecycle, every backing deregistered, the PD freed.
  absl::Status closed = s.device->cache->CloseTenant(s.tenant);
  s.device->Home().sessions.fetch_sub(1);
  if (!closed.ok()) first = closed;
  // Only now — after the device confirmed every invalidation — is the memory unmapped.
  {
    base::MutexLock lock(&s.mu);
    for (auto& [id, m] : s.memories) stats_.memory_mapped_bytes.Sub(m.mem->length());
    s.memories.clear();
    s.mapped_bytes = 0;
  }
  stats_.sessions_closed.Inc();
  stats_.sessions_open.Sub();
  stats_.session_close_ns.Record(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(base::MonotonicNow() - start)));
  return first;
}

absl::Status DaemonImpl::CloseSession(SessionId session) {
  if (observers_.Remove(session)) return absl::OkStatus();  // it holds nothing
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, sessions_.Remove(session));
  s->grants->Closing();
  s->ring->Stop();               // before `ops`: the worker's call in flight holds it shared
  base::MutexLock ops(&s->ops);  // waits for the session's calls in flight
  absl::Status st = CloseLocked(*s);
  RC_LOG(INFO) << "session " << session << " closed" << (st.ok() ? "" : ": ") << st.message();
  return st;
}

absl::StatusOr<internal::MemoryCharge> DaemonImpl::AdmitMemory(const Session& s, uint64_t n) {
  auto charge = internal::AdmitMemory(config_, budget_, s.mapped_bytes, n);
  if (!charge.ok()) stats_.memory_refused.Inc();
  return charge;
}

absl::StatusOr<AllocatedMemory> DaemonImpl::AllocateMemory(SessionId session, uint64_t length,
                                                           bool hugetlb) {
  ASSIGN_OR_RETURN(auto pin, Pin(session));
  Session& s = **pin;
  base::MutexLock lock(&s.mu);
  ASSIGN_OR_RETURN(internal::MemoryCharge charge, AdmitMemory(s, length));
  auto mem = SharedMemory::Create(length, hugetlb,
                                  absl::StrFormat("regcache-s%d-m%d", s.id, s.next_memory));
  if (!mem.ok()) {
    stats_.memory_refused.Inc();
    return mem.status();
  }
  ASSIGN_OR_RETURN(int fd, (*mem)->DupFd());
  Memory m;
  m.id = s.next_memory++;
  m.daemon_allocated = true;
  m.mem = std::move(*mem);
  m.charge = std::move(charge);
  s.mapped_bytes += length;
  stats_.memory_mapped_bytes.Add(length);
  stats_.memory_allocated.Inc();
  AllocatedMemory out{m.id, length, fd, hugetlb};
  s.memories.emplace(m.id, std::move(m));
  return out;
}

absl::StatusOr<MemoryId> DaemonImpl::ImportMemory(SessionId session, int fd, uint64_t offset,
                                                  uint64_t length) {
  base::UniqueFd owned(fd);  // closed on every refusal below
  ASSIGN_OR_RETURN(auto pin, Pin(session));
  Session& s = **pin;
  base::MutexLock lock(&s.mu);
  ASSIGN_OR_RETURN(internal::MemoryCharge charge, AdmitMemory(s, length));
  auto mem = SharedMemory::ImportClientFile(owned.release(), offset, length,  // owns the fd now
                                            s.device->device->capabilities());
  if (!mem.ok()) {
    stats_.memory_refused.Inc();
    return mem.status();
  }
  Memory m;
  m.id = s.next_memory++;
  m.mem = std::move(*mem);
  m.charge = std::move(charge);
  s.mapped_bytes += length;
  stats_.memory_mapped_bytes.Add(length);
  stats_.memory_imported.Inc();
  const MemoryId id = m.id;
  s.memories.emplace(id, std::move(m));
  return id;
}

absl::Status DaemonImpl::AttachMemory(SessionId session, MemoryId memory, uint64_t client_va,
                                      bool on_demand) {
  ASSIGN_OR_RETURN(auto pin, Pin(session));
  return internal::AttachSessionMemory(config_, **pin, memory, client_va, on_demand);
}

absl::Status DaemonImpl::DetachMemory(SessionId session, MemoryId memory) {
  ASSIGN_OR_RETURN(auto pin, Pin(session));
  Session& s = **pin;
  base::MutexLock lock(&s.mu);
  auto it = s.memories.find(memory);
  if (it == s.memories.end()) return internal::DetachClientRegion(s, memory);
  if (it->second.attaching) {
    return absl::FailedPreconditionError(absl::StrFormat("memory %d is being attached", memory));
  }
  if (it->second.attached) {
    // The state words say it first; then every key over it is invalidated and the memory
    // deregistered; only then is it unmapped (erase).
    RETURN_IF_ERROR(s.grants->RevokeRangeAround(
        it->second.client_va, it->second.mem->length(),
        [&] { return s.device->cache->RemoveBacking(s.tenant, it->second.backing); }));
  }
  s.mapped_bytes -= it->second.mem->length();
  stats_.memory_mapped_bytes.Sub(it->second.mem->length());
  s.memories.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MemoryInfo>> DaemonImpl::ListMemory(SessionId session) {
  if (observers_.Find(session)) return std::vector<MemoryInfo>{};
  ASSIGN_OR_RETURN(auto pin, Pin(session));
  Session& s = **pin;
  base::MutexLock lock(&s.mu);
  std::vector<MemoryInfo> out;
  for (const auto& [id, m] : s.memories) {
    out.push_back({id, m.mem->length(), m.client_va, m.attached, m.on_demand, m.daemon_allocated,
                   m.mem->hugetlb(), false, m.log_page_size});
  }
  internal::ListClientRegions(s, &out);
  return out;
}

DaemonStatus DaemonImpl::Status() {
  DaemonStatus st;
  for (size_t i = 0; i < devices_->size(); ++i) {
    const internal::DeviceSlot& d = devices_->at(i);
    st.devices.push_back(
        {d.Identity(), d.spec, d.selection, d.caps(), d.sessions.load(), d.device->Health()});
  }
  st.capabilities = devices_->first().caps();
  st.device = absl::StrFormat("%s:%s", st.capabilities.backend, st.capabilities.device_name);
  st.draining = draining();
  st.started = started_;
  st.device_selection = devices_->first().selection;
  st.sessions = sessions_.size();
  return st;
}

absl::StatusOr<std::vector<SessionInfo>> DaemonImpl::Sessions(SessionId caller) {
  RETURN_IF_ERROR(RequireAdmin(caller, "listing sessions"));
  return AllSessions();
}

std::vector<base::stats::Sample> DaemonImpl::TenantStats() {
  return internal::TenantSamples(sessions_.TenantUse(), config_.metrics_max_tenants);
}

std::vector<SessionInfo> DaemonImpl::AllSessions() {
  std::vector<SessionInfo> out;
  for (auto& s : sessions_.All()) {
    SessionInfo info;
    info.id = s->id;
    info.peer = s->peer;
    info.admin = s->admin;
    info.opened = s->opened;
    info.device = s->device->Identity();
    auto u = s->device->cache->Usage(s->tenant);
    if (u.ok()) info.usage = *u;
    {
      base::MutexLock lock(&s->mu);
      info.memories = s->memories.size();
    }
    out.push_back(info);
  }
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.id < b.id; });
  return out;
}

absl::Status DaemonImpl::Drain() {
  draining_.store(true, std::memory_order_release);
  for (auto& s : sessions_.All()) {  // every client learns it at once, and why
    s->grants->Closing(protocol::ReasonNumber(base::reason::kDraining));
  }
  absl::Status first;
  for (SessionId id : sessions_.Ids()) {
    absl::Status s = CloseSession(id);
    if (!s.ok() && !absl::IsNotFound(s) && first.ok()) first = s;
  }
  return first;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(const DaemonConfig& config,
                                                       base::stats::Registry* registry) {
  auto daemon = std::make_unique<DaemonImpl>(config, registry);
  RETURN_IF_ERROR(daemon->OpenDevices());
  return std::unique_ptr<Daemon>(std::move(daemon));
}

}  // namespace regcache::service
