// The sim's firmware command interface: CREATE_MKEY, QUERY_MKEY, DESTROY_MKEY, PAGE_FAULT_RESUME
// and QUERY_HCA_CAP executed from PRM mailbox bytes (docs/prm.md, Command mailboxes), against the
// key table, the device's parked ODP accesses and its capability images.
//
// Inputs are decoded and outputs encoded with umr/mailbox.h, the same code a DevX backend uses
// on the other side (mlx5dv_devx_obj_create / _query / _destroy, mlx5dv_devx_general_cmd), so
// the device executes the very bytes that backend posts. A command that fails writes a status
// and a syndrome into a 16-byte output header and returns the same failure as a Status, as DevX
// reports EREMOTEIO with the outbox filled:
//   0x03 BAD_PARAM      malformed mailbox, unmodelled opcode / access mode / UMEM, translation
//                       larger than the key, a resume that does not match its fault, a
//                       CREATE_MKEY naming a PD the device never allocated (when it checks), a
//                       QUERY_HCA_CAP of a capability type it has no image of
//                                                                      -> kInvalidArgument
//   0x05 BAD_RESOURCE   no such mkey index, no parked fault with that token -> kNotFound
//   0x08 LIM            key table full, a KLM/KSM list longer than log_max_klm_list_size allows
//                                                                      -> kResourceExhausted
//
// Thread safety: Execute may be called concurrently (slots are locked one at a time; the resume
// hook must be thread-safe).
#ifndef REGCACHE_HCA_SIM_COMMANDS_H_
#define REGCACHE_HCA_SIM_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "hca/sim/internal/mkey_table.h"
#include "umr/caps.h"
#include "umr/mailbox.h"

namespace regcache::hca::sim {

class CommandProcessor {
 public:
  // Executes a decoded PAGE_FAULT_RESUME against the parked accesses: OK, kNotFound for a token
  // with no parked fault, kInvalidArgument when wq_number / type do not match the fault.
  using ResumeHook = std::function<absl::Status(const umr::PageFaultResumeIn&)>;

  struct Options {
    // Without it, PAGE_FAULT_RESUME is an unmodelled opcode.
    ResumeHook resume;
    // QUERY_HCA_CAP answers (cap_type 0 general, 2 ODP; current and maximum alike). Without
    // them the command is unmodelled, as the sim fills hca::Capabilities itself.
    std::optional<umr::HcaCaps> general_caps;
    std::optional<umr::OdpCaps> odp_caps;
    // Whether a PD number is allocated: firmware refuses a CREATE_MKEY of any other. Null
    // accepts every PD (the sim checks PDs at its own interface).
    std::function<bool(uint32_t pdn)> pd_exists;
    // The longest KLM/KSM list a CREATE_MKEY may size (2^log_max_klm_list_size); 0: any.
    uint32_t max_klm_entries = 0;
  };

  // `table` must outlive this.
  CommandProcessor(MkeyTable* table, Options options)
      : table_(table), options_(std::move(options)) {}

  // Executes the command in `in` (opcode from its header), filling `*out` with the output
  // mailbox. `on_demand` marks a created MTT key as an ODP key (sim-side state: on hardware the
  // kernel registers ODP MRs, the mkc has no such bit).
  absl::Status Execute(absl::Span<const uint8_t> in, std::vector<uint8_t>* out,
                       bool on_demand = false);

 private:
  absl::Status CreateMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out, bool on_demand);
  absl::Status QueryMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out);
  absl::Status DestroyMkey(absl::Span<const uint8_t> in, std::vector<uint8_t>* out);
  absl::Status PageFaultResume(absl::Span<const uint8_t> in, std::vector<uint8_t>* out);
  absl::Status QueryHcaCap(absl::Span<const uint8_t> in, std::vector<uint8_t>* out);

  MkeyTable* const table_;
  const Options options_;
};

}  // namespace regcache::hca::sim
#endif  // REGCACHE_HCA_SIM_COMMANDS_H_
