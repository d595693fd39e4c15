#include "api/verbs/poll_yield.h"

#include "gtest/gtest.h"

namespace rdmaplane::verbs {
namespace {

int a, b, c;  // stand-ins for three CQs

TEST(PollYield, OneCqYieldsAtEveryEmptyPollButTheFirst) {
  PollYield y(1);
  EXPECT_FALSE(y.AfterPoll(&a, 0));
  EXPECT_TRUE(y.AfterPoll(&a, 0));
  EXPECT_TRUE(y.AfterPoll(&a, 0));
  EXPECT_FALSE(y.AfterPoll(&a, 1));  // a completion ends the round
  EXPECT_FALSE(y.AfterPoll(&a, 0));
  EXPECT_TRUE(y.AfterPoll(&a, 0));
}

TEST(PollYield, CqsPolledInTurnYieldOncePerPass) {
  PollYield y(1);
  int yields = 0;
  for (int pass = 0; pass < 10; ++pass) {
    for (const int* cq : {&a, &b, &c}) yields += y.AfterPoll(cq, 0);
  }
  // The first pass only learns the CQs; each later one yields once, at
  // its first CQ.
  EXPECT_EQ(yields, 9);
}

TEST(PollYield, ACompletionOnAnyCqStartsAFreshRound) {
  PollYield y(1);
  EXPECT_FALSE(y.AfterPoll(&a, 0));
  EXPECT_FALSE(y.AfterPoll(&b, 0));
  EXPECT_FALSE(y.AfterPoll(&a, 2));
  EXPECT_FALSE(y.AfterPoll(&b, 0));
  EXPECT_FALSE(y.AfterPoll(&a, 0));
  EXPECT_TRUE(y.AfterPoll(&b, 0));
}

TEST(PollYield, YieldAfterCountsRounds) {
  PollYield y(3);
  int yields = 0;
  for (int i = 0; i < 31; ++i) yields += y.AfterPoll(&a, 0);
  EXPECT_EQ(yields, 10);  // 30 rounds ended, every third yields
}

TEST(PollYield, ZeroNeverYields) {
  PollYield y(0);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(y.AfterPoll(&a, 0));
}

TEST(PollYield, MoreCqsThanItRemembersStillYield) {
  PollYield y(1);
  int cqs[PollYield::kMaxCqs + 4];
  int yields = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (const int& cq : cqs) yields += y.AfterPoll(&cq, 0);
  }
  EXPECT_GE(yields, 2);
}

}  // namespace
}  // namespace rdmaplane::verbs
