// Peer descriptors (include/regcache/descriptor.h); the layout is docs/descriptors.md's.
#include "regcache/descriptor.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace regcache::api {
namespace {

constexpr uint8_t kMagic[4] = {'R', 'C', 'K', 'D'};
constexpr uint8_t kFlagEndpoint = 1u << 0;
constexpr uint32_t kRemoteRights = kRemoteRead | kRemoteWrite | kRemoteAtomic;
constexpr uint32_t kMaxQpn = (1u << 24) - 1;

// Field offsets (docs/descriptors.md). Every integer is little-endian.
enum Offset : size_t {
  kOffMagic = 0,
  kOffVersion = 4,
  kOffFlags = 5,
  kOffSize = 6,
  kOffNodeGuid = 8,
  kOffGid = 16,
  kOffPort = 32,
  kOffKeyBounds = 33,
  kOffReserved0 = 34,  // u16
  kOffRkey = 36,
  kOffAddr = 40,
  kOffLength = 48,
  kOffAccess = 56,
  kOffReserved1 = 60,  // u32
  kOffQpn = 64,
  kOffPsn = 68,
  kOffQpGid = 72,
  kOffLid = 88,
  kOffMtu = 90,
  kOffReserved2 = 92,  // u32
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("peer descriptor: ", what));
}

template <typename T>
void Put(std::string& out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

template <typename T>
T Get(std::string_view in, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<T>(static_cast<uint8_t>(in[at + i])) << (8 * i));
  }
  return v;
}

bool ValidMtu(uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

// What both directions refuse: the fields a peer could not use.
absl::Status Check(const PeerDescriptor& d) {
  if (d.port == 0) return Bad("port 0 (ports are numbered from 1)");
  if (static_cast<uint8_t>(d.key_bounds) > static_cast<uint8_t>(KeyBounds::kAttachment)) {
    return Bad(
        absl::StrFormat("key_bounds %d is not a KeyBounds value", static_cast<int>(d.key_bounds)));
  }
  if ((d.access & ~kRemoteRights) != 0) {
    return Bad(absl::StrFormat(
        "access 0x%x has bits other than remote read, write and atomic (a peer has no local "
        "rights)",
        d.access));
  }
  if (d.access == 0) return Bad("access grants no remote right: no peer could use the key");
  if (d.length == 0) return Bad("length 0");
  if (d.addr + d.length < d.addr && d.addr + d.length != 0) {
    return Bad(absl::StrFormat("[0x%x, +0x%x) wraps around the address space", d.addr, d.length));
  }
  if (d.endpoint.has_value()) {
    const RemoteQp& q = *d.endpoint;
    if (q.qpn == 0 || q.qpn > kMaxQpn) {
      return Bad(absl::StrFormat("endpoint qpn %d is outside 1..2^24-1", q.qpn));
    }
    if (q.psn > kMaxQpn) return Bad(absl::StrFormat("endpoint psn %d is not below 2^24", q.psn));
    if (!ValidMtu(q.mtu)) {
      return Bad(absl::StrFormat("endpoint mtu %d is not 256, 512, 1024, 2048 or 4096", q.mtu));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PeerDescriptor> DescribeKey(const DeviceInfo& device, const Key& key,
                                           const EndpointInfo* endpoint) {
  PeerDescriptor d;
  d.node_guid = device.node_guid;
  d.gid = device.gid;
  d.port = device.port;
  d.key_bounds = device.key_bounds;
  d.rkey = key.rkey;
  d.addr = key.va;
  d.length = key.length;
  d.access = key.access & kRemoteRights;
  if (endpoint != nullptr) {
    d.endpoint = endpoint->local;
    // The peer may use only what both the key and the endpoint accept.
    d.access &= endpoint->access;
  }
  if (absl::Status s = Check(d); !s.ok()) return s;
  return d;
}

absl::StatusOr<std::string> PackDescriptor(const PeerDescriptor& d) {
  if (absl::Status s = Check(d); !s.ok()) return s;
  const size_t size = d.endpoint.has_value() ? kDescriptorWithEndpointBytes : kDescriptorBytes;
  std::string out(size, '\0');
  std::memcpy(out.data() + kOffMagic, kMagic, sizeof(kMagic));
  Put<uint8_t>(out, kOffVersion, kDescriptorVersion);
  Put<uint8_t>(out, kOffFlags, d.endpoint.has_value() ? kFlagEndpoint : 0);
  Put<uint16_t>(out, kOffSize, static_cast<uint16_t>(size));
  Put<uint64_t>(out, kOffNodeGuid, d.node_guid);
  std::memcpy(out.data() + kOffGid, d.gid.data(), d.gid.size());
  Put<uint8_t>(out, kOffPort, d.port);
  Put<uint8_t>(out, kOffKeyBounds, static_cast<uint8_t>(d.key_bounds));
  Put<uint32_t>(out, kOffRkey, d.rkey);
  Put<uint64_t>(out, kOffAddr, d.addr);
  Put<uint64_t>(out, kOffLength, d.length);
  Put<uint32_t>(out, kOffAccess, d.access);
  if (d.endpoint.has_value()) {
    const RemoteQp& q = *d.endpoint;
    Put<uint32_t>(out, kOffQpn, q.qpn);
    Put<uint32_t>(out, kOffPsn, q.psn);
    std::memcpy(out.data() + kOffQpGid, q.gid.data(), q.gid.size());
    Put<uint16_t>(out, kOffLid, q.lid);
    Put<uint16_t>(out, kOffMtu, static_cast<uint16_t>(q.mtu));
  }
  return out;
}

absl::StatusOr<PeerDescriptor> UnpackDescriptor(std::string_view in) {
  if (in.size() < 8 || std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) {
    return Bad(absl::StrFormat(
        "not a regcache peer descriptor (%d bytes; one starts with \"RCKD\" and has at least %d)",
        in.size(), kDescriptorBytes));
  }
  const uint8_t version = Get<uint8_t>(in, kOffVersion);
  if (version == 0) return Bad("version 0");
  if (version > kDescriptorVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "peer descriptor: format version %d is newer than this library's %d; update libregcache "
        "on this side",
        version, kDescriptorVersion));
  }
  const uint8_t flags = Get<uint8_t>(in, kOffFlags);
  if ((flags & ~kFlagEndpoint) != 0) {
    return Bad(absl::StrFormat("unknown flags 0x%02x", flags & ~kFlagEndpoint));
  }
  const bool has_endpoint = (flags & kFlagEndpoint) != 0;
  const size_t want = has_endpoint ? kDescriptorWithEndpointBytes : kDescriptorBytes;
  const uint16_t size = Get<uint16_t>(in, kOffSize);
  if (size != want) {
    return Bad(absl::StrFormat("size field %d, but a version-1 descriptor %s an endpoint is %d",
                               size, has_endpoint ? "with" : "without", want));
  }
  if (in.size() != want) {
    return Bad(absl::StrFormat("%d bytes, but its size field says %d%s", in.size(), want,
                               in.size() < want ? " (truncated)" : " (trailing bytes)"));
  }
  if (Get<uint16_t>(in, kOffReserved0) != 0 || Get<uint32_t>(in, kOffReserved1) != 0 ||
      (has_endpoint && Get<uint32_t>(in, kOffReserved2) != 0)) {
    return Bad("reserved bytes are not zero");
  }
  PeerDescriptor d;
  d.node_guid = Get<uint64_t>(in, kOffNodeGuid);
  std::memcpy(d.gid.data(), in.data() + kOffGid, d.gid.size());
  d.port = Get<uint8_t>(in, kOffPort);
  d.key_bounds = static_cast<KeyBounds>(Get<uint8_t>(in, kOffKeyBounds));
  d.rkey = Get<uint32_t>(in, kOffRkey);
  d.addr = Get<uint64_t>(in, kOffAddr);
  d.length = Get<uint64_t>(in, kOffLength);
  d.access = Get<uint32_t>(in, kOffAccess);
  if (has_endpoint) {
    RemoteQp q;
    q.qpn = Get<uint32_t>(in, kOffQpn);
    q.psn = Get<uint32_t>(in, kOffPsn);
    std::memcpy(q.gid.data(), in.data() + kOffQpGid, q.gid.size());
    q.lid = Get<uint16_t>(in, kOffLid);
    q.mtu = Get<uint16_t>(in, kOffMtu);
    d.endpoint = q;
  }
  if (absl::Status s = Check(d); !s.ok()) return s;
  return d;
}

absl::StatusOr<std::string> DescriptorToText(const PeerDescriptor& d) {
  absl::StatusOr<std::string> bytes = PackDescriptor(d);
  if (!bytes.ok()) return bytes.status();
  std::string text(kDescriptorTextPrefix);
  text += absl::WebSafeBase64Escape(*bytes);
  return text;
}

absl::StatusOr<PeerDescriptor> DescriptorFromText(std::string_view text) {
  if (!text.starts_with(kDescriptorTextPrefix)) {
    return Bad(absl::StrFormat("text does not start with \"%s\"", kDescriptorTextPrefix));
  }
  const absl::string_view body(text.data() + kDescriptorTextPrefix.size(),
                               text.size() - kDescriptorTextPrefix.size());
  std::string bytes;
  // Only the canonical unpadded form: one text per descriptor.
  if (body.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") !=
          absl::string_view::npos ||
      !absl::WebSafeBase64Unescape(body, &bytes) || absl::WebSafeBase64Escape(bytes) != body) {
    return Bad("text is not unpadded base64url after the prefix");
  }
  return UnpackDescriptor(bytes);
}

bool operator==(const PeerDescriptor& a, const PeerDescriptor& b) {
  const auto same_qp = [](const RemoteQp& x, const RemoteQp& y) {
    return x.qpn == y.qpn && x.psn == y.psn && x.gid == y.gid && x.lid == y.lid && x.mtu == y.mtu;
  };
  return a.node_guid == b.node_guid && a.gid == b.gid && a.port == b.port &&
         a.key_bounds == b.key_bounds && a.rkey == b.rkey && a.addr == b.addr &&
         a.length == b.length && a.access == b.access &&
         a.endpoint.has_value() == b.endpoint.has_value() &&
         (!a.endpoint.has_value() || same_qp(*a.endpoint, *b.endpoint));
}

}  // namespace regcache::api
