// regcache_mlx5_probe [spec] — can regcache make keys on this host's ConnectX? Opens the mlx5
// backend (default spec "mlx5": the first ConnectX that opens with DevX) and prints what it
// found: the capabilities the backend will use, or why it cannot. Exit 0 when it opens, 77 when
// this host has no usable ConnectX (the `hw` test tier skips on it), 1 for a bad spec.
#include <cstdio>
#include <string>

#include "hca/device.h"
#include "hca/mlx5/mlx5_device.h"

int main(int argc, char** argv) {
  using namespace regcache::hca;  // NOLINT: a tiny tool
  mlx5::RegisterBackend();
  const std::string spec = argc > 1 ? argv[1] : "mlx5";
  if (spec.rfind("mlx5", 0) != 0) {
    std::fprintf(stderr, "usage: %s [mlx5[:name,param=value...]]\n", argv[0]);
    return 1;
  }
  auto d = OpenDevice(spec);
  if (!d.ok()) {
    std::printf("skipped: %s\n", std::string(d.status().message()).c_str());
    return absl::IsInvalidArgument(d.status()) ? 1 : 77;
  }
  const Capabilities& c = (*d)->capabilities();
  std::printf(
      "%s: max_keys %u, max_klm_entries %u (inline %u%s), max_indirection %u, queue depth %u, "
      "ksm %d, odp %d, atomics %d (by UMR %d), umr_modify_entity_size %d\n",
      c.device_name.c_str(), c.max_keys, c.max_klm_entries, c.max_inline_klm,
      c.umr_pointer_translation ? ", longer by pointer" : "", c.max_indirection, c.max_queue_depth,
      c.ksm, c.odp, c.atomics, c.umr_modify_atomic, c.umr_modify_entity_size);
  return 0;
}
