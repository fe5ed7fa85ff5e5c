// The C ABI (include/regcache/regcache.h) over regcache::api::Client: argument checks, struct
// conversion and the per-thread last error. No call lets a C++ exception out (a C or FFI caller
// cannot catch one): anything thrown becomes REGCACHE_INTERNAL (REGCACHE_RESOURCE_EXHAUSTED for
// std::bad_alloc).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/internal/c_abi.h"
#include "regcache/client.h"
#include "regcache/regcache.h"

namespace rc = ::regcache::api;
using rc::c_abi::FromC;
using rc::c_abi::FromStatus;
using rc::c_abi::Guard;
using rc::c_abi::Invalid;
using rc::c_abi::last_error;
using rc::c_abi::last_reason;
using rc::c_abi::Ok;
using rc::c_abi::SetError;

// The ABI's numbers are the C++ client's: one static_assert per shared value.
static_assert(REGCACHE_LOCAL_READ == rc::kLocalRead);
static_assert(REGCACHE_LOCAL_WRITE == rc::kLocalWrite);
static_assert(REGCACHE_REMOTE_READ == rc::kRemoteRead);
static_assert(REGCACHE_REMOTE_WRITE == rc::kRemoteWrite);
static_assert(REGCACHE_REMOTE_ATOMIC == rc::kRemoteAtomic);
static_assert(REGCACHE_PREFETCH_NONE == static_cast<int>(rc::PrefetchMode::kNone));
static_assert(REGCACHE_PREFETCH_SYNC == static_cast<int>(rc::PrefetchMode::kSync));
static_assert(REGCACHE_PREFETCH_ASYNC == static_cast<int>(rc::PrefetchMode::kAsync));
static_assert(REGCACHE_OK == static_cast<int>(absl::StatusCode::kOk));
static_assert(REGCACHE_MAX_BATCH_ITEMS == rc::kMaxBatchItems);
static_assert(REGCACHE_REVOKED_INVALIDATED == static_cast<int>(rc::RevocationReason::kInvalidated));
static_assert(REGCACHE_REVOKED_PARENT_INVALIDATED ==
              static_cast<int>(rc::RevocationReason::kParentInvalidated));
static_assert(REGCACHE_REVOKED_MEMORY_DETACHED ==
              static_cast<int>(rc::RevocationReason::kMemoryDetached));
static_assert(REGCACHE_REVOKED_REREGISTERED ==
              static_cast<int>(rc::RevocationReason::kReregistered));
static_assert(REGCACHE_REVOKED_RECLAIMED == static_cast<int>(rc::RevocationReason::kReclaimed));
static_assert(REGCACHE_REVOKED_UNKNOWN == static_cast<int>(rc::RevocationReason::kUnknown));
static_assert(sizeof(regcache_qp_address_t{}.gid) == sizeof(rc::RemoteQp{}.gid));
static_assert(REGCACHE_INVALID_ARGUMENT == static_cast<int>(absl::StatusCode::kInvalidArgument));
static_assert(REGCACHE_NOT_FOUND == static_cast<int>(absl::StatusCode::kNotFound));
static_assert(REGCACHE_RESOURCE_EXHAUSTED ==
              static_cast<int>(absl::StatusCode::kResourceExhausted));
static_assert(REGCACHE_OUT_OF_RANGE == static_cast<int>(absl::StatusCode::kOutOfRange));
static_assert(REGCACHE_UNAVAILABLE == static_cast<int>(absl::StatusCode::kUnavailable));
static_assert(REGCACHE_UNAUTHENTICATED == static_cast<int>(absl::StatusCode::kUnauthenticated));

namespace {

using rc::c_abi::ToC;

void ToC(const rc::Memory& m, regcache_memory_t* out) {
  out->id = m.id;
  out->data = m.data;
  out->length = m.length;
}

void ToC(const rc::Key& k, regcache_key_t* out) {
  out->handle = k.handle;
  out->lkey = k.lkey;
  out->rkey = k.rkey;
  out->va = k.va;
  out->length = k.length;
  out->access = k.access;
  out->hit = k.hit ? 1 : 0;
  out->same_key = k.same_key ? 1 : 0;
  out->reserved = 0;
}

void ToC(const rc::KeyInfo& k, regcache_key_info_t* out) {
  *out = regcache_key_info_t{};
  out->handle = k.handle;
  out->key = k.key;
  out->access = k.access;
  out->va = k.va;
  out->length = k.length;
  out->holders = k.holders;
  out->revoked = k.revoked ? 1 : 0;
  out->is_window = k.is_window ? 1 : 0;
  out->parent = k.parent;
  std::snprintf(out->key_state, sizeof(out->key_state), "%s", k.key_state.c_str());
}

void ToC(const rc::SessionUsage& u, regcache_usage_t* out) {
  out->live_registrations = u.live_registrations;
  out->revoked_held = u.revoked_held;
  out->cached_unreferenced = u.cached_unreferenced;
  out->backings = u.backings;
  out->backed_bytes = u.backed_bytes;
  out->pool_outstanding = u.pool_outstanding;
  out->pool_total = u.pool_total;
}

void ToC(const rc::EndpointInfo& e, regcache_endpoint_t* out) {
  *out = regcache_endpoint_t{};
  out->id = e.id;
  ToC(e.local, &out->local);
  out->access = e.access;
}

// The common shape of a call that returns a value: check the client and the output pointer,
// run `call` (which returns an absl::StatusOr<T>), convert its value into *out.
template <typename Out, typename Call>
regcache_code_t Fetch(regcache_client_t* client, Out* out, const char* out_name, Call call) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (out == nullptr) return Invalid(out_name);
    auto result = call(*client->impl);
    if (!result.ok()) return FromStatus(result.status());
    ToC(*result, out);
    return Ok();
  });
}

// A call that returns only a status.
template <typename Call>
regcache_code_t Do(regcache_client_t* client, Call call) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    return FromStatus(call(*client->impl));
  });
}

bool ValidPrefetch(uint32_t p) {
  return p == REGCACHE_PREFETCH_NONE || p == REGCACHE_PREFETCH_SYNC || p == REGCACHE_PREFETCH_ASYNC;
}

regcache_code_t BadPrefetch(uint32_t p) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "prefetch mode %d is none of REGCACHE_PREFETCH_*",
                static_cast<int>(p));
  return SetError(REGCACHE_INVALID_ARGUMENT, buf);
}

bool BatchSizeOk(size_t count) { return count != 0 && count <= REGCACHE_MAX_BATCH_ITEMS; }

regcache_code_t BadBatchSize() {
  return SetError(REGCACHE_INVALID_ARGUMENT, "count is 0 or above REGCACHE_MAX_BATCH_ITEMS");
}

// A batch that ran: REGCACHE_OK, with the message of the first item that failed (if any).
regcache_code_t BatchRan(const absl::Status& first_failure) {
  if (first_failure.ok()) return Ok();
  FromStatus(first_failure);
  return REGCACHE_OK;
}

}  // namespace

extern "C" {

const char* regcache_last_error(void) { return last_error; }

const char* regcache_last_error_reason(void) { return last_reason; }

const char* regcache_code_name(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return "UNKNOWN_CODE";
  }
  return kNames[code];
}

regcache_code_t regcache_set_last_error(regcache_code_t code, const char* message) {
  if (code == REGCACHE_OK) return Ok();
  return SetError(code, message);
}

regcache_code_t regcache_connect(const char* socket_dir, const regcache_options_t* options,
                                 regcache_client_t** out) {
  return regcache_connect_device(socket_dir, options, nullptr, out);
}

regcache_code_t regcache_connect_device(const char* socket_dir, const regcache_options_t* options,
                                        const char* device, regcache_client_t** out) {
  return regcache_connect_ex(socket_dir, options, device, 0, out);
}

regcache_code_t regcache_connect_ex(const char* socket_dir, const regcache_options_t* options,
                                    const char* device, uint32_t flags, regcache_client_t** out) {
  return Guard([&] {
    if (out == nullptr) return Invalid("out");
    if (const uint32_t unknown = flags & ~uint32_t{REGCACHE_CONNECT_OWN_DEVICE_CONTEXT}) {
      char why[80];
      std::snprintf(why, sizeof(why), "regcache_connect_ex: unknown flags 0x%x", unknown);
      return SetError(REGCACHE_INVALID_ARGUMENT, why);
    }
    rc::ClientOptions opts;
    opts.own_device_context = (flags & REGCACHE_CONNECT_OWN_DEVICE_CONTEXT) != 0;
    if (options != nullptr) {
      if (options->call_timeout_ms != 0) {
        opts.call_timeout = absl::Milliseconds(options->call_timeout_ms);
      }
      opts.tcp_port = options->tcp_port;
      opts.fast_path = options->no_fast_path == 0;
      opts.client_cache = options->no_client_cache == 0;
    }
    if (device != nullptr) opts.device = device;
    absl::StatusOr<std::unique_ptr<rc::Client>> c =
        rc::Client::Connect(socket_dir != nullptr ? socket_dir : "", opts);
    if (!c.ok()) return FromStatus(c.status());
    *out = new regcache_client{std::move(*c)};
    return Ok();
  });
}

void regcache_close(regcache_client_t* client) {
  Guard([&] {
    delete client;  // the client's destructor closes the session
    return Ok();
  });
}

regcache_code_t regcache_device(const regcache_client_t* client, regcache_device_t* out) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (out == nullptr) return Invalid("out");
    const rc::DeviceInfo& d = client->impl->device();
    *out = regcache_device_t{};
    out->index = d.index;
    out->port = d.port;
    out->key_bounds = static_cast<uint8_t>(d.key_bounds);
    out->node_guid = d.node_guid;
    std::memcpy(out->gid, d.gid.data(), sizeof(out->gid));
    std::memcpy(out->name, d.name.data(), std::min(d.name.size(), sizeof(out->name) - 1));
    return Ok();
  });
}

uint64_t regcache_session_id(const regcache_client_t* client) {
  return client == nullptr ? 0 : client->impl->session_id();
}

regcache_code_t regcache_allocate(regcache_client_t* client, uint64_t length, int hugetlb,
                                  int on_demand, regcache_memory_t* out) {
  return Fetch(client, out, "out", [&](rc::Client& c) {
    return c.AllocateMemory(length, hugetlb != 0, on_demand != 0);
  });
}

regcache_code_t regcache_attach_fd(regcache_client_t* client, int fd, uint64_t offset,
                                   uint64_t length, int on_demand, regcache_memory_t* out) {
  if (client != nullptr && out != nullptr && fd < 0) {
    return SetError(REGCACHE_INVALID_ARGUMENT, "fd is negative");
  }
  return Fetch(client, out, "out",
               [&](rc::Client& c) { return c.AttachFd(fd, offset, length, on_demand != 0); });
}

regcache_code_t regcache_attach_dmabuf(regcache_client_t* client, int fd, uint64_t offset,
                                       uint64_t length, const void* va, regcache_memory_t* out) {
  if (client != nullptr && out != nullptr && fd < 0) {
    return SetError(REGCACHE_INVALID_ARGUMENT, "fd is negative");
  }
  return Fetch(client, out, "out",
               [&](rc::Client& c) { return c.AttachDmabuf(fd, offset, length, va); });
}

regcache_code_t regcache_detach(regcache_client_t* client, const regcache_memory_t* memory) {
  if (client != nullptr && memory == nullptr) return Invalid("memory");
  return Do(client, [&](rc::Client& c) {
    return c.DetachMemory(rc::Memory{memory->id, memory->data, memory->length});
  });
}

regcache_code_t regcache_import_pd(regcache_client_t* client, struct ibv_context** context,
                                   struct ibv_pd** pd) {
  if (client != nullptr && context == nullptr) return Invalid("context");
  if (client != nullptr && pd == nullptr) return Invalid("pd");
  return Do(client, [&](rc::Client& c) -> absl::Status {
    absl::StatusOr<rc::ImportedPd> imported = c.ImportPd();
    if (!imported.ok()) return imported.status();
    *context = imported->context;
    *pd = imported->pd;
    return absl::OkStatus();
  });
}

regcache_code_t regcache_attach_region(regcache_client_t* client, const struct ibv_mr* mr,
                                       const void* addr, uint64_t length, uint32_t access,
                                       regcache_memory_t* out) {
  if (client != nullptr && out != nullptr && mr == nullptr) return Invalid("mr");
  return Fetch(client, out, "out",
               [&](rc::Client& c) { return c.AttachRegion(mr, addr, length, access); });
}

regcache_code_t regcache_register(regcache_client_t* client, const void* addr, uint64_t length,
                                  uint32_t access, uint32_t prefetch, regcache_key_t* out) {
  if (client != nullptr && out != nullptr) {
    if (addr == nullptr) return Invalid("addr");
    if (length == 0) return SetError(REGCACHE_INVALID_ARGUMENT, "length is 0");
    if (!ValidPrefetch(prefetch)) return BadPrefetch(prefetch);
  }
  return Fetch(client, out, "out", [&](rc::Client& c) {
    return c.Register(addr, length, access, static_cast<rc::PrefetchMode>(prefetch));
  });
}

regcache_code_t regcache_window(regcache_client_t* client, uint64_t parent, uint64_t offset,
                                uint64_t length, uint32_t access, regcache_key_t* out) {
  return Fetch(client, out, "out",
               [&](rc::Client& c) { return c.Window(parent, offset, length, access); });
}

regcache_code_t regcache_release(regcache_client_t* client, uint64_t handle) {
  return Do(client, [&](rc::Client& c) { return c.Release(handle); });
}

regcache_code_t regcache_invalidate(regcache_client_t* client, uint64_t handle) {
  return Do(client, [&](rc::Client& c) { return c.Invalidate(handle); });
}

regcache_code_t regcache_query(regcache_client_t* client, uint64_t handle,
                               regcache_key_info_t* out) {
  return Fetch(client, out, "out", [&](rc::Client& c) { return c.Query(handle); });
}

regcache_code_t regcache_reregister(regcache_client_t* client, uint64_t handle, const void* addr,
                                    uint64_t length, uint32_t access, regcache_key_t* out) {
  if (client != nullptr && out != nullptr && addr == nullptr) return Invalid("addr");
  return Fetch(client, out, "out",
               [&](rc::Client& c) { return c.Reregister(handle, addr, length, access); });
}

regcache_code_t regcache_register_batch(regcache_client_t* client,
                                        const regcache_register_item_t* items, size_t count,
                                        regcache_key_t* keys, int* codes) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (items == nullptr) return Invalid("items");
    if (keys == nullptr) return Invalid("keys");
    if (codes == nullptr) return Invalid("codes");
    if (!BatchSizeOk(count)) return BadBatchSize();
    std::vector<rc::RegisterItem> in(count);
    for (size_t i = 0; i < count; ++i) {
      if (!ValidPrefetch(items[i].prefetch)) return BadPrefetch(items[i].prefetch);
      in[i] = rc::RegisterItem{items[i].addr, items[i].length, items[i].access,
                               static_cast<rc::PrefetchMode>(items[i].prefetch)};
    }
    absl::StatusOr<std::vector<absl::StatusOr<rc::Key>>> done = client->impl->RegisterBatch(in);
    if (!done.ok()) return FromStatus(done.status());
    absl::Status first;
    for (size_t i = 0; i < count; ++i) {
      const absl::StatusOr<rc::Key>& k = (*done)[i];
      codes[i] = static_cast<int>(k.status().code());
      if (k.ok()) {
        ToC(*k, &keys[i]);
      } else if (first.ok()) {
        first = k.status();
      }
    }
    return BatchRan(first);
  });
}

regcache_code_t regcache_release_batch(regcache_client_t* client, const uint64_t* handles,
                                       size_t count, int* codes) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (handles == nullptr) return Invalid("handles");
    if (codes == nullptr) return Invalid("codes");
    if (!BatchSizeOk(count)) return BadBatchSize();
    absl::StatusOr<std::vector<absl::Status>> done =
        client->impl->ReleaseBatch(absl::MakeConstSpan(handles, count));
    if (!done.ok()) return FromStatus(done.status());
    absl::Status first;
    for (size_t i = 0; i < count; ++i) {
      codes[i] = static_cast<int>((*done)[i].code());
      if (!(*done)[i].ok() && first.ok()) first = (*done)[i];
    }
    return BatchRan(first);
  });
}

regcache_code_t regcache_prefetch(regcache_client_t* client, const void* addr, uint64_t length,
                                  int write, uint32_t mode) {
  if (client != nullptr) {
    if (addr == nullptr) return Invalid("addr");
    if (!ValidPrefetch(mode)) return BadPrefetch(mode);
  }
  return Do(client, [&](rc::Client& c) {
    return c.Prefetch(addr, length, write != 0, static_cast<rc::PrefetchMode>(mode));
  });
}

regcache_code_t regcache_endpoint_create(regcache_client_t* client,
                                         const regcache_qp_address_t* peer, uint32_t access,
                                         regcache_endpoint_t* out) {
  if (client != nullptr && out != nullptr && peer == nullptr) return Invalid("peer");
  return Fetch(client, out, "out",
               [&](rc::Client& c) { return c.CreateEndpoint(FromC(*peer), access); });
}

regcache_code_t regcache_endpoint_destroy(regcache_client_t* client, uint64_t id) {
  return Do(client, [&](rc::Client& c) { return c.DestroyEndpoint(id); });
}

regcache_code_t regcache_set_revocation_callback(regcache_client_t* client,
                                                 regcache_revocation_fn fn, void* user_data) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (fn == nullptr) {
      client->impl->SetRevocationCallback(nullptr);
      return Ok();
    }
    client->impl->SetRevocationCallback([fn, user_data](const rc::Revocation& r) {
      const regcache_revocation_t c{r.handle, r.key, static_cast<uint32_t>(r.reason)};
      fn(&c, user_data);
    });
    return Ok();
  });
}

regcache_code_t regcache_usage(regcache_client_t* client, regcache_usage_t* out) {
  return Fetch(client, out, "out", [&](rc::Client& c) -> absl::StatusOr<rc::SessionUsage> {
    absl::StatusOr<rc::StatsSnapshot> s = c.Stats();
    if (!s.ok()) return s.status();
    return s->session;
  });
}

}  // extern "C"
