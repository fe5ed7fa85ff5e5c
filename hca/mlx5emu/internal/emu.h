// The emulator's objects behind the rdma-core handles it gives out, and the device they live
// on. Every handle (ibv_context, ibv_pd, ibv_mr, ibv_cq, ibv_qp, mlx5dv_devx_obj,
// mlx5dv_mkey) is the first member of one of these, so the entry points find the object from
// the handle the caller passes back.
//
// Device memory: the send queue buffer, the doorbell records, the BlueFlame register page and
// the CQ buffer are ordinary memory the emulator allocates and hands out by mlx5dv_init_obj.
// The caller writes them with plain stores and fences, as it would a NIC's; the device reads
// and writes them only through the accessors in queues.cc, which copy a WQE out before
// decoding it and publish a CQE's ownership byte last.
//
// The fabric (fabric.cc): a verbs queue pair connected to a GID other than its own device's
// reaches its responder through a unix socket in the abstract namespace named by that GID, so
// queue pairs on two devices, or in two processes, reach each other as two hosts' would.
//
// Thread safety: a Device's tables are guarded by its mutex; the device thread holds it while
// it executes, so destroying a queue pair waits for the WQE in flight. The fabric's threads
// take it only between socket operations, never across one.
#ifndef REGCACHE_HCA_MLX5EMU_INTERNAL_EMU_H_
#define REGCACHE_HCA_MLX5EMU_INTERNAL_EMU_H_

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "base/unique_fd.h"
#include "hca/dmabuf.h"
#include "hca/mlx5emu/internal/images.h"
#include "hca/sim/sim_core.h"
#include "hca/status.h"
#include "umr/cqe.h"

// The opaque DevX object of mlx5dv.h: the emulator's is one mkey.
struct mlx5dv_devx_obj {
  struct ibv_context* context = nullptr;
  uint32_t mkey_index = 0;
};

namespace regcache::hca::mlx5emu {

// What a test run adjusts (mlx5emu.h, REGCACHE_MLX5EMU).
struct Options {
  bool umr_on_devx_mkey = true;
  bool pointer_mr_lkey = true;
  bool variant_on_dv_mkey = true;
  bool devx_mkey = true;
  bool odp = true;
  int umr_fence = -1;  // -1: the model's
  bool umr_modify_atomic_disabled = false;
  bool umr_modify_entity_size_disabled = false;
  int max_wqe_sz_sq = -1;          // -1: the model's
  int log_max_klm_list_size = -1;  // -1: the model's
  bool umr_indirect_mkey_disabled = false;
  bool devx = true;  // false: no context gets DevX (a kernel without it)
  // Nonzero: this signal (e.g. 12, SIGUSR2) sent to the process kills every device, as
  // KillDevice does: how a test fails the device under a program it did not link (the hw
  // tier's binaries through the shims).
  int fatal_signal = 0;
};

class Device;
class Port;
struct Context;
struct Pd;
struct Mr;
struct Cq;
struct Qp;

// The kernel's uverbs file behind a context's command fd (ib_uverbs_file). The context that
// opened it and every context imported from a duplicate of its command fd (ibv_import_device)
// share it; every PD, memory region, CQ and queue pair made through any of them is the file's,
// and only the file's handles can be imported through it. When its last context closes, the
// file destroys what is left in it, whoever made it (the kernel's uverbs_destroy_ufile_hw).
// Guarded by the device's mutex.
struct Ufile {
  dev_t st_dev = 0;  // of the memfd whose duplicates are its command fds
  ino_t st_ino = 0;
  int open = 0;                    // contexts open on it
  std::vector<Context*> contexts;  // every one, freed with the file (objects point at them)
  std::set<Pd*> pds;
  std::set<Mr*> mrs;
  std::set<Cq*> cqs;
  std::set<Qp*> qps;
};

struct Context {
  verbs_context vctx{};  // ibv_context = &vctx.context
  Device* dev = nullptr;
  Ufile* file = nullptr;
  bool devx = false;  // opened by mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX
  bool closed = false;
  base::UniqueFd cmd_fd;
  // An eventfd, blocking unless the caller sets O_NONBLOCK (as the kernel's async file): it
  // counts the events queued for ibv_get_async_event.
  base::UniqueFd async_fd;
  std::deque<ibv_event_type> events;  // guarded by dev->mu
};

struct Pd {
  ibv_pd pd{};
  uint32_t pdn = 0;
  int users = 0;  // MRs, QPs, mkeys: dealloc is EBUSY while any remain (Device::mu)
  // An imported PD (ibv_import_pd): only this process's handle for `origin`, the file's PD.
  Pd* origin = nullptr;
};

struct Mr {
  ibv_mr mr{};
  uint32_t index = 0;
  Pd* owner = nullptr;  // the PD it was registered in (the file's, never an import's handle)
  // An imported region (ibv_import_mr): a copy of the file's region's handle, freed by
  // ibv_unimport_mr; the region stays its registrant's.
  bool imported = false;
  bool on_demand = false;
  // ibv_reg_dmabuf_mr: the exporter's memory, mapped to play the device's DMA into it.
  std::unique_ptr<DmabufMapping> dmabuf;
};

struct DvMkey {
  mlx5dv_mkey mkey{};
  Pd* pd = nullptr;
  uint32_t index = 0;
};

struct DevxObj {
  mlx5dv_devx_obj obj{};
  Pd* pd = nullptr;  // the PD the mkey names (may be null for a PD the emulator never gave)
};

// Allocated aligned memory (device memory handed to the caller).
struct Aligned {
  void operator()(uint8_t* p) const;
};
using DeviceMemory = std::unique_ptr<uint8_t[], Aligned>;
DeviceMemory AllocDeviceMemory(size_t bytes);

struct Cq {
  ibv_cq cq{};
  uint32_t cqe_cnt = 0;   // power of two
  DeviceMemory buf;       // cqe_cnt x 64 bytes
  DeviceMemory dbrec;     // [0] consumer index (BE, 24 bits), [1] arm
  bool dv_owned = false;  // handed out by mlx5dv_init_obj: the caller polls it itself
  uint32_t producer = 0;  // CQEs written (device side)
  // The producer, published after each CQE: poll_cq (the provider, in the emulator) reads the
  // ring only up to it. A caller polling the ring itself goes by the owner bit alone.
  std::atomic<uint32_t> published{0};
  uint32_t consumer = 0;  // poll_cq's index (provider side)
  struct Pending {
    absl::Time due;
    umr::Cqe cqe;
  };
  std::deque<Pending> delayed;  // CQEs written later (DelayUmrCompletions)
};

// One send work request of a plain (verbs) RC queue pair, as the provider queued it.
struct SendWr {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  ibv_sge sge{};
  bool has_sge = false;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint16_t index = 0;  // its position in the send queue (the CQE's wqe_counter)
};

struct Qp {
  ibv_qp qp{};
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  bool dv = false;  // made by mlx5dv_create_qp: the caller writes raw WQEs into the SQ buffer
  uint32_t max_send_wr = 0;
  unsigned access = 0;       // qp_access_flags (INIT)
  uint32_t dest_qpn = 0;     // RTR
  ibv_gid dgid{};            // RTR: the address vector's destination GID
  uint32_t path_mtu = 1024;  // RTR, bytes
  uint32_t rq_psn = 0;       // the responder's next expected PSN (24 bits)
  uint32_t sq_psn = 0;       // the requester's next PSN (24 bits)
  // The oldest work request is with the fabric (one at a time: the responder is elsewhere).
  bool on_fabric = false;
  uint32_t epoch = 0;  // counts moves to RESET: a fabric answer from before one is dropped
  // Raw-WQE queues (dv): the SQ ring, doorbell record and BlueFlame page.
  uint32_t wqe_cnt = 0;
  DeviceMemory sq;
  DeviceMemory dbrec;                   // [0] receive counter, [1] send counter (BE, 16 bits)
  DeviceMemory bf;                      // 4 KiB: two BlueFlame buffers of kBfSize
  DeviceMemory snapshot;                // the device's copy of the WQE it executes (ring-shaped)
  std::optional<sim::SendRules> rules;  // what the device checks of each raw WQE (first use)
  uint32_t executed = 0;                // WQEBBs the device consumed, mod 2^32
  uint16_t reported_producer = 0;       // the doorbell value last reported as a violation
  umr::WqeScratch scratch{};
  // Verbs queues: work requests the provider queued and the device has not yet executed.
  std::deque<SendWr> pending;
  std::map<uint16_t, uint64_t> wr_ids;  // by index, until completed
  uint16_t next_index = 0;
};

class Device {
 public:
  // `model` gives the unadjusted image.
  // `ordinal`: the device's place in the list (its GID tells the devices apart).
  Device(std::string name, uint32_t ordinal, Image (*model)(), const Options& options);
  ~Device();

  ibv_device* ibv() { return &ibv_; }
  const std::string& name() const { return name_; }
  uint32_t ordinal() const { return ordinal_; }
  // Fixed while a context is open (Reconfigure refuses then).
  const Image& image() const { return image_; }
  const Options& options() const { return options_; }
  sim::HcaCore& core() { return *core_; }
  bool fatal() const { return fatal_.load(std::memory_order_acquire); }
  void Kill();
  // A fresh device (empty key table) with `options`: kFailedPrecondition while a context is
  // open.
  absl::Status Reconfigure(const Options& options);
  std::atomic<int> open_contexts{0};

  base::Mutex mu;
  std::map<uint32_t, Qp*> qps ABSL_GUARDED_BY(mu);    // by QP number
  std::set<uint32_t> dv_mkeys ABSL_GUARDED_BY(mu);    // indices made by mlx5dv_create_mkey
  std::set<uint32_t> devx_mkeys ABSL_GUARDED_BY(mu);  // indices made by DevX CREATE_MKEY
  std::map<uint32_t, Mr*> mrs ABSL_GUARDED_BY(mu);    // by key index
  std::set<Context*> contexts ABSL_GUARDED_BY(mu);    // open ones: Kill queues their events
  std::set<Ufile*> files ABSL_GUARDED_BY(mu);         // with at least one context open
  uint32_t next_qpn ABSL_GUARDED_BY(mu) = 0x100;
  uint32_t next_cqn ABSL_GUARDED_BY(mu) = 0x40;
  Port* port ABSL_GUARDED_BY(mu) = nullptr;  // on the fabric once a queue pair is (never freed)

  // Wakes the device thread (a doorbell it cannot see is a store; this only shortens its nap).
  void Kick();

 private:
  void Loop();
  // One pass over every queue pair; whether anything happened.
  bool Step() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  void Build(const Options& options);

  ibv_device ibv_{};  // first: ibv_get_device_list hands out its address
  const std::string name_;
  const uint32_t ordinal_;
  Image (*const model_)();
  Image image_;
  Options options_;
  std::unique_ptr<sim::HcaCore> core_;
  std::atomic<bool> fatal_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> kicks_{0};
  std::thread thread_;
};

// Whether Options::fatal_signal arrived (the device thread then kills its device).
bool FatalSignalled();
// The process's emulated devices (created on first use, from REGCACHE_MLX5EMU or Configure).
std::vector<Device*>& Devices();
Device* DeviceOf(ibv_device* d);  // null for a device the emulator did not give out
// Records what the device refused without a CQE or an errno.
void Violation(std::string what);

// Faults on demand (mlx5emu.h), consumed by the device and the entry points.
struct Faults {
  std::atomic<uint32_t> fail_nth_umr_wqe{0};
  std::atomic<uint8_t> fail_syndrome{0};
  std::atomic<uint8_t> fail_vendor{0};
  std::atomic<int> fail_command_opcode{-1};
  std::atomic<uint8_t> fail_command_status{0};
  std::atomic<uint32_t> fail_command_syndrome{0};
  std::atomic<int64_t> umr_cqe_delay_ns{0};
  std::atomic<uint32_t> lose_umr_cqes{0};
  std::atomic<int> fail_next_reg_mr{0};
};
Faults& GetFaults();

// --- queues.cc ---
// Creates a CQ of at least `cqe` entries (the provider rounds cqe + 1 up to a power of two).
std::unique_ptr<Cq> NewCq(Device* dev, ibv_context* ctx, int cqe);
// The QP's state machine (ibv_modify_qp): the errno.
int ModifyQp(Device* dev, Qp* qp, const ibv_qp_attr& attr, int mask)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
// Executes what a queue pair has been given; whether anything happened.
bool StepQp(Device* dev, Qp* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
// Moves a queue pair to the error state (its later work completes flushed).
void ToError(Qp* qp);
// The provider's poll_cq: decodes PRM CQEs into work completions.
int PollCq(Device* dev, Cq* cq, int n, ibv_wc* wc);
// The provider's post_send for a verbs RC queue pair.
int PostSend(Device* dev, Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);

inline constexpr uint32_t kBfSize = 256;

// --- fabric.cc ---
// One RDMA READ, WRITE or atomic as it travels from a requester queue pair to its responder
// (fixed layout: it crosses the fabric as is, between copies of the same emulator).
struct RdmaRequest {
  uint8_t gid[16] = {};  // the requester's port GID
  uint32_t src_qpn = 0;
  uint32_t dest_qpn = 0;
  uint32_t psn = 0;
  uint32_t rkey = 0;
  uint32_t opcode = 0;  // ibv_wr_opcode
  uint32_t reserved = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};
// The PSNs an operation occupies on a path of `mtu` bytes (one per packet).
uint32_t PsnSpan(const RdmaRequest& r, uint32_t mtu);
// The responder's half of `req` on this device. nullopt where nothing answers: no queue pair
// by that number, one not connected to the sender, or a PSN out of sequence (the requester
// retries until it gives up). Otherwise 0 or the syndrome the requester completes with; `in`
// holds a WRITE's bytes, `out` receives a READ's or an atomic's.
std::optional<uint8_t> Respond(Device* dev, const RdmaRequest& req, absl::Span<const uint8_t> in,
                               std::vector<uint8_t>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
// The requester's half around it: the request for `w` and a WRITE's bytes gathered from its
// local buffer (0 or a local syndrome; the PSN advances), and a READ's or atomic's answer
// scattered into it (0 or a local syndrome).
uint8_t PrepareWr(Device* dev, Qp* qp, const SendWr& w, RdmaRequest* req,
                  std::vector<uint8_t>* data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
uint8_t FinishWr(Device* dev, Qp* qp, const SendWr& w, absl::Span<const uint8_t> data)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
// The requester's end of `answer` (Respond's): the retries running out where none came, the
// responder's syndrome, or 0 once a READ's or atomic's bytes are scattered (FinishWr).
uint8_t Conclude(Device* dev, Qp* qp, const SendWr& w, std::optional<uint8_t> answer,
                 absl::Span<const uint8_t> back) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
// The syndrome of a failed access (DeviceError), or `fallback`.
uint8_t SyndromeOf(const absl::Status& s, Syndrome fallback);
inline constexpr uint8_t kSynRetryExceeded = 0x15;  // MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR
// Completes `w` with `syndrome` (a CQE if signalled or failed; a failure moves `qp` to error).
void CompleteWr(Qp* qp, const SendWr& w, uint8_t syndrome);
// Whether `qp` is connected to a queue pair of this device (else its peer is on the fabric).
bool ConnectedHere(Device* dev, const Qp* qp);
// Puts the device on the fabric (once): from then on it answers other devices' requests.
void AttachToFabric(Device* dev) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);
// Hands queue pair `qpn`'s oldest work request to the fabric (its peer is on another device).
void SendOnFabric(Device* dev, uint32_t qpn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev->mu);

}  // namespace regcache::hca::mlx5emu
#endif  // REGCACHE_HCA_MLX5EMU_INTERNAL_EMU_H_
