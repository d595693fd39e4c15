#include "dataplane/port/burst_guard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include "gtest/gtest.h"

namespace rdmaplane::port {
namespace {

// Memory that faults on any access, standing in for a ring the memif PMD
// unmapped under a burst.
uint8_t* Unmapped() {
  void* p = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return static_cast<uint8_t*>(p);
}

int Touch(const volatile uint8_t* p) { return p[0]; }

TEST(BurstGuardTest, AFaultInsideAGuardedBurstEndsOnlyTheBurst) {
  InstallBurstGuard();
  uint8_t* bad = Unmapped();
  ASSERT_NE(bad, MAP_FAILED);
  int faults = 0;
  int value = -1;
  for (int i = 0; i < 3; ++i) {  // the guard works again after a fault
    RDP_GUARDED_BURST(value = Touch(bad), ++faults);
  }
  EXPECT_EQ(faults, 3);
  EXPECT_EQ(value, -1);
  uint8_t good = 7;
  RDP_GUARDED_BURST(value = Touch(&good), ++faults);
  EXPECT_EQ(value, 7);
  EXPECT_EQ(faults, 3);
  munmap(bad, 4096);
}

TEST(BurstGuardTest, GuardsArePerThread) {
  InstallBurstGuard();
  uint8_t* bad = Unmapped();
  int faults = 0;
  std::thread t([&] { RDP_GUARDED_BURST(Touch(bad), ++faults); });
  t.join();
  EXPECT_EQ(faults, 1);
  munmap(bad, 4096);
}

TEST(BurstGuardDeathTest, AFaultOutsideAGuardedBurstStillCrashes) {
  EXPECT_DEATH(
      {
        InstallBurstGuard();
        Touch(Unmapped());
      },
      "");
}

}  // namespace
}  // namespace rdmaplane::port
