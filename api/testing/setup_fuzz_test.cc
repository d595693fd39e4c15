// The daemon's Unix control socket and its setup readers with descriptors
// that must be closed exactly once. Every close(2) of this process goes
// through the interposer below, so a descriptor closed twice shows even when
// no other thread reused its number in between.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
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

constexpr size_t kMsg = sizeof(shm::SetupMessage);
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

// A read that fails takes no descriptor (fixed; found by fuzzing the control
// socket, with a client that closed in the middle of a message that carried
// a descriptor, an answer of the daemon's unread: SetupReader::Read looked
// through the control buffer of the recvmsg(2) that then failed with
// ECONNRESET, which the kernel leaves as it was, found there the descriptor
// its previous recvmsg had received, took it a second time and closed it
// twice).
TEST(SetupReaderTest, AFailedReadTakesNoDescriptor) {
  const uint64_t bad_closes = g_bad_closes.load();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  // The reader's peer closes with data of the reader's unread, so that the
  // reader's next recvmsg fails with ECONNRESET once it has read what the
  // peer sent: part of a message, with a descriptor.
  ASSERT_EQ(send(sv[0], "x", 1, MSG_NOSIGNAL), 1);
  RawClient peer("");
  peer.AdoptSocket(sv[1]);
  const int extra = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(extra, 0);
  const shm::SetupMessage m = shm::MakeSetup(shm::kSetupArena);
  ASSERT_TRUE(peer.Send(&m, kMsg / 2, {extra}));
  close(extra);
  peer.Close();
  shm::SetupReader reader;
  shm::SetupMessage got;
  int fd0 = -1, fd1 = -1;
  EXPECT_EQ(reader.Read(sv[0], &got, &fd0, &fd1),
            shm::SetupReader::Result::kClosed);
  close(sv[0]);
  EXPECT_EQ(g_bad_closes.load(), bad_closes)
      << "descriptor " << g_last_bad_close.load() << " closed twice";
}

// Likewise for the blocking RecvSetup of the client library (fixed: after a
// recvmsg that failed, with a time-out or a reset, it closed whatever
// descriptors the stale control buffer named -- those of an earlier answer
// the client was still using, its doorbells).
TEST(SetupReaderTest, AFailedRecvSetupClosesNothing) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const int bell = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(bell, 0);
  shm::SetupMessage m = shm::MakeSetup(shm::kSetupHelloReply);
  ASSERT_TRUE(shm::SendSetup(sv[1], m, bell));
  close(bell);
  // One answer, then nothing: the second receive fails at once. Back to
  // back, so that nothing else used the stack between them.
  ASSERT_EQ(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  int kept = -1, fd1 = -1, fd2 = -1, fd3 = -1;
  const bool first = shm::RecvSetup(sv[0], &m, &kept, &fd1);
  const bool second = shm::RecvSetup(sv[0], &m, &fd2, &fd3);
  ASSERT_TRUE(first);
  ASSERT_GE(kept, 0);
  EXPECT_FALSE(second);
  EXPECT_EQ(fd2, -1);
  EXPECT_NE(fcntl(kept, F_GETFD), -1)
      << "a failed receive closed the descriptor of an earlier answer";
  close(kept);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace rdmaplane
