// The sim's firmware command interface: CREATE_MKEY, QUERY_MKEY and DESTROY_MKEY executed from
// PRM mailbox bytes (facts §5), against the key table.
//
// Inputs and outputs are the exact mailbox images (umr/prm.h layouts, big-endian). A command
// that fails writes status 0x03 (BAD_PARAM) or 0x05 (BAD_RESOURCE) / 0x04 (BAD_RES_STATE) and a
// syndrome into the output header and returns the same failure as a Status, as DevX reports
// EREMOTEIO with the outbox filled (facts §5).
//
// Thread safety: Execute may be called concurrently (slots are locked one at a time).
#ifndef REGCACHE_HCA_SIM_COMMANDS_H_
#define REGCACHE_HCA_SIM_COMMANDS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "hca/sim/mkey_table.h"

namespace hca::sim {

inline constexpr uint8_t kCmdStatusBadParam = 0x03;
inline constexpr uint8_t kCmdStatusBadResState = 0x04;
inline constexpr uint8_t kCmdStatusBadResource = 0x05;

class CommandProcessor {
 public:
  // `table` must outlive this.
  explicit CommandProcessor(MkeyTable* table) : table_(table) {}

  // Executes the command in `in` (opcode from its header), filling `*out` (resized to the
  // command's output size). `on_demand` marks a created MTT key as an ODP key (sim-side state:
  // on hardware the kernel registers ODP MRs, the mkc has no such bit).
  absl::Status Execute(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                       bool on_demand = false);

 private:
  absl::Status CreateMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out, bool on_demand);
  absl::Status QueryMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out);
  absl::Status DestroyMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out);

  MkeyTable* const table_;
};

}  // namespace hca::sim

#endif  // REGCACHE_HCA_SIM_COMMANDS_H_
