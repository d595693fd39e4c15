// What one user may hold in the daemon, and what hitting a limit looks like
// to a client: a distinct status (RDP_ERR_LIMIT, or the seeds'
// RDP_ERR_NO_BUFFERS for registrations), rdp_last_error() naming the limit
// and its flag, nothing held on the daemon's side, and room again once the
// user lets something go. Also the daemon running out of file descriptors
// (a real rdmaplaned with a small open-file limit).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/status.h"
#include "control/daemon.h"
#include "tests/testing/child_process.h"
#include "tests/testing/hang_limit.h"
#include "tests/testing/test_util.h"

namespace rdmaplane {
namespace {

using testing::kHangLimit;
using testing::TestDaemon;

bool Mentions(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

control::DaemonOptions SmallLimits() {
  control::DaemonOptions o;
  o.user_limits.sessions = 4;
  o.user_limits.arenas = 3;
  o.user_limits.arena_bytes = 40u << 20;
  o.user_limits.registrations = 5;
  o.user_limits.connections = 4;
  return o;
}

class LimitsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Open(absl::Status* status = nullptr) {
    ClientOptions o;
    o.socket_path = daemon_.daemon->socket_path();
    o.arena_bytes = 16u << 20;
    o.hugepages = ClientOptions::Hugepages::kOff;
    auto c = Client::Open(o);
    if (status != nullptr) *status = c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  control::DaemonSnapshot Snap() const { return daemon_.daemon->Snapshot(); }

  TestDaemon daemon_{"limits", SmallLimits()};
};

TEST_F(LimitsTest, SessionsPerUser) {
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(Open());
    ASSERT_NE(held.back(), nullptr) << i;
  }
  absl::Status refused;
  EXPECT_EQ(Open(&refused), nullptr);
  EXPECT_EQ(RdpCode(refused), RDP_ERR_LIMIT) << refused;
  EXPECT_TRUE(Mentions(rdp_last_error(), "--max_sessions_per_user"))
      << rdp_last_error();
  EXPECT_EQ(std::string(rdp_status_name(RDP_ERR_LIMIT)), "limit reached");
  // The C API says the same.
  rdp_client* c = nullptr;
  EXPECT_EQ(rdp_open(daemon_.daemon->socket_path().c_str(), &c),
            RDP_ERR_LIMIT);
  EXPECT_TRUE(Mentions(rdp_last_error(), "--max_sessions_per_user"));
  // One goes, one comes.
  held.pop_back();
  EXPECT_TRUE(testing::WaitForSessions(*daemon_.daemon, 3));
  EXPECT_NE(Open(), nullptr);
}

TEST_F(LimitsTest, ArenasAndArenaBytesPerUser) {
  std::unique_ptr<Client> a = Open();
  std::unique_ptr<Client> b = Open();
  ASSERT_TRUE(a != nullptr && b != nullptr);
  // 16 MiB arenas: two fit in 40 MiB, the third does not.
  ASSERT_NE(a->Alloc(16u << 20), nullptr);
  ASSERT_NE(b->Alloc(16u << 20), nullptr);
  EXPECT_EQ(b->Alloc(16u << 20), nullptr);
  EXPECT_TRUE(Mentions(rdp_last_error(), "--max_arena_bytes_per_user"))
      << rdp_last_error();
  EXPECT_EQ(Snap().arenas, 2u);
  // Small arenas: the count is the limit then.
  b.reset();
  std::unique_ptr<Client> small;
  {
    ClientOptions o;
    o.socket_path = daemon_.daemon->socket_path();
    o.arena_bytes = 2u << 20;
    o.hugepages = ClientOptions::Hugepages::kOff;
    auto opened = Client::Open(o);
    ASSERT_TRUE(opened.ok());
    small = std::move(*opened);
  }
  ASSERT_NE(small->Alloc(2u << 20), nullptr);
  ASSERT_NE(small->Alloc(2u << 20), nullptr);
  EXPECT_EQ(small->Alloc(2u << 20), nullptr);
  EXPECT_TRUE(Mentions(rdp_last_error(), "--max_arenas_per_user"))
      << rdp_last_error();
}

TEST_F(LimitsTest, RegistrationsPerUserAreTheSeedsNoBuffers) {
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  auto* buf = static_cast<uint8_t*>(c->Alloc(1u << 20));
  ASSERT_NE(buf, nullptr);
  std::vector<uint32_t> keys;
  for (int i = 0; i < 5; ++i) {
    auto k = c->RegisterMemory(buf + 4096 * i, 4096, RDP_MEM_READ);
    ASSERT_TRUE(k.ok()) << i << " " << k.status();
    keys.push_back(*k);
  }
  auto refused = c->RegisterMemory(buf + 4096 * 5, 4096, RDP_MEM_READ);
  EXPECT_EQ(RdpCode(refused.status()), RDP_ERR_NO_BUFFERS);
  EXPECT_TRUE(Mentions(rdp_last_error(), "--max_registrations_per_user"))
      << rdp_last_error();
  // The same buffer again is a reference, not a new registration.
  auto again = c->RegisterMemory(buf, 4096, RDP_MEM_READ);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, keys[0]);
  // Another session of the same user shares the allowance.
  std::unique_ptr<Client> other = Open();
  ASSERT_NE(other, nullptr);
  auto* obuf = static_cast<uint8_t*>(other->Alloc(4096));
  EXPECT_EQ(RdpCode(other->RegisterMemory(obuf, 4096, RDP_MEM_READ).status()),
            RDP_ERR_NO_BUFFERS);
  // Released (both references), it is room for one more.
  ASSERT_TRUE(c->DeregisterMemory(keys[0]).ok());
  ASSERT_TRUE(c->DeregisterMemory(keys[0]).ok());
  EXPECT_TRUE(other->RegisterMemory(obuf, 4096, RDP_MEM_READ).ok());
}

TEST_F(LimitsTest, ConnectionEndsPerUser) {
  std::unique_ptr<Client> server = Open();
  std::unique_ptr<Client> client = Open();
  ASSERT_TRUE(server != nullptr && client != nullptr);
  ASSERT_TRUE(server->Listen("ends").ok());
  // Two connections inside the daemon: four ends, the allowance.
  std::vector<rdp_conn> mine;
  for (int i = 0; i < 2; ++i) {
    auto c = client->Connect("ends");
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(server->Accept("ends", kHangLimit).ok());
    mine.push_back(*c);
  }
  auto refused = client->Connect("ends");
  EXPECT_EQ(RdpCode(refused.status()), RDP_ERR_LIMIT) << refused.status();
  EXPECT_TRUE(Mentions(rdp_last_error(), "--max_connections_per_user"))
      << rdp_last_error();
  // One end given back: a connect (one end) fits, its accept does not.
  ASSERT_TRUE(client->Disconnect(mine[0]).ok());
  auto c = client->Connect("ends");
  ASSERT_TRUE(c.ok()) << c.status();
  auto a = server->Accept("ends", kHangLimit);
  EXPECT_EQ(RdpCode(a.status()), RDP_ERR_LIMIT) << a.status();
}

// The daemon itself out of file descriptors: a real rdmaplaned whose
// open-file limit allows only a few sessions. Clients beyond them are told
// why (RDP_ERR_LIMIT), the daemon logs it and keeps serving, and once
// sessions go, new ones are served again.
TEST(DaemonDescriptorsTest, OutOfDescriptorsRefusesWithAReasonAndRecovers) {
  signal(SIGPIPE, SIG_IGN);
  const std::string socket =
      "/tmp/rdp-fds-" + std::to_string(getpid()) + ".sock";
  auto daemon = testing::ChildProcess::Spawn(
      {testing::RunfilePath("control/rdmaplaned"), "--socket=" + socket},
      /*open_files=*/48);
  ASSERT_NE(daemon, nullptr);
  struct stat st{};
  // The deadlines below only turn a hang into a failure.
  const absl::Time end = absl::Now() + kHangLimit;
  while (stat(socket.c_str(), &st) != 0 && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(stat(socket.c_str(), &st), 0) << "rdmaplaned did not start";
  ClientOptions o;
  o.socket_path = socket;
  o.arena_bytes = 2u << 20;
  o.hugepages = ClientOptions::Hugepages::kOff;
  std::vector<std::unique_ptr<Client>> held;
  absl::Status refused;
  for (int i = 0; i < 64; ++i) {
    auto c = Client::Open(o);
    if (!c.ok()) {
      refused = c.status();
      break;
    }
    held.push_back(std::move(*c));
  }
  ASSERT_FALSE(refused.ok()) << "64 sessions with 48 descriptors";
  EXPECT_GT(held.size(), 0u);
  EXPECT_EQ(RdpCode(refused), RDP_ERR_LIMIT) << refused;
  EXPECT_TRUE(Mentions(std::string(refused.message()), "file descriptors"))
      << refused;
  // The sessions it holds still work, and it still answers.
  EXPECT_NE(held.front()->Alloc(4096), nullptr);
  // The daemon notices the closed sessions in its own time: a new session
  // is asked for until one is served.
  held.clear();
  const absl::Time served_by = absl::Now() + kHangLimit;
  absl::Status served = Client::Open(o).status();
  while (!served.ok() && absl::Now() < served_by) {
    absl::SleepFor(absl::Milliseconds(10));
    served = Client::Open(o).status();
  }
  EXPECT_TRUE(served.ok()) << "no session served once the others went: "
                           << served;
  EXPECT_EQ(kill(daemon->pid(), SIGTERM), 0);
  const int status = daemon->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace rdmaplane
