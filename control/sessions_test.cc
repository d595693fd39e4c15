// The session server on a real Unix socket, with clients of the real
// library: sessions served and ended (the closing hook runs once, before
// anything is unmapped), the per-user allowance of sessions and the
// per-session allowance of arenas refused with their reason, admin queries
// answered, a client that speaks nonsense dropped, and a second server on a
// live socket refused. The reactor runs on a thread of its own, as the
// daemon's control thread does; the test thread only talks to the socket.
#include "control/sessions.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/status.h"
#include "control/admin.h"
#include "control/testing/fake_session.h"

namespace rdmaplane::control {
namespace {

std::string SocketPath(const std::string& name) {
  return "/tmp/rdp-sessions-" + name + "-" + std::to_string(getpid()) + ".sock";
}

bool WaitFor(const std::function<bool()>& done) {
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

class SessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UserLimits limits;
    limits.sessions = 3;
    accounts_ = std::make_unique<UserAccounts>(limits);
    SessionPolicy policy;
    policy.max_arenas_per_session = 2;
    SessionHooks hooks;
    hooks.closing = [this](Session*) { closed_.fetch_add(1); };
    hooks.status = [this] {
      DaemonStatus st;
      st.version = "sessions-test" + big_version_;
      return st;
    };
    server_ = std::make_unique<SessionServer>(policy, &reactor_, &arena_memory_,
                                              accounts_.get(), &counters_,
                                              std::move(hooks));
    path_ = SocketPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(server_->Listen(path_).ok());
    ASSERT_TRUE(server_->Publish().ok());
    loop_ = std::thread([this] {
      while (!stop_.load()) reactor_.RunOnce(10);
      server_->Shutdown();
    });
  }
  void TearDown() override {
    stop_.store(true);
    reactor_.Wake();
    if (loop_.joinable()) loop_.join();
  }

  absl::StatusOr<std::unique_ptr<Client>> Open() {
    ClientOptions o;
    o.socket_path = path_;
    o.arena_bytes = 2u << 20;
    o.hugepages = ClientOptions::Hugepages::kOff;
    return Client::Open(o);
  }

  Reactor reactor_;
  ArenaMemory arena_memory_;
  std::unique_ptr<UserAccounts> accounts_;
  ControlCounters counters_;
  std::unique_ptr<SessionServer> server_;
  std::string path_;
  std::atomic<int> closed_{0};
  std::atomic<bool> stop_{false};
  std::thread loop_;
  std::string big_version_;  // set before a query: makes its answer large
};

TEST_F(SessionsTest, ASessionIsServedAndItsEndRunsTheHookOnce) {
  {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE((*c)->Alloc(4096), nullptr);
    EXPECT_EQ(closed_.load(), 0);
  }
  EXPECT_TRUE(WaitFor([&] { return closed_.load() == 1; }));
  EXPECT_TRUE(
      WaitFor([&] { return counters_.sessions_reclaimed.load() == 1; }));
  // A second session's end, served after the first's: its hook is the only
  // one that ran since.
  {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << c.status();
  }
  EXPECT_TRUE(
      WaitFor([&] { return counters_.sessions_reclaimed.load() == 2; }));
  EXPECT_EQ(closed_.load(), 2);
}

TEST_F(SessionsTest, TheUsersSessionsAndTheSessionsArenasAreLimited) {
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << c.status();
    held.push_back(std::move(*c));
  }
  auto refused = Open();
  EXPECT_EQ(RdpCode(refused.status()), RDP_ERR_LIMIT) << refused.status();
  EXPECT_NE(refused.status().message().find("--max_sessions_per_user"),
            std::string::npos);
  EXPECT_EQ(counters_.rejected_clients.load(), 1u);
  // Two arenas, then the third is refused.
  EXPECT_NE(held[0]->Alloc(2u << 20), nullptr);
  EXPECT_NE(held[0]->Alloc(2u << 20), nullptr);
  EXPECT_EQ(held[0]->Alloc(2u << 20), nullptr);
  EXPECT_NE(std::string(rdp_last_error()).find("--max_arenas_per_session"),
            std::string::npos)
      << rdp_last_error();
  held.pop_back();
  EXPECT_TRUE(WaitFor([&] { return closed_.load() == 1; }));
  EXPECT_TRUE(Open().ok());
}

TEST_F(SessionsTest, AnAdminQueryIsAnsweredAndDoesNotCountAsASession) {
  auto answer = QueryDaemon(path_, "status", /*json=*/true, absl::Seconds(5));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_NE(answer->find("sessions-test"), std::string::npos) << *answer;
  EXPECT_EQ(closed_.load(), 0) << "an admin query ran the session hook";
  // It holds none of the user's three sessions.
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << i << " " << c.status();
    held.push_back(std::move(*c));
  }
}

// A user at its session limit still gets rdmaplanectl's answers (a query
// opens no session), while its next client is refused with the limit's
// reason; connections of a user at the limit that say nothing are bounded
// (a few wait for their question, more are refused at once).
TEST_F(SessionsTest, AUserAtItsSessionLimitIsStillAnswered) {
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << i << " " << c.status();
    held.push_back(std::move(*c));
  }
  for (const char* topic : {"status", "clients", "counters"}) {
    for (bool json : {false, true}) {
      auto answer = QueryDaemon(path_, topic, json, absl::Seconds(5));
      ASSERT_TRUE(answer.ok()) << topic << ": " << answer.status();
      EXPECT_FALSE(answer->empty()) << topic;
    }
  }
  auto refused = Open();
  EXPECT_EQ(RdpCode(refused.status()), RDP_ERR_LIMIT) << refused.status();
  EXPECT_NE(refused.status().message().find("--max_sessions_per_user"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(counters_.rejected_clients.load(), 1u);

  // Silent connections over the limit: 8 wait, the 9th is refused at once.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
  std::vector<int> silent;
  for (int i = 0; i < 9; ++i) {
    const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(sock, 0);
    ASSERT_EQ(connect(sock, reinterpret_cast<const sockaddr*>(&addr),
                      sizeof(addr)),
              0);
    silent.push_back(sock);
  }
  // The 9th gets the refusal without asking anything.
  shm::SetupMessage reply;
  size_t got = 0;
  while (got < sizeof(reply)) {
    const ssize_t n = read(silent.back(), reinterpret_cast<char*>(&reply) + got,
                           sizeof(reply) - got);
    ASSERT_GT(n, 0) << "no refusal after " << got << " bytes";
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(reply.type, shm::kSetupHelloReply);
  EXPECT_EQ(reply.status, shm::kStatusLimit);
  EXPECT_EQ(counters_.rejected_clients.load(), 2u);
  // The waiting ones still allow no session, and take no question's place
  // once gone: with them closed, a query is answered and a client refused.
  // (The daemon sees the closes in its own time: until then it may still
  // refuse a new connection of this user at once.)
  for (int sock : silent) close(sock);
  EXPECT_TRUE(WaitFor([&] {
    return QueryDaemon(path_, "status", false, absl::Seconds(5)).ok();
  }));
  EXPECT_EQ(RdpCode(Open().status()), RDP_ERR_LIMIT);
  // A session ended: a client is served again.
  held.pop_back();
  EXPECT_TRUE(WaitFor([&] { return closed_.load() == 1; }));
  EXPECT_TRUE(Open().ok());
}

// The daemon sends an admin answer as the asker reads it: an asker that
// reads nothing of a large answer holds no other session up (the control
// thread never waits for it), and once it reads, the whole answer comes.
TEST_F(SessionsTest, AnAdminAskerThatDoesNotReadHoldsNothingUp) {
  big_version_ = std::string(8 << 20, 'v');  // far more than a socket holds
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  ASSERT_EQ(
      connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  shm::SetupMessage request = shm::MakeSetup(shm::kSetupAdmin);
  std::snprintf(request.text, sizeof(request.text), "status");
  request.id = kAdminFormatText;
  ASSERT_EQ(write(sock, &request, sizeof(request)),
            static_cast<ssize_t>(sizeof(request)));
  // While the asker reads nothing, a client is served (its hello and an
  // arena go through the control thread).
  {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE((*c)->Alloc(4096), nullptr);
  }
  // Now it reads: the header, then the whole body.
  shm::SetupMessage reply;
  size_t got = 0;
  while (got < sizeof(reply)) {
    const ssize_t n =
        read(sock, reinterpret_cast<char*>(&reply) + got, sizeof(reply) - got);
    ASSERT_GT(n, 0) << "the answer ended after " << got << " bytes";
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(reply.type, shm::kSetupAdminReply);
  EXPECT_EQ(reply.status, 0);
  std::string body(reply.length, '\0');
  got = 0;
  while (got < body.size()) {
    const ssize_t n = read(sock, body.data() + got, body.size() - got);
    ASSERT_GT(n, 0) << "the body ended after " << got << " of " << body.size()
                    << " bytes";
    got += static_cast<size_t>(n);
  }
  EXPECT_NE(body.find(big_version_), std::string::npos);
  char extra;
  EXPECT_EQ(read(sock, &extra, 1), 0) << "the daemon closes after the answer";
  close(sock);
}

TEST_F(SessionsTest, NonsenseDropsTheSessionAndIsCounted) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string garbage(96, 'x');
  ASSERT_EQ(write(fd, garbage.data(), garbage.size()),
            static_cast<ssize_t>(garbage.size()));
  char c;
  EXPECT_EQ(read(fd, &c, 1), 0) << "the daemon kept a nonsense session";
  close(fd);
  EXPECT_TRUE(
      WaitFor([&] { return counters_.sessions_reclaimed.load() == 1; }));
  // Its session was given back: the user's three are there to open.
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    auto c = Open();
    ASSERT_TRUE(c.ok()) << i << " " << c.status();
    held.push_back(std::move(*c));
  }
}

TEST_F(SessionsTest, ASecondServerOnALiveSocketIsRefused) {
  Reactor other_reactor;
  ArenaMemory other_memory;
  SessionServer other(SessionPolicy{}, &other_reactor, &other_memory,
                      accounts_.get(), &counters_, SessionHooks{});
  const absl::Status s = other.Listen(path_);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_TRUE(Open().ok()) << "the first server stopped serving";
}

// The client owns the response ring's consumer index: an answer that finds
// the ring full (the client has not read, or moved its index) is held, and
// later answers queue behind it, so that the client reads every answer
// once and in the order given, as soon as it makes room.
TEST(SessionAnswerTest, AnswersWithoutRoomAreHeldAndDeliveredInOrder) {
  FakeSession fake(1, 1000);
  Session& s = fake.s;
  const uint32_t capacity = s.responses.capacity();
  uint64_t next_id = 1;
  auto answer = [&] {
    shm::ControlResponse r{};
    r.request_id = next_id++;
    s.Answer(r);
  };
  for (uint32_t i = 0; i < capacity; ++i) answer();
  EXPECT_EQ(s.held_answers(), 0u);
  answer();
  answer();
  EXPECT_EQ(s.held_answers(), 2u);
  EXPECT_FALSE(s.FlushHeldAnswers()) << "no room was made";

  // One read makes room for one: the older held answer goes, the newer
  // waits; an answer given meanwhile queues behind it.
  auto first = fake.TakeAnswer();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->request_id, 1u);
  answer();
  EXPECT_EQ(s.held_answers(), 3u) << "a new answer overtook held ones";
  EXPECT_TRUE(s.FlushHeldAnswers());
  EXPECT_EQ(s.held_answers(), 2u);

  uint64_t expected = 2;
  while (true) {
    s.FlushHeldAnswers();
    auto r = fake.TakeAnswer();
    if (!r.has_value()) break;
    EXPECT_EQ(r->request_id, expected++);
  }
  EXPECT_EQ(expected, next_id) << "an answer was lost";
  EXPECT_EQ(s.held_answers(), 0u);
}

}  // namespace
}  // namespace rdmaplane::control
