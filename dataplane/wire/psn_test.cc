#include "dataplane/wire/psn.h"

#include <gtest/gtest.h>

namespace rdmaplane::wire {
namespace {

TEST(PsnTest, ConstructionMasksTo24Bits) {
  EXPECT_EQ(Psn(0x1234567).value(), 0x234567u);
  EXPECT_EQ(Psn(0xFFFFFF).value(), 0xFFFFFFu);
}

TEST(PsnTest, AdditionWraps) {
  EXPECT_EQ((Psn(0xFFFFFF) + 1).value(), 0u);
  EXPECT_EQ((Psn(0xFFFFFE) + 5).value(), 3u);
  EXPECT_EQ((Psn(2) - 5).value(), 0xFFFFFDu);
  Psn p(0xFFFFFF);
  ++p;
  EXPECT_EQ(p.value(), 0u);
}

TEST(PsnTest, OrderingIsWrapAware) {
  EXPECT_LT(Psn(0xFFFFF0), Psn(0x10));
  EXPECT_GT(Psn(0x10), Psn(0xFFFFF0));
  EXPECT_EQ(Psn(0x10).DistanceFrom(Psn(0xFFFFF0)), 0x20);
  EXPECT_EQ(Psn(0xFFFFF0).DistanceFrom(Psn(0x10)), -0x20);
  EXPECT_LE(Psn(5), Psn(5));
  EXPECT_GE(Psn(5), Psn(5));
  EXPECT_LT(Psn(0), Psn(0x7FFFFF));
  // Exactly half the space apart reads as "behind" (the sign bit of 24).
  EXPECT_GT(Psn(0), Psn(0x800000));
}

TEST(PsnTest, IdsAreDistinctTypes) {
  EXPECT_EQ(Qpn(7), Qpn(7));
  EXPECT_NE(Rkey(7), Rkey(8));
  static_assert(!std::is_convertible_v<Qpn, Rkey>);
  static_assert(!std::is_convertible_v<uint32_t, Psn>);
}

}  // namespace
}  // namespace rdmaplane::wire
