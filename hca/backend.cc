#include "hca/backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/mutex.h"

namespace regcache::hca {
namespace {

struct Registry {
  base::Mutex mu;
  std::map<std::string, BackendFactory> factories ABSL_GUARDED_BY(mu);
};

Registry& GlobalRegistry() {
  static Registry* registry = new Registry;  // never destroyed: usable during exit
  return *registry;
}

// Which call links in each of the project's own backends (for the kNotFound message).
absl::string_view LinkHint(absl::string_view name) {
  if (name == "sim") return " (link regcache_hca_sim and call hca::sim::RegisterBackend())";
  if (name == "mlx5") return " (link regcache_hca_mlx5 and call hca::mlx5::RegisterBackend())";
  if (name == "verbs") return " (link regcache_hca_verbs and call hca::verbs::RegisterBackend())";
  return "";
}

}  // namespace

absl::StatusOr<BackendSpec> ParseBackendSpec(absl::string_view spec) {
  BackendSpec out;
  std::pair<absl::string_view, absl::string_view> name_args =
      absl::StrSplit(spec, absl::MaxSplits(':', 1));
  if (name_args.first.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("device spec '", spec, "': empty backend name"));
  }
  out.backend = std::string(name_args.first);
  const bool has_args = spec.size() > name_args.first.size();
  if (!has_args) return out;
  for (absl::string_view item : absl::StrSplit(name_args.second, ',')) {
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("device spec '", spec, "': empty item"));
    }
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      if (!out.device.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("device spec '", spec, "': two device names"));
      }
      out.device = std::string(item);
      continue;
    }
    std::string key(item.substr(0, eq));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("device spec '", spec, "': empty key"));
    }
    if (!out.params.emplace(key, std::string(item.substr(eq + 1))).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("device spec '", spec, "': repeated key '", key, "'"));
    }
  }
  return out;
}

absl::Status RegisterBackend(absl::string_view name, BackendFactory factory) {
  Registry& r = GlobalRegistry();
  base::MutexLock lock(&r.mu);
  if (!r.factories.emplace(std::string(name), std::move(factory)).second) {
    return absl::AlreadyExistsError(absl::StrCat("backend '", name, "' already registered"));
  }
  return absl::OkStatus();
}

std::vector<std::string> RegisteredBackends() {
  Registry& r = GlobalRegistry();
  base::MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

namespace {

// "auto": mlx5, then verbs, then sim, the first that opens. "auto:rdma": the same without the
// sim, for deployments where a simulated device would hand out keys no peer can use.
absl::StatusOr<std::unique_ptr<Device>> OpenAuto(const BackendSpec& spec,
                                                 const OpenOptions& options) {
  const bool rdma_only = spec.device == "rdma";
  if ((!spec.device.empty() && !rdma_only) || !spec.params.empty()) {
    return absl::InvalidArgumentError(
        "device 'auto' takes no arguments but 'rdma' (auto:rdma: a real RDMA device, never the "
        "sim)");
  }
  std::vector<std::string> passed;
  OpenOptions each = options;
  each.selection = nullptr;
  std::vector<const char*> candidates = {"mlx5", "verbs"};
  if (!rdma_only) candidates.push_back("sim");
  for (const char* name : candidates) {
    absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(name, each);
    if (!d.ok()) {
      passed.push_back(absl::StrCat(name, ": ", d.status().message()));
      continue;
    }
    if (options.selection != nullptr) {
      *options.selection =
          absl::StrCat("auto chose ", name, " (", (*d)->capabilities().device_name, ")",
                       passed.empty() ? "" : "; not ", absl::StrJoin(passed, "; not "));
    }
    return d;
  }
  return absl::NotFoundError(
      absl::StrCat("device '", rdma_only ? "auto:rdma" : "auto",
                   "' found nothing to open: ", absl::StrJoin(passed, "; ")));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view spec,
                                                   const OpenOptions& options) {
  absl::StatusOr<BackendSpec> parsed = ParseBackendSpec(spec);
  if (!parsed.ok()) return parsed.status();
  if (parsed->backend == "auto") return OpenAuto(*parsed, options);
  if (options.selection != nullptr) *options.selection = absl::StrCat("named ", spec);
  BackendFactory factory;
  {
    Registry& r = GlobalRegistry();
    base::MutexLock lock(&r.mu);
    auto it = r.factories.find(parsed->backend);
    if (it == r.factories.end()) {
      std::vector<std::string> names;
      for (const auto& [name, f] : r.factories) names.push_back(name);
      return absl::NotFoundError(absl::StrCat("no hca backend '", parsed->backend, "'",
                                              LinkHint(parsed->backend), "; registered: [",
                                              absl::StrJoin(names, ", "), "]"));
    }
    factory = it->second;  // called outside the lock: opening a device may take long
  }
  return factory(*parsed, options);
}

void ClearBackendsForTest() {
  Registry& r = GlobalRegistry();
  base::MutexLock lock(&r.mu);
  r.factories.clear();
}

}  // namespace regcache::hca