#include "service/internal/device_set.h"

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "service/internal/access_policy.h"

namespace regcache::service::internal {

absl::Status DeviceSlot::Failed() const {
  return base::WithReason(device->Health(), base::reason::kDeviceFailed);
}

DeviceIdentity DeviceSlot::Identity() const {
  DeviceIdentity id;
  id.index = index;
  id.name = caps().device_name;
  id.backend = caps().backend;
  id.node_guid = caps().node_guid;
  id.port = caps().port;
  id.gid = caps().gid;
  id.key_bounds = caps().key_bounds;
  return id;
}

absl::StatusOr<std::vector<std::string>> SplitDeviceList(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(list, ';')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device list '%s': item %d is empty (specs are separated by ';')", list, out.size() + 1));
    }
    out.emplace_back(item);
  }
  return out;
}

namespace {

// Opens one device and builds its cache and servicer. `registry`: where they register (the
// slot's own, which the daemon's holds under the device label).
absl::Status Build(DeviceSlot& slot, const DaemonConfig& config, base::stats::Registry* registry,
                   const std::atomic<bool>* draining) {
  hca::OpenOptions open;
  open.stats_registry = registry;
  open.selection = &slot.selection;
  open.strict_key_bounds = config.strict_key_bounds;
  ASSIGN_OR_RETURN(slot.device, hca::OpenDevice(slot.spec, open));
  // The fault servicer observes the cache's backings, so it comes first and goes last.
  cache::CacheOptions cache_options = config.cache;
  cache_options.pool.capacity_classes =
      cache::RegCache::FitClasses(cache_options.pool.capacity_classes, slot.caps());
  if (slot.caps().odp) {
    odp::ServicerOptions servicer_options;
    servicer_options.completion_timeout = config.cache.engine.completion_timeout;
    ASSIGN_OR_RETURN(slot.servicer,
                     odp::Servicer::Create(slot.device.get(), servicer_options, registry));
    cache_options.backing_observer = slot.servicer.get();
  }
  ASSIGN_OR_RETURN(slot.cache, cache::RegCache::Create(slot.device.get(), cache_options, registry));
  slot.keys = std::make_unique<SessionKeys>(slot.cache.get(), slot.servicer.get(),
                                            slot.device.get(), draining);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceSet>> DeviceSet::Open(const DaemonConfig& config,
                                                           base::stats::Registry* registry,
                                                           const std::atomic<bool>* draining) {
  ASSIGN_OR_RETURN(std::vector<std::string> specs, SplitDeviceList(config.device));
  const bool several = specs.size() > 1;
  auto set = std::unique_ptr<DeviceSet>(new DeviceSet);
  std::set<std::string> names;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (several && (specs[i] == "auto" || absl::StartsWith(specs[i], "auto:"))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device list '%s': 'auto' opens one device and must stand alone; name each device "
          "instead",
          config.device));
    }
    auto slot = std::make_unique<DeviceSlot>();
    slot->index = static_cast<uint32_t>(i);
    slot->spec = specs[i];
    slot->peer_on_any_device = config.peer_on_any_device;
    // Each device's components go to its own registry, labelled with the device's name once it
    // is known (after opening): `device` is on every series of a device, one or several.
    base::stats::Registry* target = registry == nullptr ? nullptr : &slot->stats;
    absl::Status built = Build(*slot, config, target, draining);
    if (!built.ok()) {
      return several ? base::Annotate(built, absl::StrCat("device '", specs[i], "'")) : built;
    }
    if (!names.insert(slot->name()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device list '%s': two devices are named '%s' (give each a name, e.g. sim:sim1)",
          config.device, slot->name()));
    }
    if (registry != nullptr) {
      slot->stats_registration = base::stats::Registration(
          *registry, absl::StrFormat("device=\"%s\"", slot->name()), &slot->stats);
    }
    RC_LOG(INFO) << "device " << i << ": " << slot->caps().backend << ":" << slot->name()
                 << (slot->servicer != nullptr ? " (on-demand paging served)" : "") << "; "
                 << slot->selection;
    set->slots_.push_back(std::move(slot));
  }
  return set;
}

absl::StatusOr<std::shared_ptr<DeviceSlot>> OpenOwnContext(DeviceSlot& home,
                                                           const DaemonConfig& config,
                                                           const std::atomic<bool>* draining) {
  const hca::Capabilities& caps = home.caps();
  if (!caps.pd_export) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s:%s cannot give a session a device context to import (its provider has no "
        "ibv_import_device/ibv_import_pd; see docs/client_memory.md)",
        caps.backend, caps.device_name));
  }
  if (!config.allow_pd_export) {
    return absl::PermissionDeniedError(
        "sessions with a device context of their own are off in this regcached "
        "(--allow_pd_export)");
  }
  auto slot = std::make_shared<DeviceSlot>();
  slot->index = home.index;
  slot->spec = home.spec;
  slot->home = &home;
  slot->peer_on_any_device = home.peer_on_any_device;
  RETURN_IF_ERROR(Build(*slot, config, nullptr, draining));
  if (slot->name() != home.name() || slot->caps().backend != caps.backend) {
    return absl::InternalError(
        absl::StrFormat("device spec '%s' opened %s:%s for a session's own context, not %s:%s",
                        home.spec, slot->caps().backend, slot->name(), caps.backend, home.name()));
  }
  return slot;
}

absl::StatusOr<DeviceSlot*> DeviceSet::FindForSession(absl::string_view name,
                                                      uint32_t max_sessions) const {
  ASSIGN_OR_RETURN(DeviceSlot * slot, Find(name));
  if (max_sessions != 0 && slot->sessions.load() >= max_sessions) {
    return SessionLimitReached(max_sessions, slot->name());
  }
  if (!slot->device->Health().ok()) return slot->Failed();
  return slot;
}

absl::StatusOr<DeviceSlot*> DeviceSet::Find(absl::string_view name) const {
  if (name.empty()) return &first();
  for (const auto& slot : slots_) {
    if (slot->name() == name) return slot.get();
  }
  return absl::NotFoundError(
      absl::StrFormat("regcached serves no device '%s'; its devices: %s", name, Names()));
}

std::string DeviceSet::Names() const {
  std::string out;
  for (const auto& slot : slots_) absl::StrAppend(&out, out.empty() ? "" : ", ", slot->name());
  return out;
}

}  // namespace regcache::service::internal
