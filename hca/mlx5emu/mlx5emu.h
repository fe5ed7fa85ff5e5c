// mlx5emu: an emulated ConnectX behind rdma-core's entry points (docs/mlx5emu.md).
//
// Linking regcache_hca_mlx5emu into a program gives it the libibverbs and libmlx5 functions the
// mlx5 backend (hca/mlx5, with hca/verbs) calls — ibv_get_device_list, mlx5dv_open_device,
// mlx5dv_devx_*, mlx5dv_create_qp, mlx5dv_init_obj, ... — with rdma-core 44's structures, so the
// backend's unchanged object files run against it. The device executes what the backend
// writes where a NIC reads it: UMR and NOP WQEs from the send queue buffer up to the doorbell
// record, on a device thread, with CQEs into the CQ buffer under the PRM's owner-bit rules;
// DevX mailboxes through the same model as the sim (hca/sim/sim_core.h). It is only ever linked
// into tests and test programs: production binaries link libibverbs.
//
// Devices: mlx5_0 answers QUERY_HCA_CAP as a ConnectX-6 Dx, mlx5_1 as a ConnectX-7
// (internal/images.cc), both with one active RoCE port. Each process is a host of its own: a
// port's GID carries the process id, and verbs queue pairs connected to another device's GID,
// in this process or another, reach it over the emulator's fabric (internal/fabric.cc). The
// environment variable REGCACHE_MLX5EMU, read when the device list is first built, adjusts them for
// a test run of an unchanged binary: a comma-separated list of
//   umr_on_devx_mkey=0       a user QP may not UMR a DevX-made mkey (error CQE, LOCAL_QP_OP)
//   pointer_mr_lkey=0        pointer-mode UMRs may not read their list through an MR's lkey
//                            (error CQE, LOCAL_PROT)
//   variant_on_dv_mkey=0     a UMR may not change the variant of an mlx5dv_create_mkey key
//                            (error CQE, LOCAL_QP_OP)
//   devx_mkey=0              DevX CREATE_MKEY is refused with EPERM (mlx5dv_create_mkey works)
//   odp=0                    no on-demand paging in ibv_odp_caps
//   umr_fence=0|1|2          the umr_fence capability, and the fence the device then demands
//   max_wqe_sz_sq=N          the largest send WQE in bytes (larger ones fail LOCAL_QP_OP)
//   log_max_klm_list_size=N  the longest KLM list, 2^N entries
//   umr_indirect_mkey_disabled=1
//   devx=0                   no context gets DevX (a kernel without it, or DevX not permitted)
//   umr_modify_atomic_disabled=1, umr_modify_entity_size_disabled=1
//   fatal_signal=N           signal N (12: SIGUSR2) kills every device, as KillDevice: how a
//                            test fails the device under a program that cannot call KillDevice
// The first three are the hardware behaviours docs/mlx5.md says no source states.
//
// Thread safety: every function here may be called from any thread.
#ifndef REGCACHE_HCA_MLX5EMU_MLX5EMU_H_
#define REGCACHE_HCA_MLX5EMU_MLX5EMU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hca/sim/sim_options.h"

namespace regcache::hca::mlx5emu {

// Applies `options` (the REGCACHE_MLX5EMU grammar above) to every emulated device, as if the
// variable had held them; replaces what an earlier call or the variable set. kInvalidArgument
// for an unknown option. Call it before the backend opens a device.
absl::Status Configure(absl::string_view options);

// --- faults on demand (each applies to the next matching event on any emulated device) ---
// The `nth` WQE the device executes from now on a UMR queue (1 = the next) completes with an
// error CQE of `syndrome` (and `vendor_syndrome`), as if the device refused it.
void FailNthUmrWqe(uint32_t nth, uint8_t syndrome, uint8_t vendor_syndrome = 0);
// The next firmware command with `opcode` (CREATE_MKEY 0x200, QUERY_MKEY 0x201,
// QUERY_HCA_CAP 0x100, DESTROY_MKEY 0x202) fails with `status` and `syndrome` in its outbox
// (EREMOTEIO, as DevX reports a firmware failure).
void FailNextCommand(uint16_t opcode, uint8_t status, uint32_t syndrome);
// Every CQE on a UMR queue is written `delay` after its WQE executed (zero: at once).
void DelayUmrCompletions(absl::Duration delay);
// The next `count` CQEs due on UMR queues are never written (lost completions).
void LoseUmrCompletions(uint32_t count);
// The next ibv_reg_mr (or ibv_reg_mr_iova2) fails with `err`.
void FailNextRegMr(int err);
// Device `name` suffers a fatal error: every queue pair moves to the error state and flushes,
// every later verb on its contexts fails with EIO, and each open context gets
// IBV_EVENT_DEVICE_FATAL from ibv_get_async_event (its async_fd turns readable).
void KillDevice(absl::string_view name);

// What the device refused without a CQE or errno to say it (a doorbell rung in RESET, a CQ
// overrun, a write past the doorbell), in the order seen; and clearing them.
std::vector<std::string> Violations();
void ClearViolations();

// The device core's counters of device `name` (WQEs executed, UMRs failed, translations, ...).
sim::SimStats* StatsOf(absl::string_view name);

// What device `name` holds now, over all its uverbs files (all zero for an unknown name): for
// tests of who cleans up. A file goes, with whatever is left in it, when the last context on
// it (opened, or imported from its command fd) closes.
struct Census {
  int contexts = 0;  // open
  int files = 0;     // with a context open
  int pds = 0;
  int mrs = 0;
  int cqs = 0;
  int qps = 0;

  bool operator==(const Census&) const = default;
};
Census CensusOf(absl::string_view name);

}  // namespace regcache::hca::mlx5emu
#endif  // REGCACHE_HCA_MLX5EMU_MLX5EMU_H_
