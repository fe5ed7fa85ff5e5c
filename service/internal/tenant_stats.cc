#include "service/internal/tenant_stats.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"

namespace regcache::service::internal {
namespace {

struct TenantUse {
  uint64_t sessions = 0;
  uint64_t live_registrations = 0;
  uint64_t revoked_held = 0;
  uint64_t backed_bytes = 0;
  uint64_t memories = 0;

  void Add(const TenantUse& o) {
    sessions += o.sessions;
    live_registrations += o.live_registrations;
    revoked_held += o.revoked_held;
    backed_bytes += o.backed_bytes;
    memories += o.memories;
  }
};

void Append(const std::string& tenant, const TenantUse& u, std::vector<base::stats::Sample>* out) {
  const std::string component = absl::StrCat("tenant{tenant=\"", tenant, "\"}");
  auto gauge = [&](const char* name, const char* help, uint64_t v) {
    base::stats::Sample s;
    s.component = component;
    s.name = name;
    s.help = help;
    s.kind = base::stats::Kind::kGauge;
    s.value = static_cast<int64_t>(v);
    out->push_back(std::move(s));
  };
  gauge("sessions", "sessions open, by tenant (the uid that opened them)", u.sessions);
  gauge("live_registrations", "registrations and windows live, by tenant", u.live_registrations);
  gauge("revoked_held", "registrations revoked and still held, by tenant", u.revoked_held);
  gauge("backed_bytes", "bytes of backing memory attached, by tenant", u.backed_bytes);
  gauge("memories", "shareable memories attached, by tenant", u.memories);
}

}  // namespace

std::vector<base::stats::Sample> TenantSamples(const std::vector<SessionInfo>& sessions,
                                               uint32_t max_tenants) {
  absl::btree_map<uint32_t, TenantUse> by_uid;
  for (const SessionInfo& s : sessions) {
    TenantUse& u = by_uid[s.peer.uid];
    u.Add({1, s.usage.live_registrations, s.usage.revoked_held, s.usage.backed_bytes, s.memories});
  }
  std::vector<std::pair<uint32_t, TenantUse>> ranked(by_uid.begin(), by_uid.end());
  // btree order is by uid, and stable_sort keeps it among equals.
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.backed_bytes, a.second.live_registrations, a.second.sessions) >
           std::tie(b.second.backed_bytes, b.second.live_registrations, b.second.sessions);
  });
  std::vector<base::stats::Sample> out;
  TenantUse other;
  bool any_other = false;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (i < max_tenants) {
      Append(absl::StrCat(ranked[i].first), ranked[i].second, &out);
    } else {
      other.Add(ranked[i].second);
      any_other = true;
    }
  }
  if (any_other) Append("other", other, &out);
  return out;
}

}  // namespace regcache::service::internal
