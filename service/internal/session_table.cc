#include "service/internal/session_table.h"

#include <sys/random.h>

#include <cerrno>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace regcache::service::internal {

absl::StatusOr<std::string> NewToken() {
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return base::ErrnoToStatus(errno, "getrandom for a session token");
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

size_t SessionTable::size() const {
  base::MutexLock lock(&mu_);
  return sessions_.size();
}

SessionId SessionTable::NewId() {
  base::MutexLock lock(&mu_);
  return next_session_++;
}

SessionId SessionTable::Add(std::shared_ptr<Session> s) {
  base::MutexLock lock(&mu_);
  if (s->id == 0) s->id = next_session_++;
  by_token_[s->token] = s->id;
  const SessionId id = s->id;
  sessions_[id] = std::move(s);
  return id;
}

absl::StatusOr<std::shared_ptr<Session>> SessionTable::Find(SessionId id) const {
  base::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrFormat("no session %d", id));
  return it->second;
}

absl::StatusOr<std::unique_ptr<SessionRef>> SessionTable::Pin(SessionId id) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(id));
  auto ref = std::make_unique<SessionRef>(std::move(s));
  (**ref).ops.AssertReaderHeld();  // the SessionRef holds it
  if ((**ref).closed) return absl::NotFoundError(absl::StrFormat("session %d is closed", id));
  return ref;
}

std::optional<SessionId> SessionTable::FindToken(absl::string_view token) const {
  base::MutexLock lock(&mu_);
  auto it = by_token_.find(token);  // heterogeneous: no string built per call
  if (it == by_token_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::shared_ptr<Session>> SessionTable::Remove(SessionId id) {
  base::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrFormat("no session %d", id));
  std::shared_ptr<Session> s = std::move(it->second);
  sessions_.erase(it);
  by_token_.erase(s->token);
  return s;
}

std::vector<std::shared_ptr<Session>> SessionTable::All() const {
  std::vector<std::shared_ptr<Session>> all;
  base::MutexLock lock(&mu_);
  for (const auto& [id, s] : sessions_) all.push_back(s);
  return all;
}

std::vector<SessionId> SessionTable::Ids() const {
  std::vector<SessionId> ids;
  base::MutexLock lock(&mu_);
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  return ids;
}

std::vector<TenantSession> SessionTable::TenantUse() const {
  std::vector<TenantSession> use;
  for (auto& s : All()) {
    base::MutexLock lock(&s->mu);
    use.push_back({s->peer.uid, s->mapped_bytes, s->memories.size() + s->regions.size()});
  }
  return use;
}

}  // namespace regcache::service::internal
