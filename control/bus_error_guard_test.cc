#include "control/bus_error_guard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace rdmaplane::control {
namespace {

constexpr size_t kBytes = 64 << 10;

// A file of kBytes (a memfd without seals, which anyone holding it may
// shrink), mapped shared and filled with 0x5A.
struct MappedFile {
  int fd = -1;
  uint8_t* at = nullptr;
  MappedFile() {
    fd = memfd_create("bus-error-guard-test", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, kBytes), 0);
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    at = static_cast<uint8_t*>(p);
    std::memset(at, 0x5A, kBytes);
  }
  ~MappedFile() {
    munmap(at, kBytes);
    close(fd);
  }
};

// Reads through a volatile pointer, so that the access happens here.
uint8_t ReadAt(const uint8_t* p) { return *static_cast<const volatile uint8_t*>(p); }

TEST(BusErrorGuardTest, AWatchedMappingThatLostItsPagesReadsZeroAndLives) {
  MappedFile file;
  const int watch = BusErrorGuard::Watch(file.at, kBytes);
  ASSERT_GE(watch, 0);
  const uint64_t before = BusErrorGuard::losses();
  EXPECT_EQ(ReadAt(file.at + 100), 0x5A);
  EXPECT_FALSE(BusErrorGuard::Lost(watch));
  // The file shrinks under the mapping: its next access would be SIGBUS.
  ASSERT_EQ(ftruncate(file.fd, 0), 0);
  EXPECT_EQ(ReadAt(file.at + kBytes - 1), 0);
  EXPECT_TRUE(BusErrorGuard::Lost(watch));
  EXPECT_EQ(BusErrorGuard::losses(), before + 1);
  // The replacement takes writes, and the file never sees them.
  std::memset(file.at, 0x77, kBytes);
  EXPECT_EQ(ReadAt(file.at + 5), 0x77);
  struct stat st {};
  ASSERT_EQ(fstat(file.fd, &st), 0);
  EXPECT_EQ(st.st_size, 0);
  BusErrorGuard::Unwatch(file.at);
  EXPECT_FALSE(BusErrorGuard::Lost(watch));
}

TEST(BusErrorGuardTest, ThreadsFaultingAtOnceAllGoOn) {
  MappedFile file;
  ASSERT_GE(BusErrorGuard::Watch(file.at, kBytes), 0);
  ASSERT_EQ(ftruncate(file.fd, 0), 0);
  std::vector<std::thread> threads;
  std::vector<int> seen(4, -1);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { seen[t] = ReadAt(file.at + t * 4096); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(seen, std::vector<int>(4, 0));
  BusErrorGuard::Unwatch(file.at);
}

TEST(BusErrorGuardTest, WatchesAreReusedAndCounted) {
  const int before = BusErrorGuard::watched();
  std::vector<MappedFile> files(3);
  std::vector<int> watches;
  for (MappedFile& f : files) {
    watches.push_back(BusErrorGuard::Watch(f.at, kBytes));
    ASSERT_GE(watches.back(), 0);
  }
  EXPECT_EQ(BusErrorGuard::watched(), before + 3);
  BusErrorGuard::Unwatch(files[1].at);
  EXPECT_EQ(BusErrorGuard::watched(), before + 2);
  // Unwatching an address nobody watches changes nothing.
  BusErrorGuard::Unwatch(files[1].at);
  EXPECT_EQ(BusErrorGuard::watched(), before + 2);
  EXPECT_EQ(BusErrorGuard::Watch(files[1].at, kBytes), watches[1]);
  for (MappedFile& f : files) BusErrorGuard::Unwatch(f.at);
  EXPECT_EQ(BusErrorGuard::watched(), before);
}

// How the process ends on a bus error nobody handles: killed by SIGBUS, or,
// under a sanitizer (whose handler was there before the guard's), by the
// sanitizer's report of it.
bool EndedByTheBusError(int status) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return !WIFEXITED(status) || (WEXITSTATUS(status) != 0 &&
                                WEXITSTATUS(status) != 3);
#else
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
}

// Elsewhere a bus error is what it was: the process ends with SIGBUS.
TEST(BusErrorGuardDeathTest, ABusErrorOutsideEveryWatchEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        BusErrorGuard::Install();
        MappedFile file;
        BusErrorGuard::Watch(file.at, 4096);  // its first page only
        if (ftruncate(file.fd, 0) != 0) _exit(3);
        ReadAt(file.at + 8192);
        _exit(0);
      },
      EndedByTheBusError, "");
}

}  // namespace
}  // namespace rdmaplane::control
