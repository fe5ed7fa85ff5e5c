#include "server/grpc_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "cache/lifecycle.h"
#include "protocol/control_protocol.h"
#include "protocol/grpc_status.h"
#include "regcache/v1/regcache.grpc.pb.h"
#include "server/internal/call_ledger.h"
#include "server/internal/grpc_calls.h"
#include "server/internal/paging.h"
#include "server/internal/proto_convert.h"
#include "server/internal/sim_peer_service.h"

namespace regcache::server {
namespace {

namespace pb = ::regcache::v1;
using service::SessionId;

// Calls with less than this left (or none set) ask, after making a key, whether the client
// cancelled (Kept). It is wide because the deadline the server sees can run late by far more
// than the transit: gRPC converts it to a relative timeout from a clock each side caches per
// batch of work, and on a loaded machine a call sent with its deadline already past was seen
// here with 146 ms left. The clients' own calls carry 10 s, so they never pay for the question.
constexpr std::chrono::milliseconds kCancelCheckWindow{1000};

using internal::CheckBatchSize;
using internal::CheckDeadline;
using internal::FromProto;
using internal::PrefetchFromProto;
using internal::ToProto;

// Health of the services (grpc.health.v1): SERVING for "" and each service's full name from
// the start, NOT_SERVING for all of them once a drain starts or a device failed (for good).
class ServingHealth {
 public:
  void Attach(grpc::HealthCheckServiceInterface* health, const std::vector<std::string>& services) {
    base::MutexLock l(&mu_);
    health_ = health;
    for (const std::string& name : services) health_->SetServingStatus(name, !down_);
    health_->SetServingStatus("", !down_);
  }
  void Down() {
    base::MutexLock l(&mu_);
    down_ = true;
    if (health_ != nullptr) health_->SetServingStatus(false);  // every service, "" included
  }

 private:
  base::Mutex mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
};

class RegCacheServiceImpl final : public pb::RegCacheService::Service {
 public:
  RegCacheServiceImpl(service::Daemon* daemon, FdSender* fds, std::function<void()> on_drain,
                      ServingHealth* health)
      : daemon_(daemon),
        fds_(fds),
        on_drain_(std::move(on_drain)),
        health_(health),
        session_calls_(daemon) {}

  grpc::Status Ping(grpc::ServerContext*, const pb::PingRequest*, pb::PingResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status AllocateMemory(grpc::ServerContext* ctx, const pb::AllocateMemoryRequest* req,
                              pb::AllocateMemoryResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(service::AllocatedMemory m,
                       daemon_->AllocateMemory(s, req->length(), req->hugetlb()));
      const base::UniqueFd memfd(m.fd);  // the client has its own copy once sent
      absl::Status sent = CheckDeadline(ctx);
      if (sent.ok()) sent = fds_->SendMemoryFd(s, m);
      if (!sent.ok()) {
        // The client never got the fd: nothing else can ever attach this memory.
        (void)daemon_->DetachMemory(s, m.id);
        return base::Annotate(sent, "AllocateMemory: sending the memfd");
      }
      resp->set_memory_id(m.id);
      resp->set_length(m.length);
      return absl::OkStatus();
    });
  }

  grpc::Status AttachMemory(grpc::ServerContext* ctx, const pb::AttachMemoryRequest* req,
                            pb::AttachMemoryResponse*) override {
    return Run(ctx, [&](SessionId s) {
      return daemon_->AttachMemory(s, req->memory_id(), req->client_va(), req->on_demand());
    });
  }

  grpc::Status DetachMemory(grpc::ServerContext* ctx, const pb::DetachMemoryRequest* req,
                            pb::DetachMemoryResponse*) override {
    return Run(ctx, [&](SessionId s) { return daemon_->DetachMemory(s, req->memory_id()); });
  }

  grpc::Status ListMemory(grpc::ServerContext* ctx, const pb::ListMemoryRequest* req,
                          pb::ListMemoryResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(internal::PageSpec page,
                       internal::ParsePage("memory", s, req->page_size(), req->page_token()));
      ASSIGN_OR_RETURN(std::vector<service::MemoryInfo> list, daemon_->ListMemory(s));
      resp->set_next_page_token(internal::TakePage(
          list, [](const service::MemoryInfo& m) { return m.id; }, "memory", s, page));
      for (const service::MemoryInfo& m : list) {
        pb::MemoryInfo* o = resp->add_memory();
        o->set_memory_id(m.id);
        o->set_length(m.length);
        o->set_client_va(m.client_va);
        o->set_attached(m.attached);
        o->set_on_demand(m.on_demand);
        o->set_log_page_size(m.log_page_size);
        o->set_daemon_allocated(m.daemon_allocated);
        o->set_hugetlb(m.hugetlb);
      }
      return absl::OkStatus();
    });
  }

  grpc::Status Register(grpc::ServerContext* ctx, const pb::RegisterRequest* req,
                        pb::RegisterResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(std::optional<odp::PrefetchMode> prefetch,
                       PrefetchFromProto(req->prefetch()));
      ASSIGN_OR_RETURN(cache::KeyGrant g,
                       daemon_->Register(s, req->va(), req->length(), req->access(), prefetch));
      return Deliver(ctx, s, req->call_id(), g, resp->mutable_grant());
    });
  }

  grpc::Status Prefetch(grpc::ServerContext* ctx, const pb::PrefetchRequest* req,
                        pb::PrefetchResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(std::optional<odp::PrefetchMode> mode, PrefetchFromProto(req->mode()));
      return daemon_->Prefetch(s, req->va(), req->length(), req->write(), mode);
    });
  }

  grpc::Status Window(grpc::ServerContext* ctx, const pb::WindowRequest* req,
                      pb::WindowResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(cache::KeyGrant g, daemon_->CreateWindow(s, req->parent(), req->offset(),
                                                                req->length(), req->access()));
      return Deliver(ctx, s, req->call_id(), g, resp->mutable_grant());
    });
  }

  grpc::Status Release(grpc::ServerContext* ctx, const pb::ReleaseRequest* req,
                       pb::ReleaseResponse*) override {
    return Run(ctx, [&](SessionId s) { return daemon_->Release(s, req->handle()); });
  }

  grpc::Status Reregister(grpc::ServerContext* ctx, const pb::ReregisterRequest* req,
                          pb::ReregisterResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(cache::KeyGrant g, daemon_->Reregister(s, req->handle(), req->va(),
                                                              req->length(), req->access()));
      // The old hold was traded in: a reply that cannot arrive must not leave the new one.
      return Deliver(ctx, s, req->call_id(), g, resp->mutable_grant());
    });
  }

  // Each item checked as Register checks its request, the good ones registered together (their
  // misses mapped as one batch); a bad item fails alone. When the deadline passes before the
  // batch starts, every item fails with DEADLINE_EXCEEDED and does nothing; after it, every key
  // made is released again.
  grpc::Status RegisterBatch(grpc::ServerContext* ctx, const pb::RegisterBatchRequest* req,
                             pb::RegisterBatchResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      RETURN_IF_ERROR(CheckBatchSize("RegisterBatch", req->items_size()));
      std::vector<absl::StatusOr<cache::KeyGrant>> results(req->items_size(),
                                                           absl::InternalError("not served"));
      std::vector<service::RegisterCall> calls;
      std::vector<int> call_of;
      for (int i = 0; i < req->items_size(); ++i) {
        const pb::RegisterRequest& item = req->items(i);
        absl::StatusOr<std::optional<odp::PrefetchMode>> p = PrefetchFromProto(item.prefetch());
        if (!p.ok()) {
          results[i] = p.status();
          continue;
        }
        calls.push_back({item.va(), item.length(), item.access(), *p});
        call_of.push_back(i);
      }
      if (absl::Status late = CheckDeadline(ctx); !late.ok()) {
        for (int i : call_of) results[i] = late;
      } else if (!calls.empty()) {
        ASSIGN_OR_RETURN(std::vector<absl::StatusOr<cache::KeyGrant>> made,
                         daemon_->RegisterBatch(s, calls));
        const absl::Status after = Late(ctx);  // asked once for the whole batch
        for (size_t k = 0; k < made.size(); ++k) {
          const int i = call_of[k];
          if (made[k].ok()) {
            if (absl::Status kept = KeptAfter(after, s, req->items(i).call_id(), *made[k]);
                !kept.ok()) {
              made[k] = kept;
            }
          }
          results[i] = std::move(made[k]);
        }
      }
      const uint32_t device = DeviceIndex(s);
      for (const absl::StatusOr<cache::KeyGrant>& g : results) {
        pb::RegisterResult* out = resp->add_results();
        ToProto(g.status(), out->mutable_status());
        if (g.ok()) ToProto(*g, device, out->mutable_grant());
      }
      return absl::OkStatus();
    });
  }

  grpc::Status ReleaseBatch(grpc::ServerContext* ctx, const pb::ReleaseBatchRequest* req,
                            pb::ReleaseBatchResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      RETURN_IF_ERROR(CheckBatchSize("ReleaseBatch", req->handles_size()));
      for (uint64_t handle : req->handles()) {
        absl::Status released = CheckDeadline(ctx);
        if (released.ok()) released = daemon_->Release(s, handle);
        ToProto(released, resp->add_results());
      }
      return absl::OkStatus();
    });
  }

  grpc::Status ForgetCalls(grpc::ServerContext* ctx, const pb::ForgetCallsRequest* req,
                           pb::ForgetCallsResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      RETURN_IF_ERROR(CheckBatchSize("ForgetCalls", req->call_ids_size()));
      for (uint64_t id : req->call_ids()) {
        if (id == 0) return absl::InvalidArgumentError("ForgetCalls: call id 0 names no call");
      }
      uint32_t released = 0;
      for (uint64_t id : req->call_ids()) {
        std::optional<uint64_t> hold = calls_.Forget(s, id);
        if (hold.has_value() && daemon_->Release(s, *hold).ok()) ++released;
      }
      resp->set_released(released);
      return absl::OkStatus();
    });
  }

  grpc::Status Invalidate(grpc::ServerContext* ctx, const pb::InvalidateRequest* req,
                          pb::InvalidateResponse*) override {
    return Run(ctx, [&](SessionId s) { return daemon_->Invalidate(s, req->handle()); });
  }

  grpc::Status Query(grpc::ServerContext* ctx, const pb::QueryRequest* req,
                     pb::QueryResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(cache::RegistrationInfo r, daemon_->Query(s, req->handle()));
      ToProto(r, resp->mutable_key());
      return absl::OkStatus();
    });
  }

  grpc::Status ListKeys(grpc::ServerContext* ctx, const pb::ListKeysRequest* req,
                        pb::ListKeysResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(SessionId target, session_calls_.Target(s, req->session_id()));
      ASSIGN_OR_RETURN(internal::PageSpec page,
                       internal::ParsePage("keys", target, req->page_size(), req->page_token()));
      ASSIGN_OR_RETURN(std::vector<cache::RegistrationInfo> keys, daemon_->ListKeys(target));
      resp->set_next_page_token(internal::TakePage(
          keys, [](const cache::RegistrationInfo& r) { return r.handle; }, "keys", target, page));
      for (const cache::RegistrationInfo& r : keys) ToProto(r, resp->add_keys());
      return absl::OkStatus();
    });
  }

  grpc::Status Stats(grpc::ServerContext* ctx, const pb::StatsRequest*,
                     pb::StatsResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(cache::TenantUsage u, daemon_->Usage(s));
      ToProto(u, resp->mutable_session_usage());
      for (const base::stats::Sample& sample : daemon_->Stats()) {
        pb::Stat* o = resp->add_stats();
        o->set_component(sample.component);
        o->set_name(sample.name);
        switch (sample.kind) {
          case base::stats::Kind::kCounter:
            o->set_kind("counter");
            break;
          case base::stats::Kind::kGauge:
            o->set_kind("gauge");
            break;
          case base::stats::Kind::kHistogram:
            o->set_kind("histogram");
            break;
        }
        o->set_value(sample.value);
        if (sample.kind == base::stats::Kind::kHistogram) {
          o->set_count(sample.histogram.count);
          o->set_sum(sample.histogram.sum);
          o->set_max(sample.histogram.max);
          o->set_p50(sample.histogram.Percentile(50));
          o->set_p99(sample.histogram.Percentile(99));
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::Status Status(grpc::ServerContext* ctx, const pb::StatusRequest*,
                      pb::StatusResponse* resp) override {
    absl::Status live = CheckDeadline(ctx);
    if (!live.ok()) return protocol::ToGrpcStatus(live);
    service::DaemonStatus st = daemon_->Status();
    resp->set_device(st.device);
    resp->set_backend(st.capabilities.backend);
    resp->set_sessions(st.sessions);
    resp->set_draining(st.draining);
    resp->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - st.started));
    resp->set_odp(st.capabilities.odp);
    resp->set_peer(st.capabilities.peer);
    resp->set_max_keys(st.capabilities.max_keys);
    resp->set_endpoints(st.capabilities.endpoints);
    resp->set_device_selection(st.device_selection);
    for (const service::DeviceStatus& d : st.devices) ToProto(d, resp->add_devices());
    return grpc::Status::OK;
  }

  grpc::Status Sessions(grpc::ServerContext* ctx, const pb::SessionsRequest* req,
                        pb::SessionsResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(internal::PageSpec page,
                       internal::ParsePage("sessions", 0, req->page_size(), req->page_token()));
      ASSIGN_OR_RETURN(std::vector<service::SessionInfo> list, daemon_->Sessions(s));
      resp->set_next_page_token(internal::TakePage(
          list, [](const service::SessionInfo& i) { return i.id; }, "sessions", 0, page));
      for (const service::SessionInfo& i : list) {
        pb::SessionInfo* o = resp->add_sessions();
        o->set_session_id(i.id);
        o->set_pid(i.peer.pid);
        o->set_uid(i.peer.uid);
        o->set_gid(i.peer.gid);
        o->set_admin(i.admin);
        o->set_opened_unix_ms(absl::ToUnixMillis(i.opened));
        ToProto(i.usage, o->mutable_usage());
        o->set_memories(i.memories);
        o->set_device(i.device.name);
        o->set_device_index(i.device.index);
      }
      return absl::OkStatus();
    });
  }

  grpc::Status Drain(grpc::ServerContext* ctx, const pb::DrainRequest*,
                     pb::DrainResponse*) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      RETURN_IF_ERROR(daemon_->CheckMayChange(s));  // an observer only reads
      RETURN_IF_ERROR(session_calls_.RequireAdmin(s, "Drain"));
      // Run checked the deadline (with its margin) first: a Drain that starts is answered OK
      // however long it takes, never DEADLINE_EXCEEDED for an action that was carried out.
      // Health turns NOT_SERVING first, so probes see the drain from its start.
      health_->Down();
      absl::Status drained = daemon_->Drain();
      if (on_drain_) on_drain_();
      return drained;
    });
  }

  grpc::Status CreateEndpoint(grpc::ServerContext* ctx, const pb::CreateEndpointRequest* req,
                              pb::CreateEndpointResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      if (!req->has_peer()) {
        return absl::InvalidArgumentError("CreateEndpoint: the peer's address is missing");
      }
      ASSIGN_OR_RETURN(hca::EndpointAddress peer, FromProto(req->peer()));
      ASSIGN_OR_RETURN(service::EndpointInfo e, daemon_->CreateEndpoint(s, peer, req->access()));
      ToProto(e, resp->mutable_endpoint());
      return absl::OkStatus();
    });
  }

  grpc::Status DestroyEndpoint(grpc::ServerContext* ctx, const pb::DestroyEndpointRequest* req,
                               pb::DestroyEndpointResponse*) override {
    return Run(ctx, [&](SessionId s) { return daemon_->DestroyEndpoint(s, req->endpoint_id()); });
  }

  grpc::Status ListEndpoints(grpc::ServerContext* ctx, const pb::ListEndpointsRequest* req,
                             pb::ListEndpointsResponse* resp) override {
    return Run(ctx, [&](SessionId s) -> absl::Status {
      ASSIGN_OR_RETURN(SessionId target, session_calls_.Target(s, req->session_id()));
      ASSIGN_OR_RETURN(
          internal::PageSpec page,
          internal::ParsePage("endpoints", target, req->page_size(), req->page_token()));
      ASSIGN_OR_RETURN(std::vector<service::EndpointInfo> list, daemon_->ListEndpoints(target));
      resp->set_next_page_token(internal::TakePage(
          list, [](const service::EndpointInfo& e) { return e.id; }, "endpoints", target, page));
      for (const service::EndpointInfo& e : list) ToProto(e, resp->add_endpoints());
      return absl::OkStatus();
    });
  }

 private:
  // The index of the session's device, which every grant of the session names (0 if the
  // session closed meanwhile: its grants are gone anyway).
  uint32_t DeviceIndex(SessionId s) {
    absl::StatusOr<service::DeviceIdentity> d = daemon_->SessionDevice(s);
    return d.ok() ? d->index : 0;
  }

  // OK when the reply carrying `g` can still reach the client. Otherwise the grant is released
  // again, so a call that ran out of time leaves no hold behind: DEADLINE_EXCEEDED.
  // With a call id, the grant is recorded for ForgetCalls, or released at once if the client
  // already forgot the call.
  absl::Status Kept(grpc::ServerContext* ctx, SessionId s, uint64_t call_id,
                    const cache::KeyGrant& g) {
    return KeptAfter(Late(ctx), s, call_id, g);
  }
  // Kept's first half: whether the call can still be answered (its deadline, its client).
  absl::Status Late(grpc::ServerContext* ctx) {
    absl::Status late = CheckDeadline(ctx);
    // A client whose own deadline passed has given up even where this side still sees time
    // (the deadline travels relative, and the server's clock starts when the request arrives;
    // an expired one may arrive as no deadline at all). Asking costs tens of microseconds, so
    // only calls without a deadline or with little left ask whether the client cancelled.
    const auto left = ctx->deadline() - std::chrono::system_clock::now();
    if (late.ok() &&
        (ctx->deadline() == std::chrono::system_clock::time_point::max() ||
         left < kCancelCheckWindow) &&
        ctx->IsCancelled()) {
      late = base::WithReason(absl::CancelledError("the client gave up on the call"),
                              base::reason::kCallAbandoned);
    }
    return late;
  }
  // Kept's second half, given the first's answer.
  absl::Status KeptAfter(absl::Status late, SessionId s, uint64_t call_id,
                         const cache::KeyGrant& g) {
    if (late.ok() && call_id != 0) {
      if (calls_.PruneDue())
        calls_.Prune([&](uint64_t id) { return daemon_->SessionDevice(id).ok(); });
      if (!calls_.Made(s, call_id, g.handle)) {
        late = base::WithReason(
            absl::CancelledError("the client forgot this call (ForgetCalls) before it ended"),
            base::reason::kCallAbandoned, {{"call_id", std::to_string(call_id)}});
      }
    }
    if (late.ok()) return late;
    (void)daemon_->Release(s, g.handle);
    return base::Annotate(late, "the key made for it was released again");
  }

  // Register's, Window's and Reregister's reply: the grant, if it can still be delivered (Kept).
  absl::Status Deliver(grpc::ServerContext* ctx, SessionId s, uint64_t call_id,
                       const cache::KeyGrant& g, pb::KeyGrant* out) {
    RETURN_IF_ERROR(Kept(ctx, s, call_id, g));
    ToProto(g, DeviceIndex(s), out);
    return absl::OkStatus();
  }

  template <typename Fn>
  grpc::Status Run(grpc::ServerContext* ctx, Fn&& fn) {
    return session_calls_.Run(ctx, std::forward<Fn>(fn));
  }

  service::Daemon* daemon_;
  FdSender* fds_;
  std::function<void()> on_drain_;
  ServingHealth* health_;
  internal::SessionCalls session_calls_;
  internal::CallLedger calls_;
};

// Every gRPC service of the daemon: the object Start registers and the server owns.
struct Services {
  ServingHealth health;
  std::unique_ptr<RegCacheServiceImpl> regcache;
  std::unique_ptr<internal::SimPeerServiceImpl> sim_peer;  // when a device simulates a peer
};

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(std::unique_ptr<Services> services, std::unique_ptr<grpc::Server> server,
                 std::string unix_target)
      : services_(std::move(services)),
        server_(std::move(server)),
        unix_target_(std::move(unix_target)) {}
  ~GrpcServerImpl() override { Shutdown(absl::ZeroDuration()); }

  void Draining() override { services_->health.Down(); }
  void DeviceFailed() override { services_->health.Down(); }
  void Shutdown(absl::Duration grace) override {
    std::call_once(shutdown_once_, [&] {
      services_->health.Down();
      server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
      server_->Wait();
    });
  }
  std::string unix_target() const override { return unix_target_; }

 private:
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string unix_target_;
  std::once_flag shutdown_once_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(service::Daemon* daemon,
                                                              FdSender* fds,
                                                              const GrpcServerOptions& options) {
  if (options.socket_dir.empty()) return absl::InvalidArgumentError("socket_dir is empty");
  std::string path = absl::StrCat(options.socket_dir, "/", protocol::kGrpcSocketName);
  unlink(path.c_str());  // a stale socket of a previous run
  std::string unix_target = absl::StrCat("unix:", path);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto services = std::make_unique<Services>();
  services->regcache =
      std::make_unique<RegCacheServiceImpl>(daemon, fds, options.on_drain, &services->health);
  std::vector<std::string> names = {pb::RegCacheService::service_full_name()};
  if (service::SimPeerPort* port = daemon->sim_peer(); port != nullptr) {
    services->sim_peer = std::make_unique<internal::SimPeerServiceImpl>(daemon, port);
    names.push_back(pb::SimPeerService::service_full_name());
  }
  grpc::ServerBuilder builder;
  int unix_port = 0;
  builder.AddListeningPort(unix_target, grpc::InsecureServerCredentials(), &unix_port);
  int tcp_port = 0;
  if (options.tcp_port != 0) {
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", options.tcp_port),
                             grpc::InsecureServerCredentials(), &tcp_port);
  }
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(services->regcache.get());
  if (services->sim_peer != nullptr) builder.RegisterService(services->sim_peer.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || unix_port == 0) {
    return absl::UnavailableError(absl::StrCat("gRPC: cannot listen on ", unix_target));
  }
  if (options.tcp_port != 0 && tcp_port == 0) {
    server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("gRPC: cannot listen on 127.0.0.1:", options.tcp_port));
  }
  // The allow-list (peer credentials on the control socket, then the session token) is the
  // policy, not the file mode: any local user may dial.
  chmod(path.c_str(), 0666);
  services->health.Attach(server->GetHealthCheckService(), names);
  RC_LOG(INFO) << "gRPC listening on " << unix_target
               << (options.tcp_port != 0 ? absl::StrCat(" and 127.0.0.1:", options.tcp_port)
                                         : std::string())
               << " (" << absl::StrJoin(names, ", ") << ")";
  return std::unique_ptr<GrpcServer>(
      new GrpcServerImpl(std::move(services), std::move(server), std::move(unix_target)));
}

}  // namespace regcache::server
