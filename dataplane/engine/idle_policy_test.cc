#include "dataplane/engine/idle_policy.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace rdmaplane::engine {
namespace {

using Action = IdlePolicy::Action;

constexpr uint32_t kSpins = 4;
constexpr uint64_t kIdleNs = 1000;

// A clock the test moves by hand; counts how often the policy read it.
struct FakeClock {
  uint64_t now = 5000;
  int reads = 0;
  auto Fn() {
    return [this] {
      ++reads;
      return now;
    };
  }
};

TEST(IdlePolicyTest, AdaptiveSpinsThenYieldsThenSleeps) {
  IdlePolicy p(PollMode::kAdaptive, kSpins, kIdleNs);
  FakeClock clock;
  for (uint32_t i = 0; i < kSpins; ++i) {
    EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kPoll) << i;
  }
  EXPECT_EQ(clock.reads, 0) << "the spin must not read the clock";
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
  clock.now += kIdleNs - 1;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
  clock.now += 1;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kSleep);
}

TEST(IdlePolicyTest, WorkRestartsTheSpinAndTheIdleTime) {
  IdlePolicy p(PollMode::kAdaptive, kSpins, kIdleNs);
  FakeClock clock;
  for (uint32_t i = 0; i <= kSpins; ++i) p.AfterTurn(false, clock.Fn());
  clock.now += kIdleNs / 2;
  EXPECT_EQ(p.AfterTurn(true, clock.Fn()), Action::kPoll);
  for (uint32_t i = 0; i < kSpins; ++i) {
    EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kPoll);
  }
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
  // The idle time counts from the end of the new spin, not the old one.
  clock.now += kIdleNs - 1;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
  clock.now += 1;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kSleep);
}

TEST(IdlePolicyTest, AfterAnUninterruptedNapSleepsRightAfterTheSpin) {
  IdlePolicy p(PollMode::kAdaptive, kSpins, kIdleNs);
  FakeClock clock;
  for (uint32_t i = 0; i < kSpins; ++i) p.AfterTurn(false, clock.Fn());
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
  clock.now += kIdleNs;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kSleep);
  p.AfterSleep(/*woken=*/false);
  EXPECT_EQ(p.naps(), 1u);
  for (uint32_t i = 0; i < kSpins; ++i) {
    EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kPoll);
  }
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kSleep);
  p.AfterSleep(/*woken=*/false);
  EXPECT_EQ(p.naps(), 2u);
}

TEST(IdlePolicyTest, AWakeUpRestoresTheFullIdleTime) {
  IdlePolicy p(PollMode::kAdaptive, kSpins, kIdleNs);
  FakeClock clock;
  for (uint32_t i = 0; i < kSpins; ++i) p.AfterTurn(false, clock.Fn());
  p.AfterTurn(false, clock.Fn());
  clock.now += kIdleNs;
  ASSERT_EQ(p.AfterTurn(false, clock.Fn()), Action::kSleep);
  p.AfterSleep(/*woken=*/false);
  p.AfterSleep(/*woken=*/true);
  EXPECT_EQ(p.naps(), 0u);
  for (uint32_t i = 0; i < kSpins; ++i) p.AfterTurn(false, clock.Fn());
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
  clock.now += kIdleNs - 1;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
}

TEST(IdlePolicyTest, WorkAfterNapsClearsThem) {
  IdlePolicy p(PollMode::kAdaptive, kSpins, kIdleNs);
  FakeClock clock;
  p.AfterSleep(/*woken=*/false);
  p.AfterSleep(/*woken=*/false);
  ASSERT_EQ(p.naps(), 2u);
  p.AfterTurn(true, clock.Fn());
  EXPECT_EQ(p.naps(), 0u);
}

TEST(IdlePolicyTest, BusyNeverYieldsOrSleepsNorReadsTheClock) {
  IdlePolicy p(PollMode::kBusy, kSpins, kIdleNs);
  FakeClock clock;
  for (int i = 0; i < 10000; ++i) {
    ASSERT_EQ(p.AfterTurn(false, clock.Fn()), Action::kPoll) << i;
    clock.now += kIdleNs;
  }
  EXPECT_EQ(clock.reads, 0);
}

TEST(IdlePolicyTest, ZeroSpinsYieldsFromTheFirstEmptyTurn) {
  IdlePolicy p(PollMode::kAdaptive, 0, kIdleNs);
  FakeClock clock;
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kYield);
}

TEST(IdlePolicyTest, ZeroIdleTimeSleepsRightAfterTheSpin) {
  IdlePolicy p(PollMode::kAdaptive, kSpins, 0);
  FakeClock clock;
  for (uint32_t i = 0; i < kSpins; ++i) p.AfterTurn(false, clock.Fn());
  EXPECT_EQ(p.AfterTurn(false, clock.Fn()), Action::kSleep);
}

}  // namespace
}  // namespace rdmaplane::engine
