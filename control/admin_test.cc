#include "control/admin.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "api/shm/layout.h"
#include "control/admin_test_server.h"
#include "control/status_sample.h"
#include "tests/testing/fuzz.h"

namespace rdmaplane::control {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Reads exactly n bytes (blocking); false on end of stream or error.
bool ReadFully(int fd, void* data, size_t n, size_t chunk = 1 << 20,
               int pause_us = 0) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = read(fd, p, std::min(n, chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    if (pause_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  return true;
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7) % 26);
  return s;
}

class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv_), 0);
  }
  void TearDown() override {
    for (int fd : sv_) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseReader() {
    close(sv_[1]);
    sv_[1] = -1;
  }
  // Reads one answer: the reply header and its body.
  void ReadAnswer(shm::SetupMessage* reply, std::string* body,
                  size_t chunk = 1 << 20, int pause_us = 0) {
    ASSERT_TRUE(ReadFully(sv_[1], reply, sizeof(*reply)));
    ASSERT_EQ(reply->magic, shm::kSetupMagic);
    ASSERT_EQ(reply->version, shm::kSetupVersion);
    ASSERT_EQ(reply->type, shm::kSetupAdminReply);
    body->assign(reply->length, '\0');
    ASSERT_TRUE(ReadFully(sv_[1], body->data(), body->size(), chunk, pause_us));
  }
  int sv_[2] = {-1, -1};
};

// --- SendAdminAnswer ---------------------------------------------------------

// Bounds for the tests in which a reader that keeps reading must get the
// whole answer: what they check is that it does, not how fast. Under
// ThreadSanitizer on two busy CPUs several MiB in 64 KiB reads can take
// longer than the default second.
constexpr absl::Duration kSteadyStall = absl::Seconds(10);
constexpr absl::Duration kSteadyTotal = absl::Seconds(120);

// Sends `body` as one answer on `fd` from another thread, then ends the
// stream, so that a reader waiting for bytes that will not come (the
// sender gave up) sees the end instead of waiting for ever.
std::thread SendThenEnd(int fd, const std::string& body,
                        std::atomic<int>* sent) {
  return std::thread([fd, &body, sent] {
    *sent = SendAdminAnswer(fd, 0, "", body, kSteadyStall, kSteadyTotal) ? 1
                                                                          : 0;
    shutdown(fd, SHUT_WR);
  });
}

TEST_F(SocketPair, AnswerOfSeveralMiBReachesASteadyReader) {
  const std::string big = Pattern(4 << 20);
  std::atomic<int> sent{-1};
  std::thread server = SendThenEnd(sv_[0], big, &sent);
  shm::SetupMessage reply;
  std::string body;
  // 64 KiB at a time with a pause: slower than the kernel, still steady.
  ReadAnswer(&reply, &body, 64 << 10, 500);
  server.join();
  EXPECT_EQ(sent, 1);
  EXPECT_EQ(reply.status, 0);
  EXPECT_EQ(reply.length, big.size());
  EXPECT_TRUE(body == big);
  // Nothing after the body: the stream ends there.
  char extra;
  EXPECT_EQ(read(sv_[1], &extra, 1), 0);
}

TEST_F(SocketPair, WorksOnANonBlockingSocket) {
  fcntl(sv_[0], F_SETFL, fcntl(sv_[0], F_GETFL) | O_NONBLOCK);
  const std::string big = Pattern(2 << 20);
  std::atomic<int> sent{-1};
  std::thread server = SendThenEnd(sv_[0], big, &sent);
  shm::SetupMessage reply;
  std::string body;
  ReadAnswer(&reply, &body);
  server.join();
  EXPECT_EQ(sent, 1);
  EXPECT_TRUE(body == big);
}

TEST_F(SocketPair, ErrorStatusAndReasonCutToFit) {
  const std::string reason(100, 'r');
  ASSERT_TRUE(SendAdminAnswer(sv_[0], shm::kStatusInvalid, reason, ""));
  shm::SetupMessage reply;
  std::string body;
  ReadAnswer(&reply, &body);
  EXPECT_EQ(reply.status, shm::kStatusInvalid);
  EXPECT_EQ(reply.length, 0u);
  EXPECT_EQ(std::string(reply.text), std::string(63, 'r'));
}

TEST_F(SocketPair, GivesUpOnAPeerThatDoesNotRead) {
  const std::string big = Pattern(8 << 20);
  const auto start = Clock::now();
  EXPECT_FALSE(SendAdminAnswer(sv_[0], 0, "", big));
  const double took = SecondsSince(start);
  EXPECT_GE(took, 0.09);  // it did wait for the peer a little
}

TEST_F(SocketPair, GivesUpOnAPeerThatReadsTooSlowly) {
  // A small send buffer makes the reader's pace the answer's pace.
  const int sndbuf = 64 << 10;
  ASSERT_EQ(setsockopt(sv_[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)),
            0);
  // What the socket holds unread at most (the kernel doubles what was set).
  int held = 0;
  socklen_t held_len = sizeof(held);
  ASSERT_EQ(getsockopt(sv_[0], SOL_SOCKET, SO_SNDBUF, &held, &held_len), 0);
  const std::string big = Pattern(16 << 20);
  std::atomic<bool> done{false};
  std::atomic<size_t> received{0};
  // Takes 64 KiB every 20 ms (the pace of a slow reader, not a wait for
  // anything): a pause far shorter than the 100 ms stall, but at most a
  // few MiB in the second the answer may take, far from 16 MiB.
  std::thread reader([&] {
    std::string buf(64 << 10, '\0');
    while (!done) {
      const ssize_t got = read(sv_[1], buf.data(), buf.size());
      if (got <= 0) break;
      received += static_cast<size_t>(got);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  EXPECT_FALSE(SendAdminAnswer(sv_[0], 0, "", big));
  done = true;
  shutdown(sv_[0], SHUT_RDWR);
  reader.join();
  // It gave up with most of the answer unsent ...
  EXPECT_LT(received.load(), big.size() / 2);
  // ... after serving the steady reader through many of its pauses, not at
  // the first full socket: the reader took several times what the socket
  // holds (about 50 reads of 64 KiB fit in the second; 8 are asked for).
  EXPECT_GT(received.load(), std::max<size_t>(4 * static_cast<size_t>(held),
                                              size_t{8} << 16));
}

TEST_F(SocketPair, GivesUpOnAGonePeerWithoutSigpipe) {
  CloseReader();
  EXPECT_FALSE(SendAdminAnswer(sv_[0], 0, "", Pattern(1 << 20)));
  EXPECT_FALSE(SendAdminAnswer(sv_[0], 0, "", ""));
}

// --- AnswerAdminRequest ------------------------------------------------------

shm::SetupMessage Request(const char* topic, uint32_t format) {
  shm::SetupMessage m = shm::MakeSetup(shm::kSetupAdmin);
  std::snprintf(m.text, sizeof(m.text), "%s", topic);
  m.id = format;
  return m;
}

TEST_F(SocketPair, AnswersEachTopicInEachFormat) {
  const DaemonStatus sample = SampleStatus();
  for (std::string_view topic : kStatusTopics) {
    for (uint32_t format : {kAdminFormatText, kAdminFormatJson}) {
      int calls = 0;
      ASSERT_TRUE(AnswerAdminRequest(
          sv_[0], Request(std::string(topic).c_str(), format), [&] {
            ++calls;
            return sample;
          }));
      shm::SetupMessage reply;
      std::string body;
      ReadAnswer(&reply, &body);
      EXPECT_EQ(calls, 1);
      EXPECT_EQ(reply.status, 0);
      EXPECT_EQ(body, format == kAdminFormatJson ? RenderJson(sample, topic)
                                                 : RenderText(sample, topic));
      EXPECT_FALSE(body.empty());
    }
  }
}

TEST_F(SocketPair, RejectsBadRequestsWithoutAskingForStatus) {
  int calls = 0;
  auto source = [&] {
    ++calls;
    return SampleStatus();
  };
  struct Case {
    shm::SetupMessage request;
    std::string reason;
  };
  shm::SetupMessage hello = Request("status", 0);
  hello.type = shm::kSetupHello;
  const Case cases[] = {
      {Request("bogus", kAdminFormatText), "unknown topic 'bogus'"},
      {Request("Status", kAdminFormatJson), "unknown topic 'Status'"},
      {Request("", kAdminFormatJson), "unknown topic ''"},
      {Request("status", 7), "unknown format 7"},
      {hello, "not an admin request"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(AnswerAdminRequest(sv_[0], c.request, source));
    shm::SetupMessage reply;
    std::string body;
    ReadAnswer(&reply, &body);
    EXPECT_EQ(reply.status, shm::kStatusInvalid);
    EXPECT_EQ(std::string(reply.text), c.reason);
    EXPECT_EQ(body, "");
  }
  EXPECT_EQ(calls, 0);
}

TEST_F(SocketPair, TopicWithoutTerminatorIsReadWithinItsField) {
  shm::SetupMessage m = Request("", kAdminFormatText);
  std::memset(m.text, 'x', sizeof(m.text));  // no NUL at all
  ASSERT_TRUE(AnswerAdminRequest(sv_[0], m, [] { return DaemonStatus(); }));
  shm::SetupMessage reply;
  std::string body;
  ReadAnswer(&reply, &body);
  EXPECT_EQ(reply.status, shm::kStatusInvalid);
  EXPECT_EQ(std::string(reply.text),
            "unknown topic '" + std::string(24, 'x') + "'");
}

// A topic field made from a valid topic (testing::Rng::text_field), for the
// fuzzing tests. They take a new seed every run, or RDP_FUZZ_SEED to replay
// one, and their length
// from RDP_FUZZ_ITERATIONS (tests/testing/fuzz.h); a failure names the seed
// and the iteration.
void FuzzTopic(testing::Rng& rng,
               char (&text)[sizeof(shm::SetupMessage::text)]) {
  const std::string t = rng.text_field(
      kStatusTopics[rng.below(kStatusTopics.size())], sizeof(text));
  std::memcpy(text, t.data(), sizeof(text));
}

// Valid requests mutated in their type, format and topic, and anywhere by
// bit flips (the magic and version are the reader's to check, not
// AnswerAdminRequest's). Each gets exactly the answer the protocol gives it:
// for a wrong type, format or topic an error with its reason and an empty
// body, without asking for the status; otherwise the rendered topic.
TEST_F(SocketPair, FuzzedRequestsGetTheirExactAnswer) {
  const uint64_t seed = testing::FuzzSeed();
  const int iterations = testing::FuzzIterations(3000);
  const DaemonStatus sample = SampleStatus();
  int answered = 0;
  for (int i = 0; i < iterations; ++i) {
    SCOPED_TRACE("RDP_FUZZ_SEED=" + std::to_string(seed) + ", iteration " +
                 std::to_string(i));
    testing::Rng rng(testing::IterationSeed(seed, static_cast<uint64_t>(i)));
    shm::SetupMessage m = Request(
        std::string(kStatusTopics[rng.below(kStatusTopics.size())]).c_str(),
        rng.percent(50) ? kAdminFormatJson : kAdminFormatText);
    for (uint64_t n = rng.below(4); n > 0; --n) {
      switch (rng.below(6)) {
        case 0: {
          const uint16_t types[] = {static_cast<uint16_t>(rng.below(10)),
                                    0xFFFF, shm::kSetupHello,
                                    shm::kSetupAdminReply};
          m.type = rng.pick(types);
          break;
        }
        case 1: {
          const uint32_t ids[] = {0, 1, 2, 7, 0x100, ~0u, rng.u32()};
          m.id = rng.pick(ids);
          break;
        }
        case 2:
        case 3:
          FuzzTopic(rng, m.text);
          break;
        case 4:
          m.status = static_cast<int32_t>(rng.u32());
          m.address = rng.u64();
          m.length = rng.u64();
          break;
        default: {
          const uint64_t bit = rng.below(sizeof(m) * 8);
          reinterpret_cast<uint8_t*>(&m)[bit / 8] ^=
              static_cast<uint8_t>(1u << (bit % 8));
          break;
        }
      }
    }
    const std::string topic(m.text, strnlen(m.text, sizeof(m.text)));
    std::string refusal;
    if (m.type != shm::kSetupAdmin) {
      refusal = "not an admin request";
    } else if (m.id != kAdminFormatText && m.id != kAdminFormatJson) {
      refusal = "unknown format " + std::to_string(m.id);
    } else if (std::find(kStatusTopics.begin(), kStatusTopics.end(), topic) ==
               kStatusTopics.end()) {
      refusal = "unknown topic '" + topic.substr(0, 24) + "'";
    }

    int calls = 0;
    ASSERT_TRUE(AnswerAdminRequest(sv_[0], m, [&] {
      ++calls;
      return sample;
    }));
    shm::SetupMessage reply;
    std::string body;
    ReadAnswer(&reply, &body);
    if (HasFatalFailure()) return;
    if (refusal.empty()) {
      ++answered;
      ASSERT_EQ(reply.status, shm::kStatusOk) << reply.text;
      ASSERT_EQ(calls, 1);
      ASSERT_EQ(body, m.id == kAdminFormatJson ? RenderJson(sample, topic)
                                               : RenderText(sample, topic));
    } else {
      ASSERT_EQ(reply.status, shm::kStatusInvalid);
      ASSERT_EQ(std::string(reply.text), refusal);
      ASSERT_EQ(body, "");
      ASSERT_EQ(calls, 0);
    }
  }
  std::printf("fuzzed admin requests: %d, %d answered\n", iterations, answered);
}

// --- QueryDaemon against a fake daemon socket --------------------------------

constexpr absl::Duration kTimeout = absl::Seconds(5);

TEST(QueryDaemonTest, EveryTopicInBothFormats) {
  const DaemonStatus sample = SampleStatus();
  auto server = FakeAdminServer::Answering(ShortSocketPath("all"), sample);
  ASSERT_NE(server, nullptr);
  int n = 0;
  for (std::string_view topic : kStatusTopics) {
    for (bool json : {false, true}) {
      absl::StatusOr<std::string> answer =
          QueryDaemon(server->path(), topic, json, kTimeout);
      ASSERT_TRUE(answer.ok()) << answer.status();
      EXPECT_EQ(*answer,
                json ? RenderJson(sample, topic) : RenderText(sample, topic));
      const std::vector<shm::SetupMessage> requests = server->requests();
      ASSERT_EQ(requests.size(), static_cast<size_t>(++n));
      EXPECT_EQ(requests.back().type, shm::kSetupAdmin);
      EXPECT_EQ(std::string(requests.back().text), topic);
      EXPECT_EQ(requests.back().id, json ? kAdminFormatJson : kAdminFormatText);
    }
  }
}

TEST(QueryDaemonTest, UnknownTopicIsTheDaemonsInvalidArgument) {
  auto server = FakeAdminServer::Answering(ShortSocketPath("bad"), {});
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::string> answer =
      QueryDaemon(server->path(), "stats", false, kTimeout);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(answer.status().message(), "unknown topic 'stats'");
}

TEST(QueryDaemonTest, NoSocketFile) {
  const std::string path = ShortSocketPath("none");
  unlink(path.c_str());
  absl::StatusOr<std::string> answer =
      QueryDaemon(path, "status", false, kTimeout);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answer.status().message(),
            "no daemon at " + path + ": no such socket");
}

// A socket file nobody listens on: what a crashed daemon leaves behind.
TEST(QueryDaemonTest, StaleSocketIsConnectionRefused) {
  const std::string path = ShortSocketPath("stale");
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  absl::StatusOr<std::string> answer =
      QueryDaemon(path, "status", false, kTimeout);
  close(fd);
  unlink(path.c_str());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answer.status().message(),
            "no daemon at " + path + ": connection refused");
}

// The daemon refuses a user it does not allow as soon as it accepts: a hello
// reply with kStatusPermission, then close, without reading anything.
TEST(QueryDaemonTest, RefusedByTheDaemonsPolicy) {
  auto server = FakeAdminServer::Start(ShortSocketPath("policy"), [](int sock) {
    shm::SetupMessage reply = shm::MakeSetup(shm::kSetupHelloReply);
    reply.status = shm::kStatusPermission;
    std::snprintf(reply.text, sizeof(reply.text),
                  "uid 1234 is not allowed by this daemon's policy");
    shm::SendSetup(sock, reply);
  });
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::string> answer =
      QueryDaemon(server->path(), "status", false, kTimeout);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(answer.status().message(),
            "uid 1234 is not allowed by this daemon's policy");
}

// Clears CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from this process's
// effective set, so that file modes apply even to root.
bool DropFileModeOverride() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective &=
      ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
  return syscall(SYS_capset, &header, data) == 0;
}

// A socket file the caller may not write to.
TEST(QueryDaemonTest, SocketPermissionDenied) {
  auto server = FakeAdminServer::Answering(ShortSocketPath("perm"), {});
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(chmod(server->path().c_str(), 0), 0);
  // Root ignores file modes: ask from a child that gave up that power.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!DropFileModeOverride()) _exit(100);
    absl::StatusOr<std::string> answer =
        QueryDaemon(server->path(), "status", false, absl::Seconds(2));
    if (answer.status().code() != absl::StatusCode::kPermissionDenied) {
      _exit(101);
    }
    if (answer.status().message() !=
        "cannot connect to " + server->path() + ": permission denied") {
      _exit(102);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(server->connections(), 0);
}

TEST(QueryDaemonTest, SilentDaemonTimesOut) {
  // The server holds the connection, silent, until the query has returned:
  // only the query's own timeout can end it.
  absl::Notification answered;
  auto server =
      FakeAdminServer::Start(ShortSocketPath("silent"), [&](int sock) {
        answered.WaitForNotificationWithTimeout(absl::Seconds(30));
      });
  ASSERT_NE(server, nullptr);
  const auto start = Clock::now();
  absl::StatusOr<std::string> answer =
      QueryDaemon(server->path(), "status", false, absl::Milliseconds(200));
  const double took = SecondsSince(start);
  answered.Notify();
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(took, 0.19);
}

TEST(QueryDaemonTest, DaemonClosesWithoutAnswering) {
  FakeAdminServer* self = nullptr;
  auto server = FakeAdminServer::Start(ShortSocketPath("close"), [&](int sock) {
    shm::SetupMessage request;
    self->ReadRequest(sock, &request);
  });
  ASSERT_NE(server, nullptr);
  self = server.get();
  absl::StatusOr<std::string> answer =
      QueryDaemon(server->path(), "status", false, kTimeout);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(
      answer.status().message().find("closed the connection without answering"),
      absl::string_view::npos)
      << answer.status();
}

// Sends a reply header with `length`, then `body`, then closes.
FakeAdminServer::Handler RawAnswer(uint32_t magic, uint16_t type,
                                   uint64_t length, std::string body) {
  return [=](int sock) {
    shm::SetupMessage reply = shm::MakeSetup(static_cast<shm::SetupType>(type));
    reply.magic = magic;
    reply.length = length;
    std::string bytes(reinterpret_cast<const char*>(&reply), sizeof(reply));
    bytes += body;
    (void)!write(sock, bytes.data(), bytes.size());
  };
}

TEST(QueryDaemonTest, MalformedAnswers) {
  struct Case {
    const char* name;
    FakeAdminServer::Handler handler;
    absl::StatusCode code;
    const char* message_part;
  };
  const Case cases[] = {
      {"short",
       RawAnswer(shm::kSetupMagic, shm::kSetupAdminReply, 1000, "0123456789"),
       absl::StatusCode::kUnavailable, "in the middle of its answer"},
      {"huge",
       RawAnswer(shm::kSetupMagic, shm::kSetupAdminReply,
                 kMaxAdminAnswerBytes + 1, ""),
       absl::StatusCode::kDataLoss, "is larger than"},
      {"magic", RawAnswer(0x12345678, shm::kSetupAdminReply, 0, ""),
       absl::StatusCode::kDataLoss, "malformed answer"},
      {"type", RawAnswer(shm::kSetupMagic, shm::kSetupArenaReply, 0, ""),
       absl::StatusCode::kDataLoss, "unexpected answer type 4"},
  };
  for (const Case& c : cases) {
    auto server = FakeAdminServer::Start(ShortSocketPath(c.name), c.handler);
    ASSERT_NE(server, nullptr);
    absl::StatusOr<std::string> answer =
        QueryDaemon(server->path(), "status", false, kTimeout);
    EXPECT_EQ(answer.status().code(), c.code)
        << c.name << ": " << answer.status();
    EXPECT_NE(answer.status().message().find(c.message_part),
              absl::string_view::npos)
        << c.name << ": " << answer.status();
  }
}

TEST(QueryDaemonTest, LargeAnswer) {
  const std::string big = Pattern(3 << 20);
  FakeAdminServer* self = nullptr;
  std::atomic<int> sent{-1};
  auto server = FakeAdminServer::Start(ShortSocketPath("large"), [&](int sock) {
    shm::SetupMessage request;
    if (!self->ReadRequest(sock, &request)) return;
    // Patient, as the daemon is (kAdminStall, 10 s): this checks the asker's
    // reassembly of a large answer, on a machine that may be busy.
    sent = SendAdminAnswer(sock, 0, "", big, absl::Seconds(10), absl::Seconds(60))
               ? 1
               : 0;
  });
  ASSERT_NE(server, nullptr);
  self = server.get();
  absl::StatusOr<std::string> answer =
      QueryDaemon(server->path(), "connections", true, kTimeout);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_TRUE(*answer == big);
  server.reset();  // joins the handler
  EXPECT_EQ(sent, 1);
}

TEST(QueryDaemonTest, ArgumentsThatDoNotFitTheProtocol) {
  EXPECT_EQ(
      QueryDaemon("/tmp/" + std::string(120, 'p'), "status", false, kTimeout)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QueryDaemon("", "status", false, kTimeout).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QueryDaemon("/tmp/x.sock", std::string(64, 't'), false, kTimeout)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// What QueryDaemon must make of the answer `bytes` (then end of stream).
struct ExpectedQuery {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;  // all of it for the daemon's own reasons, else a part
  bool exact = false;
  std::string body;
};

ExpectedQuery PredictQuery(const std::string& bytes) {
  ExpectedQuery e;
  auto fail = [&e](absl::StatusCode code, std::string message,
                   bool exact = false) {
    e.code = code;
    e.message = std::move(message);
    e.exact = exact;
    return e;
  };
  if (bytes.size() < sizeof(shm::SetupMessage)) {
    return fail(absl::StatusCode::kUnavailable, "without answering");
  }
  shm::SetupMessage r;
  std::memcpy(&r, bytes.data(), sizeof(r));
  if (r.magic != shm::kSetupMagic || r.version != shm::kSetupVersion) {
    return fail(absl::StatusCode::kDataLoss, "malformed answer");
  }
  // The daemon's status: its reason, or its number when it gave none.
  auto daemon_error = [&] {
    std::string reason(r.text, strnlen(r.text, sizeof(r.text)));
    if (reason.empty()) reason = "daemon error " + std::to_string(r.status);
    const absl::StatusCode code =
        r.status == shm::kStatusInvalid ? absl::StatusCode::kInvalidArgument
        : r.status == shm::kStatusPermission
            ? absl::StatusCode::kPermissionDenied
        : r.status == shm::kStatusNoBuffers
            ? absl::StatusCode::kResourceExhausted
        : r.status == shm::kStatusTimeout ? absl::StatusCode::kDeadlineExceeded
        : r.status == shm::kStatusAgain   ? absl::StatusCode::kUnavailable
                                          : absl::StatusCode::kInternal;
    return fail(code, reason, /*exact=*/true);
  };
  if (r.type == shm::kSetupHelloReply && r.status != 0) return daemon_error();
  if (r.type != shm::kSetupAdminReply) {
    return fail(absl::StatusCode::kDataLoss,
                "unexpected answer type " + std::to_string(r.type));
  }
  if (r.status != 0) return daemon_error();
  if (r.length > kMaxAdminAnswerBytes) {
    return fail(absl::StatusCode::kDataLoss, "is larger than");
  }
  if (bytes.size() - sizeof(r) < r.length) {
    return fail(absl::StatusCode::kUnavailable, "in the middle of its answer");
  }
  e.body = bytes.substr(sizeof(r), r.length);
  return e;
}

// rdmaplanectl's side: a fake daemon answers each query with a valid answer
// or error, mutated in its header (bit flips, magic, version, type, status,
// reason, length from zero to huge), cut anywhere or followed by garbage.
// QueryDaemon returns, well within its time-out, the whole body of an answer
// that is whole and valid, and otherwise the error the bytes call for.
TEST(QueryDaemonTest, FuzzedAnswersAreErrorsOrTheWholeBody) {
  const uint64_t seed = testing::FuzzSeed();
  const int iterations = testing::FuzzIterations(1500);
  std::mutex mu;
  std::string next;  // what the fake daemon answers the next query with
  FakeAdminServer* self = nullptr;
  // Its own path: copies of this test may run at once, in sandboxes whose
  // process ids are alike and whose /tmp is shared.
  const std::string path =
      ShortSocketPath("fuzz-" + std::to_string(std::random_device()()));
  auto server = FakeAdminServer::Start(path, [&](int sock) {
    shm::SetupMessage request;
    if (!self->ReadRequest(sock, &request)) return;
    std::string bytes;
    {
      std::lock_guard<std::mutex> lock(mu);
      bytes = next;
    }
    (void)!write(sock, bytes.data(), bytes.size());
  });
  ASSERT_NE(server, nullptr);
  self = server.get();
  int answered = 0;
  for (int i = 0; i < iterations; ++i) {
    SCOPED_TRACE("RDP_FUZZ_SEED=" + std::to_string(seed) + ", iteration " +
                 std::to_string(i));
    testing::Rng rng(testing::IterationSeed(seed, static_cast<uint64_t>(i)));
    shm::SetupMessage r = shm::MakeSetup(shm::kSetupAdminReply);
    const std::string body = rng.bytes(rng.below(3000));
    r.length = body.size();
    if (rng.percent(30)) {
      const int32_t statuses[] = {shm::kStatusInvalid,
                                  shm::kStatusPermission,
                                  shm::kStatusNoBuffers,
                                  shm::kStatusTimeout,
                                  shm::kStatusAgain,
                                  shm::kStatusFault,
                                  5,
                                  INT32_MIN};
      r.status = rng.pick(statuses);
      r.length = 0;
      if (rng.percent(70)) FuzzTopic(rng, r.text);
    }
    for (uint64_t n = rng.below(3); n > 0; --n) {
      switch (rng.below(7)) {
        case 0: {
          const uint64_t bit = rng.below(sizeof(r) * 8);
          reinterpret_cast<uint8_t*>(&r)[bit / 8] ^=
              static_cast<uint8_t>(1u << (bit % 8));
          break;
        }
        case 1:
          r.magic = rng.percent(50) ? 0 : rng.u32();
          break;
        case 2:
          r.version = static_cast<uint16_t>(rng.percent(50) ? 2 : rng.u32());
          break;
        case 3: {
          const uint16_t types[] = {shm::kSetupHelloReply,
                                    shm::kSetupArenaReply, shm::kSetupAdmin, 0,
                                    0xFFFF};
          r.type = rng.pick(types);
          r.status = rng.percent(50) ? shm::kStatusPermission : 0;
          break;
        }
        case 4:
          r.status = static_cast<int32_t>(rng.u32());
          break;
        case 5:
          FuzzTopic(rng, r.text);
          break;
        default: {
          const uint64_t lengths[] = {0,
                                      body.size() + 1,
                                      body.size() + 4096,
                                      body.empty() ? 0 : body.size() - 1,
                                      kMaxAdminAnswerBytes + 1,
                                      ~uint64_t{0},
                                      rng.u64()};
          r.length = rng.pick(lengths);
          break;
        }
      }
    }
    std::string bytes(reinterpret_cast<const char*>(&r), sizeof(r));
    bytes += body;
    if (rng.percent(15)) bytes.resize(rng.below(bytes.size() + 1));
    if (rng.percent(10)) bytes += rng.bytes(1 + rng.below(200));
    {
      std::lock_guard<std::mutex> lock(mu);
      next = bytes;
    }
    const ExpectedQuery want = PredictQuery(bytes);
    const std::string_view topic =
        kStatusTopics[rng.below(kStatusTopics.size())];
    absl::StatusOr<std::string> answer =
        QueryDaemon(server->path(), topic, rng.percent(50), kTimeout);
    ASSERT_EQ(answer.status().code(), want.code) << answer.status();
    if (want.code == absl::StatusCode::kOk) {
      ++answered;
      ASSERT_TRUE(*answer == want.body);
      continue;
    }
    const std::string message(answer.status().message());
    if (want.exact) {
      ASSERT_EQ(message, want.message);
    } else {
      ASSERT_NE(message.find(want.message), std::string::npos)
          << message << " does not say " << want.message;
    }
  }
  std::printf("fuzzed admin answers: %d, %d taken whole\n", iterations,
              answered);
}

}  // namespace
}  // namespace rdmaplane::control
