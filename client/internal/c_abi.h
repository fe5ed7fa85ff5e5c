// What the C ABI's translation units share (client/c_api.cc, client/c_descriptor.cc): the
// client object behind regcache_client_t, the calling thread's last error, and the guard that
// keeps C++ exceptions from crossing into C.
#ifndef REGCACHE_CLIENT_INTERNAL_C_ABI_H_
#define REGCACHE_CLIENT_INTERNAL_C_ABI_H_

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "regcache/client.h"
#include "regcache/regcache.h"

struct regcache_client {
  std::unique_ptr<regcache::api::Client> impl;
};

namespace regcache::api::c_abi {

// This thread's last message. A fixed buffer (trivially destructible: no thread-exit work in a
// library that may be dlopen'ed and dlclose'd by an FFI host); long messages are truncated.
inline thread_local char last_error[1024];
// Its reason (ErrorReason; reasons are at most 63 characters), "" when it has none.
inline thread_local char last_reason[64];

inline regcache_code_t SetError(regcache_code_t code, const char* message) {
  std::snprintf(last_error, sizeof(last_error), "%s", message == nullptr ? "" : message);
  last_reason[0] = '\0';
  return code;
}

inline regcache_code_t Ok() {
  last_error[0] = '\0';
  last_reason[0] = '\0';
  return REGCACHE_OK;
}

inline regcache_code_t FromStatus(const absl::Status& s) {
  if (s.ok()) return Ok();
  std::string msg(s.message());
  const regcache_code_t code = SetError(static_cast<regcache_code_t>(s.code()), msg.c_str());
  std::snprintf(last_reason, sizeof(last_reason), "%s", ErrorReason(s).c_str());
  return code;
}

inline regcache_code_t Invalid(const char* what) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%s is NULL", what);
  return SetError(REGCACHE_INVALID_ARGUMENT, buf);
}

// Runs `body` (which returns a regcache_code_t) with every exception turned into a code.
template <typename Body>
regcache_code_t Guard(Body body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return SetError(REGCACHE_RESOURCE_EXHAUSTED, "out of memory in the client library");
  } catch (const std::exception& e) {
    return SetError(REGCACHE_INTERNAL, e.what());
  } catch (...) {
    return SetError(REGCACHE_INTERNAL, "unknown exception in the client library");
  }
}

inline void ToC(const RemoteQp& q, regcache_qp_address_t* out) {
  *out = regcache_qp_address_t{};
  out->qpn = q.qpn;
  out->psn = q.psn;
  std::memcpy(out->gid, q.gid.data(), sizeof(out->gid));
  out->lid = q.lid;
  out->mtu = q.mtu;
}

inline RemoteQp FromC(const regcache_qp_address_t& a) {
  RemoteQp q;
  q.qpn = a.qpn;
  q.psn = a.psn;
  std::memcpy(q.gid.data(), a.gid, q.gid.size());
  q.lid = a.lid;
  q.mtu = a.mtu;
  return q;
}

}  // namespace regcache::api::c_abi
#endif  // REGCACHE_CLIENT_INTERNAL_C_ABI_H_
