// regcache_rdma_peer — a remote node in a process of its own, for tests on a real verbs device
// (the VM tier): its own verbs context, PD, queue pair and buffer, driven by one command per
// line on stdin, answering one line per command on stdout. It does what a remote storage or
// AI-framework node does with a regcache rkey: connect an RC queue pair to a target endpoint and
// RDMA-WRITE, READ and FETCH_ADD through the rkey.
//
//   (at start)                       -> qp <qpn> <psn> <gid: 32 hex digits> <lid> <mtu>
//   connect <qpn> <psn> <gid> <lid> <mtu>   (the endpoint's address)    -> ok
//   write <rkey> <addr> <hex bytes>                                     -> ok
//   read <rkey> <addr> <length>                                         -> ok <hex bytes>
//   fadd <rkey> <addr> <add>                                            -> ok <value before>
//   new      (a fresh queue pair, after an error left the old one in the error state)  -> qp ...
//   quit
// rkey and addr are hexadecimal (0x optional), the rest decimal. Errors answer
// "err <CANONICAL_CODE> <SYNDROME> <message>", e.g. "err PERMISSION_DENIED REMOTE_ACCESS ...".
// Usage: regcache_rdma_peer [device name or "any" [seconds a request waits for its completion]]
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "hca/status.h"
#include "hca/verbs/context.h"
#include "hca/verbs/endpoint.h"

namespace regcache::hca::verbs {
namespace {

std::string Address(const EndpointAddress& a) {
  return absl::StrFormat(
      "qp %d %d %s %d %d", a.qpn, a.psn,
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(a.gid.data()), 16)),
      a.lid, a.mtu);
}

std::string Error(const absl::Status& s) {
  const auto info = ErrorOf(s);
  const std::string synd =
      info.has_value() ? std::string(SyndromeName(info->syndrome)) : std::string("NONE");
  return absl::StrCat("err ", absl::StatusCodeToString(s.code()), " ", synd, " ", s.message());
}

bool Hex(const std::string& s, uint64_t* out) { return absl::SimpleHexAtoi(s, out); }

absl::Duration g_timeout = absl::Seconds(30);

std::string Serve(Context* c, std::unique_ptr<Requester>& r, const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  if (cmd == "new") {
    auto n = Requester::Create(c);
    if (!n.ok()) return Error(n.status());
    r = std::move(*n);
    r->set_timeout(g_timeout);
    return Address(r->local());
  }
  if (cmd == "connect") {
    EndpointAddress a;
    std::string gid;
    uint32_t lid = 0;
    if (!(in >> a.qpn >> a.psn >> gid >> lid >> a.mtu) || gid.size() != 32) {
      return "err INVALID_ARGUMENT NONE connect <qpn> <psn> <gid hex> <lid> <mtu>";
    }
    const std::string raw = absl::HexStringToBytes(gid);
    std::copy(raw.begin(), raw.end(), a.gid.begin());
    a.lid = static_cast<uint16_t>(lid);
    absl::Status s = r->Connect(a);
    return s.ok() ? "ok" : Error(s);
  }
  std::string rkey_s, addr_s, arg;
  uint64_t rkey = 0, addr = 0;
  if (!(in >> rkey_s >> addr_s >> arg) || !Hex(rkey_s, &rkey) || !Hex(addr_s, &addr)) {
    return "err INVALID_ARGUMENT NONE usage: <command> <rkey hex> <addr hex> <argument>";
  }
  if (cmd == "write") {
    const std::string bytes = absl::HexStringToBytes(arg);
    absl::Status s =
        r->Write(static_cast<Key>(rkey), addr,
                 absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    return s.ok() ? "ok" : Error(s);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(arg, &n)) return "err INVALID_ARGUMENT NONE bad number";
  if (cmd == "read") {
    std::vector<uint8_t> out(n);
    absl::Status s = r->Read(static_cast<Key>(rkey), addr, absl::MakeSpan(out));
    if (!s.ok()) return Error(s);
    return absl::StrCat(
        "ok ", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(out.data()), n)));
  }
  if (cmd == "fadd") {
    auto v = r->Atomic(static_cast<Key>(rkey), addr, /*compare_swap=*/false, n, 0);
    return v.ok() ? absl::StrCat("ok ", *v) : Error(v.status());
  }
  return absl::StrCat("err INVALID_ARGUMENT NONE unknown command '", cmd, "'");
}

int Main(int argc, char** argv) {
  VerbsOptions o;
  if (argc > 1 && std::string(argv[1]) != "any") o.device_name = argv[1];
  int seconds = 0;
  if (argc > 2 && absl::SimpleAtoi(argv[2], &seconds) && seconds > 0) {
    g_timeout = absl::Seconds(seconds);
  }
  // A remote node only reads, writes and does atomics: it needs no memory windows.
  ContextOpener opener;
  opener.backend = "regcache_rdma_peer";
  opener.require_memory_windows = false;
  auto c = OpenContext(o, opener);
  if (!c.ok()) {
    std::cout << Error(c.status()) << std::endl;
    return 1;
  }
  auto r = Requester::Create(c->get());
  if (!r.ok()) {
    std::cout << Error(r.status()) << std::endl;
    return 1;
  }
  std::unique_ptr<Requester> requester = std::move(*r);
  requester->set_timeout(g_timeout);
  std::cout << Address(requester->local()) << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "quit") break;
    if (line.empty()) continue;
    std::cout << Serve(c->get(), requester, line) << std::endl;
  }
  requester.reset();  // before the context it was made in
  return 0;
}

}  // namespace
}  // namespace regcache::hca::verbs

int main(int argc, char** argv) { return regcache::hca::verbs::Main(argc, argv); }
