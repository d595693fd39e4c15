#include "api/shm/setup.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace rdmaplane::shm {
namespace {

// Sends raw bytes with optional descriptors.
void SendRaw(int sock, const void* data, size_t len, int fd0 = -1,
             int fd1 = -1, int fd2 = -1) {
  iovec iov{const_cast<void*>(data), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))];
  int fds[3];
  int n = 0;
  for (int fd : {fd0, fd1, fd2}) {
    if (fd >= 0) fds[n++] = fd;
  }
  if (n > 0) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(n * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
  }
  ASSERT_EQ(sendmsg(sock, &mh, 0), static_cast<ssize_t>(len));
}

class SetupReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv_), 0);
  }
  void TearDown() override {
    close(sv_[0]);
    close(sv_[1]);
  }
  int sv_[2];
};

TEST_F(SetupReaderTest, AssemblesAMessageSentInPiecesWithItsDescriptor) {
  SetupMessage out = MakeSetup(kSetupArena);
  out.length = 12345;
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  SetupReader reader;
  SetupMessage in;
  int fd0, fd1;
  EXPECT_EQ(reader.Read(sv_[1], &in, &fd0, &fd1),
            SetupReader::Result::kPartial);
  SendRaw(sv_[0], &out, 40, pipe_fds[0]);
  EXPECT_EQ(reader.Read(sv_[1], &in, &fd0, &fd1),
            SetupReader::Result::kPartial);
  SendRaw(sv_[0], reinterpret_cast<uint8_t*>(&out) + 40, sizeof(out) - 40);
  ASSERT_EQ(reader.Read(sv_[1], &in, &fd0, &fd1),
            SetupReader::Result::kMessage);
  EXPECT_EQ(in.type, kSetupArena);
  EXPECT_EQ(in.length, 12345u);
  ASSERT_GE(fd0, 0);
  EXPECT_EQ(fd1, -1);
  // The descriptor is the pipe's read end: it sees what the write end sends.
  ASSERT_EQ(write(pipe_fds[1], "x", 1), 1);
  char c = 0;
  EXPECT_EQ(read(fd0, &c, 1), 1);
  EXPECT_EQ(c, 'x');
  close(fd0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST_F(SetupReaderTest, BadMagicTooManyDescriptorsAndEndOfStreamClose) {
  SetupMessage bad = MakeSetup(kSetupHello);
  bad.magic = 0;
  SetupReader reader;
  SetupMessage in;
  int fd0, fd1;
  SendRaw(sv_[0], &bad, sizeof(bad));
  EXPECT_EQ(reader.Read(sv_[1], &in, &fd0, &fd1), SetupReader::Result::kClosed);

  SetupReader reader2;
  SetupMessage good = MakeSetup(kSetupHello);
  SendRaw(sv_[0], &good, sizeof(good), 0, 1, 2);  // three descriptors
  EXPECT_EQ(reader2.Read(sv_[1], &in, &fd0, &fd1),
            SetupReader::Result::kClosed);

  SetupReader reader3;
  close(sv_[0]);
  sv_[0] = -1;
  EXPECT_EQ(reader3.Read(sv_[1], &in, &fd0, &fd1),
            SetupReader::Result::kClosed);
}

}  // namespace
}  // namespace rdmaplane::shm
