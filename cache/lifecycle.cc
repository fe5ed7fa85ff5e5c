#include "cache/lifecycle.h"

#include "base/log.h"

namespace regcache::cache {

absl::string_view KeyStateName(KeyState s) {
  switch (s) {
    case KeyState::kFree:
      return "free";
    case KeyState::kMapping:
      return "mapping";
    case KeyState::kActive:
      return "active";
    case KeyState::kDraining:
      return "draining";
    case KeyState::kFencing:
      return "fencing";
    case KeyState::kInvalidating:
      return "invalidating";
    case KeyState::kUnmapped:
      return "unmapped";
    case KeyState::kQuarantined:
      return "quarantined";
    case KeyState::kRecovery:
      return "recovery";
    case KeyState::kDestroyed:
      return "destroyed";
  }
  return "unknown";
}

bool IsLegalTransition(KeyState from, KeyState to) {
  using S = KeyState;
  switch (from) {
    case S::kFree:
      return to == S::kMapping || to == S::kDestroyed;
    case S::kMapping:
      return to == S::kActive || to == S::kRecovery;
    case S::kActive:
      return to == S::kDraining;
    case S::kDraining:
      return to == S::kFencing;
    case S::kFencing:
      return to == S::kInvalidating;
    case S::kInvalidating:
      return to == S::kUnmapped || to == S::kRecovery;
    case S::kUnmapped:
      return to == S::kQuarantined;
    case S::kQuarantined:
      return to == S::kFree || to == S::kDestroyed;
    case S::kRecovery:
      return to == S::kUnmapped || to == S::kDestroyed;
    case S::kDestroyed:
      return false;
  }
  return false;
}

void KeyLifecycle::Transition(KeyState to) {
  RC_CHECK(IsLegalTransition(state_, to))
      << "illegal key transition " << KeyStateName(state_) << " -> " << KeyStateName(to);
  state_ = to;
}

}  // namespace regcache::cache