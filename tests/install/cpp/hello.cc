// The C++ client built OUTSIDE the project through the installed CMake package
// (find_package(regcache) + regcache::client_cpp): connect to the regcached in argv[1],
// allocate, register, print the rkey, release. Exit 0 only when every call succeeded.
#include <cstdio>
#include <memory>

#include "regcache/client.h"

namespace rc = regcache::api;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <socket_dir>\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::unique_ptr<rc::Client>> client = rc::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "Connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<rc::Memory> memory = (*client)->AllocateMemory(1 << 20);
  if (!memory.ok()) {
    std::fprintf(stderr, "AllocateMemory: %s\n", memory.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<rc::KeyRef> key =
      (*client)->Acquire(memory->data, 4096, rc::kLocalWrite | rc::kRemoteRead);
  if (!key.ok()) {
    std::fprintf(stderr, "Acquire: %s\n", key.status().ToString().c_str());
    return 1;
  }
  std::printf("c++: session=%llu rkey=0x%x\n",
              static_cast<unsigned long long>((*client)->session_id()), (*key)->rkey);
  key->reset();  // releases the key
  absl::Status detached = (*client)->DetachMemory(*memory);
  if (!detached.ok()) {
    std::fprintf(stderr, "DetachMemory: %s\n", detached.ToString().c_str());
    return 1;
  }
  (*client)->Close();
  return 0;
}
