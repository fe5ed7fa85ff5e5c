// regcache_e2e_client — a client process for the end-to-end tests, driven line by line.
//
//   regcache_e2e_client --socket_dir=DIR [--uid=N] [--tcp_port=P]
//
// On start it connects (after dropping to --uid, when given) and prints "ok session=ID admin=A"
// or "err CODE message" (then exits 1). Then it reads one command per line from stdin and
// answers exactly one line: "ok ..." or "err CODE message" (CODE as absl prints it, e.g.
// INVALID_ARGUMENT). Numbers are decimal or 0x-hex. Commands:
//   alloc LEN                       daemon memfd, mapped here  -> ok mem=ID ptr=0x...
//   allocfd LEN                     own memfd passed over the control socket -> same
//   reg ADDR LEN ACCESS             -> ok handle=H rkey=R va=V len=L hit=0|1
//   window PARENT OFF LEN ACCESS    -> same
//   release H | inval H | query H   -> ok [state=S revoked=0|1]
//   check ADDR TEXT                 the bytes at ADDR in THIS process's mapping equal TEXT
//   pwrite RKEY ADDR TEXT [SESSION] the sim peer writes TEXT; SESSION: another session's peer
//   pwrite_big RKEY ADDR N          a PeerWrite request of N bytes
//   stat COMPONENT NAME             -> ok value=V
//   sessions                        -> ok ids=1,2,...
//   token own|none|garbage          the session token sent from now on
//   raw METHOD HEX                  raw bytes as the request of METHOD (generic stub)
//   ctlgarbage                      a malformed datagram on the control socket -> ok reply=CODE
//   traffic ADDR                    starts a register/release loop on [ADDR, +1 MiB) -> ok
//   rereg H ADDR LEN ACCESS         -> ok handle=... hit=0|1 same=0|1
//   regbatch ADDR LEN ACCESS [...]  one RegisterBatch -> ok items=CODE[:HANDLE:RKEY],...
//   regbatch_n N ADDR               a RegisterBatch of N items [ADDR, +64) -> ok n=N
//   relbatch H [H ...]              one ReleaseBatch -> ok items=CODE,...
//   ping | quit
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/internal/client_testing.h"
#include "protocol/control_protocol.h"
#include "regcache/client.h"
#include "regcache/sim_peer.h"

ABSL_FLAG(std::string, socket_dir, "", "regcached's socket directory");
ABSL_FLAG(int32_t, uid, -1, "drop to this uid (and gid) before connecting");
ABSL_FLAG(uint16_t, tcp_port, 0, "dial gRPC on 127.0.0.1:<port> instead of the unix socket");

namespace {

std::string Err(const absl::Status& s) {
  std::string msg(s.message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return absl::StrCat("err ", absl::StatusCodeToString(s.code()), " ", msg);
}

bool Num(const std::string& t, uint64_t* out) {
  if (t.rfind("0x", 0) == 0) return absl::SimpleHexAtoi(t.substr(2), out);
  return absl::SimpleAtoi(t, out);
}

std::string KeyLine(const regcache::api::Key& k) {
  return absl::StrCat("ok handle=0x", absl::Hex(k.handle), " rkey=0x", absl::Hex(k.rkey), " va=0x",
                      absl::Hex(k.va), " len=", k.length, " hit=", k.hit ? 1 : 0);
}

std::string Command(regcache::api::Client& c, const std::vector<std::string>& a,
                    std::atomic<bool>* stop, std::vector<std::thread>* threads) {
  auto n = [&](size_t i) {
    uint64_t v = 0;
    if (i < a.size()) Num(a[i], &v);
    return v;
  };
  const std::string& cmd = a[0];
  if (cmd == "ping") {
    absl::Status s = c.Ping();
    return s.ok() ? "ok" : Err(s);
  }
  if (cmd == "alloc") {
    auto m = c.AllocateMemory(n(1));
    if (!m.ok()) return Err(m.status());
    return absl::StrCat("ok mem=", m->id, " ptr=0x",
                        absl::Hex(reinterpret_cast<uint64_t>(m->data)));
  }
  if (cmd == "allocfd") {
    int fd = memfd_create("e2e", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(n(1))) != 0) return "err INTERNAL memfd";
    auto m = c.AttachFd(fd, 0, n(1));
    close(fd);
    if (!m.ok()) return Err(m.status());
    return absl::StrCat("ok mem=", m->id, " ptr=0x",
                        absl::Hex(reinterpret_cast<uint64_t>(m->data)));
  }
  if (cmd == "allocodp") {  // on-demand memory: translations absent until faulted/prefetched
    auto m = c.AllocateMemory(n(1), /*hugetlb=*/false, /*on_demand=*/true);
    if (!m.ok()) return Err(m.status());
    return absl::StrCat("ok mem=", m->id, " ptr=0x",
                        absl::Hex(reinterpret_cast<uint64_t>(m->data)));
  }
  if (cmd == "regp") {  // reg with prefetch mode: 0 none, 1 sync, 2 async
    auto k = c.Register(reinterpret_cast<const void*>(n(1)), n(2), static_cast<uint32_t>(n(3)),
                        static_cast<regcache::api::PrefetchMode>(n(4)));
    return k.ok() ? KeyLine(*k) : Err(k.status());
  }
  if (cmd == "prefetch") {  // prefetch <va> <len> <write 0|1> <sync 0|1>
    absl::Status s = c.Prefetch(
        reinterpret_cast<const void*>(n(1)), n(2), n(3) != 0,
        n(4) != 0 ? regcache::api::PrefetchMode::kSync : regcache::api::PrefetchMode::kAsync);
    return s.ok() ? "ok" : Err(s);
  }
  if (cmd == "reg") {
    auto k = c.Register(reinterpret_cast<const void*>(n(1)), n(2), static_cast<uint32_t>(n(3)));
    return k.ok() ? KeyLine(*k) : Err(k.status());
  }
  if (cmd == "window") {
    auto k = c.Window(n(1), n(2), n(3), static_cast<uint32_t>(n(4)));
    return k.ok() ? KeyLine(*k) : Err(k.status());
  }
  if (cmd == "release" || cmd == "inval") {
    absl::Status s = cmd == "release" ? c.Release(n(1)) : c.Invalidate(n(1));
    return s.ok() ? "ok" : Err(s);
  }
  if (cmd == "query") {
    auto q = c.Query(n(1));
    if (!q.ok()) return Err(q.status());
    return absl::StrCat("ok state=", q->key_state, " revoked=", q->revoked ? 1 : 0);
  }
  if (cmd == "check" && a.size() == 3) {
    const char* p = reinterpret_cast<const char*>(n(1));
    if (std::memcmp(p, a[2].data(), a[2].size()) == 0) return "ok";
    return absl::StrCat("err MISMATCH got=", absl::CHexEscape(absl::string_view(p, a[2].size())));
  }
  if (cmd == "pwrite" && a.size() >= 4) {
    absl::Status s = SimPeerWrite(c, static_cast<uint32_t>(n(1)), n(2), a[3], n(4));
    return s.ok() ? "ok" : Err(s);
  }
  if (cmd == "pwrite_big") {
    absl::Status s = SimPeerWrite(c, static_cast<uint32_t>(n(1)), n(2), std::string(n(3), 'x'));
    return s.ok() ? "ok" : Err(s);
  }
  if (cmd == "stat" && a.size() == 3) {
    auto st = c.Stats();
    if (!st.ok()) return Err(st.status());
    auto v = st->Get(a[1], a[2]);
    return v.ok() ? absl::StrCat("ok value=", *v) : Err(v.status());
  }
  if (cmd == "sessions") {
    auto s = c.Sessions();
    if (!s.ok()) return Err(s.status());
    std::vector<uint64_t> ids;
    for (const auto& r : *s) ids.push_back(r.id);
    return absl::StrCat("ok ids=", absl::StrJoin(ids, ","));
  }
  if (cmd == "token" && a.size() == 2) {
    if (a[1] == "none") regcache::api::testing::SetToken(c, false, "");
    if (a[1] == "garbage") regcache::api::testing::SetToken(c, true, "not-a-token!");
    if (a[1] == "wrong") regcache::api::testing::SetToken(c, true, std::string(32, 'a'));
    return "ok";
  }
  if (cmd == "raw" && a.size() == 3) {
    std::string bytes = absl::HexStringToBytes(a[2]);
    absl::Status s = regcache::api::testing::RawCall(c, a[1], bytes);
    return s.ok() ? "ok" : Err(s);
  }
  if (cmd == "ctlgarbage") {
    const char junk[] = "this is not a control message";
    if (write(regcache::api::testing::ControlFd(c), junk, sizeof(junk)) != sizeof(junk)) {
      return "err INTERNAL write";
    }
    auto reply = regcache::protocol::ReceiveControlMessage(regcache::api::testing::ControlFd(c),
                                                           absl::Seconds(5));
    if (!reply.ok()) return Err(reply.status());
    if (reply->type != regcache::protocol::ControlType::kError)
      return "err INTERNAL not an error reply";
    absl::Status s =
        regcache::protocol::StatusFromErrorMessage(reply->As<regcache::protocol::ErrorMsg>());
    return absl::StrCat("ok reply=", absl::StatusCodeToString(s.code()));
  }
  if (cmd == "traffic") {
    uint64_t base = n(1);
    threads->emplace_back([&c, base, stop] {
      const uint32_t rw = regcache::api::kLocalRead | regcache::api::kLocalWrite |
                          regcache::api::kRemoteRead | regcache::api::kRemoteWrite;
      for (uint64_t i = 0; !stop->load(); ++i) {
        auto k = c.Register(reinterpret_cast<const void*>(base + (i % 256) * 4096), 4096, rw);
        if (k.ok()) (void)c.Release(k->handle);
      }
    });
    return "ok";
  }
  if (cmd == "rereg" && a.size() == 5) {
    auto k =
        c.Reregister(n(1), reinterpret_cast<const void*>(n(2)), n(3), static_cast<uint32_t>(n(4)));
    return k.ok() ? absl::StrCat(KeyLine(*k), " same=", k->same_key ? 1 : 0) : Err(k.status());
  }
  if ((cmd == "regbatch" && a.size() % 3 == 1) || (cmd == "regbatch_n" && a.size() == 3)) {
    std::vector<regcache::api::RegisterItem> items;
    const uint32_t rw = regcache::api::kLocalWrite | regcache::api::kRemoteWrite;
    const size_t count = cmd == "regbatch" ? (a.size() - 1) / 3 : n(1);
    for (size_t i = 0; i < count; ++i) {
      if (cmd == "regbatch") {
        items.push_back({reinterpret_cast<const void*>(n(1 + 3 * i)), n(2 + 3 * i),
                         static_cast<uint32_t>(n(3 + 3 * i))});
      } else {
        items.push_back({reinterpret_cast<const void*>(n(2)), 64, rw});
      }
    }
    auto r = c.RegisterBatch(items);
    if (!r.ok()) return Err(r.status());
    if (cmd == "regbatch_n") return absl::StrCat("ok n=", r->size());
    std::vector<std::string> out;
    for (const auto& k : *r) {
      out.push_back(k.ok() ? absl::StrCat("OK:0x", absl::Hex(k->handle), ":0x", absl::Hex(k->rkey))
                           : absl::StatusCodeToString(k.status().code()));
    }
    return absl::StrCat("ok items=", absl::StrJoin(out, ","));
  }
  if (cmd == "relbatch") {
    std::vector<uint64_t> handles;
    for (size_t i = 1; i < a.size(); ++i) handles.push_back(n(i));
    auto r = c.ReleaseBatch(handles);
    if (!r.ok()) return Err(r.status());
    std::vector<std::string> out;
    for (const absl::Status& s : *r) out.push_back(absl::StatusCodeToString(s.code()));
    return absl::StrCat("ok items=", absl::StrJoin(out, ","));
  }
  return "err INVALID_ARGUMENT unknown command";
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (int uid = absl::GetFlag(FLAGS_uid); uid >= 0) {
    if (setgid(static_cast<gid_t>(uid)) != 0 || setuid(static_cast<uid_t>(uid)) != 0) {
      std::printf("err INTERNAL setuid\n");
      return 1;
    }
  }
  regcache::api::ClientOptions options;
  options.tcp_port = absl::GetFlag(FLAGS_tcp_port);
  auto client = regcache::api::Client::Connect(absl::GetFlag(FLAGS_socket_dir), options);
  if (!client.ok()) {
    std::printf("%s\n", Err(client.status()).c_str());
    std::fflush(stdout);
    return 1;
  }
  std::printf("ok session=%" PRIu64 " admin=%d\n", (*client)->session_id(),
              (*client)->admin() ? 1 : 0);
  std::fflush(stdout);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.empty()) continue;
    if (words[0] == "quit") break;
    std::printf("%s\n", Command(**client, words, &stop, &threads).c_str());
    std::fflush(stdout);
  }
  stop = true;
  for (auto& t : threads) t.join();
  return 0;
}
