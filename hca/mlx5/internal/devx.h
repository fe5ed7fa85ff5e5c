// Firmware commands through DevX (docs/mlx5.md, Commands): the mailbox bytes are umr/'s
// (umr/mailbox.h, umr/caps.h), the same bytes the sim's command processor executes; this file
// only carries them to the device and reads the answer.
//
// DevX reports a command the firmware failed as errno EREMOTEIO with the status and syndrome
// left in the output mailbox; CommandStatus turns that (and every other errno) into a Status
// that names the command, the PRM status and the syndrome, so an operator can look it up.
//
// Thread safety: the functions are safe to call concurrently (the kernel serializes commands).
#ifndef REGCACHE_HCA_MLX5_INTERNAL_DEVX_H_
#define REGCACHE_HCA_MLX5_INTERNAL_DEVX_H_

#include <infiniband/mlx5dv.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "umr/caps.h"

namespace regcache::hca::mlx5 {

// The name of a PRM command status ("BAD_PARAM", ...; "status 0x.." for unknown ones).
std::string CmdStatusName(uint8_t status);

// The outcome of DevX call `what` that returned `rc` (0 or -1/null as errno `err`) with output
// mailbox `out`: OK when rc == 0 and the outbox status is 0; for EREMOTEIO or a non-zero outbox
// status, the firmware's status (BAD_PARAM / BAD_INPUT_LEN -> kInvalidArgument, BAD_RESOURCE /
// BAD_INDEX -> kNotFound, EXCEED_LIM / NO_RESOURCES -> kResourceExhausted, BAD_SYS_STATE /
// BAD_RES_STATE / RESOURCE_BUSY -> kFailedPrecondition, BAD_OP -> kUnimplemented, others
// kInternal) with "status NAME (0x..), syndrome 0x........"; otherwise the errno's status
// (verbs::ErrnoStatus). Pure.
absl::Status CommandStatus(absl::string_view what, int rc, int err, absl::Span<const uint8_t> out);

// QUERY_HCA_CAP (current values) of cap_type general and ODP, through
// mlx5dv_devx_general_cmd. kUnavailable when the context has no DevX (EOPNOTSUPP / EPERM).
absl::StatusOr<umr::HcaCaps> QueryGeneralCaps(ibv_context* ctx);
absl::StatusOr<umr::OdpCaps> QueryOdpCaps(ibv_context* ctx);

// An mkey made by a DevX CREATE_MKEY: the object and the index the firmware chose.
struct DevxMkey {
  mlx5dv_devx_obj* obj = nullptr;
  uint32_t index = 0;
};
// Creates an mkey from a CREATE_MKEY input mailbox (hca::PoolKeyMailbox).
absl::StatusOr<DevxMkey> CreateMkey(ibv_context* ctx, absl::Span<const uint8_t> mailbox);
// QUERY_MKEY of a DevX-created mkey; the decoded output holds `entries` translation entries of
// `entry_bytes` each (the outbox is sized to read them all).
absl::StatusOr<std::vector<uint8_t>> QueryMkey(const DevxMkey& m, uint32_t entries,
                                               uint32_t entry_bytes);
absl::Status DestroyMkey(const DevxMkey& m);

}  // namespace regcache::hca::mlx5
#endif  // REGCACHE_HCA_MLX5_INTERNAL_DEVX_H_
