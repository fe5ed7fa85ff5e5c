// The fault service's plan: which pages a fault, prefetch or zap touches and which MTT ranges
// it rewrites — decided from what odp/ knows of a backing's table, with no device, no lock and
// no memory access. The servicer (servicer_impl.h) carries a plan out: it makes the pages
// resident, posts the rewrites through its UMR engine, and commits the new state.
//
// The state odp/ keeps of an on-demand backing is one EntryState per entry of the key's table
// (whole 8-entry blocks). odp/ is the only writer of those MTTs on the daemon path, so the state
// mirrors the device's table — until a rewrite fails part-way: then the state is `uncertain`
// (the device may hold more than it says), nothing is taken as present without a rewrite, and
// zaps rewrite every block of their range.
//
// A service plan covers the pending needs' entries widened to whole blocks (a UMR writes 64-byte
// blocks of 8 MTT entries: its translation offset and size are 64-byte aligned, docs/prm.md,
// UMR WQE), runs that meet merged into one; a run is rewritten only if its state changes (or the
// state is uncertain), in rewrites of at most `max_entries` entries each (what one WQE carries
// inline). Entries around a need inside its blocks are rewritten with their current state, so a
// rewrite never takes a neighbour's rights away.
//
// Thread safety: plain functions of their arguments; the caller holds the backing's lock.
#ifndef REGCACHE_ODP_INTERNAL_FAULT_PLAN_H_
#define REGCACHE_ODP_INTERNAL_FAULT_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "hca/device.h"
#include "odp/internal/mtt_range.h"

namespace regcache::odp::internal {

// What odp/ has published for one MTT entry. The bits nest: kReadWrite includes kRead.
enum EntryState : uint8_t {
  kAbsent = 0,
  kRead = 1,
  kReadWrite = 3,
};

// odp/'s copy of an on-demand backing's MTT.
struct MttState {
  std::vector<uint8_t> entries;  // one EntryState per entry of the table (TableEntries)
  bool uncertain = false;        // a rewrite failed part-way: the device may differ
};

// The MTT entry that publishes entry i of `b` in `state` (absent: all zero).
hca::MttEntry EntryFor(const hca::Backing& b, uint32_t i, uint8_t state);

// What one fault or prefetch needs from a backing, and how it ended.
struct Need {
  uint64_t addr = 0;  // daemon addresses (the backing key's address space)
  uint64_t length = 0;
  bool write = false;
  EntryRange range;  // set by CheckNeeds: the entries holding [addr, addr + length)
  bool done = false;
  absl::Status result;  // once done
};

// Sets each need's range and finishes (done, with the error) those that cannot be served:
// kInvalidArgument for a range not inside the backing (or empty), kPermissionDenied for a write
// need on a backing without write rights (`writable` false). Returns how many remain pending.
size_t CheckNeeds(const hca::Backing& b, bool writable, absl::Span<Need> needs);

// Whether every entry of `need` is present with the rights it needs. Never while uncertain.
bool Satisfied(const MttState& state, const Need& need);

// Finishes (OK) every pending need that is Satisfied; returns how many it finished.
size_t FinishSatisfied(const MttState& state, absl::Span<Need> needs);

// Finishes every pending need with `status`.
void FinishPending(absl::Span<Need> needs, const absl::Status& status);

// The daemon bytes a need's entries map, clamped to the backing: what must be resident, with
// the need's intent, before its entries may be published.
struct ByteRange {
  uint64_t addr = 0;
  uint64_t length = 0;
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};
ByteRange ResidentBytes(const hca::Backing& b, const Need& need);

// One UMR: MTT entries [first, first + entries.size()), whole blocks.
struct MttRewrite {
  uint32_t first = 0;
  std::vector<hca::MttEntry> entries;
};

// Splits entries [first, first + states.size()) (whole blocks, in `states`) into rewrites of at
// most max_entries entries, appended to `out`. REQUIRES: max_entries a non-zero multiple of 8.
void AppendRewrites(const hca::Backing& b, uint32_t first, absl::Span<const uint8_t> states,
                    uint32_t max_entries, std::vector<MttRewrite>* out);

// Making the pending needs present.
struct ServicePlan {
  std::vector<EntryRange> runs;            // whole-block runs of the pending needs, merged
  std::vector<std::vector<uint8_t>> next;  // per run: its state once the needs are served
  std::vector<MttRewrite> rewrites;        // empty: nothing changes (the needs are served)
};
// REQUIRES: CheckNeeds ran over `needs`; max_entries a non-zero multiple of 8.
ServicePlan PlanService(const hca::Backing& b, const MttState& state, absl::Span<const Need> needs,
                        uint32_t max_entries);
// After the plan's rewrites: `ok` — the runs take their next state; failed — some WQEs may have
// executed, so the new entries count as present too (a zap then clears them) and the state
// becomes uncertain.
void CommitService(const ServicePlan& plan, bool ok, MttState* state);

// Clearing the entries of a range.
struct ZapPlan {
  EntryRange range;
  std::vector<MttRewrite> rewrites;  // the blocks holding a present entry of the range
  uint64_t present = 0;              // entries of the range present before the zap
};
// Every block with a present entry in `range` (every block of it while uncertain) is rewritten
// whole: the entries of `range` absent, the others as they are; adjacent blocks share a rewrite.
// REQUIRES: range inside the table; max_entries a non-zero multiple of 8.
ZapPlan PlanZap(const hca::Backing& b, const MttState& state, EntryRange range,
                uint32_t max_entries);
// After the plan's rewrites: `ok` — the range is absent; failed — some blocks may be cleared
// already while the state still says present (so a retry clears them): uncertain.
void CommitZap(const ZapPlan& plan, bool ok, MttState* state);

}  // namespace regcache::odp::internal
#endif  // REGCACHE_ODP_INTERNAL_FAULT_PLAN_H_
