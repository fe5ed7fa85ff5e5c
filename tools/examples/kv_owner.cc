// The owner's side of docs/integrating.md: a process that keeps a "KV cache" in regcache memory,
// hands a remote peer a descriptor of one key, checks that the peer's RDMA write landed, then
// revokes the key. It talks to its peer over stdin/stdout, one line per message (any channel
// the application already has would do):
//
//   peer  -> owner   qp <qpn> <psn> <gid: 32 hex digits> <mtu>     the peer's queue pair
//   owner -> peer    descriptor <rcd1:...>                        the key, and where to connect
//   peer  -> owner   written <offset> <bytes>                     the peer's write is done
//   owner -> peer    revoked                                      the key is invalid now
//   peer  -> owner   refused <CODE>                               the peer's next write failed
//
// Usage: kv_owner [socket_dir]  (default: $REGCACHE_SOCKET_DIR, else /run/regcache). Exit 0 when
// every step went as described; a message on stderr and exit 1 otherwise.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "regcache/client.h"
#include "regcache/descriptor.h"

namespace rc = regcache::api;

namespace {

int Fail(const std::string& what, const absl::Status& s = absl::OkStatus()) {
  std::cerr << "kv_owner: " << what << (s.ok() ? "" : ": " + s.ToString()) << "\n";
  return 1;
}

// The next line from the peer, which must start with `word`.
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
  absl::StatusOr<std::unique_ptr<rc::Client>> client = rc::Client::Connect(argc > 1 ? argv[1] : "");
  if (!client.ok()) return Fail("connecting to regcached", client.status());
  rc::Client& c = **client;

  // 1. The KV cache: 1 MiB of daemon memory mapped here, and a key over all of it that a peer
  //    may write (and read).
  constexpr uint64_t kCacheBytes = 1 << 20;
  absl::StatusOr<rc::Memory> cache = c.AllocateMemory(kCacheBytes);
  if (!cache.ok()) return Fail("allocating the KV cache", cache.status());
  std::memset(cache->data, 0, kCacheBytes);
  absl::StatusOr<rc::Key> key =
      c.Register(cache->data, kCacheBytes,
                 rc::kLocalRead | rc::kLocalWrite | rc::kRemoteRead | rc::kRemoteWrite);
  if (!key.ok()) return Fail("registering the KV cache", key.status());

  // 2. The peer's queue pair, and a target endpoint of ours connected to it.
  std::istringstream in;
  rc::RemoteQp peer;
  std::string gid_hex;
  if (!Expect("qp", &in) || !(in >> peer.qpn >> peer.psn >> gid_hex >> peer.mtu) ||
      gid_hex.size() != 32) {
    return Fail("expected \"qp <qpn> <psn> <gid> <mtu>\" from the peer");
  }
  const std::string gid = absl::HexStringToBytes(gid_hex);
  std::memcpy(peer.gid.data(), gid.data(), peer.gid.size());
  absl::StatusOr<rc::EndpointInfo> ep = c.CreateEndpoint(peer, rc::kRemoteWrite | rc::kRemoteRead);
  if (!ep.ok()) return Fail("creating the endpoint", ep.status());

  // 3. The descriptor: the key, the NIC, and our queue pair for the peer to connect to.
  absl::StatusOr<rc::PeerDescriptor> d = rc::DescribeKey(c.device(), *key, &*ep);
  if (!d.ok()) return Fail("describing the key", d.status());
  absl::StatusOr<std::string> text = rc::DescriptorToText(*d);
  if (!text.ok()) return Fail("packing the descriptor", text.status());
  std::cout << "descriptor " << *text << std::endl;

  // 4. The peer wrote into the cache: the bytes are here, with no call of ours in between.
  uint64_t offset = 0, bytes = 0;
  if (!Expect("written", &in) || !(in >> offset >> bytes) || offset + bytes > kCacheBytes) {
    return Fail("expected \"written <offset> <bytes>\" from the peer");
  }
  const std::string landed(static_cast<const char*>(cache->data) + offset, bytes);
  std::cerr << "kv_owner: the peer's write landed: \"" << landed << "\"\n";
  if (landed.find("block") != 0) return Fail("the peer's bytes are not in the cache");

  // 5. Revoke: from here on no peer can use the key, whatever descriptors exist.
  if (absl::Status s = c.Invalidate(key->handle); !s.ok()) return Fail("invalidating", s);
  if (absl::Status s = c.Release(key->handle); !s.ok()) return Fail("releasing", s);
  std::cout << "revoked" << std::endl;

  // 6. The peer's next write must have failed.
  std::string code;
  if (!Expect("refused", &in) || !(in >> code)) {
    return Fail("the peer's write after the revocation was not refused");
  }
  if (code == "NOT_FOUND") return Fail("the peer lost the endpoint, not the key");
  std::cerr << "kv_owner: the peer's write after the revocation was refused (" << code << ")\n";
  return 0;
}
