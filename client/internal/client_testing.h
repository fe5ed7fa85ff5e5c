// Test-only access to a client: what an end-to-end test needs to misbehave the way a broken or
// hostile client would (garbage tokens, raw request bytes, garbage on the control socket).
// Internal to client/ and the project's tests; never part of the public client
// (include/regcache/client.h).
#ifndef REGCACHE_CLIENT_INTERNAL_CLIENT_TESTING_H_
#define REGCACHE_CLIENT_INTERNAL_CLIENT_TESTING_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "regcache/client.h"

namespace regcache::api::testing {

// REQUIRES for each `client` below: a client from Client::Connect (this library's only
// implementation).

// Sends `bytes` as the serialized request of `method` ("/regcache.v1.RegCacheService/Register") and
// returns the call's status.
absl::Status RawCall(Client& client, const std::string& method, const std::string& bytes);

// The session token the client sends from now on; `send` false sends none.
void SetToken(Client& client, bool send, const std::string& token);

// The session token the client sends (for raw gRPC calls on its session).
std::string Token(Client& client);

// The client's control socket (still owned by the client).
int ControlFd(const Client& client);

// A kNop round trip over the client's ring: the fast path's own cost (benchmarks, liveness).
// kFailedPrecondition when the client has no fast path.
absl::Status RingNop(Client& client);

// Whether the client's key calls go over the ring.
bool UsesFastPath(const Client& client);

}  // namespace regcache::api::testing

#endif  // REGCACHE_CLIENT_INTERNAL_CLIENT_TESTING_H_
