// regcachectl — the command line of regcached (docs/cli.md: every command, its JSON, the exit
// codes). The read-only commands (status, stats, sessions, keys, endpoints) connect as an
// observer (ClientOptions::observer): authenticated like a client, but no session of their own,
// so a readiness probe leaves no trace in the session counts and logs. `health` needs no
// control socket at all (gRPC health). `drain` and `peer` open a session. Admin commands need
// an admin peer (the daemon's admin list).
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/build_info.h"
#include "base/command_line.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "regcache/sim_peer.h"
#include "tools/internal/health_probe.h"
#include "tools/internal/json_writer.h"

ABSL_FLAG(std::string, socket_dir, "",
          "regcached's socket directory (empty: REGCACHE_SOCKET_DIR, else /run/regcache)");
ABSL_FLAG(std::string, output, "text", "output format: text or json (docs/cli.md)");
ABSL_FLAG(std::string, o, "", "short for --output");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "deadline of each call to the daemon");
ABSL_FLAG(uint64_t, session, 0, "target session (keys, endpoints, peer): admin only");
ABSL_FLAG(bool, all, false, "keys: every session's keys (admin)");
ABSL_FLAG(std::string, service, "", "health: the gRPC service to check (empty: the server)");
ABSL_FLAG(std::string, rkey, "", "peer: the rkey (decimal or 0x hex)");
ABSL_FLAG(std::string, addr, "", "peer: the address (decimal or 0x hex)");
ABSL_FLAG(std::string, data, "", "peer write: the bytes to write (text)");
ABSL_FLAG(uint64_t, length, 0, "peer read: bytes to read");
ABSL_FLAG(uint64_t, endpoint, 0, "peer: through this target endpoint of the session (0: none)");
ABSL_FLAG(std::string, device, "",
          "the device regcachectl connects to (empty: the daemon's first); unknown names fail");

namespace {

// --socket_dir, or where every program looks without it (protocol/control_protocol.h).
std::string SocketDir() {
  const std::string flag = absl::GetFlag(FLAGS_socket_dir);
  return flag.empty() ? regcache::protocol::DefaultSocketDir() : flag;
}

using regcache::api::Client;
using regcache::tools::internal::JsonWriter;

constexpr char kUsage[] =
    R"(regcachectl: the command line of regcached (docs/cli.md).

Usage: regcachectl [flags] COMMAND

Commands. Read-only ones connect as an observer: no session of their own.
  status                       the daemon, and each device it serves (name, GUID, GID, sessions)
  stats                        every daemon stat
  sessions                     (admin) every session: peer, device, usage
  keys --session=N | --all     (admin) the keys of one session or of all (plain `keys`: none,
                               an observer holds no keys)
  endpoints [--session=N]      (admin) the target endpoints of a session
  health [--service=NAME]      gRPC health (grpc.health.v1), no session: for probes
  drain                        (admin, opens a session) drain and stop the daemon
  peer write --rkey=K --addr=A --data=TEXT [--session=N] [--endpoint=E]
  peer read  --rkey=K --addr=A --length=N [--session=N] [--endpoint=E]
                               (sim device, opens a session) act as a session's remote peer

Flags:
  --socket_dir=DIR             regcached's socket directory (default: REGCACHE_SOCKET_DIR,
                               else /run/regcache)
  -o, --output=text|json       output format (default text); JSON shapes in docs/cli.md
  --device=NAME                the device to connect to (default: the daemon's first)
  --timeout=DURATION           deadline of each call (default 10s)
  --help                       this text (exit 0); --helpfull lists every flag
  --version                    version and build type (exit 0)

Exit status:
  0  success (health: SERVING)
  1  the daemon refused or failed the command (code and message on stderr), or could not be
     reached (every command but health)
  2  bad usage (unknown command or flag, missing argument)
  3  health: the daemon answered but is not SERVING (NOT_SERVING while draining, UNKNOWN,
     or the service is unknown to it)
  4  health: the daemon could not be reached (no socket, no answer within --timeout)
)";

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotServing = 3;
constexpr int kExitUnreachable = 4;

bool g_json = false;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "regcachectl: %s\n", s.ToString().c_str());
  return kExitFailed;
}

int Usage(const std::string& what) {
  std::fprintf(stderr, "regcachectl: %s (regcachectl --help for usage)\n", what.c_str());
  return kExitUsage;
}

// Prints the command's JSON document (one line).
int Emit(const JsonWriter& w) {
  std::printf("%s\n", w.str().c_str());
  return 0;
}

bool ParseNumber(const std::string& text, uint64_t* out) {
  if (text.size() > 2 && (text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0)) {
    return absl::SimpleHexAtoi(text.substr(2), out);
  }
  return absl::SimpleAtoi(text, out);
}

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

std::vector<std::string> AccessNames(uint32_t a) {
  static const char* const kNames[] = {"lr", "lw", "rr", "rw", "a"};
  std::vector<std::string> out;
  for (int i = 0; i < 5; ++i) {
    if (a & (1u << i)) out.push_back(kNames[i]);
  }
  return out;
}

std::string AccessString(uint32_t a) {
  std::vector<std::string> names = AccessNames(a);
  return names.empty() ? "-" : absl::StrJoin(names, "|");
}

void AccessJson(JsonWriter& w, uint32_t a) {
  w.BeginArray();
  for (const std::string& n : AccessNames(a)) w.String(n);
  w.EndArray();
}

std::string Gid(const std::array<uint8_t, 16>& gid) {
  std::string s;
  for (size_t i = 0; i < gid.size(); i += 2) {
    absl::StrAppendFormat(&s, "%s%02x%02x", i == 0 ? "" : ":", gid[i], gid[i + 1]);
  }
  return s;
}

// --- Commands: each prints its result (text or JSON) and returns the exit code. ---
using Command = int (*)(Client& c, const std::vector<std::string>& args);

void StatusDeviceJson(JsonWriter& w, const regcache::api::DaemonInfo::Device& d) {
  w.BeginObject()
      .Key("index")
      .Uint(d.info.index)
      .Key("name")
      .String(d.info.name)
      .Key("backend")
      .String(d.backend)
      .Key("node_guid")
      .String(absl::StrFormat("0x%016x", d.info.node_guid))
      .Key("port")
      .Uint(d.info.port)
      .Key("gid")
      .String(Gid(d.info.gid))
      .Key("sessions")
      .Uint(d.sessions)
      .Key("selection")
      .String(d.selection)
      .Key("key_bounds")
      .String(regcache::api::KeyBoundsName(d.info.key_bounds))
      .Key("key_range_enforced")
      .Bool(d.info.key_range_enforced())
      .Key("key_bounds_detail")
      .String(d.key_bounds_detail)
      .Key("health")
      .String(d.health)
      .EndObject();
}

int Status(Client& c, const std::vector<std::string>&) {
  absl::StatusOr<regcache::api::DaemonInfo> s = c.Status();
  if (!s.ok()) return Fail(s.status());
  if (g_json) {
    JsonWriter w;
    w.BeginObject().Key("device").String(s->device).Key("backend").String(s->backend);
    w.Key("sessions").Uint(s->sessions).Key("draining").Bool(s->draining);
    w.Key("uptime_ms").Int(s->uptime_ms).Key("peer").Bool(s->peer);
    w.Key("endpoints").Bool(s->endpoints).Key("device_selection").String(s->device_selection);
    w.Key("devices").BeginArray();
    for (const regcache::api::DaemonInfo::Device& d : s->devices) StatusDeviceJson(w, d);
    w.EndArray().EndObject();
    return Emit(w);
  }
  std::printf("device=%s backend=%s sessions=%" PRIu64 " draining=%d uptime_ms=%" PRId64
              " peer=%d endpoints=%d\n",
              s->device.c_str(), s->backend.c_str(), s->sessions, s->draining ? 1 : 0, s->uptime_ms,
              s->peer ? 1 : 0, s->endpoints ? 1 : 0);
  std::printf("device_selection=%s\n", s->device_selection.c_str());
  for (const regcache::api::DaemonInfo::Device& d : s->devices) {
    std::printf("device[%u]=%s backend=%s node_guid=0x%016" PRIx64
                " port=%u gid=%s sessions=%" PRIu64 "\n",
                d.info.index, d.info.name.c_str(), d.backend.c_str(), d.info.node_guid, d.info.port,
                Gid(d.info.gid).c_str(), d.sessions);
    std::printf("device[%u]_selection=%s\n", d.info.index, d.selection.c_str());
    std::printf("device[%u]_health=%s\n", d.info.index, d.health.c_str());
    std::printf("device[%u]_key_bounds=%s key_range_enforced=%d (%s)\n", d.info.index,
                regcache::api::KeyBoundsName(d.info.key_bounds),
                d.info.key_range_enforced() ? 1 : 0, d.key_bounds_detail.c_str());
  }
  return 0;
}

void SessionJson(JsonWriter& w, const regcache::api::SessionRecord& r) {
  w.BeginObject().Key("session_id").Uint(r.id).Key("pid").Int(r.pid);
  w.Key("uid").Uint(r.uid).Key("gid").Uint(r.gid).Key("admin").Bool(r.admin);
  w.Key("device").String(r.device).Key("memories").Uint(r.memories);
  w.Key("live_registrations").Uint(r.usage.live_registrations);
  w.Key("revoked_held").Uint(r.usage.revoked_held);
  w.Key("cached_unreferenced").Uint(r.usage.cached_unreferenced);
  w.Key("backings").Uint(r.usage.backings).Key("backed_bytes").Uint(r.usage.backed_bytes);
  w.Key("pool_outstanding").Uint(r.usage.pool_outstanding);
  w.Key("pool_total").Uint(r.usage.pool_total);
  w.EndObject();
}

int Sessions(Client& c, const std::vector<std::string>&) {
  absl::StatusOr<std::vector<regcache::api::SessionRecord>> s = c.Sessions();
  if (!s.ok()) return Fail(s.status());
  if (g_json) {
    JsonWriter w;
    w.BeginObject().Key("sessions").BeginArray();
    for (const regcache::api::SessionRecord& r : *s) SessionJson(w, r);
    w.EndArray().EndObject();
    return Emit(w);
  }
  for (const regcache::api::SessionRecord& r : *s) {
    std::printf("session=%" PRIu64 " pid=%d uid=%u gid=%u admin=%d live=%" PRIu64
                " revoked_held=%" PRIu64 " cached=%" PRIu64 " memories=%" PRIu64
                " backed_bytes=%" PRIu64 " device=%s\n",
                r.id, r.pid, r.uid, r.gid, r.admin ? 1 : 0, r.usage.live_registrations,
                r.usage.revoked_held, r.usage.cached_unreferenced, r.memories, r.usage.backed_bytes,
                r.device.c_str());
  }
  return 0;
}

void KeyJson(JsonWriter& w, uint64_t session, const regcache::api::KeyInfo& k) {
  w.BeginObject().Key("session_id").Uint(session).Key("handle").String(Hex(k.handle));
  w.Key("key").Uint(k.key).Key("va").String(Hex(k.va)).Key("length").Uint(k.length);
  w.Key("access");
  AccessJson(w, k.access);
  w.Key("holders").Uint(k.holders).Key("state").String(k.key_state);
  w.Key("revoked").Bool(k.revoked).Key("window").Bool(k.is_window);
  w.Key("parent").String(Hex(k.parent));
  w.EndObject();
}

void KeysText(uint64_t session, const std::vector<regcache::api::KeyInfo>& keys) {
  for (const regcache::api::KeyInfo& k : keys) {
    std::printf("session=%" PRIu64 " handle=0x%" PRIx64 " key=0x%08x va=0x%" PRIx64
                " length=%" PRIu64 " access=%s holders=%u state=%s%s%s\n",
                session, k.handle, k.key, k.va, k.length, AccessString(k.access).c_str(), k.holders,
                k.key_state.c_str(), k.revoked ? " revoked" : "", k.is_window ? " window" : "");
  }
}

int Keys(Client& c, const std::vector<std::string>&) {
  // Which sessions: every one (--all), the one named, or the observer's own (none).
  std::vector<uint64_t> sessions;
  const bool all = absl::GetFlag(FLAGS_all);
  if (all) {
    absl::StatusOr<std::vector<regcache::api::SessionRecord>> s = c.Sessions();
    if (!s.ok()) return Fail(s.status());
    for (const regcache::api::SessionRecord& r : *s) sessions.push_back(r.id);
  } else {
    sessions.push_back(absl::GetFlag(FLAGS_session));
  }
  JsonWriter w;
  w.BeginObject().Key("keys").BeginArray();
  for (uint64_t session : sessions) {
    absl::StatusOr<std::vector<regcache::api::KeyInfo>> keys = c.ListKeys(session);
    if (!keys.ok()) {
      if (all && keys.status().code() == absl::StatusCode::kNotFound) continue;  // it closed
      return Fail(keys.status());
    }
    const uint64_t id = session == 0 ? c.session_id() : session;
    if (!g_json) KeysText(id, *keys);
    for (const regcache::api::KeyInfo& k : *keys) KeyJson(w, id, k);
  }
  w.EndArray().EndObject();
  return g_json ? Emit(w) : 0;
}

void EndpointJson(JsonWriter& w, uint64_t session, const regcache::api::EndpointInfo& e) {
  w.BeginObject().Key("session_id").Uint(session).Key("endpoint_id").Uint(e.id);
  w.Key("qpn").Uint(e.local.qpn).Key("psn").Uint(e.local.psn);
  w.Key("gid").String(Gid(e.local.gid)).Key("mtu").Uint(e.local.mtu);
  w.Key("peer_qpn").Uint(e.peer.qpn).Key("peer_psn").Uint(e.peer.psn);
  w.Key("peer_gid").String(Gid(e.peer.gid)).Key("peer_lid").Uint(e.peer.lid);
  w.Key("access");
  AccessJson(w, e.access);
  w.Key("created_unix_ms").Int(e.created_unix_ms);
  w.EndObject();
}

int Endpoints(Client& c, const std::vector<std::string>&) {
  const uint64_t session = absl::GetFlag(FLAGS_session);
  absl::StatusOr<std::vector<regcache::api::EndpointInfo>> eps = c.ListEndpoints(session);
  if (!eps.ok()) return Fail(eps.status());
  const uint64_t id = session == 0 ? c.session_id() : session;
  if (g_json) {
    JsonWriter w;
    w.BeginObject().Key("endpoints").BeginArray();
    for (const regcache::api::EndpointInfo& e : *eps) EndpointJson(w, id, e);
    w.EndArray().EndObject();
    return Emit(w);
  }
  for (const regcache::api::EndpointInfo& e : *eps) {
    std::printf("session=%" PRIu64 " endpoint=%" PRIu64
                " qpn=0x%06x psn=0x%06x gid=%s mtu=%u"
                " peer_qpn=0x%06x peer_psn=0x%06x peer_gid=%s peer_lid=%u access=%s\n",
                id, e.id, e.local.qpn, e.local.psn, Gid(e.local.gid).c_str(), e.local.mtu,
                e.peer.qpn, e.peer.psn, Gid(e.peer.gid).c_str(), e.peer.lid,
                AccessString(e.access).c_str());
  }
  return 0;
}

void StatJson(JsonWriter& w, const regcache::api::StatValue& v) {
  w.BeginObject().Key("component").String(v.component).Key("name").String(v.name);
  w.Key("kind").String(v.kind);
  if (v.kind == "histogram") {
    w.Key("count").Uint(v.count).Key("sum").Uint(v.sum).Key("p50").Uint(v.p50);
    w.Key("p99").Uint(v.p99).Key("max").Uint(v.max);
  } else {
    w.Key("value").Int(v.value);
  }
  w.EndObject();
}

int Stats(Client& c, const std::vector<std::string>&) {
  absl::StatusOr<regcache::api::StatsSnapshot> s = c.Stats();
  if (!s.ok()) return Fail(s.status());
  if (g_json) {
    JsonWriter w;
    w.BeginObject().Key("stats").BeginArray();
    for (const regcache::api::StatValue& v : s->stats) StatJson(w, v);
    w.EndArray().EndObject();
    return Emit(w);
  }
  for (const regcache::api::StatValue& v : s->stats) {
    if (v.kind == "histogram") {
      std::printf("%s.%s count=%" PRIu64 " p50=%" PRIu64 " p99=%" PRIu64 " max=%" PRIu64 "\n",
                  v.component.c_str(), v.name.c_str(), v.count, v.p50, v.p99, v.max);
    } else {
      std::printf("%s.%s %" PRId64 "\n", v.component.c_str(), v.name.c_str(), v.value);
    }
  }
  return 0;
}

int Drain(Client& c, const std::vector<std::string>&) {
  absl::Status s = c.Drain();
  if (!s.ok()) return Fail(s);
  if (g_json) return Emit(JsonWriter().BeginObject().Key("drained").Bool(true).EndObject());
  std::printf("drained\n");
  return 0;
}

int Peer(Client& c, const std::vector<std::string>& args) {
  if (args.size() != 2 || (args[1] != "write" && args[1] != "read")) {
    return Usage("peer needs write or read");
  }
  uint64_t rkey = 0, addr = 0;
  if (!ParseNumber(absl::GetFlag(FLAGS_rkey), &rkey) || rkey > UINT32_MAX ||
      !ParseNumber(absl::GetFlag(FLAGS_addr), &addr)) {
    return Usage("peer needs --rkey and --addr");
  }
  const uint64_t session = absl::GetFlag(FLAGS_session);
  const uint64_t endpoint = absl::GetFlag(FLAGS_endpoint);
  if (args[1] == "write") {
    const std::string data = absl::GetFlag(FLAGS_data);
    absl::Status s = SimPeerWrite(c, static_cast<uint32_t>(rkey), addr, data, session, endpoint);
    if (!s.ok()) return Fail(s);
    if (g_json)
      return Emit(JsonWriter().BeginObject().Key("written").Uint(data.size()).EndObject());
    std::printf("wrote %zu bytes\n", data.size());
    return 0;
  }
  absl::StatusOr<std::string> data = SimPeerRead(c, static_cast<uint32_t>(rkey), addr,
                                                 absl::GetFlag(FLAGS_length), session, endpoint);
  if (!data.ok()) return Fail(data.status());
  if (g_json) {
    return Emit(JsonWriter()
                    .BeginObject()
                    .Key("data_hex")
                    .String(absl::BytesToHexString(*data))
                    .EndObject());
  }
  std::printf("%s\n", absl::CHexEscape(*data).c_str());
  return 0;
}

// gRPC health on <socket_dir>/grpc.sock: no control socket, no session.
int Health(const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("health takes no arguments (--service=NAME)");
  const std::string service = absl::GetFlag(FLAGS_service);
  absl::StatusOr<std::string> status = regcache::tools::internal::CheckHealth(
      absl::StrCat("unix:", SocketDir(), "/", regcache::protocol::kGrpcSocketName), service,
      absl::GetFlag(FLAGS_timeout));
  int code = 0;
  std::string state;
  if (status.ok()) {
    state = *status;
    code = state == "SERVING" ? 0 : kExitNotServing;
  } else if (status.status().code() == absl::StatusCode::kNotFound) {
    state = "SERVICE_UNKNOWN";  // the server does not know the service name
    code = kExitNotServing;
  } else if (status.status().code() == absl::StatusCode::kUnavailable ||
             status.status().code() == absl::StatusCode::kDeadlineExceeded) {
    state = "UNREACHABLE";
    code = kExitUnreachable;
  } else {
    state = "ERROR";
    code = kExitFailed;
  }
  if (!status.ok())
    std::fprintf(stderr, "regcachectl: health: %s\n", status.status().ToString().c_str());
  if (g_json) {
    JsonWriter w;
    w.BeginObject().Key("service").String(service).Key("status").String(state);
    if (!status.ok()) w.Key("error").String(status.status().ToString());
    Emit(w.EndObject());
  } else {
    std::printf("%s\n", state.c_str());
  }
  return code;
}

int Run(const std::vector<std::string>& args) {
  if (args.empty()) return Usage("no command");
  const std::string o = absl::GetFlag(FLAGS_o);
  const std::string output = o.empty() ? absl::GetFlag(FLAGS_output) : o;
  if (output != "text" && output != "json") {
    return Usage("--output must be text or json, not '" + output + "'");
  }
  g_json = output == "json";
  if (args[0] == "health") return Health(args);
  struct Entry {
    Command run;
    bool observer;  // read-only: no session of its own
  };
  static const std::map<std::string, Entry> kCommands = {
      {"status", {Status, true}}, {"sessions", {Sessions, true}},   {"keys", {Keys, true}},
      {"stats", {Stats, true}},   {"endpoints", {Endpoints, true}}, {"drain", {Drain, false}},
      {"peer", {Peer, false}},
  };
  auto it = kCommands.find(args[0]);
  if (it == kCommands.end()) return Usage("unknown command '" + args[0] + "'");
  if (args[0] != "peer" && args.size() != 1) {
    return Usage(absl::StrCat(args[0], " takes no arguments, got '", args[1], "'"));
  }
  regcache::api::ClientOptions options;
  options.device = absl::GetFlag(FLAGS_device);
  options.call_timeout = absl::GetFlag(FLAGS_timeout);
  options.observer = it->second.observer;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(SocketDir(), options);
  if (!client.ok()) return Fail(client.status());
  return it->second.run(**client, args);
}

// --help (and -h, -help, help): the usage on stdout, exit 0 — abseil's own --help exits 1.
bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-help" || a == "-h" || a == "--h" || (i == 1 && a == "help")) {
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig config;
  config.version_string = [] { return regcache::base::VersionString("regcachectl"); };
  absl::SetFlagsUsageConfig(config);
  std::string error;
  const regcache::base::CommandLine line = regcache::base::CheckCommandLine(argc, argv, &error);
  if (WantsHelp(argc, argv) || line == regcache::base::CommandLine::kHelp ||
      line == regcache::base::CommandLine::kHelpFull) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (line == regcache::base::CommandLine::kUsageError) {
    std::fprintf(stderr, "regcachectl: %s\n", error.c_str());
    return 2;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  return Run(args);
}
