#include "server/internal/call_ledger.h"

#include <vector>

namespace regcache::server::internal {

void CallLedger::Remember(Session& s, uint64_t call_id, Call call) {
  auto [it, inserted] = s.calls.insert_or_assign(call_id, call);
  (void)it;
  if (!inserted) return;  // a client reusing an id: the newest outcome counts
  s.order.push_back(call_id);
  while (s.order.size() > kCallsPerSession) {
    s.calls.erase(s.order.front());
    s.order.pop_front();
  }
}

bool CallLedger::Made(uint64_t session, uint64_t call_id, uint64_t handle) {
  base::MutexLock l(&mu_);
  Session& s = sessions_[session];
  auto it = s.calls.find(call_id);
  if (it != s.calls.end() && !it->second.handle.has_value()) {
    s.calls.erase(it);  // forgotten first: the tombstone has done its work
    return false;
  }
  ++recorded_;
  Remember(s, call_id, Call{handle});
  return true;
}

std::optional<uint64_t> CallLedger::Forget(uint64_t session, uint64_t call_id) {
  base::MutexLock l(&mu_);
  Session& s = sessions_[session];
  auto it = s.calls.find(call_id);
  if (it != s.calls.end() && it->second.handle.has_value()) {
    std::optional<uint64_t> handle = it->second.handle;
    it->second.handle.reset();  // forgetting twice releases once
    return handle;
  }
  Remember(s, call_id, Call{std::nullopt});
  return std::nullopt;
}

bool CallLedger::PruneDue() {
  base::MutexLock l(&mu_);
  if (recorded_ < kPruneEvery) return false;
  recorded_ = 0;
  return true;
}

void CallLedger::Prune(absl::FunctionRef<bool(uint64_t)> open) {
  std::vector<uint64_t> ids;
  {
    base::MutexLock l(&mu_);
    ids.reserve(sessions_.size());
    for (const auto& [id, s] : sessions_) ids.push_back(id);
  }
  std::vector<uint64_t> closed;
  for (uint64_t id : ids) {  // asked without the lock: `open` may take the daemon's
    if (!open(id)) closed.push_back(id);
  }
  base::MutexLock l(&mu_);
  for (uint64_t id : closed) sessions_.erase(id);
}

size_t CallLedger::sessions() const {
  base::MutexLock l(&mu_);
  return sessions_.size();
}

}  // namespace regcache::server::internal
