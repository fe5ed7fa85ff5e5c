// hca/mlx5 — ConnectX through DevX and mlx5dv (docs/mlx5.md).
//
// What it maps the device boundary (hca/device.h) onto:
//   capabilities  QUERY_HCA_CAP (general) through mlx5dv_devx_general_cmd, decoded by umr/caps.h,
//                 plus the verbs limits (ibv_query_device_ex: queue depth, ODP);
//   PDs, backings ibv_alloc_pd; ibv_reg_mr of the daemon's mapping (pinned, or with
//                 IBV_ACCESS_ON_DEMAND, whose faults the kernel services; Prefetch is
//                 ibv_advise_mr). These plain-verbs parts are hca/verbs' Context;
//   pooled keys   free, umr_en indirect mkeys from a DevX CREATE_MKEY whose input mailbox is the
//                 one hca::PoolKeyMailbox encodes (the bytes the sim executes);
//                 mlx5dv_create_mkey where DevX may not create them (mkey_api=auto|devx|mlx5dv);
//                 DESTROY_MKEY; QUERY_MKEY for DevX-made keys;
//   queues        RC queue pairs connected to themselves, umr/'s UMR WQEs written into their send
//                 queue by hca::UmrPoster (internal/umr_queue.h); maps longer than one WQE by
//                 pointer from a staging buffer under a local key (pointer_umr=0 turns it off);
//   endpoints     hca/verbs' target endpoints; the Peer is a requester in a PD of its own.
// Not offered: direct (MTT) pooled keys and MTT rewrites (the kernel owns MTT translations: only
// it knows the bus addresses), daemon-served fault events (the kernel serves ODP faults).
//
// Thread safety: as hca::Device.
#ifndef REGCACHE_HCA_MLX5_MLX5_DEVICE_H_
#define REGCACHE_HCA_MLX5_MLX5_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/stats.h"
#include "hca/backend.h"
#include "hca/device.h"
#include "hca/verbs/verbs_device.h"

namespace regcache::hca::mlx5 {

#define HCA_MLX5_STATS(COUNTER, GAUGE, HISTOGRAM)                               \
  COUNTER(mkeys_created, "indirect mkeys created (DevX CREATE_MKEY or mlx5dv)") \
  COUNTER(mkeys_created_mlx5dv, "of which by mlx5dv_create_mkey")               \
  COUNTER(mkeys_destroyed, "indirect mkeys destroyed")                          \
  COUNTER(command_errors, "DevX commands that failed")                          \
  COUNTER(backings_registered, "ibv_reg_mr calls that succeeded")               \
  COUNTER(registered_bytes, "bytes registered by ibv_reg_mr")                   \
  COUNTER(prefetches, "ibv_advise_mr prefetches that succeeded")                \
  COUNTER(queues_created, "UMR queue pairs created")                            \
  COUNTER(endpoints_created, "target endpoints created")                        \
  GAUGE(live_mkeys, "indirect mkeys alive")
RC_DEFINE_STATS(Mlx5Stats, HCA_MLX5_STATS);

enum class MkeyApi : uint8_t {
  kAuto,    // DevX CREATE_MKEY; mlx5dv_create_mkey where DevX refuses (EPERM / EOPNOTSUPP)
  kDevx,    // DevX only
  kMlx5dv,  // mlx5dv_create_mkey only (KLM keys; no KSM, no QUERY_MKEY)
};

struct Mlx5Options {
  // The device ("mlx5_0"; empty: the first ConnectX that opens with DevX), port, GID index and
  // queue depth cap, as the verbs context takes them (spec "port=", "gid_index=",
  // "max_queue_depth=").
  verbs::VerbsOptions context;
  MkeyApi mkey_api = MkeyApi::kAuto;  // spec "mkey_api=auto|devx|mlx5dv"
  bool pointer_umr = true;            // spec "pointer_umr=0|1"
};

// Parses "mlx5[:name,port=N,gid_index=N,max_queue_depth=N,mkey_api=...,pointer_umr=0|1]".
// kInvalidArgument for unknown keys or bad values.
absl::StatusOr<Mlx5Options> Mlx5OptionsFromSpec(const BackendSpec& spec);

// Opens the device. kUnavailable with the reason (and the devices seen) where no ConnectX opens
// with DevX, its port is not active, or its capabilities leave no way to make keys.
absl::StatusOr<std::unique_ptr<Device>> NewMlx5Device(const Mlx5Options& options,
                                                      const OpenOptions& open = {});

// Registers the "mlx5" backend with hca::OpenDevice. Idempotent.
void RegisterBackend();

}  // namespace regcache::hca::mlx5
#endif  // REGCACHE_HCA_MLX5_MLX5_DEVICE_H_
