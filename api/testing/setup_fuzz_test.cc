// The daemon's Unix control socket and its setup readers with descriptors
// that must be closed exactly once. Every close(2) of this process goes
// through the interposer below, so a descriptor closed twice shows even when
// no other thread reused its number in between.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "api/shm/layout.h"
#include "api/shm/setup.h"
#include "api/testing/hostile_client.h"

namespace {

// Descriptors closed while not open, anywhere in this process.
std::atomic<uint64_t> g_bad_closes{0};
std::atomic<int> g_last_bad_close{-1};

}  // namespace

// Every close(2) of this process, the daemon's included, comes through here
// (glibc's own internal closes do not). A descriptor closed twice shows here
// even when no other thread reused its number in between; when one did, the
// second close took that thread's descriptor, which the descriptor count of
// the checks notices.
extern "C" int close(int fd) {
  if (syscall(SYS_close, fd) == 0) return 0;
  if (errno == EBADF && fd >= 0) {
    g_last_bad_close.store(fd);
    g_bad_closes.fetch_add(1);
  }
  return -1;
}

namespace rdmaplane {
namespace {

using testing::RawClient;

constexpr uint64_t kRegionBytes = shm::SessionRegionBytes();

class SetupFuzzTest : public testing::HostileClientTest {};

// A region the daemon maps and then refuses (its session header is bad) has
// its descriptor closed once (fixed; Daemon::HandleHello closed it, and then
// CloseSession closed it again: a descriptor another thread of the daemon
// had opened in between under the same number would have been closed).
TEST_F(SetupFuzzTest, RefusedRegionIsClosedOnce) {
  const uint64_t bad_closes = g_bad_closes.load();
  const std::pair<const char*, std::function<void(shm::SessionHeader&)>>
      cases[] = {
          {"no ring table",
           [](shm::SessionHeader& h) {
             std::memset(static_cast<void*>(&h), 0,
                         offsetof(shm::SessionHeader, control_response_bell));
           }},
          {"bad magic", [](shm::SessionHeader& h) { h.magic ^= 1; }},
          {"ring outside the region",
           [](shm::SessionHeader& h) {
             h.control_requests.offset = kRegionBytes;
           }},
      };
  for (const auto& [what, scribble] : cases) {
    SCOPED_TRACE(what);
    RawClient raw(path());
    ASSERT_TRUE(raw.Format());
    scribble(*raw.header());
    ASSERT_TRUE(raw.ConnectSocket());
    ASSERT_TRUE(raw.SendHello());
    const RawClient::Answer a = raw.ReadAnswer();
    ASSERT_EQ(a.got, RawClient::Got::kMessage);
    EXPECT_EQ(a.status, shm::kStatusInvalid) << a.text;
    EXPECT_TRUE(raw.WaitClosed());
    raw.Close();
    EXPECT_TRUE(testing::CountersReach(*daemon_, baseline_));
    EXPECT_EQ(g_bad_closes.load(), bad_closes)
        << "descriptor " << g_last_bad_close.load() << " closed twice";
  }
  ExpectBaseline();
}

}  // namespace
}  // namespace rdmaplane
