// A program that carries its own generated code of google/rpc/status.proto (as every program
// using the googleapis protos does) and the installed libregcache.so (tests/install): it loads
// — the library carries no generated google.rpc code, so the .proto is registered once — and
// reads the reason of a daemon error through the client. Exit 0 only when both hold.
#include <cstdio>
#include <memory>
#include <string>

#include "google/rpc/status.pb.h"
#include "regcache/client.h"

namespace rc = regcache::api;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <socket_dir>\n", argv[0]);
    return 2;
  }
  google::rpc::Status own;
  own.set_code(5);
  absl::StatusOr<std::unique_ptr<rc::Client>> client = rc::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "Connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  // The daemon runs with no admin: listing sessions is refused, with a reason.
  absl::StatusOr<std::vector<rc::SessionRecord>> sessions = (*client)->Sessions();
  if (sessions.ok()) {
    std::fprintf(stderr, "Sessions succeeded for a non-admin\n");
    return 1;
  }
  std::printf("coexist: own google.rpc.Status code=%d; Sessions refused with %s\n", own.code(),
              rc::ErrorReason(sessions.status()).c_str());
  (*client)->Close();
  return 0;
}
