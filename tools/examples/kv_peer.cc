// The peer's side of docs/integrating.md: a remote node that receives a descriptor of the
// owner's key, connects to the owner's endpoint, RDMA-writes into the owner's KV cache, and finds
// its next write refused once the owner revoked the key. See kv_owner.cc for the conversation.
//
// On the sim the remote node is simulated by the daemon: this process opens a session only so
// its writes have a NIC to leave from (rc::SimPeerWrite; docs/integrating.md says what a real
// peer does instead). Usage: kv_peer [socket_dir]. Exit 0 when every step went as described.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "regcache/client.h"
#include "regcache/descriptor.h"
#include "regcache/sim_peer.h"

namespace rc = regcache::api;

namespace {

int Fail(const std::string& what, const absl::Status& s = absl::OkStatus()) {
  std::cerr << "kv_peer: " << what << (s.ok() ? "" : ": " + s.ToString()) << "\n";
  return 1;
}

bool Expect(const std::string& word, std::istringstream* rest) {
  std::string line;
  if (!std::getline(std::cin, line)) return false;
  rest->clear();  // the last line's end-of-input state
  rest->str(line);
  std::string first;
  return (*rest >> first) && first == word;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<std::unique_ptr<rc::Client>> nic = rc::Client::Connect(argc > 1 ? argv[1] : "");
  if (!nic.ok()) return Fail("connecting to regcached", nic.status());

  // 1. Our RC queue pair's address (on real hardware: ibv_create_qp, ibv_query_gid).
  rc::RemoteQp self;
  self.qpn = 0x10000 + static_cast<uint32_t>(getpid() % 0x10000);
  self.psn = 0x1234;
  self.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2a};
  self.mtu = 4096;
  std::cout << "qp " << self.qpn << " " << self.psn << " "
            << absl::BytesToHexString(std::string(self.gid.begin(), self.gid.end())) << " "
            << self.mtu << std::endl;

  // 2. The owner's descriptor: unpacked, checked, and our queue pair connected to its endpoint
  //    (on real hardware: ibv_modify_qp to RTR with dest_qp_num = d.endpoint->qpn, rq_psn =
  //    d.endpoint->psn, the GID, path_mtu; then RTS).
  std::istringstream in;
  std::string text;
  if (!Expect("descriptor", &in) || !(in >> text)) return Fail("expected a descriptor");
  absl::StatusOr<rc::PeerDescriptor> d = rc::DescriptorFromText(text);
  if (!d.ok()) return Fail("unpacking the descriptor", d.status());
  if ((d->access & rc::kRemoteWrite) == 0) return Fail("the key does not allow remote writes");
  if (!d->endpoint.has_value()) return Fail("the descriptor names no endpoint to connect to");

  // 3. RDMA WRITE into the owner's cache, 4 KiB in: the owner posts nothing for it.
  const std::string block = "block 7 of layer 3: keys and values";
  const uint64_t offset = 4096;
  if (absl::Status s = rc::SimPeerWrite(**nic, *d, self, d->addr + offset, block); !s.ok()) {
    return Fail("writing into the owner's cache", s);
  }
  std::cout << "written " << offset << " " << block.size() << std::endl;

  // 4. After the owner revoked the key, the same write must fail.
  if (!Expect("revoked", &in)) return Fail("expected \"revoked\"");
  absl::Status again = rc::SimPeerWrite(**nic, *d, self, d->addr + offset, "stale write");
  if (again.ok()) return Fail("a write with the revoked key succeeded");
  std::cerr << "kv_peer: the write after the revocation failed, as it must: " << again << "\n";
  std::cout << "refused " << absl::StatusCodeToString(again.code()) << std::endl;
  return 0;
}
