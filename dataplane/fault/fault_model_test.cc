#include "dataplane/fault/fault_model.h"

#include <gtest/gtest.h>

namespace rdmaplane::fault {
namespace {

TEST(FaultSpecTest, ParsesAllKeys) {
  FaultSpec spec;
  ASSERT_EQ(ParseFaultSpec("loss=0.05,dup=0.01,reorder=0.02,delay_us=5,"
                           "jitter_us=2,reorder_us=30,seed=9",
                           &spec),
            "");
  EXPECT_DOUBLE_EQ(spec.loss, 0.05);
  EXPECT_DOUBLE_EQ(spec.duplicate, 0.01);
  EXPECT_DOUBLE_EQ(spec.reorder, 0.02);
  EXPECT_EQ(spec.delay_ns, 5000u);
  EXPECT_EQ(spec.jitter_ns, 2000u);
  EXPECT_EQ(spec.reorder_ns, 30000u);
  EXPECT_EQ(spec.seed, 9u);
  EXPECT_TRUE(spec.active());
}

TEST(FaultSpecTest, RejectsBadInputAndKeepsSpec) {
  FaultSpec spec;
  spec.loss = 0.5;
  EXPECT_NE(ParseFaultSpec("loss=2", &spec), "");
  EXPECT_NE(ParseFaultSpec("loss=abc", &spec), "");
  EXPECT_NE(ParseFaultSpec("bogus=1", &spec), "");
  EXPECT_NE(ParseFaultSpec("delay_us=-3", &spec), "");
  EXPECT_NE(ParseFaultSpec("loss", &spec), "");
  EXPECT_DOUBLE_EQ(spec.loss, 0.5);
  EXPECT_EQ(ParseFaultSpec("", &spec), "");
  EXPECT_FALSE(spec.active());
}

TEST(FaultModelTest, RatesMatchSpecAndSeedIsDeterministic) {
  FaultSpec spec;
  spec.loss = 0.1;
  spec.duplicate = 0.05;
  spec.reorder = 0.02;
  spec.reorder_ns = 100;
  spec.seed = 42;
  FaultModel a(spec), b(spec);
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    FaultDecision da = a.Next(), db = b.Next();
    ASSERT_EQ(da.copies, db.copies);
    ASSERT_EQ(da.delay_ns, db.delay_ns);
  }
  EXPECT_NEAR(a.counters().dropped / double(n), 0.1, 0.005);
  EXPECT_NEAR(a.counters().duplicated / double(n), 0.9 * 0.05, 0.005);
  EXPECT_NEAR(a.counters().reordered / double(n), 0.9 * 1.05 * 0.02, 0.003);
}

TEST(FaultModelTest, DropAfterPassesTheFirstFramesOnly) {
  FaultSpec spec;
  ASSERT_EQ(ParseFaultSpec("drop_after=3", &spec), "");
  FaultModel m(spec);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m.Next().copies, 1u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(m.Next().copies, 0u);
}

TEST(FaultModelTest, NoFaultsPassesEverythingUndelayed) {
  FaultModel m(FaultSpec{});
  for (int i = 0; i < 1000; ++i) {
    FaultDecision d = m.Next();
    EXPECT_EQ(d.copies, 1u);
    EXPECT_EQ(d.delay_ns, 0u);
  }
}

}  // namespace
}  // namespace rdmaplane::fault
