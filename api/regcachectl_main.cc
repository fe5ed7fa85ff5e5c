// regcachectl — the command line of regcached. It connects like any client (a session of its
// own over the control socket; admin commands need an admin uid: root or the daemon's uid by
// default).
//
//   regcachectl [--socket_dir=/run/regcache] [--device=NAME] status
//                                                 the daemon, then one line per device it serves
//                                                 (name, GUID, GID, sessions) and how it was chosen
//   regcachectl sessions                          (admin) every session: peer, usage
//   regcachectl keys [--session=N | --all]        this session's keys; another's or all (admin)
//   regcachectl endpoints [--session=N]           this session's target endpoints; another's
//                                                 (admin)
//   regcachectl stats                             every daemon stat, one per line
//   regcachectl drain                             (admin) drain and stop the daemon
//   regcachectl peer write --rkey=K --addr=A --data=TEXT [--session=N] [--endpoint=E]
//   regcachectl peer read  --rkey=K --addr=A --length=N [--session=N] [--endpoint=E]
//
// "peer" acts as the remote node of a session on the sim device: a peer in that session's PD
// using its rkeys (--session names the target session, admin only; see api/grpc_service.h), or
// with --endpoint the peer that session named for that target endpoint, its accesses arriving
// through it (docs/endpoints.md).
// `keys` alone lists regcachectl's own (new, empty) session — useful mainly with --session or
// --all, which is what an operator wants: whose keys are live, over what, and in which state.
// --device opens regcachectl's own session on that device (default: the daemon's first).
// Exit status: 0 on success, 1 with the error's code and message on stderr, 2 for bad usage.
#include <array>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "regcache/client.h"

ABSL_FLAG(std::string, socket_dir, "/run/regcache", "regcached's socket directory");
ABSL_FLAG(uint64_t, session, 0, "target session (keys, peer): admin only");
ABSL_FLAG(bool, all, false, "keys: every session's keys (admin)");
ABSL_FLAG(std::string, rkey, "", "peer: the rkey (decimal or 0x hex)");
ABSL_FLAG(std::string, addr, "", "peer: the address (decimal or 0x hex)");
ABSL_FLAG(std::string, data, "", "peer write: the bytes to write (text)");
ABSL_FLAG(uint64_t, length, 0, "peer read: bytes to read");
ABSL_FLAG(uint64_t, endpoint, 0, "peer: through this target endpoint of the session (0: none)");
ABSL_FLAG(std::string, device, "",
          "the device regcachectl's own session lives on (empty: the daemon's first)");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "regcachectl: %s\n", s.ToString().c_str());
  return 1;
}

bool ParseNumber(const std::string& text, uint64_t* out) {
  if (text.size() > 2 && (text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0)) {
    return absl::SimpleHexAtoi(text.substr(2), out);
  }
  return absl::SimpleAtoi(text, out);
}

std::string AccessString(uint32_t a) {
  std::string s;
  const char* names[] = {"lr", "lw", "rr", "rw", "a"};
  for (int i = 0; i < 5; ++i) {
    if (a & (1u << i)) s += s.empty() ? names[i] : std::string("|") + names[i];
  }
  return s.empty() ? "-" : s;
}

void PrintKeys(uint64_t session, const std::vector<regcache::api::KeyInfo>& keys) {
  for (const regcache::api::KeyInfo& k : keys) {
    std::printf("session=%" PRIu64 " handle=0x%" PRIx64 " key=0x%08x va=0x%" PRIx64
                " length=%" PRIu64 " access=%s holders=%u state=%s%s%s\n",
                session, k.handle, k.key, k.va, k.length, AccessString(k.access).c_str(), k.holders,
                k.key_state.c_str(), k.revoked ? " revoked" : "", k.is_window ? " window" : "");
  }
}

// One function per command; each prints its result and returns the exit code.
using Command = int (*)(regcache::api::Client& c, const std::vector<std::string>& args);

int Usage(const std::string& what) {
  std::fprintf(stderr, "regcachectl: %s\n%s\n", what.c_str(), absl::ProgramUsageMessage().data());
  return 2;
}

int Status(regcache::api::Client& c, const std::vector<std::string>& args) {
  absl::StatusOr<regcache::api::DaemonInfo> s = c.Status();
  if (!s.ok()) return Fail(s.status());
  std::printf("device=%s backend=%s sessions=%" PRIu64 " draining=%d uptime_ms=%" PRId64
              " peer=%d endpoints=%d\n",
              s->device.c_str(), s->backend.c_str(), s->sessions, s->draining ? 1 : 0, s->uptime_ms,
              s->peer ? 1 : 0, s->endpoints ? 1 : 0);
  std::printf("device_selection=%s\n", s->device_selection.c_str());
  for (const regcache::api::DaemonInfo::Device& d : s->devices) {
    std::string gid;
    for (size_t i = 0; i < d.info.gid.size(); i += 2) {
      absl::StrAppendFormat(&gid, "%s%02x%02x", i == 0 ? "" : ":", d.info.gid[i],
                            d.info.gid[i + 1]);
    }
    std::printf("device[%u]=%s backend=%s node_guid=0x%016" PRIx64
                " port=%u gid=%s sessions=%" PRIu64 "%s\n",
                d.info.index, d.info.name.c_str(), d.backend.c_str(), d.info.node_guid, d.info.port,
                gid.c_str(), d.sessions,
                d.info.index == c.device().index ? " (this regcachectl)" : "");
    std::printf("device[%u]_selection=%s\n", d.info.index, d.selection.c_str());
  }
  return 0;
}

int Sessions(regcache::api::Client& c, const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<regcache::api::SessionRecord>> s = c.Sessions();
  if (!s.ok()) return Fail(s.status());
  for (const regcache::api::SessionRecord& r : *s) {
    std::printf("session=%" PRIu64 " pid=%d uid=%u gid=%u admin=%d live=%" PRIu64
                " revoked_held=%" PRIu64 " cached=%" PRIu64 " memories=%" PRIu64
                " backed_bytes=%" PRIu64 " device=%s%s\n",
                r.id, r.pid, r.uid, r.gid, r.admin ? 1 : 0, r.usage.live_registrations,
                r.usage.revoked_held, r.usage.cached_unreferenced, r.memories, r.usage.backed_bytes,
                r.device.c_str(), r.id == c.session_id() ? " (this regcachectl)" : "");
  }
  return 0;
}

int Keys(regcache::api::Client& c, const std::vector<std::string>& args) {
  if (absl::GetFlag(FLAGS_all)) {
    absl::StatusOr<std::vector<regcache::api::SessionRecord>> s = c.Sessions();
    if (!s.ok()) return Fail(s.status());
    for (const regcache::api::SessionRecord& r : *s) {
      absl::StatusOr<std::vector<regcache::api::KeyInfo>> keys = c.ListKeys(r.id);
      if (!keys.ok()) {
        if (keys.status().code() == absl::StatusCode::kNotFound) continue;  // it just closed
        return Fail(keys.status());
      }
      PrintKeys(r.id, *keys);
    }
    return 0;
  }
  uint64_t session = absl::GetFlag(FLAGS_session);
  absl::StatusOr<std::vector<regcache::api::KeyInfo>> keys = c.ListKeys(session);
  if (!keys.ok()) return Fail(keys.status());
  PrintKeys(session == 0 ? c.session_id() : session, *keys);
  return 0;
}

std::string Gid(const std::array<uint8_t, 16>& gid) {
  std::string s;
  for (size_t i = 0; i < gid.size(); i += 2) {
    char part[8];
    std::snprintf(part, sizeof(part), "%s%02x%02x", i == 0 ? "" : ":", gid[i], gid[i + 1]);
    s += part;
  }
  return s;
}

int Endpoints(regcache::api::Client& c, const std::vector<std::string>& args) {
  const uint64_t session = absl::GetFlag(FLAGS_session);
  absl::StatusOr<std::vector<regcache::api::EndpointInfo>> eps = c.ListEndpoints(session);
  if (!eps.ok()) return Fail(eps.status());
  for (const regcache::api::EndpointInfo& e : *eps) {
    std::printf("session=%" PRIu64 " endpoint=%" PRIu64
                " qpn=0x%06x psn=0x%06x gid=%s mtu=%u"
                " peer_qpn=0x%06x peer_psn=0x%06x peer_gid=%s peer_lid=%u access=%s\n",
                session == 0 ? c.session_id() : session, e.id, e.local.qpn, e.local.psn,
                Gid(e.local.gid).c_str(), e.local.mtu, e.peer.qpn, e.peer.psn,
                Gid(e.peer.gid).c_str(), e.peer.lid, AccessString(e.access).c_str());
  }
  return 0;
}

int Stats(regcache::api::Client& c, const std::vector<std::string>& args) {
  absl::StatusOr<regcache::api::StatsSnapshot> s = c.Stats();
  if (!s.ok()) return Fail(s.status());
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

int Drain(regcache::api::Client& c, const std::vector<std::string>& args) {
  absl::Status s = c.Drain();
  if (!s.ok()) return Fail(s);
  std::printf("drained\n");
  return 0;
}

int Peer(regcache::api::Client& c, const std::vector<std::string>& args) {
  if (args.size() != 2 || (args[1] != "write" && args[1] != "read")) {
    return Usage("peer needs write or read");
  }
  uint64_t rkey = 0, addr = 0;
  if (!ParseNumber(absl::GetFlag(FLAGS_rkey), &rkey) || rkey > UINT32_MAX ||
      !ParseNumber(absl::GetFlag(FLAGS_addr), &addr)) {
    std::fprintf(stderr, "regcachectl: peer needs --rkey and --addr\n");
    return 2;
  }
  const uint64_t session = absl::GetFlag(FLAGS_session);
  const uint64_t endpoint = absl::GetFlag(FLAGS_endpoint);
  if (args[1] == "write") {
    absl::Status s = c.PeerWrite(static_cast<uint32_t>(rkey), addr, absl::GetFlag(FLAGS_data),
                                 session, endpoint);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %zu bytes\n", absl::GetFlag(FLAGS_data).size());
    return 0;
  }
  absl::StatusOr<std::string> data =
      c.PeerRead(static_cast<uint32_t>(rkey), addr, absl::GetFlag(FLAGS_length), session, endpoint);
  if (!data.ok()) return Fail(data.status());
  std::printf("%s\n", absl::CHexEscape(*data).c_str());
  return 0;
}

regcache::api::ClientOptions Options() {
  regcache::api::ClientOptions o;
  o.device = absl::GetFlag(FLAGS_device);
  return o;
}

int Run(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  static const std::map<std::string, Command> kCommands = {
      {"status", Status}, {"sessions", Sessions}, {"keys", Keys},           {"stats", Stats},
      {"drain", Drain},   {"peer", Peer},         {"endpoints", Endpoints},
  };
  auto it = kCommands.find(args[0]);
  if (it == kCommands.end()) return Usage("unknown command '" + args[0] + "'");
  absl::StatusOr<std::unique_ptr<regcache::api::Client>> client =
      regcache::api::Client::Connect(absl::GetFlag(FLAGS_socket_dir), Options());
  if (!client.ok()) return Fail(client.status());
  return it->second(**client, args);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "regcachectl [--socket_dir=DIR] [--device=NAME] status | sessions | keys [--session=N|--all] "
      "| "
      "endpoints [--session=N] | stats | drain | "
      "peer write --rkey=K --addr=A --data=T [--session=N] [--endpoint=E] | "
      "peer read --rkey=K --addr=A --length=N [--session=N] [--endpoint=E]");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  return Run(args);
}
