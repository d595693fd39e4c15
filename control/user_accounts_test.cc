#include "control/user_accounts.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace rdmaplane::control {
namespace {

TEST(UserAccountsTest, ChargesAreGivenBackWhenTheyGo) {
  UserLimits limits;
  limits.sessions = 2;
  UserAccounts accounts(limits);
  {
    auto a = accounts.Take(1000, Resource::kSessions);
    auto b = accounts.Take(1000, Resource::kSessions);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(accounts.Used(1000, Resource::kSessions), 2u);
    auto c = accounts.Take(1000, Resource::kSessions);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
    // The message names the limit and the flag that sets it.
    EXPECT_NE(c.status().message().find("--max_sessions_per_user"),
              std::string::npos)
        << c.status();
    EXPECT_NE(c.status().message().find("uid 1000"), std::string::npos);
    // Another user has an allowance of their own.
    EXPECT_TRUE(accounts.Take(1001, Resource::kSessions).ok());
  }
  EXPECT_EQ(accounts.Used(1000, Resource::kSessions), 0u);
  EXPECT_TRUE(accounts.Take(1000, Resource::kSessions).ok());
}

TEST(UserAccountsTest, AmountsCountAndAMoveKeepsOneCharge) {
  UserLimits limits;
  limits.arena_bytes = 100;
  UserAccounts accounts(limits);
  auto a = accounts.Take(7, Resource::kArenaBytes, 60);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(accounts.Take(7, Resource::kArenaBytes, 41).ok());
  std::vector<UserAccounts::Charge> held;
  held.push_back(std::move(*a));
  held.emplace_back(*accounts.Take(7, Resource::kArenaBytes, 40));
  EXPECT_EQ(accounts.Used(7, Resource::kArenaBytes), 100u);
  // An amount beyond the limit on its own, and one that would wrap.
  EXPECT_FALSE(accounts.Take(8, Resource::kArenaBytes, 101).ok());
  EXPECT_FALSE(accounts.Take(7, Resource::kArenaBytes, ~uint64_t{0}).ok());
  held.erase(held.begin());
  EXPECT_EQ(accounts.Used(7, Resource::kArenaBytes), 40u);
  held.clear();
  EXPECT_EQ(accounts.Used(7, Resource::kArenaBytes), 0u);
}

TEST(UserAccountsTest, ZeroMeansUnlimited) {
  UserLimits limits;
  limits.registrations = 0;
  UserAccounts accounts(limits);
  std::vector<UserAccounts::Charge> held;
  for (int i = 0; i < 100000; ++i) {
    auto c = accounts.Take(0, Resource::kRegistrations);
    ASSERT_TRUE(c.ok());
    held.push_back(std::move(*c));
  }
  EXPECT_EQ(accounts.Used(0, Resource::kRegistrations), 100000u);
}

}  // namespace
}  // namespace rdmaplane::control
