// regcached — the per-host daemon. Flags (or a config file: --flagfile=<path>, one --flag=value
// per line) choose the device, the socket directory, the allow-lists and quotas; main builds a
// service::Daemon and its transports (control socket, gRPC, optional /metrics), then waits for
// SIGTERM/SIGINT (or an admin Drain) and drains: stop accepting, finish or abort what is in
// flight, run every key through the lifecycle, exit 0.
//
// main lives in api/ rather than service/ because the binary is where the transports are put
// together, and service/ may not depend on api/ (gRPC stays out of service/).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/build_info.h"
#include "base/command_line.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/stats.h"
#include "hca/mlx5/mlx5_device.h"
#include "hca/sim/sim_device.h"
#include "hca/verbs/verbs_device.h"
#include "protocol/control_protocol.h"
#include "server/control_server.h"
#include "server/grpc_service.h"
#include "server/internal/sd_notify.h"
#include "server/metrics_server.h"
#include "service/daemon.h"

// jemalloc's options (it is the daemon's malloc, server/CMakeLists.txt): returning freed pages
// to the kernel (madvise, and the TLB shootdown it costs) is its background thread's job, not
// that of whichever request-serving thread happened to free the memory. MALLOC_CONF in the
// environment still overrides it.
extern "C" {
const char* malloc_conf = "background_thread:true";
}

ABSL_FLAG(std::string, device, "auto",
          "device: auto (mlx5, else verbs, else sim: the first that opens) | sim[:params] | "
          "verbs[:name][,port=N,gid_index=N] (any libibverbs device); several devices separated "
          "by ';' (\"mlx5:mlx5_0;mlx5:mlx5_1\"), each with its own cache, the first the "
          "sessions' default");
ABSL_FLAG(uint32_t, max_sessions_per_device, 0,
          "most sessions open at once on one device (0: only --max_sessions limits them)");
ABSL_FLAG(std::string, socket_dir, "",
          "directory of control.sock and grpc.sock, created if missing (empty: "
          "REGCACHE_SOCKET_DIR, else /run/regcache)");
ABSL_FLAG(uint16_t, grpc_tcp_port, 0, "also serve gRPC on 127.0.0.1:<port> (0: off)");
ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus /metrics on HOST:PORT (e.g. 0.0.0.0:9464 for a pod; empty: off; "
          "docs/metrics.md)");
ABSL_FLAG(uint16_t, metrics_port, 0,
          "shorthand for --metrics_address=127.0.0.1:<port> (0: off); not with --metrics_address");
ABSL_FLAG(uint32_t, metrics_max_tenants, 16,
          "tenants (peer uids) labelled on their own in the per-tenant metrics; the rest are "
          "summed under tenant=\"other\"");
ABSL_FLAG(std::vector<std::string>, allow_uids, {},
          "uids allowed to open a session (empty with allow_gids empty: root and our uid)");
ABSL_FLAG(std::vector<std::string>, allow_gids, {}, "gids allowed to open a session");
ABSL_FLAG(std::vector<std::string>, admin_uids, {},
          "uids whose sessions are admin (Sessions, Drain, other sessions' keys); root is admin "
          "only if listed");
ABSL_FLAG(std::vector<std::string>, admin_gids, {},
          "gids whose sessions are admin (the peer's primary gid); with admin_uids empty too, no "
          "session is admin");
ABSL_FLAG(uint64_t, max_keys_per_session, 1u << 20, "keys per session (0: unlimited)");
ABSL_FLAG(uint64_t, max_memories_per_session, 4096,
          "memories a session may have attached at once (0: unlimited); each costs the device "
          "a key or two outside the pooled keys' budget");
ABSL_FLAG(uint64_t, max_bytes_per_session, uint64_t{1} << 40,
          "bytes of attached memory per session (0: unlimited)");
ABSL_FLAG(uint64_t, max_bytes_total, uint64_t{1} << 40,
          "bytes of memory mapped for all sessions together (0: unlimited); bounds the daemon's "
          "translation memory (docs/architecture.md, Large memory)");
ABSL_FLAG(uint32_t, max_backing_page_log, 30,
          "largest translation page (2^n bytes) of attached memory; 12 keeps 4 KiB pages");
ABSL_FLAG(uint32_t, max_sessions, 1024, "sessions at once");
ABSL_FLAG(uint32_t, device_reserve_divisor, 16,
          "leave 1/N of the device's key table and translation entries to other users of the "
          "NIC (1..65536; sessions share the rest fairly)");
ABSL_FLAG(uint64_t, device_translation_entries, 0,
          "translation entries (KLM) all sessions' pooled keys may hold per device before the "
          "reserve (0: 64 per key of the device's key table)");
ABSL_FLAG(uint32_t, max_endpoints, 16,
          "target endpoints (RC queue pairs, docs/endpoints.md) per session (0: unlimited)");
ABSL_FLAG(bool, allow_pd_export, false,
          "let sessions open with a device context of their own and import its PD "
          "(docs/client_memory.md): one more device context per such session");
ABSL_FLAG(bool, peer_on_any_device, false,
          "serve the peer data path (SimPeerService) on every device, through its own requester "
          "queue pair: for tests of a device backend; --device=sim always serves it");
ABSL_FLAG(bool, strict_key_bounds, false,
          "on a device that confines a peer only to a key's attachment, not to the key's own "
          "range (Soft-RoCE: see regcachectl status), give every key a memory region of its own "
          "cut at its edges; each miss then registers the key's pages (docs/key_bounds.md)");
ABSL_FLAG(uint32_t, held_reclaim_after_ms, 100,
          "how long a session under its fair share of the device's keys waits before the daemon "
          "revokes keys that sessions over their share hold (1..900; they wait 1 s at most): "
          "docs/architecture.md, Device budget");
ABSL_FLAG(uint32_t, workers, 2, "UMR queues (worker queues) per session");
ABSL_FLAG(uint32_t, umr_timeout_ms, 2000,
          "how long a UMR (or a fault's rewrite) may wait for its completion before the queue "
          "counts as broken and is replaced, 1..600000 ms (raise it only for slow emulated "
          "devices)");
ABSL_FLAG(uint32_t, ring_channels, 16,
          "fast-path channels per session (client threads beyond this share them), 1..64");
ABSL_FLAG(uint32_t, grant_slots, 1u << 18,
          "grant state slots per session: grants the client library can cache at once "
          "(4 bytes each in the session's state file, touched only when used)");
ABSL_FLAG(std::string, log_level, "info", "debug | info | warning | error");
// After Daemon::Drain every call has finished (CloseSession waits for a session's calls) or
// fails fast with UNAVAILABLE, so this only bounds the gRPC layer's own shutdown — which, with
// an idle client connection open, waits out the whole grace period (measured), hence short.
ABSL_FLAG(int32_t, drain_grace_ms, 250, "gRPC shutdown grace after the drain, ms, 0..60000");
// Closing the sockets the moment the drain ends would turn a connected client's next call into
// a torn stream (gRPC's CANCELLED, a reset control socket) instead of the reason. So regcached
// keeps answering UNAVAILABLE / DRAINING while clients stay connected, up to this long; it exits
// as soon as the last control connection closes, or at a second SIGTERM / SIGINT.
ABSL_FLAG(int32_t, drain_linger_ms, 2000,
          "after a drain, how long regcached keeps answering DRAINING while clients are still "
          "connected, ms, 0..600000 (it exits when the last one leaves, or at a second signal)");

namespace {

bool ParseIds(const std::vector<std::string>& in, const char* flag, std::vector<uint32_t>* out) {
  for (const std::string& s : in) {
    uint32_t v;
    if (!absl::SimpleAtoi(s, &v)) {
      std::fprintf(stderr, "regcached: --%s: '%s' is not a number\n", flag, s.c_str());
      return false;
    }
    out->push_back(v);
  }
  return true;
}

// The daemon's configuration from the flags; false (after saying why) when a flag is bad.
bool ConfigFromFlags(regcache::service::DaemonConfig* config) {
  regcache::base::LogSeverity severity;
  if (!regcache::base::ParseLogSeverity(absl::GetFlag(FLAGS_log_level), &severity)) {
    std::fprintf(stderr, "regcached: unknown --log_level\n");
    return false;
  }
  regcache::base::SetMinLogSeverity(severity);
  config->device = absl::GetFlag(FLAGS_device);
  if (!ParseIds(absl::GetFlag(FLAGS_allow_uids), "allow_uids", &config->allow_uids) ||
      !ParseIds(absl::GetFlag(FLAGS_allow_gids), "allow_gids", &config->allow_gids) ||
      !ParseIds(absl::GetFlag(FLAGS_admin_uids), "admin_uids", &config->admin_uids) ||
      !ParseIds(absl::GetFlag(FLAGS_admin_gids), "admin_gids", &config->admin_gids)) {
    return false;
  }
  config->max_keys_per_session = absl::GetFlag(FLAGS_max_keys_per_session);
  config->max_memories_per_session = absl::GetFlag(FLAGS_max_memories_per_session);
  config->max_bytes_per_session = absl::GetFlag(FLAGS_max_bytes_per_session);
  config->max_bytes_total = absl::GetFlag(FLAGS_max_bytes_total);
  config->max_backing_page_log = absl::GetFlag(FLAGS_max_backing_page_log);
  config->max_sessions = absl::GetFlag(FLAGS_max_sessions);
  config->max_sessions_per_device = absl::GetFlag(FLAGS_max_sessions_per_device);
  config->max_endpoints = absl::GetFlag(FLAGS_max_endpoints);
  config->allow_pd_export = absl::GetFlag(FLAGS_allow_pd_export);
  config->peer_on_any_device = absl::GetFlag(FLAGS_peer_on_any_device);
  config->strict_key_bounds = absl::GetFlag(FLAGS_strict_key_bounds);
  config->metrics_max_tenants = absl::GetFlag(FLAGS_metrics_max_tenants);
  // The simulated peer (PeerWrite / PeerRead) reaches endpoints through the sim's remote node;
  // on other devices the peer data path is refused anyway.
  config->remote_node = regcache::hca::sim::ConnectRemotePeer;
  config->cache.engine.queues_per_tenant = absl::GetFlag(FLAGS_workers);
  const uint32_t umr_timeout_ms = absl::GetFlag(FLAGS_umr_timeout_ms);
  if (umr_timeout_ms == 0 || umr_timeout_ms > 600000) {
    std::fprintf(stderr, "regcached: --umr_timeout_ms must be in 1..600000\n");
    return false;
  }
  config->cache.engine.completion_timeout = absl::Milliseconds(umr_timeout_ms);
  config->cache.device_key_reserve_divisor = absl::GetFlag(FLAGS_device_reserve_divisor);
  config->cache.device_translation_entries = absl::GetFlag(FLAGS_device_translation_entries);
  if (config->cache.device_key_reserve_divisor == 0 ||
      config->cache.device_key_reserve_divisor > 65536) {
    std::fprintf(stderr, "regcached: --device_reserve_divisor must be in 1..65536\n");
    return false;
  }
  const uint32_t reclaim_ms = absl::GetFlag(FLAGS_held_reclaim_after_ms);
  if (reclaim_ms == 0 || reclaim_ms > 900) {
    std::fprintf(stderr,
                 "regcached: --held_reclaim_after_ms must be in 1..900 (a session under its share "
                 "waits 1 s at most)\n");
    return false;
  }
  config->cache.held_reclaim_after = absl::Milliseconds(reclaim_ms);
  config->ring_channels = absl::GetFlag(FLAGS_ring_channels);
  config->grant_slots = absl::GetFlag(FLAGS_grant_slots);
  if (config->ring_channels == 0 || config->ring_channels > 64) {
    std::fprintf(stderr, "regcached: --ring_channels must be in 1..64\n");
    return false;
  }
  if (config->grant_slots == 0 || config->grant_slots > (1u << 24)) {
    std::fprintf(stderr, "regcached: --grant_slots must be in 1..16777216\n");
    return false;
  }
  return true;
}

// --drain_grace_ms and --drain_linger_ms in range; false (after saying why) otherwise.
bool DrainFlagsOk() {
  const int32_t grace = absl::GetFlag(FLAGS_drain_grace_ms);
  if (grace < 0 || grace > 60000) {
    std::fprintf(stderr, "regcached: --drain_grace_ms must be in 0..60000\n");
    return false;
  }
  const int32_t linger = absl::GetFlag(FLAGS_drain_linger_ms);
  if (linger < 0 || linger > 600000) {
    std::fprintf(stderr, "regcached: --drain_linger_ms must be in 0..600000\n");
    return false;
  }
  return true;
}

// After the drain: waits while any client is still connected to the control socket, at most
// --drain_linger_ms, ending early at a second signal. Every call meanwhile gets DRAINING.
void Linger(const regcache::server::ControlServer& control, const sigset_t& signals) {
  const absl::Time deadline =
      absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_drain_linger_ms));
  while (control.connections() > 0 && absl::Now() < deadline) {
    const timespec tick{0, 20 * 1000 * 1000};
    if (sigtimedwait(&signals, nullptr, &tick) > 0) {
      RC_LOG(INFO) << "regcached: second signal, not waiting for clients to leave";
      return;
    }
  }
  if (control.connections() > 0) {
    RC_LOG(INFO) << "regcached: " << control.connections()
                 << " client(s) still connected after --drain_linger_ms; closing";
  }
}

// --metrics_address, or 127.0.0.1:--metrics_port; empty for none. False (after saying why) when
// the two disagree or the address is not HOST:PORT.
bool MetricsAddressFromFlags(std::string* address) {
  *address = absl::GetFlag(FLAGS_metrics_address);
  const uint16_t port = absl::GetFlag(FLAGS_metrics_port);
  if (port != 0) {
    if (!address->empty()) {
      std::fprintf(stderr, "regcached: give --metrics_address or --metrics_port, not both\n");
      return false;
    }
    *address = absl::StrCat("127.0.0.1:", port);
  }
  std::string host;
  uint16_t unused;
  if (absl::Status s = regcache::server::MetricsServer::ParseAddress(*address, &host, &unused);
      !address->empty() && !s.ok()) {
    std::fprintf(stderr, "regcached: --metrics_address: %s\n", std::string(s.message()).c_str());
    return false;
  }
  return true;
}

// A device that fails for good (IBV_EVENT_DEVICE_FATAL) turns health NOT_SERVING, so that
// probes take the node out; the daemon goes on serving its other devices and its sessions'
// clean-up until it is stopped. Watches from construction to destruction.
class DeviceWatch {
 public:
  DeviceWatch(regcache::service::Daemon* daemon, regcache::server::GrpcServer* grpc)
      : thread_([this, daemon, grpc] { Run(daemon, grpc); }) {}
  // At once: the drain starts the moment the signal arrives, not at the next poll.
  ~DeviceWatch() {
    stopping_.Notify();
    thread_.join();
  }

 private:
  void Run(regcache::service::Daemon* daemon, regcache::server::GrpcServer* grpc) {
    do {
      for (const regcache::service::DeviceStatus& d : daemon->Status().devices) {
        if (d.health.ok()) continue;
        RC_LOG(ERROR) << "regcached: device " << d.identity.name << " failed: health NOT_SERVING";
        grpc->DeviceFailed();
        regcache::server::internal::NotifyServiceManager(
            absl::StrCat("STATUS=device ", d.identity.name, " failed: ", d.health.message()));
        return;
      }
    } while (!stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  }

  absl::Notification stopping_;
  std::thread thread_;
};

// Runs the daemon and its servers until SIGTERM or SIGINT (in `signals`, blocked in every
// thread), then drains. The process's exit code.
int Serve(const regcache::service::DaemonConfig& config, const std::string& socket_dir,
          const std::string& metrics_address, const sigset_t& signals) {
  regcache::base::stats::Registry registry;
  absl::StatusOr<std::unique_ptr<regcache::service::Daemon>> daemon =
      regcache::service::Daemon::Create(config, &registry);
  if (!daemon.ok()) {
    RC_LOG(ERROR) << "regcached: " << daemon.status();
    return 1;
  }
  absl::StatusOr<std::unique_ptr<regcache::server::ControlServer>> control =
      regcache::server::ControlServer::Start(daemon->get(), socket_dir);
  if (!control.ok()) {
    RC_LOG(ERROR) << "regcached: " << control.status();
    return 1;
  }
  regcache::server::GrpcServerOptions grpc_options;
  grpc_options.socket_dir = socket_dir;
  grpc_options.tcp_port = absl::GetFlag(FLAGS_grpc_tcp_port);
  // An admin Drain ends the process the same way SIGTERM does.
  grpc_options.on_drain = [] { kill(getpid(), SIGTERM); };
  absl::StatusOr<std::unique_ptr<regcache::server::GrpcServer>> grpc =
      regcache::server::GrpcServer::Start(daemon->get(), control->get(), grpc_options);
  if (!grpc.ok()) {
    RC_LOG(ERROR) << "regcached: " << grpc.status();
    return 1;
  }
  std::unique_ptr<regcache::server::MetricsServer> metrics;
  if (!metrics_address.empty()) {
    regcache::server::MetricsServerOptions metrics_options;
    metrics_options.address = metrics_address;
    metrics_options.version = REGCACHE_VERSION;
    metrics_options.build_type = REGCACHE_BUILD_TYPE;
    absl::StatusOr<std::unique_ptr<regcache::server::MetricsServer>> m =
        regcache::server::MetricsServer::Start(daemon->get(), metrics_options);
    if (!m.ok()) {
      RC_LOG(ERROR) << "regcached: " << m.status();
      return 1;
    }
    metrics = std::move(*m);
  }
  regcache::service::DaemonStatus status = (*daemon)->Status();
  RC_LOG(INFO) << "regcached ready: device " << status.device << ", sockets in " << socket_dir;
  // Type=notify (deploy/regcached.service): units ordered after regcached start only now.
  regcache::server::internal::NotifyServiceManager(
      absl::StrCat("READY=1\nSTATUS=serving on ", status.device));

  int sig = 0;
  {
    DeviceWatch watch(daemon->get(), grpc->get());
    while (sigwait(&signals, &sig) != 0) {
    }
  }
  RC_LOG(INFO) << "regcached: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", draining";
  regcache::server::internal::NotifyServiceManager("STOPPING=1\nSTATUS=draining");

  // Drain: new sessions and calls get UNAVAILABLE from here on; every session is closed (each
  // key through the lifecycle, memory unmapped) once its calls in flight finished.
  (*grpc)->Draining();  // health answers NOT_SERVING from here on
  absl::Status drained = (*daemon)->Drain();
  Linger(**control, signals);
  (*grpc)->Shutdown(absl::Milliseconds(absl::GetFlag(FLAGS_drain_grace_ms)));
  (*control)->Stop();
  metrics.reset();
  if (!drained.ok()) {
    RC_LOG(ERROR) << "regcached: drain: " << drained;
    return 1;
  }
  RC_LOG(INFO) << "regcached: drained, exiting";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("regcached --device=sim --socket_dir=/run/regcache [flags]");
  absl::FlagsUsageConfig usage_config;  // --version: this binary's version and build type
  usage_config.version_string = [] { return regcache::base::VersionString("regcached"); };
  absl::SetFlagsUsageConfig(usage_config);
  std::string error;
  switch (regcache::base::CheckCommandLine(argc, argv, &error)) {
    case regcache::base::CommandLine::kHelp:
      regcache::base::PrintFlagsHelp(stdout, absl::ProgramUsageMessage(), "regcached_main");
      return 0;
    case regcache::base::CommandLine::kHelpFull:
      regcache::base::PrintFlagsHelp(stdout, absl::ProgramUsageMessage(), "");
      return 0;
    case regcache::base::CommandLine::kUsageError:
      std::fprintf(stderr, "regcached: %s\n", error.c_str());
      return 2;
    case regcache::base::CommandLine::kRun:
      break;
  }
  if (std::vector<char*> rest = absl::ParseCommandLine(argc, argv); rest.size() > 1) {
    std::fprintf(stderr, "regcached: unexpected argument '%s' (it takes flags only)\n", rest[1]);
    return 2;
  }
  regcache::service::DaemonConfig config;
  if (!ConfigFromFlags(&config)) return 2;
  std::string metrics_address;
  if (!MetricsAddressFromFlags(&metrics_address)) return 2;
  if (!DrainFlagsOk()) return 2;

  // Every thread created from here on inherits the blocked set; Serve collects the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  regcache::hca::sim::RegisterBackend();
  regcache::hca::mlx5::RegisterBackend();
  regcache::hca::verbs::RegisterBackend();

  std::string socket_dir = absl::GetFlag(FLAGS_socket_dir);
  if (socket_dir.empty()) socket_dir = regcache::protocol::DefaultSocketDir();
  if (mkdir(socket_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    RC_LOG(ERROR) << regcache::base::ErrnoToStatus(errno, absl::StrCat("mkdir ", socket_dir));
    return 1;
  }
  return Serve(config, socket_dir, metrics_address, signals);
}
