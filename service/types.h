// The daemon's vocabulary: its configuration and the values service::Daemon's calls take and
// return (service/daemon.h), in a header of their own so that the daemon's internals and the
// transports' headers can name them without the facade.
#ifndef REGCACHE_SERVICE_TYPES_H_
#define REGCACHE_SERVICE_TYPES_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/stats.h"
#include "cache/options.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/servicer.h"
#include "protocol/shm_protocol.h"

namespace regcache::service {

namespace shm = ::regcache::protocol::shm;

// The remote node of the simulated peer data path through a target endpoint: a peer that is a
// requester queue pair with address `peer` (the one the client named for the endpoint),
// connected to the endpoint whose address is `endpoint` (hca::sim::ConnectRemotePeer).
using RemoteNode = std::function<absl::StatusOr<std::unique_ptr<hca::Peer>>(
    hca::Device* device, const hca::EndpointAddress& peer, const hca::EndpointAddress& endpoint)>;

struct DaemonConfig {
  // The devices: one spec for hca::OpenDevice ("sim", "sim:mode=thread", "verbs[:name]",
  // "mlx5[:name]", "auto"), or several separated by ';' ("mlx5:mlx5_0;mlx5:mlx5_1";
  // "sim;sim:sim1"), since a spec's own arguments are separated by commas. Each device must
  // have a distinct name (hca::Capabilities::device_name); "auto" opens one device and must
  // stand alone. The first is the sessions' default. The binary must have registered the
  // backends. Default "sim".
  std::string device = "sim";
  // Most sessions at once on one device (0 = only max_sessions limits them). Default 0.
  uint32_t max_sessions_per_device = 0;
  // Peer credentials allowed to open a session. A client is accepted when its uid is in
  // allow_uids or its gid in allow_gids. Both empty (the default): the daemon's own uid and root.
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
  // Peer credentials whose sessions are admin (Sessions, Drain, acting on another session): a
  // uid in admin_uids or a gid in admin_gids. Nothing else makes a session admin — not uid 0,
  // not the daemon's own uid; both empty (the default): no session is admin.
  std::vector<uint32_t> admin_uids;
  std::vector<uint32_t> admin_gids;
  // Tenants (peer uids) labelled on their own in the per-tenant stats (component
  // `tenant{tenant="<uid>"}`); the rest are summed under tenant="other". Default 16.
  uint32_t metrics_max_tenants = 16;
  // Per-session quotas (0 = unlimited). Defaults: 1M keys, 1 TiB of attached memory.
  uint64_t max_keys_per_session = 1u << 20;
  uint64_t max_bytes_per_session = uint64_t{1} << 40;
  // Memories a session may have attached at once (0 = unlimited): each costs the device a key
  // for its registration and, on a UMR device, one for its gate, outside the pooled keys'
  // budget. Default 4096.
  uint64_t max_memories_per_session = 4096;
  // Memory mapped for all sessions together (0 = unlimited), which bounds the daemon's own
  // memory for translations (docs/architecture.md, "Large memory": at most 2 MiB per GiB with
  // 4 KiB pages, 4 KiB per GiB with 2 MiB pages). A session's quota is further limited by what
  // the others left of it. Default 1 TiB.
  uint64_t max_bytes_total = uint64_t{1} << 40;
  // Largest translation page (2^n bytes) a backing may use: the daemon asks the device for the
  // largest page the memory allows up to this (service/internal/backing_page.h). 12 keeps every
  // backing at 4 KiB pages. Default 30 (1 GiB huge pages).
  uint32_t max_backing_page_log = 30;
  // Largest single AllocateMemory / ImportMemory. Default 1 TiB.
  uint64_t max_memory_length = uint64_t{1} << 40;
  // Most sessions at once. Default 1024.
  uint32_t max_sessions = 1024;
  // Target endpoints one session may hold at once (0 = unlimited, like the quotas above).
  // Default 16: each is a queue pair of the device's.
  uint32_t max_endpoints = 16;
  // How PeerWrite / PeerRead go through an endpoint: binaries that link the sim set it to
  // hca::sim::ConnectRemotePeer. Unset: they answer kUnimplemented.
  RemoteNode remote_node;
  // The cache (pool classes and watermarks, quarantine, UMR queues per session).
  cache::CacheOptions cache;
  // The fast path (protocol/shm_protocol.h), per session: request/completion channels (client
  // threads beyond this many share channels), in [1, shm::kMaxChannels]; and grant state slots
  // (grants beyond this many held at once carry kNoSlot and are not cached by the client).
  // They size the session's two shared files: about 12 KiB per channel, 4 bytes per slot.
  uint32_t ring_channels = shm::kDefaultChannels;
  uint32_t grant_slots = shm::kDefaultSlots;
  // Sessions may open with a device context of their own (Daemon::OpenSession's own_context),
  // whose PD Daemon::ExportPd hands to the client (docs/client_memory.md). The exported command
  // fd reaches only that session's verbs objects; each such session costs the daemon one more
  // device context. Off by default.
  bool allow_pd_export = false;
  // The peer data path (service/sim_peer.h) also on devices other than the sim, through the
  // device's own requester queue pair (hca::Device::CreatePeer, in the session's PD): for tests
  // of a device backend, such as the mlx5 backend on the emulated ConnectX
  // (docs/mlx5emu.md). A production daemon has no use for it. Off by default.
  bool peer_on_any_device = false;
  // hca::OpenOptions::strict_key_bounds for every device: where a device confines a peer only to
  // a key's attachment, cut a memory region at every key's edges (docs/key_bounds.md).
  bool strict_key_bounds = false;
};

using SessionId = uint64_t;
using MemoryId = uint64_t;
using EndpointId = uint64_t;

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Which NIC a session's keys belong to: the device's place in DaemonConfig::device, its name
// and the identity its backend reports (hca::Capabilities: node GUID, port and port GID).
struct DeviceIdentity {
  uint32_t index = 0;
  std::string name;     // hca::Capabilities::device_name, e.g. "mlx5_1"
  std::string backend;  // "sim", "verbs", "mlx5"
  uint64_t node_guid = 0;
  uint8_t port = 0;
  std::array<uint8_t, 16> gid{};
  // What confines a peer holding one of its keys (hca::Capabilities::key_bounds).
  hca::KeyBounds key_bounds = hca::KeyBounds::kUnknown;
};

struct SessionGrant {
  SessionId id = 0;
  std::string token;  // 32 hex digits; the client presents it on every call
  bool admin = false;
  bool observer = false;  // Daemon::OpenObserver's: read-only, no files, no device resources
  // The fast path's files (protocol/shm_protocol.h), for the transport to pass to the client
  // (SCM_RIGHTS) and then close: they are owned by the caller of OpenSession. -1 in copies
  // the transport keeps.
  int channel_fd = -1;
  int state_fd = -1;
  uint32_t ring_channels = 0;
  uint32_t grant_slots = 0;
  DeviceIdentity device;  // the session's device
};

// One register call of a batch (Daemon::RegisterBatch).
struct RegisterCall {
  uint64_t va = 0;
  uint64_t length = 0;
  hca::AccessFlags access = 0;
  std::optional<odp::PrefetchMode> prefetch;
};

struct SessionInfo {
  SessionId id = 0;
  PeerCredentials peer;
  bool admin = false;
  absl::Time opened;
  cache::TenantUsage usage;
  uint64_t memories = 0;
  DeviceIdentity device;
};

// An fd the transport passes to the client (SCM_RIGHTS) and then closes.
struct AllocatedMemory {
  MemoryId id = 0;
  uint64_t length = 0;
  int fd = -1;  // owned by the caller: close it after sending
  bool hugetlb = false;
};

// A memory region the client registered itself in its session's imported PD (ibv_reg_mr on
// the context Daemon::ExportPd gave it), and the part of it to attach.
struct ClientRegion {
  uint32_t handle = 0;         // ibv_mr::handle
  uint64_t region_addr = 0;    // ibv_mr::addr (the region's first address: its iova)
  uint64_t region_length = 0;  // ibv_mr::length
  uint64_t va = 0;             // the attached range, within the region
  uint64_t length = 0;
  hca::AccessFlags access = hca::kAllAccess;  // rights keys over it may have
};

struct MemoryInfo {
  MemoryId id = 0;
  uint64_t length = 0;
  uint64_t client_va = 0;  // 0 until attached
  bool attached = false;
  bool on_demand = false;
  bool daemon_allocated = false;
  bool hugetlb = false;
  bool client_region = false;  // AttachRegion: the client's own registration
  // The translation page (2^n bytes) the device uses for the attachment; 0 until attached (and
  // for client regions, whose pages the client's registration chose).
  uint32_t log_page_size = 0;
};

// One target endpoint of a session.
struct EndpointInfo {
  EndpointId id = 0;
  hca::EndpointAddress local;   // the daemon's side: what the peer connects its QP to
  hca::EndpointAddress remote;  // the peer's, as the client named it
  hca::AccessFlags access = 0;  // remote operations it accepts (rr, rw, a)
  absl::Time created;
};

// One device of the daemon.
struct DeviceStatus {
  DeviceIdentity identity;
  std::string spec;       // as given in DaemonConfig::device
  std::string selection;  // how it was chosen (hca::OpenOptions::selection)
  hca::Capabilities capabilities;
  uint64_t sessions = 0;  // open on it now
  absl::Status health;    // hca::Device::Health: OK, or why it failed (IBV_EVENT_DEVICE_FATAL)
};

struct DaemonStatus {
  // The first device (the sessions' default), as before several devices were served:
  std::string device;            // backend name and device name
  std::string device_selection;  // how it was chosen (hca::OpenOptions::selection)
  hca::Capabilities capabilities;
  std::vector<DeviceStatus> devices;  // every device, in DaemonConfig::device order
  uint64_t sessions = 0;
  bool draining = false;
  absl::Time started;
};

}  // namespace regcache::service
#endif  // REGCACHE_SERVICE_TYPES_H_
