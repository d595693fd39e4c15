#include "control/reactor.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <memory>

namespace rdmaplane::control {
namespace {

struct Pair {
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_DGRAM, 0, fd), 0); }
  ~Pair() {
    close(fd[0]);
    close(fd[1]);
  }
  void Kick() const {
    const char c = 1;
    EXPECT_EQ(write(fd[1], &c, 1), 1);
  }
  void Drain() const {
    char sink[8];
    while (recv(fd[0], sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
  }
  int fd[2];
};

TEST(ReactorTest, RunsTheHandlerOfAReadableDescriptorOnly) {
  Reactor r;
  ASSERT_TRUE(r.ok());
  Pair a, b;
  int ran_a = 0, ran_b = 0;
  ASSERT_TRUE(r.Add(a.fd[0], [&] {
                 ++ran_a;
                 a.Drain();
               }).ok());
  ASSERT_TRUE(r.Add(b.fd[0], [&] {
                 ++ran_b;
                 b.Drain();
               }).ok());
  EXPECT_EQ(r.RunOnce(0), 0);
  a.Kick();
  EXPECT_EQ(r.RunOnce(1000), 1);
  EXPECT_EQ(ran_a, 1);
  EXPECT_EQ(ran_b, 0);
}

TEST(ReactorTest, RefusesADescriptorTwiceOrNegative) {
  Reactor r;
  Pair a;
  ASSERT_TRUE(r.Add(a.fd[0], [] {}).ok());
  EXPECT_FALSE(r.Add(a.fd[0], [] {}).ok());
  EXPECT_FALSE(r.Add(-1, [] {}).ok());
  EXPECT_TRUE(r.Watches(a.fd[0]));
  r.Remove(a.fd[0]);
  EXPECT_FALSE(r.Watches(a.fd[0]));
  EXPECT_TRUE(r.Add(a.fd[0], [] {}).ok());
}

// A handler that removes another descriptor whose event is in the same
// round: the removed handler must not run, even though its descriptor number
// is reused by a new registration before the round ends.
TEST(ReactorTest, ARemovedDescriptorsPendingEventIsDropped) {
  Reactor r;
  auto a = std::make_unique<Pair>();
  auto b = std::make_unique<Pair>();
  int ran_old_b = 0, ran_new = 0;
  const int b_fd = b->fd[0];
  bool a_ran = false, b_ran_first = false;
  ASSERT_TRUE(r.Add(b_fd, [&] {
                 if (!a_ran) b_ran_first = true;
                 ++ran_old_b;
                 b->Drain();
               }).ok());
  ASSERT_TRUE(r.Add(a->fd[0], [&] {
                 a_ran = true;
                 a->Drain();
                 if (ran_old_b != 0) return;  // b went first: nothing to test
                 r.Remove(b_fd);
                 // The same number registered again, for another handler.
                 ASSERT_TRUE(r.Add(b_fd, [&] { ++ran_new; }).ok());
               }).ok());
  a->Kick();
  b->Kick();
  r.RunOnce(1000);
  // epoll reports descriptors in the order they became ready.
  ASSERT_FALSE(b_ran_first);
  EXPECT_EQ(ran_old_b, 0);
  EXPECT_EQ(ran_new, 0);
  r.Remove(b_fd);
}

TEST(ReactorTest, WakeReturnsAWaitFromAnotherThread) {
  Reactor r;
  std::thread t([&] { r.Wake(); });
  // Returns because of the wake-up, long before the time-out (nothing ran).
  EXPECT_EQ(r.RunOnce(60'000), 0);
  t.join();
}

}  // namespace
}  // namespace rdmaplane::control
