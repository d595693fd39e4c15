// The page mover under a library that stands in for mmap, as UCX's memory
// hooks do (they report every mmap to handlers that allocate from memory
// pools, which may lie next to a buffer being registered). While pages
// move, writes to them wait; a stand-in that the move itself called, and
// that wrote to the window, would wait for the very thread that moves them
// (ucx_perftest hung so in ibv_reg_mr). The move calls the kernel directly:
// this test's stand-in for mmap sees no mapping over the window, and the
// buffer keeps its contents. Not a sanitizer test: the sanitizers' own
// stand-ins for mmap would meet this one.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "api/client.h"
#include "tests/testing/test_util.h"

namespace {

std::atomic<uint64_t> watch_begin{0};
std::atomic<uint64_t> watch_end{0};
std::atomic<int> calls_over_window{0};

}  // namespace

// Every mmap of this process comes here (the executable's definition comes
// first); it writes into the watched window when a mapping lands on it, as
// a hook that allocates there would, then maps as the kernel does.
extern "C" void* mmap(void* addr, size_t length, int prot, int flags, int fd,
                      off_t offset) {
  const uint64_t at = reinterpret_cast<uint64_t>(addr);
  const uint64_t begin = watch_begin.load(std::memory_order_acquire);
  const uint64_t end = watch_end.load(std::memory_order_acquire);
  if ((flags & MAP_FIXED) != 0 && at < end && at + length > begin) {
    calls_over_window.fetch_add(1, std::memory_order_relaxed);
    auto* word = reinterpret_cast<volatile uint8_t*>(begin + 8192);
    *word = static_cast<uint8_t>(*word + 1);
  }
  const long r = syscall(SYS_mmap, addr, length, prot, flags, fd, offset);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}

namespace rdmaplane {
namespace {

using testing::ConnectedPair;
using testing::TestDaemon;

TEST(PageMoverHooksTest, AStandInForMmapIsNotCalledWhilePagesMove) {
  TestDaemon d("mover_hooks");
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  ConnectedPair p(d);
  ASSERT_TRUE(p.ok);
  constexpr size_t kBytes = 1 << 20;
  void* map = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(map);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  watch_begin.store(reinterpret_cast<uint64_t>(bytes), std::memory_order_release);
  watch_end.store(reinterpret_cast<uint64_t>(bytes) + kBytes,
                  std::memory_order_release);
  const absl::Status moved = p.client->ShareMemory(bytes + 4096, 4096);
  watch_end.store(0, std::memory_order_release);
  ASSERT_TRUE(moved.ok()) << moved;
  EXPECT_EQ(calls_over_window.load(), 0)
      << "the move mapped over the window through the process's mmap";
  size_t differ = 0;
  for (size_t i = 0; i < kBytes; ++i) {
    differ += bytes[i] != static_cast<uint8_t>(i * 7) ? 1 : 0;
  }
  EXPECT_EQ(differ, 0u) << "bytes changed by the move";
  absl::StatusOr<uint32_t> lkey =
      p.client->RegisterMemory(bytes + 4096, 4096, RDP_MEM_READWRITE);
  EXPECT_TRUE(lkey.ok()) << lkey.status();
  munmap(map, kBytes);
}

}  // namespace
}  // namespace rdmaplane
