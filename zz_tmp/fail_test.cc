#include <gtest/gtest.h>
TEST(Tmp, PassesOne) { EXPECT_EQ(1, 1); }
TEST(Tmp, PassesTwo) { EXPECT_EQ(2, 2); }
TEST(Tmp, Fails) { EXPECT_EQ(1, 2); }
