// The C ABI's peer descriptor calls (include/regcache/regcache.h) over regcache/descriptor.h.
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "client/internal/c_abi.h"
#include "regcache/client.h"
#include "regcache/descriptor.h"
#include "regcache/regcache.h"
#include "regcache/sim_peer.h"

namespace rc = ::regcache::api;
using rc::c_abi::FromC;
using rc::c_abi::FromStatus;
using rc::c_abi::Guard;
using rc::c_abi::Invalid;
using rc::c_abi::Ok;
using rc::c_abi::SetError;
using rc::c_abi::ToC;

static_assert(REGCACHE_DESCRIPTOR_MAX_BYTES == rc::kDescriptorWithEndpointBytes);
// The text of the largest descriptor: the prefix, 4 characters per 3 bytes (rounded up), a NUL.
static_assert(REGCACHE_DESCRIPTOR_MAX_TEXT == rc::kDescriptorTextPrefix.size() +
                                                  (rc::kDescriptorWithEndpointBytes * 4 + 2) / 3 +
                                                  1);

namespace {

rc::PeerDescriptor FromC(const regcache_descriptor_t& c) {
  rc::PeerDescriptor d;
  d.node_guid = c.node_guid;
  std::memcpy(d.gid.data(), c.gid, d.gid.size());
  d.port = c.port;
  d.key_bounds = static_cast<rc::KeyBounds>(c.key_bounds);
  d.rkey = c.rkey;
  d.addr = c.addr;
  d.length = c.length;
  d.access = c.access;
  if (c.has_endpoint != 0) d.endpoint = FromC(c.endpoint);
  return d;
}

void ToC(const rc::PeerDescriptor& d, regcache_descriptor_t* out) {
  *out = regcache_descriptor_t{};
  out->node_guid = d.node_guid;
  std::memcpy(out->gid, d.gid.data(), sizeof(out->gid));
  out->port = d.port;
  out->key_bounds = static_cast<uint8_t>(d.key_bounds);
  out->rkey = d.rkey;
  out->addr = d.addr;
  out->length = d.length;
  out->access = d.access;
  if (d.endpoint.has_value()) {
    out->has_endpoint = 1;
    ToC(*d.endpoint, &out->endpoint);
  }
}

// A C descriptor's own checks (the fields C can get wrong that the C++ type cannot express).
regcache_code_t CheckC(const regcache_descriptor_t& c) {
  if (c.has_endpoint > 1) {
    return SetError(REGCACHE_INVALID_ARGUMENT, "peer descriptor: has_endpoint is neither 0 nor 1");
  }
  if (c.reserved != 0 || c.reserved2 != 0 || (c.has_endpoint != 0 && c.endpoint.reserved != 0)) {
    return SetError(REGCACHE_INVALID_ARGUMENT, "peer descriptor: reserved fields are not zero");
  }
  return REGCACHE_OK;
}

regcache_code_t Deliver(const absl::StatusOr<rc::PeerDescriptor>& d, regcache_descriptor_t* out) {
  if (!d.ok()) return FromStatus(d.status());
  ToC(*d, out);
  return Ok();
}

}  // namespace

regcache_code_t regcache_describe_key(const regcache_client_t* client, const regcache_key_t* key,
                                      const regcache_endpoint_t* endpoint,
                                      regcache_descriptor_t* out) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (key == nullptr) return Invalid("key");
    if (out == nullptr) return Invalid("out");
    rc::Key k;
    k.handle = key->handle;
    k.rkey = key->rkey;
    k.va = key->va;
    k.length = key->length;
    k.access = key->access;
    rc::EndpointInfo e;
    if (endpoint != nullptr) {
      e.id = endpoint->id;
      e.local = FromC(endpoint->local);
      e.access = endpoint->access;
    }
    return Deliver(rc::DescribeKey(client->impl->device(), k, endpoint ? &e : nullptr), out);
  });
}

regcache_code_t regcache_descriptor_pack(const regcache_descriptor_t* descriptor, void* buf,
                                         size_t capacity, size_t* written) {
  return Guard([&] {
    if (descriptor == nullptr) return Invalid("descriptor");
    if (buf == nullptr) return Invalid("buf");
    if (written == nullptr) return Invalid("written");
    if (regcache_code_t c = CheckC(*descriptor); c != REGCACHE_OK) return c;
    absl::StatusOr<std::string> bytes = rc::PackDescriptor(FromC(*descriptor));
    if (!bytes.ok()) return FromStatus(bytes.status());
    if (bytes->size() > capacity) {
      const std::string msg = "peer descriptor: needs " + std::to_string(bytes->size()) +
                              " bytes, the buffer has " + std::to_string(capacity);
      return SetError(REGCACHE_OUT_OF_RANGE, msg.c_str());
    }
    std::memcpy(buf, bytes->data(), bytes->size());
    *written = bytes->size();
    return Ok();
  });
}

regcache_code_t regcache_descriptor_unpack(const void* buf, size_t length,
                                           regcache_descriptor_t* out) {
  return Guard([&] {
    if (buf == nullptr) return Invalid("buf");
    if (out == nullptr) return Invalid("out");
    return Deliver(rc::UnpackDescriptor(std::string_view(static_cast<const char*>(buf), length)),
                   out);
  });
}

regcache_code_t regcache_descriptor_to_text(const regcache_descriptor_t* descriptor, char* buf,
                                            size_t capacity) {
  return Guard([&] {
    if (descriptor == nullptr) return Invalid("descriptor");
    if (buf == nullptr) return Invalid("buf");
    if (regcache_code_t c = CheckC(*descriptor); c != REGCACHE_OK) return c;
    absl::StatusOr<std::string> text = rc::DescriptorToText(FromC(*descriptor));
    if (!text.ok()) return FromStatus(text.status());
    if (text->size() + 1 > capacity) {
      const std::string msg = "peer descriptor: its text needs " +
                              std::to_string(text->size() + 1) + " bytes, the buffer has " +
                              std::to_string(capacity);
      return SetError(REGCACHE_OUT_OF_RANGE, msg.c_str());
    }
    std::memcpy(buf, text->c_str(), text->size() + 1);
    return Ok();
  });
}

regcache_code_t regcache_descriptor_from_text(const char* text, regcache_descriptor_t* out) {
  return Guard([&] {
    if (text == nullptr) return Invalid("text");
    if (out == nullptr) return Invalid("out");
    return Deliver(rc::DescriptorFromText(text), out);
  });
}

regcache_code_t regcache_sim_peer_write(regcache_client_t* client,
                                        const regcache_descriptor_t* descriptor,
                                        const regcache_qp_address_t* self, uint64_t addr,
                                        const void* data, size_t length) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (descriptor == nullptr) return Invalid("descriptor");
    if (self == nullptr) return Invalid("self");
    if (data == nullptr && length != 0) return Invalid("data");
    if (regcache_code_t c = CheckC(*descriptor); c != REGCACHE_OK) return c;
    const std::string bytes(static_cast<const char*>(data), length);
    return FromStatus(
        rc::SimPeerWrite(*client->impl, FromC(*descriptor), FromC(*self), addr, bytes));
  });
}

regcache_code_t regcache_sim_peer_read(regcache_client_t* client,
                                       const regcache_descriptor_t* descriptor,
                                       const regcache_qp_address_t* self, uint64_t addr, void* out,
                                       size_t length) {
  return Guard([&] {
    if (client == nullptr) return Invalid("client");
    if (descriptor == nullptr) return Invalid("descriptor");
    if (self == nullptr) return Invalid("self");
    if (out == nullptr && length != 0) return Invalid("out");
    if (regcache_code_t c = CheckC(*descriptor); c != REGCACHE_OK) return c;
    absl::StatusOr<std::string> data =
        rc::SimPeerRead(*client->impl, FromC(*descriptor), FromC(*self), addr, length);
    if (!data.ok()) return FromStatus(data.status());
    std::memcpy(out, data->data(), std::min(data->size(), length));
    return Ok();
  });
}
