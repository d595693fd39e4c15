#include <gtest/gtest.h>
TEST(Tmp, Broken) { this_does_not_compile; }
