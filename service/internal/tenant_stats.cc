#include "service/internal/tenant_stats.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"

namespace regcache::service::internal {
namespace {

struct TenantUse {
  uint64_t sessions = 0;
  uint64_t mapped_bytes = 0;
  uint64_t memories = 0;

  void Add(const TenantUse& o) {
    sessions += o.sessions;
    mapped_bytes += o.mapped_bytes;
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
  gauge("mapped_bytes", "bytes of shareable memory the daemon maps, by tenant", u.mapped_bytes);
  gauge("memories", "memories and client regions of the sessions, by tenant", u.memories);
}

}  // namespace

std::vector<base::stats::Sample> TenantSamples(const std::vector<TenantSession>& sessions,
                                               uint32_t max_tenants) {
  absl::btree_map<uint32_t, TenantUse> by_uid;
  for (const TenantSession& s : sessions) by_uid[s.uid].Add({1, s.mapped_bytes, s.memories});
  std::vector<std::pair<uint32_t, TenantUse>> ranked(by_uid.begin(), by_uid.end());
  // btree order is by uid, and stable_sort keeps it among equals.
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.mapped_bytes, a.second.sessions) >
           std::tie(b.second.mapped_bytes, b.second.sessions);
  });
  std::vector<base::stats::Sample> out;
  TenantUse other;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (i < max_tenants) {
      Append(absl::StrCat(ranked[i].first), ranked[i].second, &out);
    } else {
      other.Add(ranked[i].second);
    }
  }
  if (ranked.size() > max_tenants) Append("other", other, &out);
  return out;
}

}  // namespace regcache::service::internal
