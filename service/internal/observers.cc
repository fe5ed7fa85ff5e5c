#include "service/internal/observers.h"

#include "absl/strings/str_format.h"
#include "base/error_reason.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "service/internal/device_set.h"
#include "service/internal/session_table.h"

namespace regcache::service::internal {

absl::StatusOr<SessionGrant> ObserverTable::Open(SessionId id, const PeerCredentials& peer,
                                                 bool admin, absl::StatusOr<DeviceSlot*> device) {
  if (!device.ok()) return device.status();
  ASSIGN_OR_RETURN(std::string token, NewToken());
  {
    base::MutexLock lock(&mu_);
    if (by_id_.size() >= kMaxObservers) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("observer limit %d reached (read-only connections)", kMaxObservers));
    }
    by_id_[id] = Observer{id, token, peer, admin};
    by_token_[token] = id;
  }
  SessionGrant grant{id, token, admin};
  grant.observer = true;
  grant.device = (*device)->Identity();
  RC_LOG(DEBUG) << "observer " << id << " opened: pid " << peer.pid << " uid " << peer.uid
                << (admin ? " (admin)" : "");
  return grant;
}

std::optional<Observer> ObserverTable::Find(SessionId id) const {
  base::MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

std::optional<SessionId> ObserverTable::FindToken(absl::string_view token) const {
  base::MutexLock lock(&mu_);
  auto it = by_token_.find(token);
  if (it == by_token_.end()) return std::nullopt;
  return it->second;
}

bool ObserverTable::Remove(SessionId id) {
  base::MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  by_token_.erase(it->second.token);
  by_id_.erase(it);
  return true;
}

size_t ObserverTable::size() const {
  base::MutexLock lock(&mu_);
  return by_id_.size();
}

absl::Status ObserverRefusal(SessionId id) {
  return base::WithReason(
      absl::PermissionDeniedError(absl::StrFormat(
          "%d is a read-only observer connection (Open with the observer flag): it may only read "
          "(status, stats, sessions, keys, endpoints, memory); this call needs a session of its "
          "own",
          id)),
      base::reason::kObserverReadOnly);
}

}  // namespace regcache::service::internal
