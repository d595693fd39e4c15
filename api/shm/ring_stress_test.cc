// SpscRing between two processes, the way librdmaplane and rdmaplaned use
// it: the ring lives in a memfd that each process maps on its own (at
// different addresses), the parent creates it and the forked child attaches.
// Small rings keep both the full and the empty case, and index wrap-around,
// busy the whole time.
//
// Every message carries its sequence number and a checksum over the rest, so
// the receiver tells lost, duplicated or reordered entries (wrong sequence)
// from torn ones (bad checksum: a slot read while it was being written, which
// is what a missing acquire/release pair would produce).
//
// Both sides spin, then yield (test_util.h Backoff), so the test also makes
// progress when the two processes share one core.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "api/shm/ring.h"
#include "api/shm/test_util.h"

namespace rdmaplane::shm {
namespace {

using testing::Backoff;
using testing::RoundUp;
using Clock = std::chrono::steady_clock;

// Long enough for a loaded 2-core machine; a hang fails here with a message
// rather than at the Bazel timeout.
constexpr std::chrono::seconds kDeadline{120};
// Idle polls between checks of the clock and of the peer's liveness.
constexpr uint32_t kPollsPerCheck = 4096;

// --- Self-checking messages ----------------------------------------------

struct Message {
  uint64_t seq;
  uint64_t payload;
  uint32_t kind;  // kRequest or kResponse
  uint32_t extra;
  uint64_t checksum;  // over all fields above
};
static_assert(sizeof(Message) == 32);
using MessageRing = SpscRing<Message>;

constexpr uint32_t kRequest = 0x51455552;   // "REQU"
constexpr uint32_t kResponse = 0x50534552;  // "RESP"

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t Checksum(const Message& m) {
  return Mix(m.seq ^ Mix(m.payload ^ Mix((uint64_t{m.kind} << 32) | m.extra)));
}

Message MakeMessage(uint64_t seq, uint32_t kind) {
  Message m;
  m.seq = seq;
  m.payload = Mix(seq + kind);
  m.kind = kind;
  m.extra = static_cast<uint32_t>(Mix(~seq));
  m.checksum = Checksum(m);
  return m;
}

enum class Fault { kNone, kTorn, kLost, kDuplicatedOrReordered, kWrongContent };

const char* FaultName(Fault fault) {
  switch (fault) {
    case Fault::kNone:
      return "none";
    case Fault::kTorn:
      return "torn entry (bad checksum)";
    case Fault::kLost:
      return "lost entry (sequence skipped ahead)";
    case Fault::kDuplicatedOrReordered:
      return "duplicated or reordered entry (sequence went back)";
    case Fault::kWrongContent:
      return "well-formed entry with wrong content";
  }
  return "?";
}

Fault Check(const Message& m, uint64_t expected_seq, uint32_t kind) {
  if (Checksum(m) != m.checksum) return Fault::kTorn;
  if (m.seq > expected_seq) return Fault::kLost;
  if (m.seq < expected_seq) return Fault::kDuplicatedOrReordered;
  const Message want = MakeMessage(expected_seq, kind);
  if (m.payload != want.payload || m.kind != want.kind ||
      m.extra != want.extra) {
    return Fault::kWrongContent;
  }
  return Fault::kNone;
}

// --- Shared memory and the child process ---------------------------------

// A memfd-backed region. The child maps it again with RemapInChild() and
// drops the inherited mapping, so that only offsets, never pointers, carry
// over from the parent.
class SharedRegion {
 public:
  explicit SharedRegion(size_t bytes)
      : size_(RoundUp(bytes, testing::PageSize())) {
    fd_ = memfd_create("ring_stress_test", MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(size_)) != 0) abort();
    data_ = Map();
  }
  ~SharedRegion() {
    munmap(data_, size_);
    close(fd_);
  }
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  uint8_t* RemapInChild() {
    uint8_t* fresh = Map();
    if (fresh == nullptr || munmap(data_, size_) != 0) return nullptr;
    data_ = fresh;
    return fresh;
  }

 private:
  uint8_t* Map() const {
    void* map =
        mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    return map == MAP_FAILED ? nullptr : static_cast<uint8_t*>(map);
  }

  size_t size_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
};

// Exit codes of the child, so the parent can say what went wrong there.
enum ChildExit : int {
  kChildOk = 0,
  kChildMapFailed = 10,
  kChildAttachFailed = 11,
  kChildTimedOut = 12,
  kChildBadRequest = 13,
  kChildCorruptedRing = 14,
  kChildOrphaned = 15,
};

const char* ChildExitMeaning(int code) {
  switch (code) {
    case kChildOk:
      return "ok";
    case kChildMapFailed:
      return "could not map the memfd";
    case kChildAttachFailed:
      return "could not attach to a ring";
    case kChildTimedOut:
      return "timed out waiting for the parent";
    case kChildBadRequest:
      return "received a bad request";
    case kChildCorruptedRing:
      return "saw a corrupted ring";
    case kChildOrphaned:
      return "parent went away";
  }
  return "unknown";
}

std::string DescribeWaitStatus(int status) {
  if (status == -1) return "child lost (waitpid failed)";
  if (WIFSIGNALED(status)) {
    return "child killed by signal " + std::to_string(WTERMSIG(status));
  }
  if (!WIFEXITED(status)) return "child in unexpected state";
  const int code = WEXITSTATUS(status);
  return "child exited with " + std::to_string(code) + " (" +
         ChildExitMeaning(code) + ")";
}

// A forked child running `body`; it exits with body's return value and is
// always reaped: the destructor kills and waits for a child still running
// (after a failed check the parent stops consuming and the child would
// otherwise spin until its deadline).
class ChildProcess {
 public:
  template <typename Body>
  explicit ChildProcess(Body body) {
    const pid_t parent = getpid();
    std::fflush(nullptr);  // or buffered test output is printed twice
    pid_ = fork();
    if (pid_ == 0) {
      // Also die if the parent crashes without reaching the destructor.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(kChildOrphaned);
      const int code = body();
      std::fflush(nullptr);
      _exit(code);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }

  // True once the child has exited; status() is then valid.
  bool Exited() {
    if (!reaped_) Reap(WNOHANG);
    return reaped_;
  }
  int Wait() {
    while (!reaped_) Reap(0);
    return status_;
  }
  int status() const { return status_; }

 private:
  void Reap(int options) {
    const pid_t got = waitpid(pid_, &status_, options);
    if (got == pid_) reaped_ = true;
    if (got < 0 && errno != EINTR) {
      reaped_ = true;  // not our child any more; nothing left to reap
      status_ = -1;
    }
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// Deadline and peer checks for a polling loop, done every kPollsPerCheck
// idle polls so the fast path only counts.
class Watchdog {
 public:
  Watchdog() : deadline_(Clock::now() + kDeadline) {}
  bool DueForCheck() { return ++idle_polls_ % kPollsPerCheck == 0; }
  bool Expired() const { return Clock::now() > deadline_; }
  uint64_t idle_polls() const { return idle_polls_; }

 private:
  Clock::time_point deadline_;
  uint64_t idle_polls_ = 0;
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// --- One direction -------------------------------------------------------

// Child: attaches to the ring at offset 0 of its own mapping and pushes
// `count` messages.
int Produce(SharedRegion& shm, uint64_t count) {
  uint8_t* base = shm.RemapInChild();
  if (base == nullptr) return kChildMapFailed;
  absl::StatusOr<MessageRing> ring = MessageRing::Attach(base, shm.size());
  if (!ring.ok()) return kChildAttachFailed;
  Backoff backoff;
  Watchdog watchdog;
  for (uint64_t seq = 0; seq < count; ++seq) {
    const Message m = MakeMessage(seq, kRequest);
    while (!ring->TryPush(m)) {
      backoff.Pause();
      if (watchdog.DueForCheck() && watchdog.Expired()) return kChildTimedOut;
    }
    backoff.Reset();
  }
  return kChildOk;
}

TEST(RingStress, OneDirectionTenMillionMessages) {
  constexpr uint32_t kCapacity = 1024;
  constexpr uint64_t kMessages = 10'000'000;
  SharedRegion shm(MessageRing::BytesFor(kCapacity));
  absl::StatusOr<MessageRing> ring =
      MessageRing::Create(shm.data(), shm.size(), kCapacity);
  ASSERT_TRUE(ring.ok()) << ring.status();

  const Clock::time_point start = Clock::now();
  ChildProcess producer([&shm] { return Produce(shm, kMessages); });
  ASSERT_TRUE(producer.started());

  Backoff backoff;
  Watchdog watchdog;
  uint64_t next = 0;
  while (next < kMessages) {
    Message m;
    const PopResult popped = ring->TryPop(&m);
    if (popped == PopResult::kOk) {
      const Fault fault = Check(m, next, kRequest);
      ASSERT_EQ(fault, Fault::kNone)
          << FaultName(fault) << ": expected seq " << next << ", got seq "
          << m.seq << " (kind " << m.kind << ")";
      ++next;
      backoff.Reset();
      continue;
    }
    ASSERT_EQ(popped, PopResult::kEmpty) << "corrupted ring at seq " << next;
    backoff.Pause();
    if (watchdog.DueForCheck()) {
      // A producer that exited may have pushed its last messages after the
      // pop above: only one gone with nothing left in the ring is stuck.
      ASSERT_FALSE(producer.Exited() && ring->Size() == 0)
          << DescribeWaitStatus(producer.status()) << " after " << next
          << " of " << kMessages << " messages";
      ASSERT_FALSE(watchdog.Expired()) << "stuck at seq " << next;
    }
  }
  const double seconds = SecondsSince(start);

  const int status = producer.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kChildOk)
      << DescribeWaitStatus(status);
  Message extra;
  EXPECT_EQ(ring->TryPop(&extra), PopResult::kEmpty) << "more than was sent";
  std::printf(
      "one direction: %llu messages in %.2f s (%.1f ns/message), "
      "consumer idle polls %llu\n",
      static_cast<unsigned long long>(kMessages), seconds,
      seconds * 1e9 / kMessages,
      static_cast<unsigned long long>(watchdog.idle_polls()));
}

// --- Request / response --------------------------------------------------

struct PingPongConfig {
  uint64_t round_trips;
  uint32_t window;  // requests the parent keeps in flight
  uint32_t request_capacity;
  uint32_t response_capacity;
};

struct TwoRings {
  size_t request_offset;
  size_t response_offset;
  size_t bytes;
};

TwoRings PlaceRings(const PingPongConfig& config) {
  const size_t response_offset =
      RoundUp(MessageRing::BytesFor(config.request_capacity), kCacheLine);
  return {0, response_offset,
          response_offset + MessageRing::BytesFor(config.response_capacity)};
}

// Child: the server. Checks each request and answers with a response
// computed from the request's contents.
int Serve(SharedRegion& shm, const TwoRings& rings, uint64_t count) {
  uint8_t* base = shm.RemapInChild();
  if (base == nullptr) return kChildMapFailed;
  absl::StatusOr<MessageRing> requests =
      MessageRing::Attach(base + rings.request_offset, rings.response_offset);
  absl::StatusOr<MessageRing> responses = MessageRing::Attach(
      base + rings.response_offset, rings.bytes - rings.response_offset);
  if (!requests.ok() || !responses.ok()) return kChildAttachFailed;
  Backoff backoff;
  Watchdog watchdog;
  for (uint64_t next = 0; next < count;) {
    Message request;
    const PopResult popped = requests->TryPop(&request);
    if (popped == PopResult::kEmpty) {
      backoff.Pause();
      if (watchdog.DueForCheck() && watchdog.Expired()) return kChildTimedOut;
      continue;
    }
    if (popped == PopResult::kCorrupted) return kChildCorruptedRing;
    const Fault fault = Check(request, next, kRequest);
    if (fault != Fault::kNone) {
      std::fprintf(stderr, "child: %s: expected seq %llu, got %llu\n",
                   FaultName(fault), static_cast<unsigned long long>(next),
                   static_cast<unsigned long long>(request.seq));
      return kChildBadRequest;
    }
    backoff.Reset();
    const Message response = MakeMessage(request.seq, kResponse);
    while (!responses->TryPush(response)) {
      backoff.Pause();
      if (watchdog.DueForCheck() && watchdog.Expired()) return kChildTimedOut;
    }
    backoff.Reset();
    ++next;
  }
  return kChildOk;
}

// Parent: the client. Keeps up to `window` requests in flight and never
// blocks on one ring while the other needs service, so it cannot deadlock
// with a server that is blocked pushing a response.
void RunPingPong(const PingPongConfig& config, const char* name) {
  const TwoRings rings = PlaceRings(config);
  SharedRegion shm(rings.bytes);
  absl::StatusOr<MessageRing> requests =
      MessageRing::Create(shm.data() + rings.request_offset,
                          rings.response_offset, config.request_capacity);
  absl::StatusOr<MessageRing> responses = MessageRing::Create(
      shm.data() + rings.response_offset, rings.bytes - rings.response_offset,
      config.response_capacity);
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_TRUE(responses.ok()) << responses.status();

  const Clock::time_point start = Clock::now();
  ChildProcess server([&shm, &rings, &config] {
    return Serve(shm, rings, config.round_trips);
  });
  ASSERT_TRUE(server.started());

  Backoff backoff;
  Watchdog watchdog;
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t requests_ring_full = 0;
  while (received < config.round_trips) {
    bool progress = false;
    while (sent < config.round_trips && sent - received < config.window) {
      if (!requests->TryPush(MakeMessage(sent, kRequest))) {
        ++requests_ring_full;
        break;
      }
      ++sent;
      progress = true;
    }
    Message response;
    PopResult popped;
    while ((popped = responses->TryPop(&response)) == PopResult::kOk) {
      const Fault fault = Check(response, received, kResponse);
      ASSERT_EQ(fault, Fault::kNone)
          << FaultName(fault) << ": expected response " << received
          << ", got seq " << response.seq << " (kind " << response.kind << ")";
      ++received;
      progress = true;
    }
    ASSERT_EQ(popped, PopResult::kEmpty)
        << "corrupted response ring at " << received;
    if (progress) {
      backoff.Reset();
      continue;
    }
    backoff.Pause();
    if (watchdog.DueForCheck()) {
      // A server that exited may have pushed its last responses after the
      // pop above: only one gone with nothing left in the ring is stuck.
      ASSERT_FALSE(server.Exited() && responses->Size() == 0)
          << DescribeWaitStatus(server.status()) << " after " << received
          << " of " << config.round_trips << " round trips";
      ASSERT_FALSE(watchdog.Expired()) << "stuck at response " << received;
    }
  }
  const double seconds = SecondsSince(start);

  const int status = server.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kChildOk)
      << DescribeWaitStatus(status);
  Message extra;
  EXPECT_EQ(requests->TryPop(&extra), PopResult::kEmpty);
  EXPECT_EQ(responses->TryPop(&extra), PopResult::kEmpty);
  std::printf(
      "%s: %llu round trips, window %u, in %.2f s (%.0f ns each), "
      "request ring found full %llu times\n",
      name, static_cast<unsigned long long>(config.round_trips), config.window,
      seconds, seconds * 1e9 / config.round_trips,
      static_cast<unsigned long long>(requests_ring_full));
}

// One request in flight: every message crosses both rings' acquire/release
// pairs in turn, and both rings go empty on every round trip.
TEST(RingStress, StrictPingPong) {
  RunPingPong({.round_trips = 200'000,
               .window = 1,
               .request_capacity = 64,
               .response_capacity = 64},
              "strict ping-pong");
}

// More requests in flight than both rings hold together, so both rings run
// full and both sides also take the "no room" path.
TEST(RingStress, PipelinedWithBothRingsFilling) {
  RunPingPong({.round_trips = 2'000'000,
               .window = 64,
               .request_capacity = 16,
               .response_capacity = 16},
              "pipelined");
}

}  // namespace
}  // namespace rdmaplane::shm
