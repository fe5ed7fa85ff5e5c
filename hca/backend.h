// The backend registry — the implementers' side of the device boundary (callers use
// hca/device.h, which declares OpenDevice).
//
// A backend is a factory registered under a name ("sim", "mlx5", "verbs"). A device spec names
// the backend and, after a colon, its arguments:
//
//   "sim"                           the software HCA with defaults
//   "sim:mode=thread,max_indirection=2"
//   "verbs:rxe0"                    positional argument: the device name
//   "mlx5:mlx5_0,port=1"
//
// Arguments are comma-separated; `key=value` items are parameters, at most one bare item is the
// positional device name. Each backend documents its parameters and rejects unknown ones
// (kInvalidArgument).
//
// Registration and static libraries: backends are registered EXPLICITLY, by calling the
// backend's own function (hca::sim::RegisterBackend(), hca::mlx5::RegisterBackend(), ...)
// from the binary that wants it (regcached's main, tests, benchmarks). A static initializer in
// the backend's library would be dropped by the linker whenever nothing else in that object is
// referenced, and the backend would silently vanish; an explicit call makes the link
// dependency visible and cannot be dead-stripped. The functions are idempotent.
//
// Thread safety: everything here may be called from any thread.
#ifndef REGCACHE_HCA_BACKEND_H_
#define REGCACHE_HCA_BACKEND_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "hca/device.h"

namespace regcache::hca {

// A parsed device spec.
struct BackendSpec {
  std::string backend;                        // before the colon
  std::string device;                         // the bare item, or empty
  std::map<std::string, std::string> params;  // key=value items, ordered for stable messages
};

// Parses "name[:item,item,...]". kInvalidArgument for an empty name, empty items, two bare
// items or a repeated key.
absl::StatusOr<BackendSpec> ParseBackendSpec(absl::string_view spec);

// A factory returns the opened device, kUnavailable with the reason when this machine cannot
// provide it (no such NIC, missing capability), or kInvalidArgument for bad parameters.
using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>(
    const BackendSpec& spec, const OpenOptions& options)>;

// Registers `factory` under `name`. Registering the same name again replaces nothing and returns
// kAlreadyExists (backends call this from an idempotent RegisterBackend that ignores it).
absl::Status RegisterBackend(absl::string_view name, BackendFactory factory);

// Names of the registered backends, sorted.
std::vector<std::string> RegisteredBackends();

// Test hook: forgets every registration.
void ClearBackendsForTest();

}  // namespace regcache::hca
#endif  // REGCACHE_HCA_BACKEND_H_
