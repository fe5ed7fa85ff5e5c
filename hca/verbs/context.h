// The state every part of the verbs backend shares: the opened device and port, and the table
// of protection domains, memory regions (backings) and memory windows (pooled keys) with what
// each window is bound to. Queues plan their binds against it and apply them under its lock,
// so that the bind's checks (state, variant, PD, range, rights) and its effect are one step.
//
// Public because it is also the plain-verbs half of the mlx5 backend (hca/mlx5): a ConnectX
// opened through DevX keeps its PDs, memory regions, queue-pair state changes, target endpoints
// and peers here, and adds DevX keys and UMR queues of its own.
#ifndef REGCACHE_HCA_VERBS_CONTEXT_H_
#define REGCACHE_HCA_VERBS_CONTEXT_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "base/unique_fd.h"
#include "hca/device.h"
#include "hca/verbs/verbs_options.h"

namespace regcache::hca::verbs {

struct MrRecord {
  ibv_mr* mr = nullptr;
  Pd pd;
  uint64_t addr = 0;  // the daemon's mapping (imported: the iova; the daemon has no mapping)
  uint64_t iova = 0;  // the first address of the key's address space
  uint64_t length = 0;
  AccessFlags access = 0;  // what windows on it may grant
  // A client's region (ImportMr): destroying the key unimports it (ibv_unimport_mr), never
  // deregisters it; its owner does that.
  bool imported = false;
  // A dma-buf's (RegisterDmabuf): the daemon has no mapping of it (addr is the iova).
  bool dmabuf = false;
};

// A type-1 window and what it is bound to. `seq` changes with every change of state, so that
// undoing a failed bind never overwrites a later one.
struct MwRecord {
  ibv_mw* mw = nullptr;
  Pd pd;
  bool live = false;
  Key key = 0;           // the current rkey (mw->rkey)
  ibv_mr* mr = nullptr;  // live: the region it is bound on; free: the last one (or null)
  Key parent = 0;        // the backing's lkey or the parent window's rkey
  Key base = 0;          // live: the lkey of the backing beneath (the parent's, for a window's)
  // Live, with cut backings (Context::cut_backings): the region of its own, registered over
  // exactly [start, start + length), that it is bound on (== mr). Owned by the record.
  ibv_mr* cut = nullptr;
  uint64_t start = 0;
  uint64_t length = 0;
  AccessFlags access = 0;
  uint64_t seq = 0;
  // PostBindList: the number of the list this window's newest bind was put in (none: 0). The
  // list being built has a number no earlier list had, so only its own windows match it.
  uint64_t listed = 0;
};

// A bind ready to post: the verb's arguments and the window's record before and after.
struct BindPlan {
  ibv_mw* mw = nullptr;  // null: nothing to post (an invalidate of a window never bound)
  ibv_mw_bind bind{};
  MwRecord before;
  MwRecord after;
};

// One map or invalidate as a queue holds it between Post* and Doorbell.
struct BindRequest {
  bool invalidate = false;
  Key key = 0;
  KlmEntry entry;  // map: the one entry
  uint8_t new_variant = 0;
  AccessFlags access = 0;
  bool require_free = true;
};

class Context {
 public:
  Context(ibv_context* ctx, const VerbsOptions& options) : ctx_(ctx), options_(options) {}
  ~Context();  // releases what is left: windows, regions, PDs, then the device

  ibv_context* ctx() const { return ctx_; }
  const VerbsOptions& options() const { return options_; }
  VerbsStats& stats() { return stats_; }
  const VerbsStats& stats() const { return stats_; }

  // Filled once by the device while opening, read-only afterwards.
  ibv_device_attr_ex attr{};
  ibv_port_attr port_attr{};
  ibv_gid gid{};

  // Watches the device's asynchronous events (ibv_get_async_event on a non-blocking async_fd)
  // on a thread of its own until the context closes: each event is logged and acknowledged;
  // IBV_EVENT_DEVICE_FATAL marks the device failed for good (health()). The backend starts it
  // once, after opening.
  absl::Status StartEventWatch();
  // OK, or kUnavailable saying that and when the device reported a fatal error.
  absl::Status health() const;

  // The verbs PD of `pd`, or kFailedPrecondition naming it.
  absl::StatusOr<ibv_pd*> FindPd(Pd pd);
  absl::StatusOr<Pd> AddPd(ibv_pd* pd);
  absl::Status RemovePd(Pd pd);

  // Tables keyed by key index (the key >> 8): regions and windows share the device's key space.
  absl::Status AddMr(const MrRecord& r);
  absl::Status AddMw(ibv_mw* mw, Pd pd);
  absl::Status DestroyKey(Key key);
  // The region whose key index is `key`'s, or kNotFound.
  absl::StatusOr<MrRecord> FindMr(Key key);
  absl::StatusOr<KeyInfo> QueryKey(Key key);

  // Clients' own PDs and memory (hca::Device::ExportPd / ImportBacking, docs/client_memory.md).
  // OK when this provider can import a PD of this context (ibv_import_pd of a scratch PD);
  // kUnimplemented saying why not (EOPNOTSUPP: rdma-core implements the import verbs for mlx5
  // only). Done once at open: the answer is Capabilities::pd_export.
  absl::Status ProbePdImport();
  // A duplicate of the command fd (close-on-exec; the caller closes it) and `pd`'s handle.
  // ExportPd and ImportMr answer ProbePdImport's refusal until a probe succeeded.
  absl::StatusOr<PdExport> ExportPd(Pd pd);
  // ibv_import_mr of a client's region in `pd`, checked and added as an imported MrRecord;
  // errors as hca::Device::ImportBacking.
  absl::StatusOr<Backing> ImportMr(Pd pd, const ImportedRegion& region);

  // ibv_reg_dmabuf_mr of [buf.offset, +length) of a dma-buf at `iova` in `pd` with `flags`
  // (IBV_ACCESS_*), added as a dma-buf MrRecord granting `access`; errors as
  // hca::Device::RegisterDmabufBacking, naming `backend`.
  absl::StatusOr<Backing> RegisterDmabuf(absl::string_view backend, Pd pd, const DmabufRange& buf,
                                         uint64_t length, uint64_t iova, AccessFlags access,
                                         unsigned flags);

  // Cut backings (hca::OpenOptions::strict_key_bounds on a device that checks a window only
  // against its memory region): every map binds its window on a region of its own registered
  // over exactly the key's range, so that the device's region check is the key's range.
  // Set once while opening, before any queue exists.
  void set_cut_backings(bool on) { cut_backings_ = on; }
  bool cut_backings() const { return cut_backings_; }
  // With cut backings, the region a map of `request` will bind on: registered here, outside the
  // lock (registering pins the pages: its cost grows with the length), from the daemon's
  // mapping of the backing beneath the entry, at the key's addresses. nullptr without cut
  // backings, for invalidates, and for entries that Plan will refuse anyway. The caller passes
  // it to PostBind and, if PostBind fails, releases it (ReleaseCut).
  absl::StatusOr<ibv_mr*> PrepareCut(Pd queue_pd, const BindRequest& request);
  // Deregisters a cut region no window is bound on any more (counted; a refusal is logged).
  void ReleaseCut(ibv_mr* cut);

  // Binds posted as lists: many IBV_WR_BIND_MW work requests of type-1 windows in one
  // ibv_post_send (one doorbell), rather than one ibv_bind_mw (one doorbell) each. The verbs API
  // documents ibv_bind_mw for type-1 windows; rdma-core's rxe and mlx5 providers implement it as
  // exactly such a work request, and take a list of them. Set once while opening, only when the
  // self-test (ProbeBindLists) saw a list bind two windows that then served reads through
  // another queue pair; read-only afterwards.
  void set_bind_lists(bool on) {
    bind_lists_ = on;
    stats_.bind_lists.Set(on ? 1 : 0);
  }
  bool bind_lists() const { return bind_lists_; }
  struct BindItem {
    const BindRequest* request = nullptr;
    uint64_t wr_id = 0;
    bool signaled = true;
    // The answer, made where the caller keeps it (a plan is two window records: not copied
    // through a StatusOr and a vector). OK with plan->mw set: posted; OK without: nothing to
    // post (as PostBind's); else the refusal. REQUIRES: plan default-constructed.
    BindPlan* plan = nullptr;
    absl::Status* status = nullptr;
  };
  // PostBind for each item in order, all under one hold of the lock, the binds posted as lists
  // (never with cut backings: each map would first need a region of its own).
  // A window already in the list being built sends that list first (a work request names the
  // window's rkey, which the provider reads at post time and the caller advances after). A
  // failed post refuses its unposted work requests and every later item with the errno's
  // status, their effects on the table undone.
  void PostBindList(ibv_qp* qp, Pd queue_pd, absl::Span<const BindItem> items);

  // Checks `request` against the tables and, if it may go, applies its effect to the window's
  // record and posts it with ibv_bind_mw on `qp` (wr_id `wr_id`; signalled or not as asked),
  // all under the lock. `cut`: PrepareCut's region for this request (a map with cut backings).
  // A refusal is DeviceError(kMwBind, why) and changes nothing; a failed post is the errno's
  // status (the window keeps its record).
  absl::StatusOr<BindPlan> PostBind(ibv_qp* qp, Pd queue_pd, const BindRequest& request,
                                    uint64_t wr_id, ibv_mr* cut = nullptr, bool signaled = true);
  // A bind completed successfully: the window has left the region it was bound on before, so a
  // cut region of its own it had then is released.
  void BindDone(const BindPlan& plan);
  // Undoes a bind that completed with an error or was flushed: the window's record (and
  // mw->rkey) go back to `plan.before` unless something changed them since; a cut region the
  // bind would have moved the window onto is released.
  void UndoBind(const BindPlan& plan);

 private:
  // The plan into *plan (REQUIRES: default-constructed), or the refusal. `record`, if given:
  // the window's record in mws_, where one was found.
  absl::Status Plan(Pd queue_pd, const BindRequest& request, ibv_mr* cut, BindPlan* plan,
                    MwRecord** record = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts the window's record and mw->rkey back to `plan.before`, unless the record changed since
  // the plan was applied (false).
  bool RestoreWindow(const BindPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WatchEvents();     // the event thread's loop
  void StopEventWatch();  // at close, before the device goes
  void OnEvent(const ibv_async_event& event);
  // An invalidate's plan for window `w`: a zero-length bind, or nothing to post (plan->mw null).
  void PlanInvalidate(Pd queue_pd, const MwRecord& w, BindPlan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The backing record beneath a map's entry (the entry's backing, or its parent window's), or
  // null.
  const MrRecord* BaseOf(const KlmEntry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ibv_context* const ctx_;
  const VerbsOptions options_;
  // ProbePdImport's answer (written once while opening, read-only afterwards).
  absl::Status pd_import_ = absl::UnimplementedError("PD import not probed on this device");
  VerbsStats stats_;
  bool cut_backings_ = false;
  bool bind_lists_ = false;
  // The event watch: its thread, the eventfd that stops it, and what it found.
  std::thread events_;
  base::UniqueFd stop_events_;
  std::atomic<bool> failed_{false};
  mutable base::Mutex health_mu_;
  absl::Status health_ ABSL_GUARDED_BY(health_mu_);
  base::Mutex mu_;
  uint32_t next_pdn_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_list_ ABSL_GUARDED_BY(mu_) = 1;  // PostBindList's list numbers (MwRecord::listed)
  absl::flat_hash_map<uint32_t, ibv_pd*> pds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, MrRecord> mrs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, MwRecord> mws_ ABSL_GUARDED_BY(mu_);
};

// How OpenContext opens a device: the verbs backend's defaults, or another backend's (mlx5 opens
// through mlx5dv with DevX and does not need memory windows).
struct ContextOpener {
  const char* backend = "verbs";  // names the backend in messages
  // Opens one device, or returns null with errno set; null: ibv_open_device.
  std::function<ibv_context*(ibv_device*)> open;
  const char* open_call = "ibv_open_device";  // names `open` in messages
  bool require_memory_windows = true;
};

// Opens the device `options` names (or the first that opens with an active port) and fills the
// context's attributes. kUnavailable with the reason (and the devices seen) when it cannot.
absl::StatusOr<std::unique_ptr<Context>> OpenContext(const VerbsOptions& options,
                                                     const ContextOpener& opener = {});

// An RC queue pair of `pd` with `cq` for both queues and room for `send_wr` sends; a random
// 24-bit PSN; the queue pair and CQ destroyed (null ones skipped), failures logged as `what`.
absl::StatusOr<ibv_qp*> CreateRcQp(ibv_pd* pd, ibv_cq* cq, uint32_t send_wr);
uint32_t RandomPsn();
void DestroyQpAndCq(ibv_qp* qp, ibv_cq* cq, const char* what);

// Queue-pair state changes for RC queue pairs (the bind queues' self-connection and the target
// endpoints). `access` is the INIT state's remote rights (IBV_ACCESS_REMOTE_*).
absl::Status QpToInit(const Context& c, ibv_qp* qp, unsigned access);
absl::Status QpToRtr(const Context& c, ibv_qp* qp, const EndpointAddress& remote);
absl::Status QpToRts(const Context& c, ibv_qp* qp, uint32_t psn);
// RESET -> INIT (`access`) -> RTR -> RTS, connected to itself, sending from `psn`: a queue pair
// that loops back (the bind queues; the self-test at open). Also how one recovers after an error.
absl::Status ConnectToSelf(const Context& c, ibv_qp* qp, unsigned access, uint32_t psn);

// 4 KiB pages [addr, addr + length) touches (the only page size the backend registers).
inline uint32_t Pages4k(uint64_t addr, uint64_t length) {
  return static_cast<uint32_t>(((addr & 4095) + length + 4095) / 4096);
}

// This port's address for a queue pair `qpn` sending from `psn`.
EndpointAddress LocalAddress(const Context& c, uint32_t qpn, uint32_t psn);

// MTU bytes <-> enum ibv_mtu. MtuFromBytes: nullopt for anything but 256..4096 powers of two.
std::optional<ibv_mtu> MtuFromBytes(uint32_t bytes);
uint32_t MtuBytes(ibv_mtu mtu);

// The remote rights of `access` as IBV_ACCESS_REMOTE_* bits.
unsigned RemoteAccessFlags(AccessFlags access);

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_CONTEXT_H_
