#include "cache/lifecycle.h"

#include "gtest/gtest.h"

namespace regcache::cache {
namespace {

TEST(LifecycleTest, TheHappyPathIsLegalInOrder) {
  KeyLifecycle life;
  for (KeyState s :
       {KeyState::kMapping, KeyState::kActive, KeyState::kDraining, KeyState::kFencing,
        KeyState::kInvalidating, KeyState::kUnmapped, KeyState::kQuarantined, KeyState::kFree}) {
    life.Transition(s);
    EXPECT_EQ(life.state(), s);
  }
}

TEST(LifecycleTest, NothingSkipsTheInvalidationCompletion) {
  // No edge leads from a mapped state to unmapped, quarantined or free without the device's
  // confirmation (kInvalidating -> kUnmapped, or recovery).
  for (KeyState from : {KeyState::kActive, KeyState::kDraining, KeyState::kFencing}) {
    EXPECT_FALSE(IsLegalTransition(from, KeyState::kUnmapped)) << KeyStateName(from);
    EXPECT_FALSE(IsLegalTransition(from, KeyState::kQuarantined)) << KeyStateName(from);
    EXPECT_FALSE(IsLegalTransition(from, KeyState::kFree)) << KeyStateName(from);
  }
  EXPECT_FALSE(IsLegalTransition(KeyState::kRecovery, KeyState::kFree));
  EXPECT_FALSE(IsLegalTransition(KeyState::kUnmapped, KeyState::kFree));  // quarantine first
  EXPECT_TRUE(IsLegalTransition(KeyState::kMapping, KeyState::kRecovery));
  EXPECT_TRUE(IsLegalTransition(KeyState::kInvalidating, KeyState::kRecovery));
  EXPECT_TRUE(IsLegalTransition(KeyState::kRecovery, KeyState::kDestroyed));
  EXPECT_FALSE(IsLegalTransition(KeyState::kDestroyed, KeyState::kFree));
}

TEST(LifecycleDeathTest, IllegalTransitionIsABrokenInvariant) {
  KeyLifecycle life;
  EXPECT_DEATH(life.Transition(KeyState::kActive), "illegal key transition free -> active");
}

}  // namespace
}  // namespace regcache::cache