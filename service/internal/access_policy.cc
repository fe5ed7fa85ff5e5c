#include "service/internal/access_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/error_reason.h"
#include "base/log.h"

namespace regcache::service::internal {
namespace {

bool Contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

AccessPolicy::AccessPolicy(const DaemonConfig& config, uid_t self)
    : allow_uids_(config.allow_uids),
      allow_gids_(config.allow_gids),
      admin_uids_(config.admin_uids),
      admin_gids_(config.admin_gids),
      self_(self) {}

bool AccessPolicy::MayOpenSession(const PeerCredentials& peer) const {
  if (allow_uids_.empty() && allow_gids_.empty()) return peer.uid == 0 || peer.uid == self_;
  return Contains(allow_uids_, peer.uid) || Contains(allow_gids_, peer.gid);
}

absl::Status AccessPolicy::CheckMayOpenSession(const PeerCredentials& peer) const {
  if (MayOpenSession(peer)) return absl::OkStatus();
  return base::WithReason(
      absl::PermissionDeniedError(absl::StrFormat("uid %d / gid %d is not allowed to use regcached "
                                                  "(the allow-list: --allow_uids, --allow_gids)",
                                                  peer.uid, peer.gid)),
      base::reason::kPeerNotAllowed,
      {{"uid", std::to_string(peer.uid)}, {"gid", std::to_string(peer.gid)}});
}

bool AccessPolicy::IsAdmin(const PeerCredentials& peer) const {
  return Contains(admin_uids_, peer.uid) || Contains(admin_gids_, peer.gid);
}

std::string AccessPolicy::DescribeAdmins() const {
  if (admin_uids_.empty() && admin_gids_.empty()) {
    return "no session is admin (--admin_uids, --admin_gids): Sessions, Drain and acting on "
           "another session are refused";
  }
  return absl::StrCat("admin: uids [", absl::StrJoin(admin_uids_, ","), "] gids [",
                      absl::StrJoin(admin_gids_, ","), "]");
}

absl::Status SessionLimitReached(uint32_t limit, absl::string_view device) {
  if (device.empty()) {
    return base::WithReason(
        absl::ResourceExhaustedError(absl::StrFormat("session limit %d reached", limit)),
        base::reason::kSessionLimitReached, {{"limit", std::to_string(limit)}});
  }
  return base::WithReason(absl::ResourceExhaustedError(absl::StrFormat(
                              "session limit %d of device %s reached", limit, device)),
                          base::reason::kSessionLimitReached,
                          {{"limit", std::to_string(limit)}, {"device", std::string(device)}});
}

RefusalLog::RefusalLog(absl::Duration interval, Clock now)
    : interval_(interval), now_(std::move(now)) {}

bool RefusalLog::Refused(const PeerCredentials& peer, absl::string_view what,
                         absl::string_view why) {
  const absl::Time now = now_();
  uint64_t unlogged = 0;
  {
    base::MutexLock lock(&mu_);
    if (entries_.size() >= kMaxEntries) {
      absl::erase_if(entries_, [&](const auto& e) { return now - e.second.logged >= interval_; });
      if (entries_.size() >= kMaxEntries) entries_.clear();  // a bound, whatever the clients do
    }
    auto [it, added] = entries_.try_emplace(Key{peer.uid, peer.gid, std::string(what)});
    Entry& e = it->second;
    if (!added && now - e.logged < interval_) {
      ++e.unlogged;
      return false;
    }
    unlogged = std::exchange(e.unlogged, 0);
    e.logged = now;
  }
  RC_LOG(WARNING) << what << " refused: pid " << peer.pid << " uid " << peer.uid << " gid "
                  << peer.gid << ": " << why
                  << (unlogged > 0 ? absl::StrCat(" (and ", unlogged,
                                                  " more refusals of this uid and gid not logged)")
                                   : "");
  return true;
}

}  // namespace regcache::service::internal
