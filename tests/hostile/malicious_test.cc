// Hostile clients. A "raw" client (hostile_client.h) speaks the session ABI
// directly, without librdmaplane: it creates the session memfd, formats the
// header and the rings itself, says hello over the Unix socket with
// SCM_RIGHTS, and then misbehaves: malformed hellos, rings scribbled on after
// the hello, corrupted ring indices, fuzzed control requests and work requests,
// bogus arenas.
//
// The daemon runs in this process, next to a well-behaved pair of real
// clients that moves verified bytes before and after every attack (and during
// the ones that race with it). Every test checks that the daemon still
// serves: the pair completes a verified write and read-back within 2 s, a new
// client opens a session, and once the raw client is gone the daemon holds
// what it held before: the same counters, the same number of open file
// descriptors in this process, and no descriptor or mapping of any memfd the
// raw client created.
//
// The fuzzing tests take a new seed every run, or RDP_FUZZ_SEED to replay
// one (tests/testing/fuzz.h).
// setup_fuzz_test.cc fuzzes the setup messages on the Unix socket itself.
//
// Several tests here first reproduced daemon bugs; all are fixed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"
#include "api/status.h"
#include "control/daemon.h"
#include "tests/testing/counters.h"
#include "tests/testing/fuzz.h"
#include "tests/testing/hostile_client.h"

namespace rdmaplane {
namespace {

using testing::Addr;
using testing::CountOpenFds;
using testing::Desc;
using testing::FuzzSeed;
using testing::GoodPair;
using testing::Held;
using testing::kArenaMemfd;
using testing::kHangLimit;
using testing::kNoAnswer;
using testing::kRefusedMemfd;
using testing::kRoundLimit;
using testing::kSeals;
using testing::kSessionMemfd;
using testing::NoRawMemfdsLeft;
using testing::Pipe;
using testing::RawClient;
using testing::Rng;
using testing::RoundUp;
using testing::StopAndJoin;

// What a working daemon reaches in milliseconds; the bound only turns a
// hang into a failure (kHangLimit).
bool WaitFor(const std::function<bool()>& done,
             absl::Duration timeout = kHangLimit) {
  return testing::WaitFor(done, timeout);
}

using shm::CompletionEntry;
using shm::ControlRequest;
using shm::ControlResponse;
using shm::SendEntry;

class MaliciousTest : public testing::HostileClientTest {};

// --- 1. Hellos ---------------------------------------------------------------

// Each malformed hello is refused (an answer with an error status, then the
// socket closes) or the socket is closed without an answer; the session is
// reclaimed and the daemon keeps no descriptor or mapping of what was sent.
// A few cases are accepted by design and listed as such: a second
// descriptor next to the region is closed and ignored; bytes after a good
// hello (garbage or a second hello) close the session once they are read.
TEST_F(MaliciousTest, BadHellosAreRefusedAndNothingIsKept) {
  const uint64_t kRegion = shm::SessionRegionBytes();
  enum class Want { kRefused, kClosed, kAccepted, kAcceptedThenClosed };
  struct Case {
    std::string name;
    Want want;
    std::function<void(RawClient&)> act;  // up to and including the hello
    std::function<void(RawClient&)> then = nullptr;  // after an ok answer
    std::shared_ptr<Pipe> pipe = nullptr;            // its write end went along
  };
  using Act = std::function<void(RawClient&)>;
  // A good region changed by `mutate` before the hello.
  auto mutated = [](std::function<void(RawClient&)> mutate) -> Act {
    return [mutate](RawClient& r) {
      ASSERT_TRUE(r.Format());
      mutate(r);
      ASSERT_TRUE(r.ConnectSocket());
      r.SendHello();
    };
  };
  auto header = [mutated](std::function<void(shm::SessionHeader&)> f) {
    return mutated([f](RawClient& r) { f(*r.header()); });
  };
  auto ring = [mutated](std::function<uint8_t*(RawClient&)> which,
                        std::function<void(shm::RingHeader&)> f) {
    return mutated(
        [which, f](RawClient& r) { f(*RawClient::RingHeaderOf(which(r))); });
  };
  auto region = [](uint64_t file_bytes, int seals,
                   std::optional<uint64_t> length) -> Act {
    return [=](RawClient& r) {
      ASSERT_TRUE(r.Format(file_bytes, seals));
      ASSERT_TRUE(r.ConnectSocket());
      r.SendHello(length);
    };
  };
  // A good region with a hello message changed by `f`, sent with `fds`
  // (the region's memfd when empty).
  auto message = [](std::function<void(shm::SetupMessage&)> f) -> Act {
    return [f](RawClient& r) {
      ASSERT_TRUE(r.Format());
      ASSERT_TRUE(r.ConnectSocket());
      shm::SetupMessage m = RawClient::HelloMsg(r.region_bytes());
      f(m);
      r.Send(&m, sizeof(m), {r.session_fd()});
    };
  };
  // A good hello with the region and `extra` copies of a pipe's write end.
  auto with_extra = [](std::shared_ptr<Pipe> pipe, int extra,
                       bool region_fd) -> Act {
    return [pipe, extra, region_fd](RawClient& r) {
      ASSERT_TRUE(r.Format());
      ASSERT_TRUE(r.ConnectSocket());
      std::vector<int> fds;
      if (region_fd) fds.push_back(r.session_fd());
      for (int i = 0; i < extra; ++i) fds.push_back(pipe->w);
      r.SendHelloWith(fds);
      pipe->CloseWriteEnd();
    };
  };
  auto send_ring = [](uint32_t slot) {
    return [slot](RawClient& r) { return r.send_ring(slot); };
  };
  auto completion_ring = [](uint32_t slot) {
    return [slot](RawClient& r) { return r.completion_ring(slot); };
  };
  auto request_ring = [](RawClient& r) { return r.request_ring(); };
  auto response_ring = [](RawClient& r) { return r.response_ring(); };

  std::vector<Case> cases;
  // Descriptors.
  cases.push_back({"no descriptor", Want::kRefused, [](RawClient& r) {
                     ASSERT_TRUE(r.Format());
                     ASSERT_TRUE(r.ConnectSocket());
                     r.SendHelloWith({});
                   }});
  {
    auto p = std::make_shared<Pipe>();
    cases.push_back({"a pipe instead of a memfd", Want::kRefused,
                     with_extra(p, 1, false), nullptr, p});
  }
  cases.push_back({"a regular file instead of a memfd", Want::kRefused,
                   [kRegion](RawClient& r) {
                     ASSERT_TRUE(r.Format());
                     const char* dir = std::getenv("TEST_TMPDIR");
                     const std::string file = std::string(dir ? dir : "/tmp") +
                                              "/raw-region-" +
                                              std::to_string(getpid());
                     const int fd =
                         open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
                     ASSERT_GE(fd, 0);
                     unlink(file.c_str());
                     ASSERT_EQ(ftruncate(fd, kRegion), 0);
                     ASSERT_TRUE(r.ConnectSocket());
                     r.SendHelloWith({fd}, kRegion);
                     close(fd);
                   }});
  {
    auto p = std::make_shared<Pipe>();
    cases.push_back({"a second descriptor (closed, ignored)", Want::kAccepted,
                     with_extra(p, 1, true), nullptr, p});
  }
  {
    auto p = std::make_shared<Pipe>();
    cases.push_back({"three descriptors", Want::kClosed, with_extra(p, 2, true),
                     nullptr, p});
  }
  {
    auto p = std::make_shared<Pipe>();
    cases.push_back({"eight descriptors (more than the daemon reads)",
                     Want::kClosed, with_extra(p, 7, true), nullptr, p});
  }
  // Region size and seals.
  cases.push_back({"length a page too large", Want::kRefused,
                   region(kRegion + 4096, kSeals, kRegion + 4096)});
  cases.push_back({"length a page too small", Want::kRefused,
                   region(kRegion, kSeals, kRegion - 4096)});
  cases.push_back({"length zero", Want::kRefused, region(kRegion, kSeals, 0)});
  cases.push_back(
      {"length 2^64-1", Want::kRefused, region(kRegion, kSeals, ~uint64_t{0})});
  cases.push_back({"memfd shorter than the length", Want::kRefused,
                   region(RoundUp(kRegion / 2, 4096), kSeals, kRegion)});
  cases.push_back(
      {"memfd of length zero", Want::kRefused, region(0, kSeals, kRegion)});
  cases.push_back(
      {"unsealed memfd", Want::kRefused, region(kRegion, 0, kRegion)});
  cases.push_back({"sealed against growing only", Want::kRefused,
                   region(kRegion, F_SEAL_GROW, kRegion)});
  cases.push_back({"sealed against writes", Want::kRefused,
                   region(kRegion, kSeals | F_SEAL_WRITE, kRegion)});
  // Session header.
  cases.push_back({"bad session magic", Want::kRefused,
                   header([](shm::SessionHeader& h) { h.magic ^= 1; })});
  cases.push_back(
      {"bad session version", Want::kRefused, header([](shm::SessionHeader& h) {
         h.version = shm::kSessionVersion + 1;
       })});
  cases.push_back(
      {"max_connections 1025", Want::kRefused,
       header([](shm::SessionHeader& h) { h.max_connections = 1025; })});
  cases.push_back(
      {"max_connections 16", Want::kRefused,
       header([](shm::SessionHeader& h) { h.max_connections = 16; })});
  cases.push_back(
      {"max_connections 0", Want::kRefused,
       header([](shm::SessionHeader& h) { h.max_connections = 0; })});
  // Ring table.
  cases.push_back({"control ring at the end of the region", Want::kRefused,
                   header([kRegion](shm::SessionHeader& h) {
                     h.control_requests.offset = kRegion;
                   })});
  cases.push_back({"control ring beyond the region", Want::kRefused,
                   header([kRegion](shm::SessionHeader& h) {
                     h.control_responses.offset = kRegion + 4096;
                   })});
  cases.push_back({"send ring running past the end", Want::kRefused,
                   header([kRegion](shm::SessionHeader& h) {
                     h.connections[15].send.offset = kRegion - 64;
                   })});
  cases.push_back({"completion ring at 2^64-64", Want::kRefused,
                   header([](shm::SessionHeader& h) {
                     h.connections[4].completion.offset = ~uint64_t{63};
                   })});
  cases.push_back(
      {"ring bytes 2^32-64", Want::kRefused, header([](shm::SessionHeader& h) {
         h.control_responses.bytes = 0xFFFFFFC0u;
       })});
  cases.push_back({"ring bytes smaller than its capacity needs", Want::kRefused,
                   header([](shm::SessionHeader& h) {
                     h.control_requests.bytes = shm::kRingEntriesOffset;
                   })});
  cases.push_back(
      {"control ring overlapping the header", Want::kRefused,
       header([](shm::SessionHeader& h) { h.control_requests.offset = 0; })});
  cases.push_back(
      {"misaligned control ring (+8)", Want::kRefused,
       header([](shm::SessionHeader& h) { h.control_requests.offset += 8; })});
  cases.push_back({"misaligned send ring (+32)", Want::kRefused,
                   header([](shm::SessionHeader& h) {
                     h.connections[3].send.offset += 32;
                   })});
  cases.push_back({"misaligned completion ring (+1)", Want::kRefused,
                   header([](shm::SessionHeader& h) {
                     h.connections[7].completion.offset += 1;
                   })});
  // Ring headers.
  // A slot's rings are the daemon's to format when it hands the slot out:
  // what the client wrote in their headers before is not read, and the
  // first slot handed out has well-formed rings all the same.
  auto formatted_at_hand_out = [](RawClient& r) {
    ASSERT_EQ(r.Status(RawClient::Request(shm::kOpListen, "fmt")),
              shm::kStatusOk);
    const std::optional<uint32_t> slot = r.ConnectTo("fmt");
    ASSERT_EQ(slot, std::optional<uint32_t>(0));
    shm::RingHeader send, completion;
    std::memcpy(&send, r.send_ring(0), sizeof(send));
    std::memcpy(&completion, r.completion_ring(0), sizeof(completion));
    EXPECT_EQ(send.magic, shm::kRingMagic);
    EXPECT_EQ(send.version, shm::kRingVersion);
    EXPECT_EQ(send.capacity, shm::kSendRingEntries);
    EXPECT_EQ(send.entry_size, sizeof(shm::SendEntry));
    EXPECT_EQ(completion.magic, shm::kRingMagic);
    EXPECT_EQ(completion.version, shm::kRingVersion);
    EXPECT_EQ(completion.capacity, shm::kCompletionRingEntries);
    EXPECT_EQ(completion.entry_size, sizeof(shm::CompletionEntry));
  };
  cases.push_back(
      {"send ring capacity beyond its bytes (slot rings: the daemon's)",
       Want::kAccepted,
       ring(send_ring(0), [](shm::RingHeader& h) { h.capacity = 1024; }),
       formatted_at_hand_out});
  cases.push_back(
      {"completion ring capacity not a power of two (slot rings: the "
       "daemon's)",
       Want::kAccepted,
       ring(completion_ring(5), [](shm::RingHeader& h) { h.capacity = 511; }),
       formatted_at_hand_out});
  cases.push_back(
      {"response ring capacity zero", Want::kRefused,
       ring(response_ring, [](shm::RingHeader& h) { h.capacity = 0; })});
  cases.push_back(
      {"request ring entry size mismatch", Want::kRefused,
       ring(request_ring, [](shm::RingHeader& h) { h.entry_size = 128; })});
  cases.push_back(
      {"send ring without magic (slot rings: the daemon's)", Want::kAccepted,
       ring(send_ring(15), [](shm::RingHeader& h) { h.magic = 0; }),
       formatted_at_hand_out});
  cases.push_back(
      {"completion ring version 2 (slot rings: the daemon's)",
       Want::kAccepted,
       ring(completion_ring(0), [](shm::RingHeader& h) { h.version = 2; }),
       formatted_at_hand_out});
  cases.push_back({"a send ring too small for its capacity", Want::kRefused,
                   header([](shm::SessionHeader& h) {
                     h.connections[900].send.bytes = shm::kRingEntriesOffset;
                   })});
  cases.push_back({"a receive ring too small for its capacity",
                   Want::kRefused, header([](shm::SessionHeader& h) {
                     h.receive[1023].bytes = 4096;
                   })});
  // Setup messages.
  cases.push_back(
      {"setup magic wrong", Want::kClosed,
       message([](shm::SetupMessage& m) { m.magic = 0x12345678; })});
  cases.push_back({"setup version 2", Want::kClosed,
                   message([](shm::SetupMessage& m) { m.version = 2; })});
  cases.push_back({"type 99", Want::kClosed,
                   message([](shm::SetupMessage& m) { m.type = 99; })});
  cases.push_back(
      {"an arena before the hello", Want::kClosed,
       message([](shm::SetupMessage& m) { m.type = shm::kSetupArena; })});
  cases.push_back(
      {"an arena free before the hello", Want::kClosed,
       message([](shm::SetupMessage& m) { m.type = shm::kSetupArenaFree; })});
  cases.push_back(
      {"a hello reply from the client", Want::kClosed,
       message([](shm::SetupMessage& m) { m.type = shm::kSetupHelloReply; })});
  cases.push_back({"garbage bytes", Want::kClosed, [](RawClient& r) {
                     ASSERT_TRUE(r.Format());
                     ASSERT_TRUE(r.ConnectSocket());
                     std::mt19937 rng(7);
                     uint8_t junk[sizeof(shm::SetupMessage)];
                     for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
                     r.Send(junk, sizeof(junk), {r.session_fd()});
                   }});
  cases.push_back(
      {"half a hello, then end of stream", Want::kClosed, [](RawClient& r) {
         ASSERT_TRUE(r.Format());
         ASSERT_TRUE(r.ConnectSocket());
         const shm::SetupMessage m = RawClient::HelloMsg(r.region_bytes());
         r.Send(&m, 40, {r.session_fd()});
         shutdown(r.sock(), SHUT_WR);
       }});
  cases.push_back(
      {"one byte, then end of stream", Want::kClosed, [](RawClient& r) {
         ASSERT_TRUE(r.Format());
         ASSERT_TRUE(r.ConnectSocket());
         r.Send("R", 1, {r.session_fd()});
         shutdown(r.sock(), SHUT_WR);
       }});
  cases.push_back({"trailing bytes after the hello, then end of stream",
                   Want::kAcceptedThenClosed, [](RawClient& r) {
                     ASSERT_TRUE(r.Format());
                     ASSERT_TRUE(r.ConnectSocket());
                     uint8_t buf[sizeof(shm::SetupMessage) + 50];
                     std::memset(buf, 0xA5, sizeof(buf));
                     const shm::SetupMessage m =
                         RawClient::HelloMsg(r.region_bytes());
                     std::memcpy(buf, &m, sizeof(m));
                     r.Send(buf, sizeof(buf), {r.session_fd()});
                     shutdown(r.sock(), SHUT_WR);
                   }});
  cases.push_back({"a second hello", Want::kAcceptedThenClosed,
                   mutated([](RawClient&) {}),
                   [](RawClient& r) { r.SendHello(); }});
  cases.push_back(
      {"two hellos in one write", Want::kAcceptedThenClosed, [](RawClient& r) {
         ASSERT_TRUE(r.Format());
         ASSERT_TRUE(r.ConnectSocket());
         shm::SetupMessage two[2] = {RawClient::HelloMsg(r.region_bytes()),
                                     RawClient::HelloMsg(r.region_bytes())};
         r.Send(two, sizeof(two), {r.session_fd()});
       }});

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const uint64_t reclaimed = Snap().sessions_reclaimed;
    {
      RawClient raw(path());
      c.act(raw);
      if (::testing::Test::HasFatalFailure()) return;
      const RawClient::Answer a = raw.ReadAnswer();
      switch (c.want) {
        case Want::kRefused:
          ASSERT_EQ(a.got, RawClient::Got::kMessage) << "no answer";
          EXPECT_EQ(a.type, shm::kSetupHelloReply);
          EXPECT_EQ(a.status, shm::kStatusInvalid) << a.text;
          EXPECT_EQ(a.fds, 0u);
          EXPECT_TRUE(raw.WaitClosed());
          break;
        case Want::kClosed:
          EXPECT_EQ(a.got, RawClient::Got::kClosed)
              << "answered with status " << a.status << " " << a.text;
          break;
        case Want::kAccepted:
        case Want::kAcceptedThenClosed:
          ASSERT_EQ(a.got, RawClient::Got::kMessage);
          EXPECT_EQ(a.status, shm::kStatusOk) << a.text;
          EXPECT_EQ(a.fds, 2u);
          EXPECT_GE(raw.control_bell(), 0);
          if (c.then) c.then(raw);
          if (c.want == Want::kAcceptedThenClosed) {
            EXPECT_TRUE(raw.WaitClosed());
          } else {
            // Serves requests like any session.
            EXPECT_EQ(raw.Status(RawClient::Request(shm::kOpListen, "ok")),
                      shm::kStatusOk);
          }
          break;
      }
    }
    // Reclaimed, with nothing kept: not the region, not any extra
    // descriptor.
    EXPECT_TRUE(
        WaitFor([&] { return Snap().sessions_reclaimed == reclaimed + 1; }));
    EXPECT_TRUE(CountersReach(baseline_));
    EXPECT_TRUE(NoRawMemfdsLeft());
    if (c.pipe != nullptr) {
      EXPECT_TRUE(c.pipe->WritersGone()) << "the daemon kept a descriptor";
    }
  }
  cases.clear();  // the pipes
  EXPECT_EQ(Snap().rejected_clients, before_.rejected_clients);
  ExpectServing("after the hellos");
  ExpectBaseline();
}

// --- 2. Ring headers scribbled on after the hello ----------------------------

// The daemon attached every ring at hello: zeroing the magic (and garbling
// the capacity and entry size) of the control rings and of every connection
// slot's rings afterwards changes nothing. Listen, connect, a verified write
// and read through a slot whose ring headers are gone, disconnect.
// Arenas beyond a session's allowance are refused with the reason, the
// refused memfd is closed at once, and the session keeps what it had.
TEST_F(MaliciousTest, ArenasBeyondTheSessionsAllowanceAreRefused) {
  const Held before = Settled();
  {
    RawClient raw(path());
    ASSERT_TRUE(raw.Open());
    const uint32_t limit = control::DaemonOptions{}.max_arenas_per_session;
    RawClient::Arena* first = nullptr;
    for (uint32_t i = 0; i < limit; ++i) {
      RawClient::Arena* a = raw.AddArena(4096);
      ASSERT_NE(a, nullptr) << i;
      if (first == nullptr) first = a;
    }
    RawClient::Arena extra =
        RawClient::MakeArena(4096, testing::kSeals, testing::kRefusedMemfd);
    ASSERT_NE(extra.base, nullptr);
    const auto ans = raw.SendArena(Addr(extra.base), 4096, {extra.fd});
    EXPECT_EQ(ans.got, RawClient::Got::kMessage);
    EXPECT_EQ(ans.type, shm::kSetupArenaReply);
    EXPECT_EQ(ans.status, shm::kStatusLimit);
    EXPECT_NE(ans.text.find("--max_arenas_per_session"), std::string::npos)
        << ans.text;
    RawClient::FreeArena(&extra);
    // The daemon kept neither the refused memfd nor a mapping of it.
    EXPECT_TRUE(
        testing::NoRawMemfdsLeft(kHangLimit, {testing::kRefusedMemfd}));
    EXPECT_EQ(Snap().arenas, before.arenas + limit);
    // The session still serves: a registration in its first arena.
    EXPECT_TRUE(raw.RegisterLocal(first->base, 4096, shm::kAccessReadWrite));
  }
  EXPECT_TRUE(CountersReach(before));
}

TEST_F(MaliciousTest, RingHeadersZeroedAfterHelloAreNotReread) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  RawClient::Arena* arena = raw.AddArena(1u << 20);
  ASSERT_NE(arena, nullptr);
  auto garble = [](uint8_t* ring) {
    shm::RingHeader* h = RawClient::RingHeaderOf(ring);
    h->magic = 0;
    h->version = 0xFFFF;
    h->entry_size = 1;
    h->capacity = 0xFFFFFFFFu;
  };
  garble(raw.request_ring());
  garble(raw.response_ring());
  for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
    garble(raw.send_ring(i));
    garble(raw.completion_ring(i));
  }
  // The header's own magic and ring table too.
  raw.header()->magic = 0;
  raw.header()->version = 0;
  raw.header()->control_requests.offset = ~uint64_t{0};
  raw.header()->connections[0].send.offset = ~uint64_t{0};

  EXPECT_EQ(raw.Status(RawClient::Request(shm::kOpListen, "raw-svc")),
            shm::kStatusOk);
  const auto lkey = raw.RegisterLocal(arena->base, 8192, shm::kAccessReadWrite);
  ASSERT_TRUE(lkey.has_value());
  const auto slot = raw.ConnectTo("target");
  ASSERT_TRUE(slot.has_value());
  Client& server = good_->server();
  auto sconn = server.Accept("target", kHangLimit);
  ASSERT_TRUE(sconn.ok()) << sconn.status();
  auto* sbuf = static_cast<uint8_t*>(server.Alloc(4096));
  ASSERT_NE(sbuf, nullptr);
  Desc desc;
  ASSERT_EQ(server.RegisterRdmaMemory(*sconn, sbuf, 4096, RDP_MEM_READWRITE,
                                      desc.bytes, &desc.len),
            RDP_OK);

  for (uint32_t i = 0; i < 4096; ++i) {
    arena->base[i] = static_cast<uint8_t>(i * 13 + 5);
  }
  SendEntry w{};
  w.wr_id = 1;
  w.op = shm::kSendWrite;
  w.num_sge = 1;
  w.sge[0] = {Addr(arena->base), 4096, *lkey};
  w.remote_address = desc.d()->address;
  w.rkey = desc.d()->rkey;
  ASSERT_TRUE(raw.send(*slot).TryPush(w));
  raw.KickEngine(*slot);
  auto done = raw.AwaitCompletion(*slot);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->wr_id, 1u);
  EXPECT_EQ(done->status, shm::kStatusOk);
  EXPECT_EQ(std::memcmp(sbuf, arena->base, 4096), 0);

  SendEntry r = w;
  r.wr_id = 2;
  r.op = shm::kSendRead;
  r.sge[0].address = Addr(arena->base + 4096);
  ASSERT_TRUE(raw.send(*slot).TryPush(r));
  raw.KickEngine(*slot);
  done = raw.AwaitCompletion(*slot);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->wr_id, 2u);
  EXPECT_EQ(done->status, shm::kStatusOk);
  EXPECT_EQ(std::memcmp(sbuf, arena->base + 4096, 4096), 0);

  EXPECT_EQ(raw.Disconnect(*slot), shm::kStatusOk);
  EXPECT_EQ(raw.Status(RawClient::Request(shm::kOpUnlisten, "raw-svc")),
            shm::kStatusOk);
  EXPECT_TRUE(server.Disconnect(*sconn).ok());
  EXPECT_TRUE(server.Free(sbuf).ok());
  raw.Close();
  ExpectServing("after the scribbled ring headers");
  ExpectBaseline();
}

// --- 3. Ring indices ---------------------------------------------------------

// A control request ring whose producer index is more than a ring ahead of
// the consumer (or behind it) is corrupt: the daemon drops the session, with
// its connection (the peer sees a reset) and its arena and registrations.
TEST_F(MaliciousTest, CorruptRequestRingDropsTheSession) {
  Client& server = good_->server();
  for (const int64_t delta : {int64_t{1000}, int64_t{-1}, int64_t{65}}) {
    SCOPED_TRACE("producer = consumer + " + std::to_string(delta));
    const uint64_t reclaimed = Snap().sessions_reclaimed;
    RawClient raw(path());
    ASSERT_TRUE(raw.Open());
    RawClient::Arena* arena = raw.AddArena(1u << 20);
    ASSERT_NE(arena, nullptr);
    ASSERT_TRUE(raw.RegisterLocal(arena->base, 4096, shm::kAccessReadWrite));
    const auto slot = raw.ConnectTo("target");
    ASSERT_TRUE(slot.has_value());
    auto sconn = server.Accept("target", kHangLimit);
    ASSERT_TRUE(sconn.ok()) << sconn.status();

    const uint32_t cons =
        RawClient::Consumer(raw.request_ring()).load(std::memory_order_acquire);
    RawClient::Producer(raw.request_ring())
        .store(cons + static_cast<uint32_t>(delta), std::memory_order_release);
    raw.KickControl();
    EXPECT_TRUE(raw.WaitClosed());
    EXPECT_TRUE(
        WaitFor([&] { return Snap().sessions_reclaimed == reclaimed + 1; }));
    EXPECT_TRUE(
        WaitFor([&] { return server.Flush(*sconn) == RDP_ERR_CONN_RESET; }));
    EXPECT_TRUE(server.Disconnect(*sconn).ok());
    raw.Close();
    ExpectServing("after the corrupt request ring");
    ExpectBaseline();
  }
}

// Consumer indices a client owns, moved to nonsense: the response ring's
// (ahead of the producer, or far behind) makes the daemon take no more of
// that session's requests; the completion ring's makes the engine take no
// more of that connection's work. Nothing else is held up, and putting the
// index back lets the session go on where it stopped.
TEST_F(MaliciousTest, MovedConsumerIndicesStallOnlyTheirOwner) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  RawClient::Arena* arena = raw.AddArena(1u << 20);
  ASSERT_NE(arena, nullptr);
  const auto lkey = raw.RegisterLocal(arena->base, 4096, shm::kAccessReadWrite);
  ASSERT_TRUE(lkey.has_value());
  const auto slot = raw.ConnectTo("target");
  ASSERT_TRUE(slot.has_value());
  Client& server = good_->server();
  auto sconn = server.Accept("target", absl::Seconds(5));
  ASSERT_TRUE(sconn.ok()) << sconn.status();
  auto* sbuf = static_cast<uint8_t*>(server.Alloc(4096));
  ASSERT_NE(sbuf, nullptr);
  Desc desc;
  ASSERT_EQ(server.RegisterRdmaMemory(*sconn, sbuf, 4096, RDP_MEM_READWRITE,
                                      desc.bytes, &desc.len),
            RDP_OK);
  uint64_t wr_id = 0;
  auto write_entry = [&] {
    SendEntry e{};
    e.wr_id = ++wr_id;
    e.op = shm::kSendWrite;
    e.num_sge = 1;
    e.sge[0] = {Addr(arena->base), 4096, *lkey};
    e.remote_address = desc.d()->address;
    e.rkey = desc.d()->rkey;
    return e;
  };

  // Two control requests of another session, answered one after the other:
  // the control thread has looked at every session's requests since the
  // call began.
  std::unique_ptr<Client> other = NewClient();
  ASSERT_NE(other, nullptr);
  void* other_buf = other->Alloc(4096);
  ASSERT_NE(other_buf, nullptr);
  auto control_thread_went_round = [&] {
    for (int i = 0; i < 2; ++i) {
      auto key = other->RegisterMemory(other_buf, 4096, RDP_MEM_READ);
      ASSERT_TRUE(key.ok()) << key.status();
      ASSERT_TRUE(other->DeregisterMemory(*key).ok());
    }
  };
  good_->Start();
  // Response ring.
  for (const int64_t delta : {int64_t{5}, int64_t{1}, int64_t{-1000}}) {
    SCOPED_TRACE("response consumer = producer + " + std::to_string(delta));
    std::atomic<uint32_t>& cons = RawClient::Consumer(raw.response_ring());
    const uint32_t saved = cons.load();
    cons.store(saved + static_cast<uint32_t>(delta));
    const uint64_t id = raw.Push(
        RawClient::Request(shm::kOpListen, "moved-" + std::to_string(delta)));
    ASSERT_NE(id, 0u);
    raw.KickControl();
    control_thread_went_round();
    // The control thread may have found room just before the index moved
    // and taken the request then; whether it did is a race. What must
    // never happen is an answer written into a ring whose consumer says it
    // is full: the producer index stays where it was.
    EXPECT_EQ(RawClient::Producer(raw.response_ring()).load(), saved)
        << "the daemon wrote an answer the ring had no room for";
    cons.store(saved);
    raw.KickControl();
    // Taken or not, the request is answered once the room is back, exactly
    // once (a held answer was once dropped here).
    const auto resp = raw.Await(id);
    ASSERT_TRUE(resp.has_value());
    EXPECT_EQ(resp->status, shm::kStatusOk);
    control_thread_went_round();
    EXPECT_EQ(raw.responses().Size(), 0u) << "a second answer came";
  }
  // Completion ring.
  for (const int64_t delta : {int64_t{7}, int64_t{1}, int64_t{-100000}}) {
    SCOPED_TRACE("completion consumer = producer + " + std::to_string(delta));
    std::atomic<uint32_t>& cons =
        RawClient::Consumer(raw.completion_ring(*slot));
    const uint32_t saved = cons.load();
    cons.store(saved + static_cast<uint32_t>(delta));
    std::memset(sbuf, 0, 4096);
    std::memset(arena->base, 0x5A + static_cast<int>(wr_id), 4096);
    ASSERT_TRUE(raw.send(*slot).TryPush(write_entry()));
    raw.KickEngine(*slot);
    ASSERT_TRUE(EngineWentRound());
    EXPECT_EQ(raw.send(*slot).Size(), 1u) << "the engine took the request";
    cons.store(saved);
    raw.KickEngine(*slot);
    const auto done = raw.AwaitCompletion(*slot);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->wr_id, wr_id);
    EXPECT_EQ(done->status, shm::kStatusOk);
    EXPECT_EQ(std::memcmp(sbuf, arena->base, 4096), 0);
  }
  good_->Stop();
  EXPECT_EQ(good_->error(), "") << DaemonState();
  EXPECT_GT(good_->rounds(), 0u);
  EXPECT_LT(good_->slowest(), kRoundLimit);

  EXPECT_EQ(raw.Disconnect(*slot), shm::kStatusOk);
  EXPECT_TRUE(server.Disconnect(*sconn).ok());
  EXPECT_TRUE(server.Free(sbuf).ok());
  raw.Close();
  other.reset();
  ExpectServing("after the moved consumer indices");
  ExpectBaseline();
}

// A thread keeps every send ring of the raw session "full of work"
// (producer = consumer + 200, over whatever the slots hold) and keeps its
// completion rings drained, while the raw client connects to the good
// server, is accepted (or not), and disconnects. The engine and the control
// thread bound what they take from a client-controlled ring, so the good
// pair keeps completing verified transfers throughout: two more in every
// cycle, with the scribbler running (a daemon stuck in a scribbled ring
// stops them, and EngineWentRound fails instead of hanging).
TEST_F(MaliciousTest, ScribbledSendRingIndicesDoNotStallTheDaemon) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  Client& server = good_->server();
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> gap{200};
  // No pause between sweeps: a daemon that drained a send ring until it
  // found it empty would never find it so.
  std::thread scribbler([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
        uint8_t* s = raw.send_ring(i);
        RawClient::Producer(s).store(
            RawClient::Consumer(s).load(std::memory_order_relaxed) + gap.load(),
            std::memory_order_release);
        uint8_t* c = raw.completion_ring(i);
        RawClient::Consumer(c).store(
            RawClient::Producer(c).load(std::memory_order_acquire),
            std::memory_order_release);
      }
    }
  });
  StopAndJoin join_scribbler(stop, scribbler);
  // The scribbler runs only when scheduled; before each request that makes
  // the daemon drain a slot, the rings are filled here as well.
  auto fill = [&] {
    for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
      uint8_t* s = raw.send_ring(i);
      RawClient::Producer(s).store(
          RawClient::Consumer(s).load(std::memory_order_relaxed) + gap.load(),
          std::memory_order_release);
    }
  };
  good_->Start();
  struct Cycle {
    const char* name;
    uint32_t gap;
    bool accept;
  };
  const Cycle cycles[] = {{"accepted", 200, true},
                          {"never accepted", 200, false},
                          {"accepted, indices corrupt", 100000, true}};
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (const Cycle& cycle : cycles) {
      SCOPED_TRACE(std::string(cycle.name) + ", repeat " +
                   std::to_string(repeat));
      gap.store(cycle.gap);
      fill();
      const auto slot = raw.ConnectTo("target");
      ASSERT_TRUE(slot.has_value()) << "the control thread did not answer";
      std::optional<rdp_conn> sconn;
      if (cycle.accept) {
        auto a = server.Accept("target", kHangLimit);
        ASSERT_TRUE(a.ok()) << a.status();
        sconn = *a;
      }
      raw.KickEngine(*slot);
      ASSERT_TRUE(EngineWentRound());
      if (cycle.gap > shm::kSendRingEntries && cycle.accept) {
        // The engine gave up on the connection it could not read.
        EXPECT_TRUE(
            WaitFor([&] { return raw.state(*slot) == shm::kConnAborted; }));
      }
      fill();
      EXPECT_EQ(raw.Disconnect(*slot), shm::kStatusOk);
      if (sconn) {
        EXPECT_TRUE(server.Disconnect(*sconn).ok());
      }
      ASSERT_EQ(good_->error(), "") << DaemonState();
    }
  }
  stop.store(true);
  scribbler.join();
  good_->Stop();
  EXPECT_EQ(good_->error(), "") << DaemonState();
  raw.Close();
  ExpectServing("after the send ring scribbler");
  ExpectBaseline();
}

// --- 4. Fuzzed control requests ----------------------------------------------

bool ValidServiceName(const char (&s)[shm::kServiceNameBytes]) {
  return std::memchr(s, '\0', sizeof(s)) != nullptr && s[0] != '\0';
}

// 10,000 random control requests through the raw client's control ring,
// in batches that ring its doorbell. Operations valid and not (unknown
// values included), connection numbers up to 2^32, huge lengths and
// addresses, unterminated service names, bogus and foreign keys and
// descriptors (the good pair's among them). Every request is answered, in
// order and under its own id; the ones that cannot be valid are answered
// with an error; unknown operations are counted as bad requests. Afterwards
// the session still serves a valid request, and once the raw client is gone
// nothing of it is left.
TEST_F(MaliciousTest, FuzzedControlRequestsAreAnsweredAndLeakNothing) {
  const uint64_t seed = FuzzSeed();
  SCOPED_TRACE("RDP_FUZZ_SEED=" + std::to_string(seed));
  Rng rng(seed);
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  constexpr uint64_t kArenaBytes = 1u << 20;
  RawClient::Arena* arena = raw.AddArena(kArenaBytes);
  ASSERT_NE(arena, nullptr);
  const uint64_t base = Addr(arena->base);
  auto in_arena = [&](uint64_t address, uint64_t length) {
    return address >= base && address - base <= kArenaBytes &&
           length <= kArenaBytes - (address - base);
  };

  // What the raw client was given, to be used (and misused) again.
  std::vector<uint32_t> own_keys;
  std::vector<std::vector<uint8_t>> own_descriptors;
  std::set<uint32_t> open_slots;
  const uint32_t foreign_keys[] = {good_->lsrc(), good_->ldst(),
                                   good_->desc().d()->rkey};
  const std::vector<std::string> services = {"fz-a", "fz-b", "fz-c", "good",
                                             "target"};
  const std::set<std::string> foreign_services = {"good", "target"};

  auto random_request = [&]() {
    ControlRequest r{};
    // Operation.
    const uint64_t op = rng.below(100);
    if (op < 86) {
      r.op = static_cast<uint32_t>(1 + rng.below(9));
    } else if (op < 92) {
      r.op = rng.percent(50) ? 0 : static_cast<uint32_t>(10 + rng.below(20));
    } else {
      r.op = rng.u32();
    }
    // Connection.
    const uint64_t c = rng.below(100);
    if (c < 40 && !open_slots.empty()) {
      r.connection = *std::next(
          open_slots.begin(), static_cast<long>(rng.below(open_slots.size())));
    } else if (c < 70) {
      r.connection = static_cast<uint32_t>(rng.below(shm::kMaxConnections));
    } else if (c < 90) {
      r.connection =
          shm::kMaxConnections + static_cast<uint32_t>(rng.below(16));
    } else {
      r.connection = rng.u32();
    }
    // Address and length.
    const uint64_t a = rng.below(100);
    if (a < 50) {
      r.address = base + rng.below(kArenaBytes);
    } else if (a < 60) {
      r.address = base + kArenaBytes - rng.below(64);
    } else if (a < 70) {
      r.address = Addr(good_->target());  // someone else's memory
    } else if (a < 80) {
      r.address = 0;
    } else {
      r.address = rng.u64();
    }
    const uint64_t l = rng.below(100);
    if (l < 50) {
      r.length = 1 + rng.below(8192);
    } else if (l < 60) {
      r.length = 0;
    } else if (l < 70) {
      r.length = kArenaBytes;
    } else if (l < 80) {
      r.length = ~uint64_t{0} - rng.below(4096);
    } else {
      r.length = rng.u64() >> rng.below(64);
    }
    // Flags and key.
    r.flags = rng.percent(70) ? static_cast<uint32_t>(1 + rng.below(3))
                              : (rng.percent(30) ? 0 : rng.u32());
    const uint64_t k = rng.below(100);
    if (k < 40 && !own_keys.empty()) {
      r.key = rng.pick(own_keys);
    } else if (k < 60) {
      r.key = foreign_keys[rng.below(3)];
    } else {
      r.key = rng.u32();
    }
    // Descriptor.
    const uint64_t d = rng.below(100);
    if (d < 35 && !own_descriptors.empty()) {
      const auto& own = rng.pick(own_descriptors);
      std::memcpy(r.descriptor, own.data(), sizeof(r.descriptor));
    } else if (d < 50) {
      std::memcpy(r.descriptor, good_->desc().bytes, sizeof(r.descriptor));
    } else if (d < 65 && !own_descriptors.empty()) {
      const auto& own = rng.pick(own_descriptors);
      std::memcpy(r.descriptor, own.data(), sizeof(r.descriptor));
      shm::RdmaDescriptor forged;
      std::memcpy(&forged, r.descriptor, sizeof(forged));
      forged.rkey ^= static_cast<uint32_t>(1 + rng.below(0xFFFF));
      forged.length = rng.u64();
      std::memcpy(r.descriptor, &forged, sizeof(forged));
    } else {
      for (uint8_t& b : r.descriptor) b = static_cast<uint8_t>(rng.u32());
    }
    const uint64_t dl = rng.below(100);
    r.descriptor_length =
        dl < 60 ? shm::kDescriptorBytes
                : (dl < 80 ? static_cast<uint32_t>(rng.below(64)) : rng.u32());
    r.reserved = rng.u32();
    // Service name.
    const uint64_t s = rng.below(100);
    if (s < 55) {
      const std::string& name = rng.pick(services);
      std::memcpy(r.service, name.data(), name.size());
    } else if (s < 70) {
      std::memset(r.service, 'x', sizeof(r.service));  // unterminated
    } else if (s < 80) {
      // empty
    } else {
      for (char& ch : r.service) ch = static_cast<char>(rng.u32());
    }
    // rdma_cm arguments: mostly plausible (a known port space, an id the
    // daemon may have handed out, data within its field), else noise.
    if (rng.percent(70)) {
      static constexpr uint16_t kSpaces[] = {0x0106, 0x0111, 0x013F};
      r.cm.port_space = kSpaces[rng.below(3)];
      r.cm.id = static_cast<uint32_t>(rng.below(64));
      r.cm.local_port = static_cast<uint16_t>(rng.percent(50) ? 0 : rng.u32());
      r.cm.remote_ip = rng.percent(50) ? INADDR_LOOPBACK : rng.u32();
      r.cm.remote_port = static_cast<uint16_t>(rng.u32());
      r.cm.qpn = static_cast<uint32_t>(rng.below(1 << 25));
      r.cm.timeout_ms = static_cast<uint32_t>(rng.below(100));
      r.cm.private_data_len = static_cast<uint8_t>(rng.below(256));
    } else {
      auto* bytes = reinterpret_cast<uint8_t*>(&r.cm);
      for (size_t i = 0; i < sizeof(r.cm); ++i) {
        bytes[i] = static_cast<uint8_t>(rng.u32());
      }
    }
    return r;
  };

  // The status a request must get when it cannot be valid, or nullopt when
  // it may be; `any_error` when only "not ok" can be said.
  constexpr int32_t kAnyError = INT32_MIN + 1;
  auto expected = [&](const ControlRequest& r) -> std::optional<int32_t> {
    const bool valid_service = ValidServiceName(r.service);
    const bool foreign_service =
        valid_service && foreign_services.count(r.service) > 0;
    const bool slot_open =
        r.connection < shm::kMaxConnections && open_slots.count(r.connection);
    const bool foreign_key =
        std::find(std::begin(foreign_keys), std::end(foreign_keys), r.key) !=
        std::end(foreign_keys);
    switch (r.op) {
      case shm::kOpRegisterLocal:
        if (r.flags == 0 || (r.flags & ~shm::kAccessReadWrite) != 0) {
          return shm::kStatusInvalid;
        }
        if (r.length == 0 || !in_arena(r.address, r.length)) {
          return shm::kStatusFault;
        }
        return std::nullopt;
      case shm::kOpDeregisterLocal:
        if (foreign_key || std::find(own_keys.begin(), own_keys.end(), r.key) ==
                               own_keys.end()) {
          return shm::kStatusInvalid;
        }
        return std::nullopt;
      case shm::kOpRegisterRdma:
        if (r.flags == 0 ||
            (r.flags & ~(shm::kAccessReadWrite | shm::kAccessAtomic)) != 0) {
          return shm::kStatusInvalid;
        }
        if (!slot_open) return shm::kStatusNotConnected;
        if (r.length == 0 || !in_arena(r.address, r.length)) {
          return kAnyError;  // fault, or not connected any more
        }
        return std::nullopt;
      case shm::kOpDeregisterRdma: {
        shm::RdmaDescriptor d;
        std::memcpy(&d, r.descriptor, sizeof(d));
        if (r.descriptor_length != shm::kDescriptorBytes ||
            d.magic != shm::kDescriptorMagic || !slot_open ||
            d.rkey == good_->desc().d()->rkey) {
          return shm::kStatusInvalid;
        }
        return std::nullopt;
      }
      case shm::kOpListen:
      case shm::kOpUnlisten:
      case shm::kOpAccept:
        if (!valid_service || foreign_service) return shm::kStatusInvalid;
        return std::nullopt;
      case shm::kOpConnect:
        if (!valid_service) return shm::kStatusInvalid;
        return std::nullopt;
      case shm::kOpDisconnect:
        if (!slot_open) return shm::kStatusNotConnected;
        return std::nullopt;
      case shm::kOpQueryDevice:
        return shm::kStatusOk;
      case shm::kOpCreateAh:
        if (r.key == 0 || r.key == 0xFFFFFFFF || (r.key >> 28) == 0xE) {
          return shm::kStatusInvalid;  // not a unicast address
        }
        // This daemon has no data port: it reaches only its own address.
        if (r.key == INADDR_LOOPBACK) return std::nullopt;
        return shm::kStatusNetDown;
      case shm::kOpDestroyAh:
        return shm::kStatusInvalid;  // so no handle was ever given
      case shm::kOpCreateSrq:
      case shm::kOpDestroySrq:
        return std::nullopt;  // valid or not by the domains and queues made
      case shm::kOpAllocPd:
      case shm::kOpDeallocPd:
      case shm::kOpCreateQp:
      case shm::kOpAllocMw:
      case shm::kOpDeallocMw:
        return std::nullopt;  // valid or not by the domains handed out
      case shm::kOpCmBind:
        if (r.cm.port_space != 0x0106 && r.cm.port_space != 0x0111 &&
            r.cm.port_space != 0x013F) {
          return shm::kStatusInvalid;
        }
        return std::nullopt;  // free port or not, limits
      case shm::kOpCmListen:
      case shm::kOpCmResolve:
      case shm::kOpCmConnect:
      case shm::kOpCmAccept:
      case shm::kOpCmReject:
      case shm::kOpCmDisconnect:
      case shm::kOpCmDestroy:
      case shm::kOpCmNotify:
        // Valid or not by the ids handed out and their states; private
        // data longer than its field is refused whatever the id.
        if (r.cm.private_data_len > sizeof(r.cm.private_data)) {
          return shm::kStatusInvalid;
        }
        return std::nullopt;
      case shm::kOpModifyQp:
        // Only a queue pair of this session moves, and this test never
        // has one unless it created it.
        if (!slot_open) return shm::kStatusInvalid;
        return std::nullopt;
      default:
        return shm::kStatusInvalid;
    }
  };

  constexpr int kRequests = 10000;
  int sent = 0, unknown_ops = 0, ok = 0, mismatches = 0;
  std::map<int32_t, int> statuses;
  while (sent < kRequests) {
    const int batch = static_cast<int>(
        std::min<uint64_t>(1 + rng.below(32), kRequests - sent));
    // Expectations are computed against the state before the batch; a
    // request whose validity depends on an earlier one in the same batch
    // (a slot, a key) is judged leniently below.
    std::vector<std::pair<uint64_t, ControlRequest>> pushed;
    std::vector<std::optional<int32_t>> want;
    for (int i = 0; i < batch; ++i) {
      ControlRequest r = random_request();
      want.push_back(expected(r));
      const uint64_t id = raw.Push(r);
      ASSERT_NE(id, 0u) << "control ring full";
      r.request_id = id;
      pushed.push_back({id, r});
    }
    raw.KickControl();
    for (int i = 0; i < batch; ++i) {
      const ControlRequest& r = pushed[i].second;
      ControlResponse resp;
      ASSERT_TRUE(WaitFor(
          [&] { return raw.responses().TryPop(&resp) == shm::PopResult::kOk; },
          kHangLimit))
          << "request " << sent + i << " (op " << r.op << ") got no answer";
      ASSERT_EQ(resp.request_id, pushed[i].first)
          << "answers out of order at request " << sent + i;
      ASSERT_NE(std::memchr(resp.message, '\0', sizeof(resp.message)), nullptr);
      ASSERT_GE(resp.status, shm::kStatusAgain);
      ASSERT_LE(resp.status, shm::kStatusOk);
      ++statuses[resp.status];
      if (r.op < shm::kOpRegisterLocal || r.op > shm::kOpCmNotify) {
        ++unknown_ops;
      }
      // Whether a slot or key is valid can depend on an earlier request of
      // the same batch (expectations are computed before it is sent); such
      // requests are not judged.
      const bool stateful =
          r.op == shm::kOpDisconnect || r.op == shm::kOpRegisterRdma ||
          r.op == shm::kOpDeregisterRdma || r.op == shm::kOpDeregisterLocal ||
          r.op == shm::kOpModifyQp;
      bool depends_on_batch = false;
      for (int j = 0; j < i; ++j) {
        const uint32_t op = pushed[j].second.op;
        depends_on_batch |=
            op == shm::kOpConnect || op == shm::kOpAccept ||
            op == shm::kOpDisconnect || op == shm::kOpRegisterLocal ||
            op == shm::kOpRegisterRdma || op == shm::kOpUnlisten ||
            op == shm::kOpCreateQp;
      }
      if (want[i] && !(stateful && depends_on_batch)) {
        if (*want[i] == kAnyError) {
          EXPECT_NE(resp.status, shm::kStatusOk)
              << "request " << sent + i << " op " << r.op;
        } else if (resp.status != *want[i]) {
          ++mismatches;
          EXPECT_EQ(resp.status, *want[i])
              << "request " << sent + i << " op " << r.op << " connection "
              << r.connection << ": " << resp.message;
        }
      }
      // Learn what the daemon handed out.
      if (resp.status == shm::kStatusOk) {
        ++ok;
        switch (r.op) {
          case shm::kOpRegisterLocal:
            own_keys.push_back(resp.key);
            break;
          case shm::kOpRegisterRdma:
            ASSERT_EQ(resp.descriptor_length, shm::kDescriptorBytes);
            own_descriptors.emplace_back(
                resp.descriptor, resp.descriptor + sizeof(resp.descriptor));
            break;
          case shm::kOpConnect:
          case shm::kOpAccept:
          case shm::kOpCreateQp:
            ASSERT_LT(resp.connection, shm::kMaxConnections);
            open_slots.insert(resp.connection);
            break;
          case shm::kOpDisconnect:
            open_slots.erase(r.connection);
            break;
          default:
            break;
        }
      }
    }
    sent += batch;
    if (mismatches > 20) break;  // enough said
  }
  EXPECT_EQ(sent, kRequests);
  EXPECT_GT(ok, 100) << "the fuzz rarely hit a valid request";
  EXPECT_EQ(Snap().bad_requests - before_.bad_requests,
            static_cast<uint64_t>(unknown_ops));
  std::string histogram;
  for (const auto& [status, n] : statuses) {
    histogram +=
        std::string(rdp_status_name(status)) + "=" + std::to_string(n) + " ";
  }
  std::printf("fuzzed control requests: %d, statuses: %s\n", sent,
              histogram.c_str());

  // The session still serves a valid request.
  const auto key = raw.RegisterLocal(arena->base, 4096, shm::kAccessRead);
  ASSERT_TRUE(key.has_value());
  ControlRequest dereg = RawClient::Request(shm::kOpDeregisterLocal);
  dereg.key = *key;
  EXPECT_EQ(raw.Status(dereg), shm::kStatusOk);
  EXPECT_EQ(raw.Status(RawClient::Request(shm::kOpListen, "fz-final")),
            shm::kStatusOk);

  raw.Close();
  ExpectServing("after the fuzzed control requests");
  ExpectBaseline();
  // The good server still owns "target".
  std::unique_ptr<Client> probe = NewClient();
  ASSERT_NE(probe, nullptr);
  auto pc = probe->Connect("target");
  ASSERT_TRUE(pc.ok()) << pc.status();
  auto sc = good_->server().Accept("target", kHangLimit);
  ASSERT_TRUE(sc.ok()) << sc.status();
  EXPECT_TRUE(probe->Disconnect(*pc).ok());
  EXPECT_TRUE(good_->server().Disconnect(*sc).ok());
}

// --- 5. Fuzzed work requests -------------------------------------------------

// Random send entries on a real connection to the good server: random
// operations, flags, up to 255 SGEs, random and valid local keys and
// addresses, the connection's rkey, the good pair's and random ones. Each
// entry completes exactly once (a silent success may not complete), entries
// that cannot be valid complete with an error, the daemon survives, and the
// good pair keeps moving verified bytes throughout. A connection broken by
// a remote access error is replaced.
TEST_F(MaliciousTest, FuzzedSendEntriesCompleteAndHarmNobody) {
  const uint64_t seed = FuzzSeed();
  SCOPED_TRACE("RDP_FUZZ_SEED=" + std::to_string(seed));
  Rng rng(seed);
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  constexpr uint64_t kLocalBytes = 256u << 10;
  constexpr uint32_t kRemoteBytes = 64u << 10;
  RawClient::Arena* arena = raw.AddArena(1u << 20);
  ASSERT_NE(arena, nullptr);
  Client& server = good_->server();
  auto* sbuf = static_cast<uint8_t*>(server.Alloc(kRemoteBytes));
  ASSERT_NE(sbuf, nullptr);

  uint32_t slot = 0;
  rdp_conn sconn = 0;
  Desc desc;
  auto connect = [&]() -> bool {
    const auto s = raw.ConnectTo("target");
    if (!s) return false;
    auto a = server.Accept("target", kHangLimit);
    if (!a.ok()) return false;
    slot = *s;
    sconn = *a;
    desc = Desc();
    return server.RegisterRdmaMemory(sconn, sbuf, kRemoteBytes,
                                     RDP_MEM_READWRITE, desc.bytes,
                                     &desc.len) == RDP_OK;
  };

  struct Posted {
    bool silent = false;
    bool must_fail = false;
    int completions = 0;
    int32_t status = 0;
    // Ended by the connection's final status (shm::PublishFinal), not by a
    // completion entry.
    bool ended_by_close = false;
  };
  std::map<uint64_t, Posted> posted;
  // The wr_ids of the current connection, in the order they were pushed:
  // the daemon takes them in that order, so position k is its k-th request.
  std::vector<uint64_t> order;
  uint64_t unknown_completions = 0;
  uint64_t completions_reaped = 0;
  auto reap = [&] {
    CompletionEntry c;
    while (raw.completion(slot).TryPop(&c) == shm::PopResult::kOk) {
      ++completions_reaped;
      auto it = posted.find(c.wr_id);
      if (it == posted.end()) {
        ++unknown_completions;
        continue;
      }
      ++it->second.completions;
      it->second.status = c.status;
    }
  };
  auto outstanding = [&](uint64_t from_id) {
    int n = 0;
    for (auto it = posted.lower_bound(from_id); it != posted.end(); ++it) {
      n += !it->second.silent && it->second.completions == 0;
    }
    return n;
  };
  auto disconnect = [&]() {
    EXPECT_EQ(raw.Disconnect(slot), shm::kStatusOk);
    // The daemon is done with the connection before it answers: every
    // request either completed, or succeeded silently among the first
    // `retired`, or ends with the final status -- exactly one of these.
    const int32_t final_status =
        raw.header()->final_status[slot].load(std::memory_order_acquire);
    const uint32_t retired =
        raw.header()->retired[slot].load(std::memory_order_acquire);
    EXPECT_LT(final_status, 0) << "no final status after the disconnect";
    reap();
    ASSERT_LE(retired, order.size()) << "more retired than posted";
    for (size_t k = 0; k < order.size(); ++k) {
      Posted& p = posted[order[k]];
      SCOPED_TRACE("request " + std::to_string(k) + " of the connection");
      if (k < retired) {
        EXPECT_TRUE(p.completions == 1 || p.silent)
            << "retired without a completion";
      } else if (p.completions == 0) {
        p.ended_by_close = true;
        p.status = final_status;
      }
    }
    order.clear();
    // Nothing completes after the final status: not once the engine has
    // gone over every connection's work twice more (the good pair runs).
    const uint64_t reaped = completions_reaped;
    EXPECT_TRUE(EngineWentRound());
    reap();
    EXPECT_EQ(completions_reaped, reaped)
        << "completions came after the connection's final status";
    EXPECT_TRUE(server.Disconnect(sconn).ok());
  };

  good_->Start();
  ASSERT_TRUE(connect());
  constexpr int kEntries = 3000;
  uint64_t next_id = 1;
  int reconnects = 0;
  while (next_id <= kEntries) {
    if (raw.state(slot) != shm::kConnUp) {
      disconnect();
      ASSERT_TRUE(connect());
      ++reconnects;
    }
    // The local key, again: a successful read with local invalidate retires
    // it, and registering the same buffer again gives a live one.
    const auto lkey =
        raw.RegisterLocal(arena->base, kLocalBytes, shm::kAccessReadWrite);
    ASSERT_TRUE(lkey.has_value());
    const uint64_t batch_first = next_id;
    const int batch = static_cast<int>(1 + rng.below(32));
    for (int i = 0; i < batch && next_id <= kEntries; ++i) {
      SendEntry e{};
      e.wr_id = next_id++;
      const uint64_t op = rng.below(100);
      e.op = op < 42   ? shm::kSendWrite
             : op < 84 ? shm::kSendRead
             : op < 90 ? shm::kSendFlush
             : op < 94 ? 0
                       : static_cast<uint8_t>(rng.u32());
      e.flags =
          rng.percent(80)
              ? static_cast<uint32_t>(
                    rng.u32() & shm::kKnownSendFlags &
                    (rng.percent(80) ? ~shm::kFlagReadLocalInvalidate : ~0u))
              : rng.u32();
      e.num_sge = static_cast<uint8_t>(
          rng.percent(85) ? rng.below(shm::kMaxSge + 1) : rng.below(256));
      for (shm::SgeEntry& s : e.sge) {
        const uint64_t kind = rng.below(100);
        if (kind < 55) {
          const uint64_t off = rng.below(kLocalBytes);
          s.address = Addr(arena->base) + off;
          s.length = static_cast<uint32_t>(
              rng.below(std::min<uint64_t>(kLocalBytes - off + 1, 8192)));
          s.lkey = *lkey;
        } else if (kind < 70) {
          s.address = Addr(arena->base) + kLocalBytes - rng.below(64);
          s.length = static_cast<uint32_t>(64 + rng.below(4096));
          s.lkey = *lkey;
        } else if (kind < 80) {
          s.address = Addr(good_->target());
          s.length = 4096;
          s.lkey = rng.percent(50) ? good_->lsrc() : *lkey;
        } else {
          s.address = rng.u64();
          s.length = rng.u32();
          s.lkey = rng.u32();
        }
      }
      uint64_t total = 0;
      for (uint32_t i2 = 0; i2 < std::min<uint32_t>(e.num_sge, shm::kMaxSge);
           ++i2) {
        total += e.sge[i2].length;
      }
      const uint64_t remote = rng.below(100);
      if (remote < 65) {
        e.rkey = desc.d()->rkey;
        e.remote_address =
            desc.d()->address +
            rng.below(kRemoteBytes - std::min<uint64_t>(total, kRemoteBytes) +
                      1);
      } else if (remote < 80) {
        e.rkey = good_->desc().d()->rkey;
        e.remote_address = good_->desc().d()->address;
      } else {
        e.rkey = rng.u32();
        e.remote_address = rng.u64();
      }
      e.reserved0 = static_cast<uint16_t>(rng.u32());
      e.imm = rng.u32();  // ignored without kFlagImmediate (refused here)
      Posted p;
      p.silent = (e.flags & shm::kFlagSilentSuccess) != 0;
      p.must_fail = (e.op != shm::kSendWrite && e.op != shm::kSendRead) ||
                    e.num_sge > shm::kMaxSge ||
                    (e.flags & ~shm::kKnownSendFlags) != 0;
      posted[e.wr_id] = p;
      ASSERT_TRUE(raw.send(slot).TryPush(e)) << "send ring full";
      order.push_back(e.wr_id);
    }
    raw.KickEngine(slot);
    // The batch completes, unless the connection broke: then its leftovers
    // end with the connection's final status.
    const bool settled = WaitFor(
        [&] {
          reap();
          return outstanding(batch_first) == 0 ||
                 raw.state(slot) != shm::kConnUp;
        },
        kHangLimit);
    ASSERT_TRUE(settled) << outstanding(batch_first)
                         << " entries of a batch got no completion";
    ASSERT_EQ(good_->error(), "") << DaemonState();
  }
  disconnect();

  int failed = 0, succeeded = 0, silent_missing = 0, ended_by_close = 0;
  for (const auto& [id, p] : posted) {
    SCOPED_TRACE("wr_id " + std::to_string(id));
    ASSERT_LE(p.completions, 1) << "completed twice";
    if (p.ended_by_close) {
      ++ended_by_close;
      continue;
    }
    if (p.completions == 0) {
      ASSERT_TRUE(p.silent) << "never completed";
      ++silent_missing;
      continue;
    }
    if (p.status == shm::kStatusOk) {
      ++succeeded;
      EXPECT_FALSE(p.must_fail) << "an invalid entry succeeded";
    } else {
      ++failed;
    }
  }
  EXPECT_EQ(unknown_completions, 0u);
  std::printf(
      "fuzzed send entries: %d, failed %d, succeeded %d, silent %d, ended "
      "by a close %d, connections %d\n",
      kEntries, failed, succeeded, silent_missing, ended_by_close,
      reconnects + 1);

  // The good pair kept going: EngineWentRound at every disconnect (the
  // last one included) saw it complete two more verified rounds.
  good_->Stop();
  EXPECT_EQ(good_->error(), "") << DaemonState();
  EXPECT_TRUE(server.Free(sbuf).ok());
  raw.Close();
  ExpectServing("after the fuzzed send entries");
  ExpectBaseline();
}

// --- 6. Arenas ---------------------------------------------------------------

// Arena messages the daemon must refuse, each answered with an error while
// the session goes on: zero length, a length beyond the memfd, an unsealed
// memfd or one sealed only against growing, a write-sealed memfd, no
// descriptor, a pipe, an address range that wraps. No refused memfd stays
// open or mapped in the daemon. An arena over addresses of an older one is
// taken, and holds them from then on: that is the client's own business
// (the verbs front end hands over pages mapped anew where moved ones were
// unmapped). A registration across adjacent arenas is mapped as one.
TEST_F(MaliciousTest, BadArenasAreRefused) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  constexpr uint64_t kArena = 1u << 20;
  RawClient::Arena* first = raw.AddArena(kArena);
  ASSERT_NE(first, nullptr);
  const uint64_t x = Addr(first->base);
  const Held with_one = WithRawSession(1);
  EXPECT_TRUE(CountersReach(with_one));

  struct Case {
    std::string name;
    uint64_t address;
    uint64_t length;
    uint64_t file_bytes;  // 0: no memfd
    int seals;
    bool pipe = false;
  };
  const std::vector<Case> cases = {
      {"zero length", x + 4 * kArena, 0, 4096, kSeals},
      {"length beyond the memfd", x + 4 * kArena, kArena, 64u << 10, kSeals},
      {"length 2^64-1", x + 4 * kArena, ~uint64_t{0}, 4096, kSeals},
      {"unsealed", x + 4 * kArena, 4096, 4096, 0},
      {"sealed against growing only", x + 4 * kArena, 4096, 4096, F_SEAL_GROW},
      {"write-sealed", x + 4 * kArena, 4096, 4096, kSeals | F_SEAL_WRITE},
      {"address range wraps", ~uint64_t{0} - 4095, 8192, 8192, kSeals},
      {"no descriptor", x + 4 * kArena, 4096, 0, kSeals},
      {"a pipe", x + 4 * kArena, 4096, 0, kSeals, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RawClient::Arena a;
    std::vector<int> fds;
    Pipe pipe;
    if (c.file_bytes > 0) {
      a = RawClient::MakeArena(c.file_bytes, c.seals, kRefusedMemfd);
      ASSERT_GE(a.fd, 0);
      fds.push_back(a.fd);
    }
    if (c.pipe) fds.push_back(pipe.w);
    const RawClient::Answer ans = raw.SendArena(c.address, c.length, fds);
    ASSERT_EQ(ans.got, RawClient::Got::kMessage);
    EXPECT_EQ(ans.type, shm::kSetupArenaReply);
    EXPECT_EQ(ans.status, shm::kStatusInvalid) << ans.text;
    RawClient::FreeArena(&a);
    pipe.CloseWriteEnd();
    EXPECT_TRUE(NoRawMemfdsLeft(kHangLimit, {kRefusedMemfd}));
    if (c.pipe) {
      EXPECT_TRUE(pipe.WritersGone());
    }
    EXPECT_EQ(Counters(), with_one);
    // The session goes on.
    EXPECT_EQ(raw.Status(RawClient::Request(shm::kOpListen, "arena-ok")),
              shm::kStatusOk);
  }

  // A second arena right after the first is fine, and so is a
  // registration that straddles the two; past the second, not.
  RawClient::Arena second = RawClient::MakeArena(kArena);
  ASSERT_NE(second.base, nullptr);
  RawClient::Answer ans = raw.SendArena(x + kArena, kArena, {second.fd});
  ASSERT_EQ(ans.got, RawClient::Got::kMessage);
  EXPECT_EQ(ans.status, shm::kStatusOk) << ans.text;
  EXPECT_TRUE(CountersReach(WithRawSession(2)));
  ControlRequest straddle = RawClient::Request(shm::kOpRegisterLocal);
  straddle.address = x + kArena - 4096;
  straddle.length = 8192;
  straddle.flags = shm::kAccessReadWrite;
  EXPECT_EQ(raw.Status(straddle), shm::kStatusOk);
  straddle.address = x + 2 * kArena - 4096;  // past the second
  EXPECT_EQ(raw.Status(straddle), shm::kStatusFault);
  // Arenas over the addresses of others, in every way they can lie there:
  // each is taken.
  const struct {
    const char* name;
    uint64_t address, length;
  } over[] = {{"same range", x, kArena},
              {"inside", x + 4096, 4096},
              {"straddling the start", x - 4096, 8192},
              {"straddling the two", x + kArena - 4096, 8192},
              {"enclosing", x - kArena, 4 * kArena}};
  uint32_t arenas = 2, registered = 1;  // the straddling one
  for (const auto& o : over) {
    SCOPED_TRACE(o.name);
    RawClient::Arena a = RawClient::MakeArena(o.length);
    ASSERT_NE(a.base, nullptr);
    ans = raw.SendArena(o.address, o.length, {a.fd});
    ASSERT_EQ(ans.got, RawClient::Got::kMessage);
    EXPECT_EQ(ans.status, shm::kStatusOk) << ans.text;
    straddle.address = o.address;
    straddle.length = o.length;
    EXPECT_EQ(raw.Status(straddle), shm::kStatusOk);
    Held want = WithRawSession(++arenas);
    want.registrations += ++registered;
    EXPECT_TRUE(CountersReach(want));
    RawClient::FreeArena(&a);
  }
  RawClient::FreeArena(&second);

  raw.Close();
  ExpectServing("after the bad arenas");
  ExpectBaseline();
}

// SysV segments named by id (kSetupSegment): the daemon attaches only a
// segment of the client's own user, of that size at most, not on
// hugepages; anything else is refused with a reason while the session goes
// on, and nothing stays attached in the daemon.
TEST_F(MaliciousTest, SegmentsOfOthersOrOfTheWrongSizeAreRefused) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  constexpr size_t kBytes = 1 << 20;
  const int own = shmget(IPC_PRIVATE, kBytes, IPC_CREAT | 0600);
  ASSERT_GE(own, 0);
  // Another user's: created as root, then given to nobody.
  const int other = shmget(IPC_PRIVATE, kBytes, IPC_CREAT | 0666);
  ASSERT_GE(other, 0);
  shmid_ds ds{};
  ASSERT_EQ(shmctl(other, IPC_STAT, &ds), 0);
  ds.shm_perm.uid = 65534;
  ASSERT_EQ(shmctl(other, IPC_SET, &ds), 0);
  const int no_owner_rw = shmget(IPC_PRIVATE, kBytes, IPC_CREAT | 0400);
  ASSERT_GE(no_owner_rw, 0);
  const uint64_t at = 0x7e0000000000ull;
  struct Case {
    const char* name;
    uint32_t id;
    uint64_t length;
    const char* reason;
  };
  const Case cases[] = {
      {"no such segment", 0x7FFFFFF0u, kBytes, "no such segment"},
      {"an id past INT32_MAX", 0xFFFFFFFFu, kBytes, "no such segment"},
      {"another user's", static_cast<uint32_t>(other), kBytes, "owns"},
      {"not writable by its owner", static_cast<uint32_t>(no_owner_rw),
       kBytes, "owns"},
      {"longer than the segment", static_cast<uint32_t>(own), kBytes + 4096,
       "size"},
      {"zero length", static_cast<uint32_t>(own), 0, "size"},
  };
  const Held with_session = WithRawSession(0);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RawClient::Answer ans = raw.SendSegment(c.id, at, c.length);
    ASSERT_EQ(ans.got, RawClient::Got::kMessage);
    EXPECT_EQ(ans.type, shm::kSetupArenaReply);
    EXPECT_EQ(ans.status, shm::kStatusInvalid) << ans.text;
    EXPECT_NE(ans.text.find(c.reason), std::string::npos) << ans.text;
    EXPECT_TRUE(CountersReach(with_session));
  }
  // Its own, whole: taken, and attached in the daemon until the session
  // ends.
  const RawClient::Answer ok =
      raw.SendSegment(static_cast<uint32_t>(own), at, kBytes);
  ASSERT_EQ(ok.got, RawClient::Got::kMessage);
  EXPECT_EQ(ok.status, shm::kStatusOk) << ok.text;
  EXPECT_TRUE(CountersReach(WithRawSession(1)));
  ASSERT_EQ(shmctl(own, IPC_STAT, &ds), 0);
  EXPECT_EQ(ds.shm_nattch, 1u) << "the daemon holds it";
  raw.Close();
  ExpectServing("after the segments");
  ExpectBaseline();
  ASSERT_EQ(shmctl(own, IPC_STAT, &ds), 0);
  EXPECT_EQ(ds.shm_nattch, 0u) << "still attached after the session ended";
  for (int id : {own, other, no_owner_rw}) shmctl(id, IPC_RMID, nullptr);
}

// Files mapped in place (kSetupFile): the daemon maps only a regular file
// on memory or a local disk, open for reading and writing, in whole pages
// it holds; anything else is refused with a reason while the session goes
// on. One it took is mapped until the session ends.
TEST_F(MaliciousTest, FilesNotOpenForWritingOrNotThatLongAreRefused) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  constexpr size_t kBytes = 1 << 20;
  const int file = memfd_create("malicious-file", MFD_CLOEXEC);
  ASSERT_GE(file, 0);
  ASSERT_EQ(ftruncate(file, kBytes), 0);
  const std::string self = "/proc/self/fd/" + std::to_string(file);
  const int read_only = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  const int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  const uint64_t at = 0x7e0000000000ull;
  struct Case {
    const char* name;
    int fd;
    uint64_t address, length;
    uint32_t page;
    const char* reason;
  };
  const Case cases[] = {
      {"no descriptor", -1, at, kBytes, 0, "regular file"},
      {"a pipe", pipe_fds[1], at, kBytes, 0, "regular file"},
      {"a directory", dir, at, kBytes, 0, "regular file"},
      {"open for reading only", read_only, at, kBytes, 0, "reading and writing"},
      {"zero length", file, at, 0, 0, "whole pages"},
      {"part of a page", file, at, 4095, 0, "whole pages"},
      {"at an address inside a page", file, at + 8, kBytes, 0, "whole pages"},
      {"longer than the file", file, at, kBytes + 4096, 0, "past the end"},
      {"from past its end", file, at, 4096, kBytes / 4096, "past the end"},
      {"from its last page, two pages", file, at, 8192, kBytes / 4096 - 1,
       "past the end"},
      {"wrapping the address space", file, ~0ull - 4095, 8192, 0,
       "whole pages"},
  };
  const Held with_session = WithRawSession(0);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RawClient::Answer ans =
        raw.SendFile(c.fd, c.address, c.length, c.page);
    ASSERT_EQ(ans.got, RawClient::Got::kMessage);
    EXPECT_EQ(ans.type, shm::kSetupArenaReply);
    EXPECT_EQ(ans.status, shm::kStatusInvalid) << ans.text;
    EXPECT_NE(ans.text.find(c.reason), std::string::npos) << ans.text;
    EXPECT_TRUE(CountersReach(with_session));
  }
  // Its last page, and the whole file: taken.
  for (const auto& [page, length] :
       {std::pair<uint32_t, uint64_t>{kBytes / 4096 - 1, 4096},
        std::pair<uint32_t, uint64_t>{0, kBytes}}) {
    const RawClient::Answer ok = raw.SendFile(file, at, length, page);
    ASSERT_EQ(ok.got, RawClient::Got::kMessage);
    EXPECT_EQ(ok.status, shm::kStatusOk) << ok.text;
  }
  EXPECT_TRUE(CountersReach(WithRawSession(2)));
  raw.Close();
  for (int fd : {file, read_only, dir, pipe_fds[0], pipe_fds[1]}) close(fd);
  ExpectServing("after the files");
  ExpectBaseline();
}

// Arena messages without a memfd, each answered, none of the answers read,
// until the daemon stops reading them or closes the socket. Returns how many
// went out.
int SendUnreadArenaMessages(RawClient& raw) {
  shm::SetupMessage m = RawClient::Msg(shm::kSetupArena);
  m.address = 1u << 30;
  m.length = 4096;
  int sent = 0;
  while (sent < 100000) {
    if (raw.Send(&m, sizeof(m), {}, MSG_DONTWAIT)) {
      ++sent;
      continue;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) break;  // closed
    // A working daemon reads on (or drops the session) at once; one that
    // stopped reading is given kHangLimit before the test goes on to show
    // that it holds others up.
    pollfd p{raw.sock(), POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(kHangLimit))) ==
        0) {
      break;
    }
  }
  return sent;
}

// --- Control thread and doorbells --------------------------------------------

// Half a setup message stalls nobody (fixed in d1c7902; the daemon used to
// read setup messages with a blocking recvmsg(MSG_WAITALL) bounded by a 1 s
// SO_RCVTIMEO, so three such sockets stalled every client for 3 s). Control
// requests of other sessions and new hellos are served at once, and a hello
// that arrives in pieces, its memfd with the first piece, is still accepted.
TEST_F(MaliciousTest, PartialSetupMessagesDoNotStallTheControlPlane) {
  std::vector<std::unique_ptr<RawClient>> partial;
  const size_t kFirst = 10;
  constexpr int kPartial = 3;
  for (int i = 0; i < kPartial; ++i) {
    auto r = std::make_unique<RawClient>(path());
    ASSERT_TRUE(r->Format());
    ASSERT_TRUE(r->ConnectSocket());
    const shm::SetupMessage m = RawClient::HelloMsg(r->region_bytes());
    ASSERT_TRUE(r->Send(&m, kFirst, {r->session_fd()}));
    partial.push_back(std::move(r));
  }
  // The daemon holds every first piece at once, each with its memfd (a
  // daemon that waited for the rest of one message would hold one at a
  // time, and drop it when it gave up).
  EXPECT_TRUE(WaitFor([&] {
    return testing::CountMemfdFds(kSessionMemfd) == 2 * kPartial;
  })) << testing::CountMemfdFds(kSessionMemfd)
      << " session memfds open";
  // While all of them stay partial, a control request of an existing session
  // is answered and a new session opens.
  EXPECT_TRUE(good_->server().Listen("prompt").ok());
  std::unique_ptr<Client> fresh = NewClient();
  EXPECT_NE(fresh, nullptr);
  // The rest of each hello.
  for (auto& r : partial) {
    const shm::SetupMessage m = RawClient::HelloMsg(r->region_bytes());
    ASSERT_TRUE(r->Send(reinterpret_cast<const uint8_t*>(&m) + kFirst,
                        sizeof(m) - kFirst));
    const RawClient::Answer a = r->ReadAnswer();
    ASSERT_EQ(a.got, RawClient::Got::kMessage);
    EXPECT_EQ(a.status, shm::kStatusOk) << a.text;
    EXPECT_EQ(r->Status(RawClient::Request(shm::kOpListen, "pieces")),
              partial.front() == r ? shm::kStatusOk : shm::kStatusInvalid);
  }
  partial.clear();
  fresh.reset();
  ExpectServing("after the partial messages");
  ExpectBaseline();
}

// A client that never reads its setup answers holds nobody up (fixed in
// 68203ea; Daemon::HandleArena used to answer with a blocking sendmsg, and
// ~280 unread answers left the control thread blocked for good). Arena
// messages without a memfd are refused, each with an answer, until the
// daemon stops reading them or drops the session; other clients open
// sessions meanwhile.
TEST_F(MaliciousTest, UnreadSetupAnswersDoNotBlockTheControlThread) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  const int sent = SendUnreadArenaMessages(raw);
  int unread = 0;
  ioctl(raw.sock(), FIONREAD, &unread);
  // A blocked control thread never answers the hello: the client gives up
  // after its control timeout (kHangLimit).
  std::unique_ptr<Client> fresh = NewClient();
  EXPECT_NE(fresh, nullptr)
      << "no session after " << sent << " arena messages, "
      << unread / static_cast<int>(sizeof(shm::SetupMessage))
      << " answers unread";
  if (fresh != nullptr) {
    EXPECT_TRUE(fresh->Listen("unblocked").ok());
  }
  raw.Close();
  fresh.reset();
  ExpectServing("after the unread answers");
  ExpectBaseline();
}

// Each session has doorbells of its own (fixed in d312ec2; every client used
// to receive the daemon's own control and engine eventfds, so one client
// could saturate them, making every other client's control calls fail with
// RDP_ERR_NET_DOWN, drain them, or clear O_NONBLOCK for the daemon and
// everyone). Clearing O_NONBLOCK on one client's doorbells leaves another's
// alone, and a client that floods its doorbells does not fail another
// client's control requests.
TEST_F(MaliciousTest, DoorbellsAreNotSharedBetweenClients) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  RawClient other(path());
  ASSERT_TRUE(other.Open());
  for (const auto& [mine, theirs] :
       {std::pair{raw.control_bell(), other.control_bell()},
        std::pair{raw.engine_bell(), other.engine_bell()}}) {
    const int flags = fcntl(theirs, F_GETFL);
    ASSERT_NE(flags & O_NONBLOCK, 0);
    ASSERT_EQ(fcntl(mine, F_SETFL, flags & ~O_NONBLOCK), 0);
    EXPECT_NE(fcntl(theirs, F_GETFL) & O_NONBLOCK, 0)
        << "one client made another client's doorbell blocking";
    fcntl(mine, F_SETFL, flags);
  }

  // The failures looked for are errors (RDP_ERR_NET_DOWN from a saturated
  // shared doorbell) or a control thread blocked for good on one made
  // blocking: the victim's control timeout (kHangLimit) only turns the
  // latter into a failure.
  std::unique_ptr<Client> victim = NewClient();
  ASSERT_NE(victim, nullptr);
  void* mem = victim->Alloc(4096);
  ASSERT_NE(mem, nullptr);
  std::atomic<bool> stop{false};
  std::thread flooder([&] {
    const uint64_t most = 0xFFFFFFFFFFFFFFFEull;
    while (!stop.load(std::memory_order_relaxed)) {
      for (int bell : {raw.control_bell(), raw.engine_bell()}) {
        [[maybe_unused]] ssize_t n =
            ::send(bell, &most, sizeof(most), MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      std::this_thread::yield();
    }
  });
  StopAndJoin join_flooder(stop, flooder);
  int failures = 0;
  std::string first;
  for (int i = 0; i < 20; ++i) {
    auto key = victim->RegisterMemory(mem, 4096, RDP_MEM_READWRITE);
    absl::Status s = key.ok() ? victim->DeregisterMemory(*key) : key.status();
    if (!s.ok() && failures++ == 0) first = s.ToString();
  }
  stop.store(true);
  flooder.join();
  EXPECT_EQ(failures, 0) << "of 20 register/deregister pairs of another "
                            "client; first: "
                         << first;
  victim.reset();
  raw.Close();
  other.Close();
  ExpectServing("after the flooded doorbells");
  ExpectBaseline();
}

// --- Daemon bugs -------------------------------------------------------------

// The engine serves DaemonOptions::max_connections connections at once;
// beyond that, Accept says "limit" instead of reporting a connection that
// would never be served. (One user makes them all here: its own allowance
// of connections is lifted.)
class CapacityTest : public MaliciousTest {
  void Configure(control::DaemonOptions* options) override {
    options->user_limits.connections = 0;
  }
};

TEST_F(CapacityTest, ConnectionsBeyondTheEngineCapacityAreRefusedNotIgnored) {
  std::vector<std::unique_ptr<Client>> hogs;
  int connections = 0;
  for (int i = 0; i < 64; ++i) {
    std::unique_ptr<Client> hog = NewClient();
    ASSERT_NE(hog, nullptr);
    const std::string svc = "hog-" + std::to_string(i);
    ASSERT_TRUE(hog->Listen(svc).ok());
    for (int j = 0; j < 8; ++j) {
      auto c = hog->Connect(svc);
      if (!c.ok()) break;
      auto a = hog->Accept(svc, kHangLimit);
      if (!a.ok()) break;
      ++connections;
    }
    hogs.push_back(std::move(hog));
  }
  EXPECT_GE(connections, 500);
  EXPECT_LT(connections, 512);  // the good pair holds one of the 512
  // A new pair: either refused, or served.
  std::unique_ptr<Client> server = NewClient();
  std::unique_ptr<Client> client = NewClient();
  ASSERT_TRUE(server != nullptr && client != nullptr);
  ASSERT_TRUE(server->Listen("late").ok());
  auto cc = client->Connect("late");
  auto sc = cc.ok() ? server->Accept("late", kHangLimit)
                    : absl::StatusOr<rdp_conn>(cc.status());
  if (cc.ok() && sc.ok()) {
    auto* target = static_cast<uint8_t*>(server->Alloc(4096));
    auto* src = static_cast<uint8_t*>(client->Alloc(4096));
    ASSERT_TRUE(target != nullptr && src != nullptr);
    Desc desc;
    ASSERT_EQ(server->RegisterRdmaMemory(*sc, target, 4096, RDP_MEM_WRITE,
                                         desc.bytes, &desc.len),
              RDP_OK);
    auto lkey = client->RegisterMemory(src, 4096, RDP_MEM_READ);
    ASSERT_TRUE(lkey.ok());
    std::memset(src, 0x77, 4096);
    rdp_sge sge{src, 4096, *lkey};
    static rdp_overlapped ov;  // may stay pending in the ring: keep it alive
    ov = rdp_overlapped{};
    int r = client->Write(*cc, &sge, 1, desc.bytes, desc.len, 0, 0, &ov);
    // Polled until it completes; the bound (kRoundLimit, "never starved")
    // only turns a connection that is never served into a failure.
    const absl::Time end = absl::Now() + kRoundLimit;
    while (r == RDP_PENDING && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(1));
      r = client->GetOverlappedResult(*cc, &ov, false, nullptr);
    }
    EXPECT_EQ(r, RDP_OK) << "a connection the daemon reported established "
                            "was never served ("
                         << rdp_status_name(r) << ")";
  }
  client.reset();
  server.reset();
  hogs.clear();
  ExpectServing("after the connection hogs");
  ExpectBaseline();
}

// One session may hold DaemonOptions::max_registrations_per_session
// distinct registrations, so it cannot take the whole table from the
// others.
// A queue pair's moves are the lifecycle table's (dataplane/rc/qp_state.h):
// the daemon refuses one the table lacks from the state it keeps, whatever
// the client claims, and ERR -> RESET makes the queue pair new under a new
// handle, the old one naming nothing.
TEST_F(MaliciousTest, QueuePairMovesOutsideTheLifecycleAreRefused) {
  std::unique_ptr<Client> client = NewClient();
  ASSERT_NE(client, nullptr);
  auto pd = client->AllocPd();
  ASSERT_TRUE(pd.ok()) << pd.status();
  // Only the services the daemon serves: RC (2), UC (3) and UD (4); the
  // raw and XRC types and garbage are refused, and take no slot.
  for (uint32_t service : {0u, 1u, 5u, 8u, 9u, 10u, 0xFFFFFFFFu}) {
    auto refused =
        client->CreateQueuePair(*pd, static_cast<shm::QpService>(service));
    EXPECT_EQ(RdpCode(refused.status()), RDP_ERR_INVALID) << service;
  }
  for (shm::QpService service : {shm::kQpServiceUc, shm::kQpServiceUd}) {
    auto other = client->CreateQueuePair(*pd, service);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_TRUE(client->Disconnect(other->conn).ok());
  }
  // Shared receive queues: made in a protection domain; a queue pair names
  // only one of this session's; destroyed once, and not while used.
  EXPECT_EQ(RdpCode(client->CreateSharedReceiveQueue(*pd + 1000).status()),
            RDP_ERR_INVALID);
  auto srq = client->CreateSharedReceiveQueue(*pd);
  ASSERT_TRUE(srq.ok()) << srq.status();
  auto on_srq = client->CreateQueuePair(*pd, shm::kQpServiceRc, *srq);
  ASSERT_TRUE(on_srq.ok()) << on_srq.status();
  EXPECT_EQ(RdpCode(client->DestroySharedReceiveQueue(*srq)), RDP_ERR_AGAIN);
  // A connection slot that is a queue pair is no shared receive queue.
  EXPECT_EQ(RdpCode(client->CreateQueuePair(*pd, shm::kQpServiceRc,
                                            on_srq->conn)
                        .status()),
            RDP_ERR_INVALID);
  EXPECT_TRUE(client->Disconnect(on_srq->conn).ok());
  EXPECT_TRUE(client->DestroySharedReceiveQueue(*srq).ok());
  EXPECT_EQ(RdpCode(client->DestroySharedReceiveQueue(*srq)), RDP_ERR_INVALID);
  // Address handles: without a data port, none to another address than
  // the daemon's own (127.0.0.1), and none to destroy that the session was
  // not given.
  EXPECT_EQ(RdpCode(client->CreateAddressHandle(0x0A000002).status()),
            RDP_ERR_NET_DOWN);
  EXPECT_EQ(RdpCode(client->CreateAddressHandle(0).status()),
            RDP_ERR_INVALID);
  auto own_ah = client->CreateAddressHandle(INADDR_LOOPBACK);
  ASSERT_TRUE(own_ah.ok()) << own_ah.status();
  EXPECT_TRUE(client->DestroyAddressHandle(*own_ah).ok());
  for (uint32_t ah : {0u, 1u, shm::kMaxAddressHandles, 0xFFFFFFFFu}) {
    EXPECT_EQ(RdpCode(client->DestroyAddressHandle(ah)), RDP_ERR_INVALID)
        << ah;
  }
  auto qp = client->CreateQueuePair(*pd);
  ASSERT_TRUE(qp.ok()) << qp.status();
  const shm::QpPeer none{};
  // RESET: neither RTS nor RTR (nor, without a data port, RTR at all).
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(qp->conn, shm::kQpToRts, none)),
            RDP_ERR_INVALID);
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(qp->conn, shm::kQpToRtr, none)),
            RDP_ERR_INVALID);
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(
                qp->conn, static_cast<shm::QpTransition>(99), none)),
            RDP_ERR_INVALID);
  ASSERT_TRUE(client->ModifyQueuePair(qp->conn, shm::kQpToInit, none).ok());
  // INIT: not RTS, and without a data port no RTR to a peer elsewhere.
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(qp->conn, shm::kQpToRts, none)),
            RDP_ERR_INVALID);
  shm::QpPeer elsewhere{};
  elsewhere.peer_ip = 0x0A000002;
  elsewhere.peer_qpn = 2;
  elsewhere.path_mtu = 1024;
  EXPECT_EQ(
      RdpCode(client->ModifyQueuePair(qp->conn, shm::kQpToRtr, elsewhere)),
      RDP_ERR_NET_DOWN);
  ASSERT_TRUE(client->ModifyQueuePair(qp->conn, shm::kQpToErr, none).ok());
  // ERR: only ERR and RESET.
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(qp->conn, shm::kQpToInit, none)),
            RDP_ERR_INVALID);
  EXPECT_TRUE(client->ModifyQueuePair(qp->conn, shm::kQpToErr, none).ok());
  auto fresh = client->ResetQueuePair(qp->conn);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(*fresh, qp->conn);
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(qp->conn, shm::kQpToInit, none)),
            RDP_ERR_NOT_CONNECTED)
      << "the handle from before the reset still names the queue pair";
  // RESET again: INIT is legal, RTS is not.
  EXPECT_EQ(RdpCode(client->ModifyQueuePair(*fresh, shm::kQpToRts, none)),
            RDP_ERR_INVALID);
  EXPECT_TRUE(client->ModifyQueuePair(*fresh, shm::kQpToInit, none).ok());
  EXPECT_TRUE(client->Disconnect(*fresh).ok());
}

TEST_F(MaliciousTest, OneSessionCannotExhaustTheRegistrationTable) {
  RawClient raw(path());
  ASSERT_TRUE(raw.Open());
  RawClient::Arena* arena = raw.AddArena(1u << 20);
  ASSERT_NE(arena, nullptr);
  // Distinct (address, length) pairs, so that none is a cached duplicate.
  uint64_t n = 0;
  bool full = false;
  while (!full && n < (1u << 17)) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 60; ++i, ++n) {
      ControlRequest r = RawClient::Request(shm::kOpRegisterLocal);
      r.address = Addr(arena->base) + (n % (1u << 19));
      r.length = 1 + n / (1u << 19);
      r.flags = shm::kAccessRead;
      ids.push_back(raw.Push(r));
    }
    raw.KickControl();
    for (uint64_t id : ids) {
      const auto resp = raw.Await(id);
      ASSERT_TRUE(resp.has_value());
      full |= resp->status == shm::kStatusNoBuffers;
    }
  }
  ASSERT_TRUE(full) << "the session's share never filled";
  std::unique_ptr<Client> victim = NewClient();
  ASSERT_NE(victim, nullptr);
  void* mem = victim->Alloc(4096);
  ASSERT_NE(mem, nullptr);
  auto key = victim->RegisterMemory(mem, 4096, RDP_MEM_READWRITE);
  EXPECT_TRUE(key.ok()) << "after one session registered " << n
                        << " buffers: " << key.status();
  victim.reset();
  raw.Close();
  ExpectServing("after the registration hog");
  ExpectBaseline();
}

}  // namespace
}  // namespace rdmaplane
