// Fuzz target: peer descriptors (include/regcache/descriptor.h), which a peer unpacks from bytes
// another process sent it. Any bytes unpack to an error or to a descriptor that packs back to
// exactly those bytes (one encoding per descriptor); the same bytes as text (after the prefix)
// unpack the same way; and a descriptor built from the input's fields either packs and unpacks
// to itself or is refused by both directions alike.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "regcache/descriptor.h"

namespace {

namespace rc = ::regcache::api;

void Check(bool ok) {
  if (!ok) std::abort();
}

template <typename T>
T Take(std::string_view& in) {
  T v{};
  const size_t n = std::min(sizeof(T), in.size());
  std::memcpy(&v, in.data(), n);
  in.remove_prefix(n);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rc::PeerDescriptor> d = rc::UnpackDescriptor(in);
  if (d.ok()) {
    absl::StatusOr<std::string> again = rc::PackDescriptor(*d);
    Check(again.ok() && *again == in);
    absl::StatusOr<std::string> text = rc::DescriptorToText(*d);
    Check(text.ok());
    absl::StatusOr<rc::PeerDescriptor> back = rc::DescriptorFromText(*text);
    Check(back.ok() && *back == *d);
  } else {
    Check(!d.status().message().empty());
  }
  // The input as the text after the prefix: the same answer as its decoded bytes, or refused.
  absl::StatusOr<rc::PeerDescriptor> t = rc::DescriptorFromText(std::string("rcd1:").append(in));
  if (t.ok()) {
    std::string bytes;
    Check(absl::WebSafeBase64Unescape(absl::string_view(in.data(), in.size()), &bytes));
    absl::StatusOr<rc::PeerDescriptor> u = rc::UnpackDescriptor(bytes);
    Check(u.ok() && *u == *t);
  }
  // A descriptor made of the input's fields.
  std::string_view rest = in;
  rc::PeerDescriptor f;
  f.node_guid = Take<uint64_t>(rest);
  for (auto& b : f.gid) b = Take<uint8_t>(rest);
  f.port = Take<uint8_t>(rest);
  f.key_bounds = static_cast<rc::KeyBounds>(Take<uint8_t>(rest) % 5);
  f.rkey = Take<uint32_t>(rest);
  f.addr = Take<uint64_t>(rest);
  f.length = Take<uint64_t>(rest);
  f.access = Take<uint32_t>(rest) & 0x3f;
  if (Take<uint8_t>(rest) & 1) {
    rc::RemoteQp q;
    q.qpn = Take<uint32_t>(rest) & 0x1ffffff;
    q.psn = Take<uint32_t>(rest) & 0x1ffffff;
    q.lid = Take<uint16_t>(rest);
    q.mtu = 128u << (Take<uint8_t>(rest) % 7);
    f.endpoint = q;
  }
  absl::StatusOr<std::string> packed = rc::PackDescriptor(f);
  absl::StatusOr<std::string> text = rc::DescriptorToText(f);
  Check(packed.ok() == text.ok());
  if (packed.ok()) {
    absl::StatusOr<rc::PeerDescriptor> back = rc::UnpackDescriptor(*packed);
    Check(back.ok() && *back == f);
    Check(packed->size() == (f.endpoint ? rc::kDescriptorWithEndpointBytes : rc::kDescriptorBytes));
  }
  return 0;
}
