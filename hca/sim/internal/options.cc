// SimOptionsFromSpec: the "sim:..." spec parameters (hca/sim/sim_device.h).
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "hca/sim/sim_device.h"
#include "umr/mkey.h"

namespace regcache::hca::sim {
namespace {

absl::Status ParseU32(const std::string& key, const std::string& v, uint32_t* out) {
  if (!absl::SimpleAtoi(v, out)) {
    return absl::InvalidArgumentError(absl::StrCat("sim: ", key, "='", v, "' is not a number"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimOptions> SimOptionsFromSpec(const BackendSpec& spec) {
  SimOptions o;
  if (!spec.device.empty()) o.device_name = spec.device;
  for (const auto& [k, v] : spec.params) {
    if (k == "mode") {
      if (v == "inline") {
        o.mode = ExecutionMode::kInline;
      } else if (v == "thread") {
        o.mode = ExecutionMode::kThread;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("sim: mode='", v, "' (inline|thread)"));
      }
    } else if (k == "max_keys") {
      RETURN_IF_ERROR(ParseU32(k, v, &o.max_keys));
      if (o.max_keys < 4 || o.max_keys > umr::kMaxMkeyIndex + 1) {
        return absl::InvalidArgumentError("sim: max_keys outside 4..2^24");
      }
    } else if (k == "max_indirection") {
      RETURN_IF_ERROR(ParseU32(k, v, &o.max_indirection));
    } else if (k == "log_max_klm") {
      RETURN_IF_ERROR(ParseU32(k, v, &o.log_max_klm_list_size));
      if (o.log_max_klm_list_size > 24) return absl::InvalidArgumentError("sim: log_max_klm > 24");
    } else if (k == "umr_modify_atomic_disabled" || k == "umr_modify_entity_size_disabled") {
      if (v != "0" && v != "1") {
        return absl::InvalidArgumentError(absl::StrCat("sim: ", k, "='", v, "' (0|1)"));
      }
      (k == "umr_modify_atomic_disabled" ? o.umr_modify_atomic_disabled
                                         : o.umr_modify_entity_size_disabled) = v == "1";
    } else if (k == "completion_delay_ms" || k == "backing_delay_ms") {
      uint32_t ms;
      RETURN_IF_ERROR(ParseU32(k, v, &ms));
      if (ms > 60000) return absl::InvalidArgumentError(absl::StrCat("sim: ", k, " over 60000"));
      (k == "completion_delay_ms" ? o.completion_delay : o.backing_delay) = absl::Milliseconds(ms);
    } else if (k == "fault_timeout_ms") {
      uint32_t ms;
      RETURN_IF_ERROR(ParseU32(k, v, &ms));
      o.fault_timeout = absl::Milliseconds(ms);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("sim: unknown parameter '", k, "'"));
    }
  }
  return o;
}

}  // namespace regcache::hca::sim
