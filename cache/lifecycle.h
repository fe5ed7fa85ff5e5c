// The lifecycle of a pooled key, as an explicit state machine.
//
//   kFree ──take──▶ kMapping ──UMR ok──▶ kActive ──invalidate/evict──▶ kDraining
//     ▲                │ UMR error                                        │ stop-reference:
//     │                ▼                                                  │ out of the index,
//     │            kRecovery ◀──invalidate error──┐                       ▼ no new holders
//     │                │ invalidated / destroyed  │                   kFencing  (invalidate
//     │                ▼                          │                      │       posted with
//   kQuarantined ◀── kUnmapped ◀──completion── kInvalidating ◀──────────┘       the fence bit)
//
// kDraining     no new hand-outs; holders that remain are revoked (their key stops working).
// kFencing      the invalidate WQE is posted with a fence: it starts only after every request
//               posted before it on the queue has completed.
// kInvalidating the device executes the invalidate (free = 1).
// kUnmapped     the invalidation's completion was seen: the device refuses every access through
//               the key. Only now are backing references dropped and quota returned.
// kQuarantined  the index waits out its quarantine (time and count) before reuse.
// kRecovery     a UMR on the key failed: its device state is unknown. Recovery invalidates it
//               again; if that fails too, the key is destroyed (and the pool makes a new one).
//               A key in recovery is never handed out.
// kDestroyed    terminal (DESTROY_MKEY done).
//
// Nothing is unmapped or freed before the device has confirmed the invalidation.
#ifndef REGCACHE_CACHE_LIFECYCLE_H_
#define REGCACHE_CACHE_LIFECYCLE_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace regcache::cache {

enum class KeyState : uint8_t {
  kFree,
  kMapping,
  kActive,
  kDraining,
  kFencing,
  kInvalidating,
  kUnmapped,
  kQuarantined,
  kRecovery,
  kDestroyed,
};

absl::string_view KeyStateName(KeyState s);

// True if the machine above has the edge from -> to.
bool IsLegalTransition(KeyState from, KeyState to);

// A key's current state. Transitions are checked: an illegal one is a broken invariant and
// aborts (RC_CHECK). Not synchronized: the owner (the tenant) serializes transitions.
class KeyLifecycle {
 public:
  KeyState state() const { return state_; }
  void Transition(KeyState to);

 private:
  KeyState state_ = KeyState::kFree;
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_LIFECYCLE_H_
