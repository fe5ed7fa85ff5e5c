// hca::Device — the device boundary, as callers (cache/, odp/, service/, tests) see it.
//
// Purpose: the semantic operations the daemon needs from an RDMA adapter to hand out memory keys
// fast, with no bytes, no ibverbs and no PRM in sight. Three backends implement it:
//   sim    the software HCA (hca/sim): executes the PRM bytes umr/ builds; the default device;
//   mlx5   real ConnectX through DevX + raw UMR WQEs built by umr/;
//   verbs  any verbs device through plain libibverbs: backings are ibv_reg_mr, "indirect keys"
//          are type-1 memory windows (a map is a bind, an invalidate a zero-length bind), no ODP.
// A backend reports what it can do in Capabilities and returns kUnimplemented for the rest.
// Backends are opened by name with hca::OpenDevice (below; the registry behind it, for
// implementers, is hca/backend.h).
//
// Keys: a key is the 32-bit mkey, index<<8 | variant; the same value serves as lkey and rkey.
// The cache owns the variant: every map of a pooled key names the variant the key takes
// (MapRequest::new_variant), and the key value the caller keeps afterwards is
// MakeKey(KeyIndex(key), new_variant). Data accesses (Peer) check the full key, variant
// included. Queue requests and commands (DestroyKey, QueryKey) locate the target by INDEX only,
// as UMR WQEs and firmware commands do; pass the current full key anyway.
//
// Ownership: the caller owns the Device and everything it returns through unique_ptr (queues,
// peers); they must be destroyed before the Device. Keys and PDs are plain values; destroying
// them is explicit (DestroyKey, DeallocPd). Destroying the Device releases everything left.
//
// Thread safety: Device and Peer methods may be called from any thread concurrently. A Queue
// is NOT internally synchronized for posting: one thread (or one lock) per queue posts, rings
// and polls, as with a real send queue. Fault events may be consumed by one thread while others
// use the device.
//
// Ordering: requests on one queue execute in posting order. A request posted with `fence`
// starts only after every earlier request on the same queue has completed (a UMR-style fence);
// once a request's completion is polled (or a later signalled one's, see selective signalling)
// its effect is visible to every subsequent access through the device, from any queue or peer.
// Accesses already in flight when a key is changed are not stopped (as on hardware).
#ifndef REGCACHE_HCA_DEVICE_H_
#define REGCACHE_HCA_DEVICE_H_

#include <array>
#include <cstddef>
#include <cstdint>
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
#include "hca/dmabuf.h"
#include "hca/status.h"
#include "umr/mkey.h"

namespace regcache::hca {

// ---------------------------------------------------------------------------------------------
// Keys, access rights, PDs.

using Key = uint32_t;

// The key helpers are the PRM codec's (umr/mkey.h), re-exported so callers of the device say
// hca::MakeKey, hca::KeyIndex, hca::KeyVariant, hca::NextVariant.
using umr::KeyIndex;
using umr::KeyVariant;
using umr::MakeKey;
using umr::NextVariant;

// Access rights of a key (the MKC's lr/lw/rr/rw/a bits). Local read is implied on every key the
// device creates or maps: the hardware requires it for any access.
enum AccessBits : uint32_t {
  kLocalRead = 1u << 0,
  kLocalWrite = 1u << 1,
  kRemoteRead = 1u << 2,
  kRemoteWrite = 1u << 3,
  kRemoteAtomic = 1u << 4,
};
using AccessFlags = uint32_t;  // an OR of AccessBits
inline constexpr AccessFlags kAllAccess =
    kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic;

// "lr|lw|rr" style rendering for messages and logs.
std::string AccessToString(AccessFlags access);

// A protection domain (the PRM's pdn). One per tenant. Keys and queues belong to one PD; a queue
// may modify and a peer may access only keys of its own PD.
struct Pd {
  uint32_t pdn = 0;
  friend bool operator==(Pd a, Pd b) { return a.pdn == b.pdn; }
};

// ---------------------------------------------------------------------------------------------
// Capabilities.

// Which range the device enforces when a peer accesses memory through one of the daemon's keys
// (docs/key_bounds.md). A key that reaches past its own range reaches only memory of the same
// attachment of the same session: every backend enforces the backing and the PD.
enum class KeyBounds : uint8_t {
  kUnknown = 0,     // not established (the self-test could not tell; a peer's view is unknown)
  kKey = 1,         // the key's own range: the device checks every access against it
  kCut = 2,         // the key's own range, because the backend gives every key a memory region of
                    // its own cut at the key's edges (OpenOptions::strict_key_bounds)
  kAttachment = 3,  // only its attachment's range: the device checks a memory window against the
                    // memory region it is bound on (Soft-RoCE), and one region spans an attachment
};
// "unknown", "key", "cut", "attachment"; "invalid" for anything else.
const char* KeyBoundsName(KeyBounds b);
// Whether a peer holding a key is confined to the key's own range.
inline bool KeyRangeEnforced(KeyBounds b) { return b == KeyBounds::kKey || b == KeyBounds::kCut; }

struct Capabilities {
  std::string backend;           // "sim", "mlx5", "verbs"
  std::string device_name;       // e.g. "sim0", "mlx5_0", "rxe0"
  uint32_t max_klm_entries = 0;  // per indirect key (2^log_max_klm_list_size)
  uint32_t max_inline_klm = 0;   // KLM entries that fit inline in one map request
  // Longer maps travel by pointer (the queue stages the list in registered memory), up to
  // max_klm_entries; without it a map carries at most max_inline_klm entries.
  bool umr_pointer_translation = false;
  uint32_t max_indirection = 0;  // nesting depth of keys through KLM/KSM entries
  // Bit n set: 2^n bytes is a supported MTT/KSM page size (BackingOptions::log_page_size).
  uint64_t page_size_mask = 0;
  uint64_t max_key_length = 0;   // largest length of one key (0 = 2^64 via length64)
  uint32_t max_queue_depth = 0;  // largest QueueOptions::depth
  uint32_t max_keys = 0;         // size of the key table
  bool umr = false;              // PostMap/PostUpdate/PostRewriteTranslation on queues
  // Indirect keys are type-1 memory windows (verbs backend). Then, unlike a UMR: a map binds
  // the window and always gives it the next variant (MapRequest::new_variant must be
  // NextVariant of the key's current value); an invalidate is a zero-length bind that also
  // moves the key to its next variant (the cache keeps NextVariant(key) as the free key); a live
  // key cannot be re-mapped in place; every key has one KLM entry, on a backing or on another
  // live window key (whose range it must stay within).
  bool memory_windows = false;
  bool ksm = false;                 // fixed-size-entry layout (Layout::kKsm)
  bool odp = false;                 // on-demand backings, fault events, resume, prefetch
  bool atomics = false;             // peer CompareSwap / FetchAdd
  bool remote_invalidate = false;   // SEND with invalidate honoured (en_rinval)
  bool translation_offset = false;  // PostRewriteTranslation (partial MTT rewrite)
  bool peer = false;                // CreatePeer
  bool endpoints = false;           // CreateEndpoint
  // What a UMR may change (QUERY_HCA_CAP's umr_modify_atomic_disabled and
  // umr_modify_entity_size_disabled, inverted; meaningful with `umr`): without the first, maps
  // cannot grant remote atomics (pooled keys are created without them); without the second, a
  // KSM or MTT key keeps the entity size it was created with.
  bool umr_modify_atomic = false;
  bool umr_modify_entity_size = false;
  // ExportPd and ImportBacking work: a client process may import a PD of this device (its
  // provider implements ibv_import_device / ibv_import_pd / ibv_import_mr) and register its own
  // memory in it (docs/client_memory.md).
  bool pd_export = false;
  bool dmabuf = false;  // RegisterDmabufBacking is implemented (the provider answers at use)
  // Which NIC this is, for clients that must pair keys with their own queue pairs on the same
  // device (a daemon may serve several): the node GUID (host byte order; ibv_query_device's
  // node_guid) and the port's GID at the index the backend uses (network order, as
  // ibv_query_gid returns it; on RoCE it carries the port's IP address). The sim invents stable
  // ones from its device name. Zero where a backend cannot tell.
  uint64_t node_guid = 0;
  uint8_t port = 0;  // the port the GID belongs to (1-based; 0: none)
  std::array<uint8_t, 16> gid{};
  // What bounds a peer's access through a key (KeyBounds), and how the backend knows: by design
  // (sim, ConnectX) or by the self-test it ran at open (verbs; the result, in words).
  KeyBounds key_bounds = KeyBounds::kUnknown;
  std::string key_bounds_detail;
};

// ---------------------------------------------------------------------------------------------
// Translation layouts, as the cache describes them.

// One variable-length piece of an indirect key: `length` bytes starting at `addr` in the address
// space of `key` (a backing key, a direct key or another indirect key).
struct KlmEntry {
  Key key = 0;
  uint64_t addr = 0;
  uint64_t length = 0;  // REQUIRES: 0 < length <= 2^31 for a map
  friend bool operator==(const KlmEntry&, const KlmEntry&) = default;
};

// One page of a direct key: the DMA address of the page (aligned to the key's page size; the
// low 8 bits are not stored) and its rights. read == write == false: the entry is absent (an
// ODP backing faults on it; any other key fails the access).
struct MttEntry {
  uint64_t dma_addr = 0;
  bool read = false;
  bool write = false;
  friend bool operator==(const MttEntry&, const MttEntry&) = default;
};

enum class Layout : uint8_t {
  kKlm,  // variable entries (KlmEntry::length), the default for pooled indirect keys
  kKsm,  // fixed entries: every entry covers 2^log_entity_size bytes, KlmEntry::length ignored
  kMtt,  // direct: pages of 2^log_entity_size bytes (only on direct keys)
};

// ---------------------------------------------------------------------------------------------
// Backings and pooled keys.

struct BackingOptions {
  bool on_demand = false;  // ODP: translations absent until faulted/prefetched/rewritten
  // MTT page size (2^n bytes); REQUIRES: its bit in Capabilities::page_size_mask. A hint from
  // the memory's virtual layout (addr and length multiples of the page, huge pages or a 2 MiB
  // aligned shmem mapping), not a promise about physical memory: a page above the OS page is
  // correct only where the memory behind each translation page is physically contiguous, so a
  // backend that writes physical addresses into the table must check that and fall back to a
  // smaller page, reporting the one it used in Backing::log_page_size. A backend whose
  // registration picks its own pages (ibv_reg_mr: the kernel uses the largest the pinned pages
  // allow) advertises 4 KiB only and reports 12 whatever the kernel used. The sim, whose DMA
  // addresses are the daemon's virtual addresses, honours any size exactly; its key table
  // holds one 8-byte entry per translation page, so a larger page shrinks it proportionally.
  uint32_t log_page_size = 12;
  // The first address of the key's address space, when it is not `addr` (ibv_reg_mr_iova2):
  // memory-window backends need it, because a window's addresses are its backing's, so the
  // backing must already speak the tenant's addresses. Backends without memory_windows return
  // kUnimplemented for it.
  std::optional<uint64_t> iova;
};

// A registration of memory the daemon has mapped: a direct (MTT) key over [addr, addr+length).
// The key's address space is the daemon's virtual addresses (start_addr = addr), or
// BackingOptions::iova onwards where given.
struct Backing {
  Key key = 0;
  Pd pd;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t log_page_size = 12;
  uint32_t num_entries = 0;  // MTT entries covering the range (ceil(((S mod P)+len)/P))
  bool on_demand = false;
};

// What another process needs to use a PD of the device as its own (ibv_import_device on the fd,
// then ibv_import_pd with the handle): it then creates queue pairs and memory regions in it.
struct PdExport {
  int cmd_fd = -1;         // a duplicate of the device context's command fd: the caller closes it
  uint32_t pd_handle = 0;  // the PD's handle in that context (ibv_pd::handle)
};

// A memory region another process registered in an exported PD (ibv_reg_mr, ibv_reg_dmabuf_mr
// on that process's imported context), as that process describes it. The device checks what it
// can see (that the handle names a region, and its length); the address it must take on trust.
struct ImportedRegion {
  uint32_t handle = 0;  // ibv_mr::handle in the device context both processes share
  uint64_t iova = 0;    // the region's first address (ibv_mr::addr, or the dma-buf's iova)
  uint64_t length = 0;  // ibv_mr::length; must be the device's length of the region
  // What keys over it may grant (local read is added); the region must have been registered
  // with at least these rights (and IBV_ACCESS_MW_BIND on memory-window devices), or the device
  // refuses the maps that need them.
  AccessFlags access = kLocalRead;
};

struct IndirectKeyOptions {
  bool remote_invalidate = false;  // en_rinval: the key may be invalidated by SEND with invalidate
  // kKlm (default) or kKsm. The layout is fixed at creation (a UMR cannot change the access
  // mode): every MapRequest on the key must use the same layout.
  Layout layout = Layout::kKlm;
  uint32_t log_entity_size = 12;  // kKsm: bytes covered by each entry (2^n); maps may change it
};

struct DirectKeyOptions {
  uint32_t log_page_size = 12;
  bool remote_invalidate = false;
};

// A decoded QUERY_MKEY image, for diagnostics and tests.
struct KeyInfo {
  Key key = 0;  // index<<8 | the variant the key currently accepts
  bool free = true;
  bool umr_en = false;
  Layout layout = Layout::kKlm;  // kMtt for direct keys
  uint8_t access_mode = 0;       // the raw 5-bit PRM access mode (1 MTT, 2 KLM, 3 KSM)
  AccessFlags access = 0;
  Pd pd;
  uint64_t start_addr = 0;
  uint64_t length = 0;
  bool length64 = false;
  bool remote_invalidate = false;
  uint32_t log_entity_size = 0;
  uint32_t capacity_entries = 0;  // translation entries the key can hold
  std::vector<KlmEntry> klm;      // KLM/KSM keys: the whole table (length 0 for KSM entries)
  std::vector<MttEntry> mtt;      // MTT keys: the whole table
};

// ---------------------------------------------------------------------------------------------
// Queues: the cache's dedicated send queues for UMR work.

struct PostOptions {
  bool fence = false;    // start only after every earlier request on this queue completed
  bool signaled = true;  // a successful unsignalled request produces no completion
};

// Map a pooled key: give it a new variant, layout, access, range and enable it.
struct MapRequest {
  Key key = 0;                      // the target's current full key
  uint8_t new_variant = 0;          // the variant the key accepts afterwards
  Layout layout = Layout::kKlm;     // must be the key's creation layout (kMtt: direct keys)
  absl::Span<const KlmEntry> klm;   // kKlm / kKsm; copied at post time
  absl::Span<const MttEntry> mtt;   // kMtt; copied at post time
  uint32_t log_entity_size = 12;    // kKsm / kMtt
  AccessFlags access = kLocalRead;  // local read is added if missing
  uint64_t start_addr = 0;          // first address of the key's address space
  uint64_t length = 0;              // bytes; with length64 the key spans 2^64 bytes
  bool length64 = false;
  bool remote_invalidate = false;  // en_rinval
  bool require_free = true;        // fail (kMwBind) unless the key is currently free
  PostOptions options;
};

// Update selected fields of a live key (fails if the key is free). The translation is kept.
enum UpdateFields : uint32_t {
  kUpdateAccess = 1u << 0,
  kUpdateRange = 1u << 1,  // start_addr, length, length64
  kUpdateVariant = 1u << 2,
  kUpdateRemoteInvalidate = 1u << 3,
};
struct UpdateRequest {
  Key key = 0;
  uint32_t fields = 0;  // an OR of UpdateFields; REQUIRES: non-zero
  AccessFlags access = kLocalRead;
  uint64_t start_addr = 0;
  uint64_t length = 0;
  bool length64 = false;
  uint8_t new_variant = 0;
  bool remote_invalidate = false;
  PostOptions options;
};

// One completion. Errors always complete (even unsignalled requests); a signalled success also
// retires every earlier unsignalled success on the queue.
struct Completion {
  uint64_t request_id = 0;
  absl::Status status;  // OK or DeviceError(...) (code, syndrome, reason)
  Syndrome syndrome = Syndrome::kNone;
  uint8_t vendor_syndrome = 0;
};

struct QueueOptions {
  uint32_t depth = 256;  // in 64-byte WQE basic blocks; REQUIRES: power of two <= max_queue_depth
};

class Queue {
 public:
  virtual ~Queue() = default;

  virtual Pd pd() const = 0;
  // Free ring space, in the units of QueueOptions::depth.
  virtual uint32_t FreeSlots() const = 0;

  // Post* encode a request into the ring; nothing executes until Doorbell(). All return
  // kResourceExhausted when the ring has no room (poll completions first), kInvalidArgument
  // for requests that break their REQUIRES (nothing posted), kUnimplemented when the backend
  // cannot do the operation. Key-state errors (free, PD, capacity, umr_en, variant) are NOT
  // reported here: they come back as error completions, because the device decides them.

  // REQUIRES: klm.size() (or mtt.size()) <= the key's capacity; entries > 0 unless the
  // length is 0.
  virtual absl::Status PostMap(uint64_t request_id, const MapRequest& request) = 0;
  virtual absl::Status PostUpdate(uint64_t request_id, const UpdateRequest& request) = 0;
  // Local invalidate: the key becomes free (its variant and translation are kept); accesses
  // through it fail from the completion on. Invalidating a window never touches its parent.
  virtual absl::Status PostInvalidate(uint64_t request_id, Key key, PostOptions options) = 0;
  // Rewrites MTT entries [first_entry, first_entry + entries.size()) of a live direct key (an
  // ODP backing being faulted in or zapped). The device writes whole 64-byte blocks, so the
  // range must cover whole blocks of 8 entries (padding would overwrite the neighbours).
  // REQUIRES: first_entry % 8 == 0; entries.size() a non-zero multiple of 8.
  virtual absl::Status PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                              absl::Span<const MttEntry> entries,
                                              PostOptions options) = 0;

  // Publishes everything posted so far to the device (the doorbell).
  virtual absl::Status Doorbell() = 0;

  // Moves up to out.size() completions into `out`; returns how many. Never blocks.
  virtual size_t Poll(absl::Span<Completion> out) = 0;

  // Waits until every request rung so far has executed and its completion (if any) is ready to
  // poll, or the timeout passes (kDeadlineExceeded).
  virtual absl::Status Flush(absl::Duration timeout) = 0;
};

// ---------------------------------------------------------------------------------------------
// The peer data path: what a remote node (or the local requester) does with keys.

// A connected endpoint in one PD. Remote operations use rkeys (remote rights: rr, rw, a); local
// operations use lkeys as the local HCA does for SGEs (lr to read local memory for a SEND or
// WRITE source, lw to write it for a RECV, READ result or atomic return).
// Every call returns OK, or DeviceError with the syndrome the requester would see
// (kRemoteAccess for rkey failures, kLocalProt for lkey failures, kRemoteInvalReq for a
// misaligned atomic or a refused remote invalidation, vendor 0x93 for an ODP fault resumed with
// error). An access that hits an absent ODP page blocks until the fault is resumed (or the
// backend's fault timeout passes: kDeadlineExceeded).
class Peer {
 public:
  virtual ~Peer() = default;

  virtual Pd pd() const = 0;

  // RDMA WRITE of `data` to [remote_addr, +size) through `rkey` (needs rw).
  virtual absl::Status Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data) = 0;
  // RDMA READ of out.size() bytes from remote_addr through `rkey` (needs rr).
  virtual absl::Status Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out) = 0;
  // 8-byte atomics (need a; REQUIRES remote_addr % 8 == 0 else kRemoteInvalReq). Return the
  // value before the operation.
  virtual absl::StatusOr<uint64_t> CompareSwap(Key rkey, uint64_t remote_addr, uint64_t compare,
                                               uint64_t swap) = 0;
  virtual absl::StatusOr<uint64_t> FetchAdd(Key rkey, uint64_t remote_addr, uint64_t add) = 0;
  // SEND with invalidate: the responder frees `rkey` (needs en_rinval on that key).
  virtual absl::Status SendWithInvalidate(Key rkey) = 0;

  // Local SGE access through an lkey.
  virtual absl::Status LocalRead(Key lkey, uint64_t addr, absl::Span<uint8_t> out) = 0;
  virtual absl::Status LocalWrite(Key lkey, uint64_t addr, absl::Span<const uint8_t> data) = 0;
};

// ---------------------------------------------------------------------------------------------
// Target endpoints: reliable-connected queue pairs that serve a remote node's one-sided
// operations (RDMA READ, WRITE, atomics) on the keys of their PD, with no posting on this side.
// This is how a tenant's memory is reached remotely on devices whose PDs cannot be shared with
// the tenant's process.

// What one side of an RC connection tells the other (the out-of-band exchange every RDMA
// connection manager does).
struct EndpointAddress {
  uint32_t qpn = 0;               // queue pair number (24 bits)
  uint32_t psn = 0;               // first packet sequence number this side sends (24 bits)
  std::array<uint8_t, 16> gid{};  // RoCE: the port GID (raw bytes, network order); IB: may be 0
  uint16_t lid = 0;               // InfiniBand only (0 on RoCE)
  // Path MTU in bytes (256, 512, 1024, 2048, 4096); 0 in a request: the local port's active MTU.
  uint32_t mtu = 0;
  friend bool operator==(const EndpointAddress&, const EndpointAddress&) = default;
};

struct EndpointOptions {
  // Remote operations the queue pair accepts (kRemoteRead, kRemoteWrite, kRemoteAtomic); each
  // access is still checked against the rkey it names. REQUIRES: no local bits.
  AccessFlags remote_access = kRemoteRead | kRemoteWrite | kRemoteAtomic;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;  // destroys the queue pair: the remote side's accesses fail

  virtual Pd pd() const = 0;
  // This side's address: what the remote peer connects its queue pair to.
  virtual const EndpointAddress& local() const = 0;
  // Connects to the remote queue pair (INIT -> RTR -> RTS). Once, before any traffic.
  // kFailedPrecondition if already connected; kInvalidArgument for a malformed address (qpn or
  // psn over 24 bits, unsupported mtu, a zero GID on a RoCE port); the device's error otherwise.
  virtual absl::Status Connect(const EndpointAddress& remote) = 0;
};

// ---------------------------------------------------------------------------------------------
// ODP.

// An access hit an absent MTT entry of an on-demand backing and is parked until ResumeFault.
struct FaultEvent {
  uint64_t token = 0;    // pass to ResumeFault
  Key key = 0;           // the backing (MTT) key whose entry is absent
  uint64_t address = 0;  // first faulting address in that key's address space
  uint64_t length = 0;   // bytes the parked access needs from `address` within this key
  bool write = false;    // the access needs write permission
};

// ---------------------------------------------------------------------------------------------
// The device.

class Device {
 public:
  virtual ~Device() = default;

  virtual const Capabilities& capabilities() const = 0;
  // OK while the device works; kUnavailable, saying why and since when, once it has failed for
  // good (a NIC's IBV_EVENT_DEVICE_FATAL: every later call on it fails). Cheap (one load and,
  // once failed, a copy): callers may ask on every request. The sim never fails.
  virtual absl::Status Health() const { return absl::OkStatus(); }

  // Protection domains. DeallocPd: kFailedPrecondition while keys or queues of the PD exist.
  virtual absl::StatusOr<Pd> AllocPd() = 0;
  virtual absl::Status DeallocPd(Pd pd) = 0;

  // Registers [addr, addr+length) of this process's memory as a direct key (live, umr_en, MTT,
  // start_addr = addr). Pinned backings get every entry present with rights from `access`;
  // on_demand ones start with every entry absent.
  // Errors: kInvalidArgument (length 0, unsupported page size, access without local read is
  // fine: lr is added), kResourceExhausted (key table full), kUnimplemented (on_demand without
  // Capabilities::odp).
  virtual absl::StatusOr<Backing> RegisterBacking(Pd pd, uint64_t addr, uint64_t length,
                                                  AccessFlags access,
                                                  const BackingOptions& options) = 0;

  // Creates `count` free, umr_en indirect (KLM) keys of `capacity_entries` entries each,
  // variant 0. REQUIRES: 0 < capacity_entries <= max_klm_entries (rounded up to a multiple of 4).
  virtual absl::StatusOr<std::vector<Key>> CreateIndirectKeys(
      Pd pd, uint32_t capacity_entries, uint32_t count, const IndirectKeyOptions& options) = 0;

  // Creates `count` free, umr_en direct (MTT) keys of `capacity_entries` pages each, variant 0.
  // REQUIRES: capacity_entries > 0 (rounded up to a multiple of 8).
  virtual absl::StatusOr<std::vector<Key>> CreateDirectKeys(Pd pd, uint32_t capacity_entries,
                                                            uint32_t count,
                                                            const DirectKeyOptions& options) = 0;

  // DESTROY_MKEY. The index may be reused by a later create. kNotFound if the key's index is
  // not a live key (the variant is not checked: commands name keys by index).
  virtual absl::Status DestroyKey(Key key) = 0;

  // QUERY_MKEY, decoded. kNotFound as for DestroyKey.
  virtual absl::StatusOr<KeyInfo> QueryKey(Key key) = 0;

  // A dedicated send queue (with its completion queue) in `pd`.
  virtual absl::StatusOr<std::unique_ptr<Queue>> CreateQueue(Pd pd,
                                                             const QueueOptions& options) = 0;

  // A peer endpoint whose accesses arrive at a queue pair of `pd`.
  virtual absl::StatusOr<std::unique_ptr<Peer>> CreatePeer(Pd pd) = 0;

  // A target endpoint in `pd`, not yet connected (Endpoint::Connect). kUnimplemented without
  // Capabilities::endpoints; kResourceExhausted when the device has no queue pair left.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(
      Pd pd, const EndpointOptions& options) = 0;

  // ODP. NextFaultEvent waits up to `timeout` for the next unreported fault
  // (kDeadlineExceeded when none). FaultEventFd is readable (eventfd semantics) while events are
  // pending, or -1 if the backend has none. ResumeFault(ok = true) retries the parked access
  // (which may fault again); ok = false fails it with vendor syndrome 0x93. kNotFound for an
  // unknown or already resumed token.
  virtual absl::StatusOr<FaultEvent> NextFaultEvent(absl::Duration timeout) = 0;
  virtual int FaultEventFd() = 0;
  virtual absl::Status ResumeFault(uint64_t token, bool ok) = 0;

  // Makes the translations of [addr, addr+length) of an on-demand backing present (for write
  // too when `write`), synchronously. kInvalidArgument if `backing` is not an on-demand backing
  // or the range is outside it.
  virtual absl::Status Prefetch(Key backing, uint64_t addr, uint64_t length, bool write) = 0;

  // Registers [buf.offset, +length) of a dma-buf (hca/dmabuf.h) as a direct key whose
  // addresses start at `iova` (ibv_reg_dmabuf_mr): the daemon never maps it. Backing::addr is
  // the key's address of the first byte (`iova`; on the sim, which maps the buffer to play the
  // device, the mapping's). Pinned; DestroyKey deregisters it. kUnimplemented where the
  // backend, provider or kernel driver cannot (the message names which; the default);
  // kInvalidArgument for a length of 0, a wrapping range, an fd that is not a dma-buf or a
  // range outside it; errno-based errors of the registration.
  virtual absl::StatusOr<Backing> RegisterDmabufBacking(Pd pd, const DmabufRange& buf,
                                                        uint64_t length, uint64_t iova,
                                                        AccessFlags access);

  // --- Clients' own PDs and memory (Capabilities::pd_export; docs/client_memory.md) ---
  // The defaults answer kUnimplemented: backends without pd_export need not override them.

  // What another process needs to import `pd`: a new duplicate of the device's command fd (the
  // caller owns it) and the PD's handle. Whoever holds the fd reaches every verbs object of the
  // device context by handle, not only this PD (so the daemon opens one per exporting session).
  // kFailedPrecondition for an unknown PD; kUnimplemented without pd_export; errno-based errors.
  virtual absl::StatusOr<PdExport> ExportPd(Pd pd);

  // Makes a region another process registered in `pd` (through ExportPd) a backing of this
  // device, without registering anything: Backing{key = the region's lkey, addr = region.iova,
  // length}. Keys map over it as over RegisterBacking's. The device never reads or writes that
  // memory and never deregisters it: DestroyKey of the backing only forgets (ibv_unimport_mr)
  // it; the region's owner deregisters it, after the backing is destroyed (a region
  // deregistered earlier turns every access through keys over it into an access error).
  // kInvalidArgument for a length of 0, a range that wraps, or a length that is not the
  // device's length of the region; kNotFound when the handle names no region of the shared
  // context; kAlreadyExists when its key is already a backing of this device (the daemon's
  // own, or imported before); kFailedPrecondition for an unknown PD; kUnimplemented without
  // pd_export. A region of another PD of the context cannot always be told at import: then
  // the first map over it fails (the device refuses to bind across PDs).
  virtual absl::StatusOr<Backing> ImportBacking(Pd pd, const ImportedRegion& region);
};

// ---------------------------------------------------------------------------------------------
// Opening a device.

// Options every backend honours.
struct OpenOptions {
  // Where the backend registers its counters (nullptr: not registered anywhere; the backend
  // still counts). Must outlive the device.
  base::stats::Registry* stats_registry = nullptr;
  // Component name for those counters ("hca_sim", ...); empty: "hca_<backend>".
  std::string stats_component;
  // If given, receives how the device was chosen: for "auto", the backend chosen and why each
  // one tried before it was not; for a named device, "named <spec>".
  std::string* selection = nullptr;
  // Where the device checks a key only against the memory region beneath it
  // (KeyBounds::kAttachment), give every key a region of its own cut at its edges
  // (KeyBounds::kCut): each miss then also registers the key's pages (ibv_reg_mr) and each
  // invalidate deregisters them. No effect on a device that enforces a key's own range.
  bool strict_key_bounds = false;
};

// Opens a device by spec: the backend's name and, after a colon, its comma-separated arguments
// ("sim", "sim:mode=thread,max_indirection=2", "verbs:rxe0", "mlx5:mlx5_0,port=1"; the grammar is
// in hca/backend.h). "auto" (no arguments) opens the first that works of mlx5 (a ConnectX with
// DevX), verbs (any RDMA device) and sim, among the registered backends, and says in
// OpenOptions::selection which it chose and why each one before it was not. kNotFound when no
// backend of that name is registered (the message lists the registered ones and, for the project's
// own backend names, says which RegisterBackend() call links it in); kInvalidArgument for a
// malformed spec or parameters the backend does not know; kUnavailable when this machine cannot
// provide the device; otherwise the backend's error.
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view spec,
                                                   const OpenOptions& options = {});

}  // namespace regcache::hca
#endif  // REGCACHE_HCA_DEVICE_H_
