// The devices of one daemon (DaemonConfig::device, a ';'-separated list of device specs) and
// what the daemon builds on each: its registration cache, its fault servicer (devices with
// on-demand paging), the key calls of the sessions that live on it, and a stats registry of
// its own (labelled device="<name>" in the daemon's when there are several devices, so each
// component keeps its name: cache{device="mlx5_1"}). Internal to service/.
//
// Thread safety: the set is built once and constant afterwards; a slot's cache, servicer and
// keys lock for themselves; `sessions` is atomic.
#ifndef REGCACHE_SERVICE_INTERNAL_DEVICE_SET_H_
#define REGCACHE_SERVICE_INTERNAL_DEVICE_SET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/servicer.h"
#include "service/internal/session_keys.h"
#include "service/types.h"

namespace regcache::service::internal {

// One device and what the daemon built on it. Members are destroyed in reverse order: the
// keys, then the cache (it observes nothing after), then the servicer that observed the cache's
// backings, then the device, then the registry everything registered into.
struct DeviceSlot {
  uint32_t index = 0;
  std::string spec;
  std::string selection;  // hca::OpenOptions::selection
  base::stats::Registry stats;
  base::stats::Registration stats_registration;  // `stats` in the daemon's registry, labelled
  std::unique_ptr<hca::Device> device;
  std::unique_ptr<odp::Servicer> servicer;  // null on a device without ODP
  std::unique_ptr<cache::RegCache> cache;
  std::unique_ptr<SessionKeys> keys;
  std::atomic<uint64_t> sessions{0};  // open on this device
  bool peer_on_any_device = false;    // DaemonConfig::peer_on_any_device
  // A session's own device context (OpenOwnContext): the daemon's slot it was opened like, whose
  // session count holds the session. Null for the daemon's own slots.
  DeviceSlot* home = nullptr;

  DeviceSlot& Home() { return home != nullptr ? *home : *this; }

  const hca::Capabilities& caps() const { return device->capabilities(); }
  // Whether the peer data path is served on this device (service/sim_peer.h): the sim's
  // simulated peer, or any device's own when DaemonConfig::peer_on_any_device.
  bool SimulatesPeer() const {
    return caps().peer && (caps().backend == "sim" || peer_on_any_device);
  }
  const std::string& name() const { return device->capabilities().device_name; }
  DeviceIdentity Identity() const;
  // The device's failure (hca::Device::Health) with the reason DEVICE_FAILED: a session cannot
  // open on it. REQUIRES: the device has failed.
  absl::Status Failed() const;
};

// A device context of one session's own (DaemonConfig::allow_pd_export): `home`'s device opened
// again from its spec, with a cache and fault servicer of its own and no stats in the daemon's
// registry (the session's tenant counts its keys). What a client imports of it (ExportPd) names
// that session's objects only, and objects the client left in it go with the context.
// kUnimplemented where the device cannot export a PD (saying why); kPermissionDenied unless
// allow_pd_export; kInternal if the spec opens another device; else OpenDevice's or the cache's.
absl::StatusOr<std::shared_ptr<DeviceSlot>> OpenOwnContext(DeviceSlot& home,
                                                           const DaemonConfig& config,
                                                           const std::atomic<bool>* draining);

// The items of a device list: split on ';', surrounding spaces trimmed. kInvalidArgument for an
// empty list or an empty item, naming its place.
absl::StatusOr<std::vector<std::string>> SplitDeviceList(absl::string_view list);

class DeviceSet {
 public:
  // Opens every device of `config.device` and builds a cache (and servicer) on each, from
  // `config.cache`. `registry` (may be null) receives their stats: under their own names with
  // one device (as a single-device daemon always had), each device's labelled with several.
  // `draining` must outlive the set. Errors: see Daemon::Create.
  static absl::StatusOr<std::unique_ptr<DeviceSet>> Open(const DaemonConfig& config,
                                                         base::stats::Registry* registry,
                                                         const std::atomic<bool>* draining);

  size_t size() const { return slots_.size(); }
  DeviceSlot& at(size_t i) const { return *slots_[i]; }
  DeviceSlot& first() const { return *slots_.front(); }
  // The device of this name; empty: the first. kNotFound listing the devices served.
  absl::StatusOr<DeviceSlot*> Find(absl::string_view name) const;
  // Find, for a new session: also kResourceExhausted once `max_sessions` (nonzero) are open on
  // it, and the device's failure (DeviceSlot::Failed) when it failed.
  absl::StatusOr<DeviceSlot*> FindForSession(absl::string_view name, uint32_t max_sessions) const;
  // Whether any device simulates a remote peer (DeviceSlot::SimulatesPeer).
  bool SimulatesPeer() const {
    for (const auto& slot : slots_) {
      if (slot->SimulatesPeer()) return true;
    }
    return false;
  }
  // "sim0, sim1": the names, in order.
  std::string Names() const;

 private:
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_DEVICE_SET_H_
