#include "odp/internal/fault_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace regcache::odp::internal {

hca::MttEntry EntryFor(const hca::Backing& b, uint32_t i, uint8_t state) {
  if (state == kAbsent) return hca::MttEntry{};
  return hca::MttEntry{EntryDmaAddr(b, i), true, state == kReadWrite};
}

size_t CheckNeeds(const hca::Backing& b, bool writable, absl::Span<Need> needs) {
  size_t pending = 0;
  for (Need& n : needs) {
    n.done = false;
    n.range = EntriesCovering(b, n.addr, n.length);
    if (n.range.empty() || n.addr < b.addr || n.addr + n.length > b.addr + b.length) {
      n.done = true;
      n.result = absl::InvalidArgumentError(
          absl::StrFormat("[0x%x, +%u) is outside backing 0x%08x [0x%x, +%u)", n.addr, n.length,
                          b.key, b.addr, b.length));
    } else if (n.write && !writable) {
      n.done = true;
      n.result =
          absl::PermissionDeniedError(absl::StrFormat("backing 0x%08x is not writable", b.key));
    } else {
      ++pending;
    }
  }
  return pending;
}

bool Satisfied(const MttState& state, const Need& need) {
  if (state.uncertain) return false;
  const uint8_t want = need.write ? kReadWrite : kRead;
  for (uint32_t i = need.range.first; i < need.range.end; ++i) {
    if ((state.entries[i] & want) != want) return false;
  }
  return true;
}

size_t FinishSatisfied(const MttState& state, absl::Span<Need> needs) {
  size_t finished = 0;
  for (Need& n : needs) {
    if (!n.done && Satisfied(state, n)) {
      n.done = true;
      n.result = absl::OkStatus();
      ++finished;
    }
  }
  return finished;
}

void FinishPending(absl::Span<Need> needs, const absl::Status& status) {
  for (Need& n : needs) {
    if (!n.done) {
      n.done = true;
      n.result = status;
    }
  }
}

ByteRange ResidentBytes(const hca::Backing& b, const Need& need) {
  uint64_t lo, lo_len, hi, hi_len;
  EntryBytes(b, need.range.first, &lo, &lo_len);
  EntryBytes(b, need.range.end - 1, &hi, &hi_len);
  return ByteRange{lo, hi + hi_len - lo};
}

void AppendRewrites(const hca::Backing& b, uint32_t first, absl::Span<const uint8_t> states,
                    uint32_t max_entries, std::vector<MttRewrite>* out) {
  for (size_t off = 0; off < states.size(); off += max_entries) {
    const size_t n = std::min<size_t>(max_entries, states.size() - off);
    MttRewrite r;
    r.first = static_cast<uint32_t>(first + off);
    r.entries.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      r.entries.push_back(EntryFor(b, static_cast<uint32_t>(r.first + i), states[off + i]));
    }
    out->push_back(std::move(r));
  }
}

ServicePlan PlanService(const hca::Backing& b, const MttState& state, absl::Span<const Need> needs,
                        uint32_t max_entries) {
  ServicePlan plan;
  // Runs of whole blocks touched by the pending needs, merged where they meet.
  std::vector<EntryRange> runs;
  for (const Need& n : needs) {
    if (!n.done) runs.push_back(AlignToBlocks(b, n.range));
  }
  std::sort(runs.begin(), runs.end(),
            [](const EntryRange& x, const EntryRange& y) { return x.first < y.first; });
  for (const EntryRange& r : runs) {
    if (!plan.runs.empty() && r.first <= plan.runs.back().end) {
      plan.runs.back().end = std::max(plan.runs.back().end, r.end);
    } else {
      plan.runs.push_back(r);
    }
  }
  // The new state of those runs: what is there, plus what the needs add.
  plan.next.resize(plan.runs.size());
  for (size_t k = 0; k < plan.runs.size(); ++k) {
    plan.next[k].assign(state.entries.begin() + plan.runs[k].first,
                        state.entries.begin() + plan.runs[k].end);
  }
  for (const Need& n : needs) {
    if (n.done) continue;
    size_t k = 0;
    while (plan.runs[k].end <= n.range.first) ++k;
    for (uint32_t i = n.range.first; i < n.range.end; ++i) {
      plan.next[k][i - plan.runs[k].first] |= n.write ? kReadWrite : kRead;
    }
  }
  for (size_t k = 0; k < plan.runs.size(); ++k) {
    if (!state.uncertain && std::equal(plan.next[k].begin(), plan.next[k].end(),
                                       state.entries.begin() + plan.runs[k].first)) {
      continue;
    }
    AppendRewrites(b, plan.runs[k].first, plan.next[k], max_entries, &plan.rewrites);
  }
  return plan;
}

void CommitService(const ServicePlan& plan, bool ok, MttState* state) {
  if (!ok) state->uncertain = true;
  for (size_t k = 0; k < plan.runs.size(); ++k) {
    const std::vector<uint8_t>& next = plan.next[k];
    uint8_t* entries = state->entries.data() + plan.runs[k].first;
    for (size_t i = 0; i < next.size(); ++i) entries[i] = ok ? next[i] : (entries[i] | next[i]);
  }
}

ZapPlan PlanZap(const hca::Backing& b, const MttState& state, EntryRange range,
                uint32_t max_entries) {
  ZapPlan plan;
  plan.range = range;
  const EntryRange blocks = AlignToBlocks(b, range);
  // Runs of blocks to rewrite: [run_first, run_first + states.size()).
  uint32_t run_first = 0;
  std::vector<uint8_t> states;
  for (uint32_t blk = blocks.first; blk < blocks.end; blk += kEntriesPerBlock) {
    bool any = false;
    for (uint32_t i = std::max(blk, range.first); i < std::min(blk + kEntriesPerBlock, range.end);
         ++i) {
      if (state.entries[i] != kAbsent) {
        any = true;
        ++plan.present;
      }
    }
    if (!any && !state.uncertain) continue;
    if (!states.empty() && run_first + states.size() != blk) {
      AppendRewrites(b, run_first, states, max_entries, &plan.rewrites);
      states.clear();
    }
    if (states.empty()) run_first = blk;
    for (uint32_t i = blk; i < blk + kEntriesPerBlock; ++i) {
      const bool in = i >= range.first && i < range.end;
      states.push_back(in ? uint8_t{kAbsent} : state.entries[i]);
    }
  }
  if (!states.empty()) AppendRewrites(b, run_first, states, max_entries, &plan.rewrites);
  return plan;
}

void CommitZap(const ZapPlan& plan, bool ok, MttState* state) {
  if (!ok) {
    state->uncertain = true;
    return;
  }
  std::fill(state->entries.begin() + plan.range.first, state->entries.begin() + plan.range.end,
            kAbsent);
}

}  // namespace regcache::odp::internal