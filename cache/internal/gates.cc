#include "cache/internal/gates.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "cache/umr_engine.h"

namespace regcache::cache::internal {

namespace {

// DESTROY_MKEY of a gate's index; the ledger remembers the variant it carried.
absl::Status DestroyIndex(Tenant& t, hca::Key gate) {
  if (t.ctx->ledger != nullptr) t.ctx->ledger->Destroyed(gate);
  return t.device()->DestroyKey(gate);
}

}  // namespace

bool UsesGates(const Tenant& t) {
  const hca::Capabilities& c = t.device()->capabilities();
  return t.ctx->options.gate_backings && c.umr && !c.memory_windows &&
         c.max_indirection >= kGatedIndirection;
}

absl::StatusOr<hca::Key> OpenGate(Tenant& t, const BackingRecord& b) {
  // One entry per 2 GiB (a KLM entry's most), onto the registration at the same addresses.
  KlmLayout klm;
  for (uint64_t off = 0; off < b.length; off += kMaxKlmEntryBytes) {
    klm.push_back(hca::KlmEntry{b.device.key, b.device_addr + off,
                                std::min<uint64_t>(kMaxKlmEntryBytes, b.length - off)});
  }
  const hca::Capabilities& caps = t.device()->capabilities();
  const uint32_t most = caps.max_klm_entries;
  if (klm.size() > most) {
    return absl::OutOfRangeError(
        absl::StrFormat("memory of %d bytes needs a gate of %d entries; the device's keys hold %d",
                        b.length, klm.size(), most));
  }
  ASSIGN_OR_RETURN(std::vector<hca::Key> made,
                   t.device()->CreateIndirectKeys(t.pd, static_cast<uint32_t>(klm.size()), 1, {}));
  // Like a pooled key, a gate starts from the variant its index last carried and moves on: a
  // value some client may still hold from a destroyed key never names it.
  const hca::Key created =
      t.ctx->ledger != nullptr ? t.ctx->ledger->Resume(made.front()) : made.front();
  UmrOp op;
  op.kind = UmrOp::Kind::kMap;
  op.klm = std::move(klm);
  op.map.key = created;
  op.map.new_variant = hca::KeyVariant(hca::NextVariant(created));
  op.map.layout = hca::Layout::kKlm;
  // Remote atomics only where a UMR may grant them; no key over the gate can then have them.
  op.map.access = caps.umr_modify_atomic ? b.access : b.access & ~hca::kRemoteAtomic;
  op.map.start_addr = b.device_addr;
  op.map.length = b.length;
  op.map.require_free = true;
  UmrOp* ops[] = {&op};
  t.engine->Execute(ops);
  const hca::Key gate = hca::NextVariant(created);
  if (!op.result.ok()) {
    // Mapped or not, the index goes: remember the later variant.
    (void)DestroyIndex(t, gate);
    return base::Annotate(op.result, "map the gate of attached memory");
  }
  t.stats().gates.Add();
  return gate;
}

absl::Status DestroyGate(Tenant& t, hca::Key gate) {
  absl::Status s = DestroyIndex(t, gate);
  if (s.ok()) t.stats().gates.Sub();
  return s;
}

absl::Status ShutGates(Tenant& t, absl::Span<const hca::Key> gates) {
  if (gates.empty()) return absl::OkStatus();
  std::vector<UmrOp> ops;
  ops.reserve(gates.size());
  std::vector<UmrOp*> posted;
  for (hca::Key g : gates) {
    // Fenced: whatever this queue posted before (maps through the gate) completes first.
    ops.push_back(UmrOp::Invalidate(g, /*fence=*/true));
    posted.push_back(&ops.back());
  }
  t.engine->Execute(posted);
  for (const UmrOp& op : ops) {
    if (!op.result.ok()) {
      return base::Annotate(op.result, absl::StrFormat("invalidate gate 0x%08x", op.key));
    }
  }
  return absl::OkStatus();
}

}  // namespace regcache::cache::internal
