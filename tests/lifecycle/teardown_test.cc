// How requests end when their connection does: every overlapped result ends
// exactly once, whoever ends the connection and however -- rdp_close and
// rdp_disconnect with work in flight, the peer disconnecting first, the
// peer's process killed -- and the handle of an ended connection never names
// another. An in-process daemon; the peers that get killed are processes of
// their own (target_client).
#include <gtest/gtest.h>
#include <signal.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/status.h"
#include "tests/testing/child_process.h"
#include "tests/testing/hang_limit.h"
#include "tests/testing/hostile_client.h"
#include "tests/testing/test_util.h"

namespace rdmaplane {
namespace {

using testing::ChildProcess;
using testing::ConnectedPair;
using testing::GoodPair;
using testing::kHangLimit;
using testing::TestDaemon;

constexpr uint32_t kBig = 32u << 20;  // copied 1 MiB per engine turn
constexpr int kBigWrites = 16;

struct Desc {
  alignas(8) uint8_t bytes[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t len = sizeof(bytes);
};

bool ParseHexDescriptor(const std::string& line, Desc* d) {
  const std::string prefix = "descriptor ";
  if (line.rfind(prefix, 0) != 0 ||
      line.size() != prefix.size() + 2 * RDP_DESCRIPTOR_BYTES) {
    return false;
  }
  for (uint32_t i = 0; i < RDP_DESCRIPTOR_BYTES; ++i) {
    d->bytes[i] = static_cast<uint8_t>(
        std::stoi(line.substr(prefix.size() + 2 * i, 2), nullptr, 16));
  }
  d->len = RDP_DESCRIPTOR_BYTES;
  return true;
}

size_t CountByte(const uint8_t* p, size_t n, uint8_t v) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) count += p[i] == v;
  return count;
}

class TeardownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(daemon_.start_status.ok()) << daemon_.start_status;
  }

  std::unique_ptr<Client> NewClient(size_t arena_bytes = 64u << 20) {
    ClientOptions o;
    o.socket_path = daemon_.daemon->socket_path();
    o.arena_bytes = arena_bytes;
    auto c = Client::Open(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // A pair whose server offers `target_bytes` for writes and whose client
  // has a source of `source_bytes` filled with `fill`.
  struct Transfer {
    std::unique_ptr<Client> server, client;
    rdp_conn sconn = 0, cconn = 0;
    uint8_t* target = nullptr;
    uint8_t* source = nullptr;
    Desc desc;
    uint32_t lkey = 0;
  };
  Transfer MakeTransfer(const std::string& service, uint32_t bytes,
                        uint8_t fill) {
    Transfer t;
    t.server = NewClient();
    t.client = NewClient();
    EXPECT_TRUE(t.server != nullptr && t.client != nullptr);
    if (t.server == nullptr || t.client == nullptr) return t;
    EXPECT_TRUE(t.server->Listen(service).ok());
    auto c = t.client->Connect(service);
    EXPECT_TRUE(c.ok()) << c.status();
    auto s = t.server->Accept(service, kHangLimit);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!c.ok() || !s.ok()) return t;
    t.cconn = *c;
    t.sconn = *s;
    t.target = static_cast<uint8_t*>(t.server->Alloc(bytes));
    t.source = static_cast<uint8_t*>(t.client->Alloc(bytes));
    EXPECT_TRUE(t.target != nullptr && t.source != nullptr);
    if (t.target == nullptr || t.source == nullptr) return t;
    std::memset(t.target, 0, bytes);
    std::memset(t.source, fill, bytes);
    EXPECT_EQ(t.server->RegisterRdmaMemory(t.sconn, t.target, bytes,
                                           RDP_MEM_READWRITE, t.desc.bytes,
                                           &t.desc.len),
              RDP_OK);
    auto lkey = t.client->RegisterMemory(t.source, bytes, RDP_MEM_READWRITE);
    EXPECT_TRUE(lkey.ok());
    t.lkey = lkey.ok() ? *lkey : 0;
    return t;
  }

  // Posts kBigWrites writes of kBig bytes and waits until the first bytes
  // landed, so that the rest is in flight.
  void StartBigWrites(Transfer& t, std::array<rdp_overlapped, kBigWrites>& ov) {
    rdp_sge sge{t.source, kBig, t.lkey};
    for (rdp_overlapped& o : ov) {
      o = rdp_overlapped{};
      ASSERT_EQ(
          t.client->Write(t.cconn, &sge, 1, t.desc.bytes, t.desc.len, 0, 0, &o),
          RDP_PENDING);
    }
    // The deadline only turns a hang into a failure.
    const absl::Time end = absl::Now() + kHangLimit;
    while (__atomic_load_n(&t.target[0], __ATOMIC_RELAXED) == 0 &&
           absl::Now() < end) {
    }
    ASSERT_NE(t.target[0], 0) << "no byte ever landed";
  }

  // A pair of its own, set up before the transfer under test: its verified
  // rounds show that the daemon's one engine went round. Null if it could
  // not be set up.
  std::unique_ptr<GoodPair> NewBystander() {
    std::unique_ptr<Client> server = NewClient(4u << 20);
    std::unique_ptr<Client> client = NewClient(4u << 20);
    if (server == nullptr || client == nullptr) return nullptr;
    auto pair =
        std::make_unique<GoodPair>(std::move(server), std::move(client));
    if (!pair->Setup()) {
      ADD_FAILURE() << pair->error();
      return nullptr;
    }
    return pair;
  }

  // Nothing lands in `target` once the transfer ended: it is cleared to 0,
  // a byte the writer never writes; the daemon has one engine, so once the
  // bystander completed two verified rounds through it, the engine has gone
  // over everything the ended transfer left queued, and a late write would
  // show.
  static void ExpectNothingLands(GoodPair& bystander, uint8_t* target,
                                 size_t bytes, const char* after) {
    std::memset(target, 0, bytes);
    for (uint64_t round = 0; round < 2; ++round) {
      ASSERT_TRUE(bystander.Round(round)) << bystander.error();
    }
    EXPECT_EQ(CountByte(target, bytes, 0), bytes)
        << "bytes landed after " << after << " returned";
  }

  TestDaemon daemon_{"teardown"};
};

// "rdp_close: when it returns, every overlapped structure is final, and the
// daemon moves none of the session's bytes any more."
TEST_F(TeardownTest, CloseWithWorkInFlightEndsEveryRequestAndStopsTheBytes) {
  std::unique_ptr<GoodPair> bystander = NewBystander();
  ASSERT_NE(bystander, nullptr);
  Transfer t = MakeTransfer("close", kBig, 0xAB);
  ASSERT_NE(t.lkey, 0u);
  std::array<rdp_overlapped, kBigWrites> ov;
  StartBigWrites(t, ov);
  t.client.reset();  // rdp_close
  int aborted = 0;
  for (const rdp_overlapped& o : ov) {
    const int status = __atomic_load_n(&o.status, __ATOMIC_ACQUIRE);
    EXPECT_TRUE(status == RDP_OK || status == RDP_ERR_ABORTED)
        << rdp_status_name(status);
    aborted += status == RDP_ERR_ABORTED;
  }
  EXPECT_GT(aborted, 0) << "all " << kBigWrites << " writes of " << kBig
                        << " bytes finished before the close";
  ExpectNothingLands(*bystander, t.target, kBig, "rdp_close");
  // The server's end was reset.
  rdp_overlapped probe{};
  rdp_sge sge{t.target, 64, 0};
  EXPECT_EQ(
      t.server->Write(t.sconn, &sge, 1, t.desc.bytes, t.desc.len, 0, 0, &probe),
      RDP_ERR_CONN_RESET);
}

// "rdp_disconnect returns within a bounded time, and every outstanding
// request completes RDP_ERR_ABORTED"; the peer's outstanding work ends as
// reset.
TEST_F(TeardownTest, DisconnectWithWorkInFlightEndsEveryRequestOnBothEnds) {
  std::unique_ptr<GoodPair> bystander = NewBystander();
  ASSERT_NE(bystander, nullptr);
  Transfer t = MakeTransfer("disconnect", kBig, 0xCD);
  ASSERT_NE(t.lkey, 0u);
  // The server reads from the client's source meanwhile.
  Desc src_desc;
  ASSERT_EQ(t.client->RegisterRdmaMemory(t.cconn, t.source, kBig, RDP_MEM_READ,
                                         src_desc.bytes, &src_desc.len),
            RDP_OK);
  auto* sink = static_cast<uint8_t*>(t.server->Alloc(kBig));
  ASSERT_NE(sink, nullptr);
  auto sink_key = t.server->RegisterMemory(sink, kBig, RDP_MEM_WRITE);
  ASSERT_TRUE(sink_key.ok());
  std::array<rdp_overlapped, 4> reads{};
  rdp_sge rsge{sink, kBig, *sink_key};
  const auto* d = reinterpret_cast<const shm::RdmaDescriptor*>(src_desc.bytes);
  for (rdp_overlapped& o : reads) {
    ASSERT_EQ(t.server->Read(t.sconn, &rsge, 1, d->address, src_desc.bytes,
                             src_desc.len, 0, &o),
              RDP_PENDING);
  }
  std::array<rdp_overlapped, kBigWrites> ov;
  StartBigWrites(t, ov);
  EXPECT_EQ(RdpCode(t.client->Disconnect(t.cconn)), RDP_OK);
  int aborted = 0;
  for (const rdp_overlapped& o : ov) {
    const int status = __atomic_load_n(&o.status, __ATOMIC_ACQUIRE);
    EXPECT_TRUE(status == RDP_OK || status == RDP_ERR_ABORTED)
        << rdp_status_name(status);
    aborted += status == RDP_ERR_ABORTED;
  }
  EXPECT_GT(aborted, 0);
  ExpectNothingLands(*bystander, t.target, kBig, "rdp_disconnect");
  // The peer's reads end too: completed, or reset.
  for (rdp_overlapped& o : reads) {
    const int status =
        t.server->GetOverlappedResult(t.sconn, &o, true, nullptr);
    EXPECT_TRUE(status == RDP_OK || status == RDP_ERR_CONN_RESET)
        << rdp_status_name(status);
  }
  // The handle is gone for good.
  rdp_overlapped late{};
  rdp_sge sge{t.source, 64, t.lkey};
  EXPECT_EQ(
      t.client->Write(t.cconn, &sge, 1, t.desc.bytes, t.desc.len, 0, 0, &late),
      RDP_ERR_NOT_CONNECTED);
}

// The first reason wins: the peer disconnected first, so what was
// outstanding ends as reset, and our own disconnect changes nothing of it.
TEST_F(TeardownTest, ThePeersDisconnectFirstMakesOutstandingWorkReset) {
  Transfer t = MakeTransfer("first", kBig, 0x11);
  ASSERT_NE(t.lkey, 0u);
  std::array<rdp_overlapped, kBigWrites> ov;
  StartBigWrites(t, ov);
  ASSERT_TRUE(t.server->Disconnect(t.sconn).ok());
  std::vector<int> seen;
  int reset = 0;
  for (rdp_overlapped& o : ov) {
    const int status =
        t.client->GetOverlappedResult(t.cconn, &o, true, nullptr);
    EXPECT_TRUE(status == RDP_OK || status == RDP_ERR_CONN_RESET)
        << rdp_status_name(status);
    reset += status == RDP_ERR_CONN_RESET;
    seen.push_back(status);
  }
  EXPECT_GT(reset, 0);
  ASSERT_TRUE(t.client->Disconnect(t.cconn).ok());
  for (size_t i = 0; i < ov.size(); ++i) {
    EXPECT_EQ(ov[i].status, seen[i]) << "request " << i << " ended twice";
  }
}

// "A request posted after the peer's session is gone completes
// RDP_ERR_CONN_RESET, never OK" -- right after waitpid, every time.
TEST_F(TeardownTest, APostAfterThePeerWasKilledNeverSucceeds) {
  std::unique_ptr<Client> client = NewClient();
  ASSERT_NE(client, nullptr);
  auto* source = static_cast<uint8_t*>(client->Alloc(4096));
  ASSERT_NE(source, nullptr);
  std::memset(source, 0x5C, 4096);
  auto lkey = client->RegisterMemory(source, 4096, RDP_MEM_READ);
  ASSERT_TRUE(lkey.ok());
  rdp_sge sge{source, 4096, *lkey};
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string service = "killed-" + std::to_string(round);
    auto target = ChildProcess::Spawn(
        {testing::RunfilePath("tests/lifecycle/target_client"),
         daemon_.daemon->socket_path(), service, "65536"});
    ASSERT_NE(target, nullptr);
    ASSERT_EQ(target->ReadLine().value_or("(nothing)"), "listening");
    auto conn = client->Connect(service);
    ASSERT_TRUE(conn.ok()) << conn.status();
    Desc desc;
    ASSERT_TRUE(ParseHexDescriptor(target->ReadLine().value_or(""), &desc));
    rdp_overlapped ok{};
    ASSERT_EQ(client->Write(*conn, &sge, 1, desc.bytes, desc.len, 0, 0, &ok),
              RDP_PENDING);
    ASSERT_EQ(client->GetOverlappedResult(*conn, &ok, true, nullptr), RDP_OK);
    target->Kill();  // SIGKILL and waitpid
    rdp_overlapped late{};
    int status =
        client->Write(*conn, &sge, 1, desc.bytes, desc.len, 0, 0, &late);
    if (status == RDP_PENDING) {
      status = client->GetOverlappedResult(*conn, &late, true, nullptr);
    }
    EXPECT_EQ(status, RDP_ERR_CONN_RESET) << rdp_status_name(status);
    EXPECT_TRUE(client->Disconnect(*conn).ok());
  }
}

// Writes keep flowing while the peer is killed: whatever was posted after
// its death never succeeds, and every request ends.
TEST_F(TeardownTest, WritesInFlightWhenThePeerIsKilledAllEnd) {
  std::unique_ptr<Client> client = NewClient();
  ASSERT_NE(client, nullptr);
  constexpr uint32_t kBlock = 1u << 20;
  auto* source = static_cast<uint8_t*>(client->Alloc(kBlock));
  ASSERT_NE(source, nullptr);
  auto lkey = client->RegisterMemory(source, kBlock, RDP_MEM_READ);
  ASSERT_TRUE(lkey.ok());
  rdp_sge sge{source, kBlock, *lkey};
  auto target = ChildProcess::Spawn(
      {testing::RunfilePath("tests/lifecycle/target_client"),
       daemon_.daemon->socket_path(), "stream", std::to_string(16 * kBlock)});
  ASSERT_NE(target, nullptr);
  ASSERT_EQ(target->ReadLine().value_or("(nothing)"), "listening");
  auto conn = client->Connect("stream");
  ASSERT_TRUE(conn.ok()) << conn.status();
  Desc desc;
  ASSERT_TRUE(ParseHexDescriptor(target->ReadLine().value_or(""), &desc));
  constexpr int kDepth = 16;
  std::vector<rdp_overlapped> ov(4096);
  size_t posted = 0;
  size_t oldest = 0;  // first request not yet waited for
  // Posts one write; a full queue (RDP_ERR_NO_BUFFERS, the seed's
  // WSAENOBUFS) is backpressure, not an ending: wait for the oldest request
  // and post again.
  auto post = [&]() {
    for (;;) {
      rdp_overlapped& o = ov[posted];
      o = rdp_overlapped{};
      const int r =
          client->Write(*conn, &sge, 1, desc.bytes, desc.len,
                        static_cast<uint32_t>((posted % 16) * kBlock), 0, &o);
      if (r != RDP_ERR_NO_BUFFERS || oldest == posted) {
        ++posted;
        return r;
      }
      if (ov[oldest].status == RDP_PENDING) {
        client->GetOverlappedResult(*conn, &ov[oldest], true, nullptr);
      }
      ++oldest;
    }
  };
  for (int i = 0; i < kDepth; ++i) ASSERT_EQ(post(), RDP_PENDING);
  // Keep kDepth in flight for a while, then kill the peer mid-stream.
  for (size_t done = 0; done < 64; ++done) {
    ASSERT_EQ(client->GetOverlappedResult(*conn, &ov[done], true, nullptr),
              RDP_OK);
    ASSERT_EQ(post(), RDP_PENDING);
  }
  target->Kill();
  const size_t first_after = posted;
  // Post until the library refuses (the connection is known reset).
  int refused = RDP_PENDING;
  while (posted < ov.size() && (refused = post()) == RDP_PENDING) {
  }
  EXPECT_EQ(refused, RDP_ERR_CONN_RESET) << rdp_status_name(refused);
  for (size_t i = 0; i < posted; ++i) {
    const int status =
        ov[i].status == RDP_PENDING
            ? client->GetOverlappedResult(*conn, &ov[i], true, nullptr)
            : ov[i].status;
    if (i >= first_after) {
      EXPECT_NE(status, RDP_OK)
          << "request " << i << " posted after the kill succeeded";
    }
    EXPECT_TRUE(status == RDP_OK || status == RDP_ERR_CONN_RESET)
        << "request " << i << ": " << rdp_status_name(status);
  }
  EXPECT_TRUE(client->Disconnect(*conn).ok());
}

// "Make connection handles unambiguous": a handle of an ended connection
// never names the connection that reuses its slot.
TEST_F(TeardownTest, AStaleHandleNeverNamesTheNextConnection) {
  std::unique_ptr<Client> server = NewClient(4u << 20);
  std::unique_ptr<Client> client = NewClient(4u << 20);
  ASSERT_TRUE(server != nullptr && client != nullptr);
  ASSERT_TRUE(server->Listen("stale").ok());
  auto first = client->Connect("stale");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(server->Accept("stale", kHangLimit).ok());
  ASSERT_TRUE(client->Disconnect(*first).ok());
  auto second = client->Connect("stale");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(server->Accept("stale", kHangLimit).ok());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(*first & Client::kSlotMask, *second & Client::kSlotMask)
      << "expected the slot reused";
  EXPECT_NE(*first, 0u);
  rdp_overlapped ov{};
  rdp_overlapped* done[1];
  uint8_t desc[RDP_DESCRIPTOR_BYTES] = {};
  auto* buf = static_cast<uint8_t*>(client->Alloc(4096));
  uint32_t len = sizeof(desc);
  EXPECT_EQ(client->Poll(*first, done, 1), RDP_ERR_NOT_CONNECTED);
  EXPECT_EQ(client->GetOverlappedResult(*first, &ov, false, nullptr),
            RDP_ERR_NOT_CONNECTED);
  EXPECT_EQ(
      client->RegisterRdmaMemory(*first, buf, 4096, RDP_MEM_READ, desc, &len),
      RDP_ERR_NOT_CONNECTED);
  EXPECT_EQ(client->DeregisterRdmaMemory(*first, desc, sizeof(desc)),
            RDP_ERR_INVALID);
  EXPECT_EQ(RdpCode(client->Disconnect(*first)), RDP_ERR_NOT_CONNECTED);
  EXPECT_EQ(
      client->RegisterRdmaMemory(*second, buf, 4096, RDP_MEM_READ, desc, &len),
      RDP_OK);
}

// The thread that opened the session ended while the process lives: its
// liveness mutex is marked, the daemon confirms the process still runs,
// and the connection goes on; closing from another thread is safe.
TEST_F(TeardownTest, TheOpeningThreadMayEndBeforeTheSession) {
  std::unique_ptr<Client> server, client;
  std::thread opener([&] {
    server = NewClient(4u << 20);
    client = NewClient(4u << 20);
  });
  opener.join();
  ASSERT_TRUE(server != nullptr && client != nullptr);
  ASSERT_TRUE(server->Listen("orphan").ok());
  auto c = client->Connect("orphan");
  ASSERT_TRUE(c.ok());
  auto s = server->Accept("orphan", kHangLimit);
  ASSERT_TRUE(s.ok());
  auto* target = static_cast<uint8_t*>(server->Alloc(4096));
  auto* source = static_cast<uint8_t*>(client->Alloc(4096));
  std::memset(source, 0x42, 4096);
  Desc desc;
  ASSERT_EQ(server->RegisterRdmaMemory(*s, target, 4096, RDP_MEM_WRITE,
                                       desc.bytes, &desc.len),
            RDP_OK);
  auto lkey = client->RegisterMemory(source, 4096, RDP_MEM_READ);
  ASSERT_TRUE(lkey.ok());
  rdp_sge sge{source, 4096, *lkey};
  for (int i = 0; i < 3; ++i) {
    rdp_overlapped ov{};
    ASSERT_EQ(client->Write(*c, &sge, 1, desc.bytes, desc.len, 0, 0, &ov),
              RDP_PENDING);
    EXPECT_EQ(client->GetOverlappedResult(*c, &ov, true, nullptr), RDP_OK);
  }
  EXPECT_EQ(target[4095], 0x42);
  client.reset();
  server.reset();
}

// "A descriptor must match its registration in every field, or it is
// refused": a copy with any field changed releases nothing.
TEST_F(TeardownTest, AnAlteredDescriptorIsRefusedAndReleasesNothing) {
  ConnectedPair pair(daemon_, "altered");
  ASSERT_TRUE(pair.ok);
  auto* buf = static_cast<uint8_t*>(pair.server->Alloc(8192));
  Desc d;
  ASSERT_EQ(pair.server->RegisterRdmaMemory(pair.server_conn, buf, 8192,
                                            RDP_MEM_READWRITE, d.bytes, &d.len),
            RDP_OK);
  auto alter = [&](auto&& change) {
    shm::RdmaDescriptor copy;
    std::memcpy(&copy, d.bytes, sizeof(copy));
    change(copy);
    return pair.server->DeregisterRdmaMemory(pair.server_conn, &copy,
                                             sizeof(copy));
  };
  EXPECT_EQ(alter([](shm::RdmaDescriptor& c) { c.address += 64; }),
            RDP_ERR_INVALID);
  EXPECT_EQ(alter([](shm::RdmaDescriptor& c) { c.length -= 1; }),
            RDP_ERR_INVALID);
  EXPECT_EQ(alter([](shm::RdmaDescriptor& c) { c.length += 4096; }),
            RDP_ERR_INVALID);
  EXPECT_EQ(alter([](shm::RdmaDescriptor& c) { c.access = RDP_MEM_READ; }),
            RDP_ERR_INVALID);
  EXPECT_EQ(alter([](shm::RdmaDescriptor& c) { c.reserved = 1; }),
            RDP_ERR_INVALID);
  EXPECT_EQ(alter([](shm::RdmaDescriptor& c) { c.rkey ^= 1; }),
            RDP_ERR_INVALID);
  // The registration is still there: the peer can write into it, and the
  // true descriptor releases it, once.
  auto* src = static_cast<uint8_t*>(pair.client->Alloc(64));
  std::memset(src, 0x6E, 64);
  auto lkey = pair.client->RegisterMemory(src, 64, RDP_MEM_READ);
  ASSERT_TRUE(lkey.ok());
  rdp_sge sge{src, 64, *lkey};
  rdp_overlapped ov{};
  ASSERT_EQ(
      pair.client->Write(pair.client_conn, &sge, 1, d.bytes, d.len, 0, 0, &ov),
      RDP_PENDING);
  EXPECT_EQ(
      pair.client->GetOverlappedResult(pair.client_conn, &ov, true, nullptr),
      RDP_OK);
  EXPECT_EQ(buf[63], 0x6E);
  EXPECT_EQ(pair.server->DeregisterRdmaMemory(pair.server_conn, d.bytes, d.len),
            RDP_OK);
  EXPECT_EQ(pair.server->DeregisterRdmaMemory(pair.server_conn, d.bytes, d.len),
            RDP_ERR_INVALID);
}

}  // namespace
}  // namespace rdmaplane
