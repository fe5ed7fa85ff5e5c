#include "server/internal/call_ledger.h"

#include <gtest/gtest.h>

namespace regcache::server::internal {
namespace {

TEST(CallLedgerTest, ForgettingAFinishedCallGivesItsHoldOnce) {
  CallLedger ledger;
  EXPECT_TRUE(ledger.Made(1, 7, 1000));
  EXPECT_EQ(ledger.Forget(1, 7), 1000u);
  EXPECT_EQ(ledger.Forget(1, 7), std::nullopt) << "a second forget must not release again";
}

TEST(CallLedgerTest, ACallForgottenBeforeItEndsIsRefusedWhenItMakesItsHold) {
  CallLedger ledger;
  EXPECT_EQ(ledger.Forget(1, 7), std::nullopt);
  EXPECT_FALSE(ledger.Made(1, 7, 1000)) << "the caller must release the hold";
  // The tombstone did its work; the id may be used again.
  EXPECT_TRUE(ledger.Made(1, 7, 1001));
}

TEST(CallLedgerTest, SessionsAreSeparate) {
  CallLedger ledger;
  EXPECT_TRUE(ledger.Made(1, 7, 1000));
  EXPECT_EQ(ledger.Forget(2, 7), std::nullopt) << "another session's call of the same id";
  EXPECT_EQ(ledger.Forget(1, 7), 1000u);
}

TEST(CallLedgerTest, OnlyTheMostRecentCallsAreRemembered) {
  CallLedger ledger;
  for (uint64_t id = 1; id <= CallLedger::kCallsPerSession + 10; ++id) {
    ASSERT_TRUE(ledger.Made(1, id, 1000 + id));
  }
  EXPECT_EQ(ledger.Forget(1, 1), std::nullopt) << "the oldest were dropped";
  const uint64_t newest = CallLedger::kCallsPerSession + 10;
  EXPECT_EQ(ledger.Forget(1, newest), 1000 + newest);
}

TEST(CallLedgerTest, PruneDropsClosedSessions) {
  CallLedger ledger;
  size_t due = 0;
  for (uint64_t i = 0; i < CallLedger::kPruneEvery; ++i) {
    ASSERT_TRUE(ledger.Made(1 + i % 3, i + 1, i));
    if (ledger.PruneDue()) ++due;
  }
  EXPECT_EQ(due, 1u);
  EXPECT_EQ(ledger.sessions(), 3u);
  ledger.Prune([](uint64_t s) { return s == 2; });
  EXPECT_EQ(ledger.sessions(), 1u);
  EXPECT_EQ(ledger.Forget(1, 1), std::nullopt);
}

}  // namespace
}  // namespace regcache::server::internal
