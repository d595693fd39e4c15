// Clients as real processes. The daemon runs in this test process; the
// victims are separate processes started with posix_spawn (this process has
// threads, so no fork), fed through pipes.
//
//  * A client killed with SIGKILL in the middle of a transfer is reclaimed:
//    its session, arenas and registrations go, the registrations its peer
//    made for the connection go, the peer sees the connection reset, and an
//    unrelated pair keeps moving verified bytes throughout. Three cycles, so
//    a leak of one object per cycle shows.
//  * Isolation between clients: keys, arenas and registrations of one client
//    are out of reach of another, including by guessing rkey tags.
//  * The daemon's uid policy refuses a process running as another user.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/status.h"
#include "control/daemon.h"
#include "tests/testing/child_process.h"
#include "tests/testing/counters.h"
#include "tests/testing/hostile_client.h"

extern char** environ;

namespace rdmaplane {
namespace {

using testing::CountersReach;
using testing::Held;
using testing::HeldOf;
using testing::kHangLimit;
using testing::Plus;
using testing::Settled;

// What a working daemon reaches in milliseconds; the bound only turns a
// hang into a failure (kHangLimit).
bool WaitFor(const std::function<bool()>& done,
             absl::Duration timeout = kHangLimit) {
  return testing::WaitFor(done, timeout);
}

// --- Daemon and clients ------------------------------------------------------

// Unix socket paths are limited to 108 bytes, which TEST_TMPDIR can exceed.
std::string SocketPath(const std::string& name) {
  return "/tmp/rdp-proc-" + name + "-" + std::to_string(getpid()) + ".sock";
}

struct Desc {
  alignas(8) uint8_t bytes[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t len = sizeof(bytes);
  shm::RdmaDescriptor* d() {
    return reinterpret_cast<shm::RdmaDescriptor*>(bytes);
  }
  const shm::RdmaDescriptor* d() const {
    return reinterpret_cast<const shm::RdmaDescriptor*>(bytes);
  }
  std::string Hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (uint8_t b : bytes) {
      s += kDigits[b >> 4];
      s += kDigits[b & 15];
    }
    return s;
  }
};

int WriteWait(Client& c, rdp_conn conn, void* src, uint32_t n, uint32_t lkey,
              const Desc& target, uint32_t offset) {
  rdp_sge sge{src, n, lkey};
  rdp_overlapped ov{};
  int r = c.Write(conn, &sge, 1, target.bytes, target.len, offset, 0, &ov);
  if (r != RDP_PENDING) return r;
  return c.GetOverlappedResult(conn, &ov, true, nullptr);
}

int ReadWait(Client& c, rdp_conn conn, void* dst, uint32_t n, uint32_t lkey,
             const Desc& token, uint64_t remote_offset) {
  rdp_sge sge{dst, n, lkey};
  rdp_overlapped ov{};
  int r = c.Read(conn, &sge, 1, token.d()->address + remote_offset, token.bytes,
                 token.len, 0, &ov);
  if (r != RDP_PENDING) return r;
  return c.GetOverlappedResult(conn, &ov, true, nullptr);
}

bool AllBytes(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != v) return false;
  }
  return true;
}

// --- Child processes ---------------------------------------------------------

std::string VictimPath() {
  return testing::RunfilePath("tests/hostile/victim_client");
}

using Child = testing::ChildProcess;

// --- Fixture -----------------------------------------------------------------

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // a dead victim's stdin must not kill us
    StartDaemon({});
  }

  void StartDaemon(control::DaemonOptions options) {
    options.socket_path = SocketPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    daemon_ = std::make_unique<control::Daemon>(options);
    const absl::Status s = daemon_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }

  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Stop();
  }

  std::unique_ptr<Client> NewClient(size_t arena_bytes = 16u << 20) {
    ClientOptions o;
    o.socket_path = daemon_->socket_path();
    o.arena_bytes = arena_bytes;
    auto c = Client::Open(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  control::DaemonSnapshot Snap() const { return daemon_->Snapshot(); }
  Held Counters() const { return HeldOf(Snap()); }

  Held Settled() const { return testing::Settled(*daemon_); }
  ::testing::AssertionResult CountersReach(
      const Held& want, absl::Duration timeout = kHangLimit) {
    return testing::CountersReach(*daemon_, want, timeout);
  }

  std::unique_ptr<control::Daemon> daemon_;
};

// --- SIGKILL mid-transfer ----------------------------------------------------

TEST_F(ProcessTest, SigkillMidTransferIsReclaimedAndOthersUnaffected) {
  constexpr uint32_t kTargetBytes = 16u << 20;
  constexpr uint32_t kBlock = 1u << 20;  // the victim's write size
  std::unique_ptr<Client> sink = NewClient(32u << 20);
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(sink->Listen("sink").ok());
  auto* target = static_cast<uint8_t*>(sink->Alloc(kTargetBytes));
  ASSERT_NE(target, nullptr);

  // An unrelated pair that writes and reads back verified data on its own
  // thread until stopped.
  testing::GoodPair bystander(NewClient(), NewClient());
  ASSERT_TRUE(bystander.Setup()) << bystander.error();
  ASSERT_TRUE(bystander.Round(0)) << bystander.error();  // before any victim
  bystander.Start();

  // What the sink and the bystanders hold; the victims must leave exactly
  // this behind.
  const Held steady = Settled();
  const control::DaemonSnapshot before = Snap();
  std::vector<Held> after_each;

  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    std::unique_ptr<Child> victim =
        Child::Spawn({VictimPath(), daemon_->socket_path(), "sink"});
    ASSERT_NE(victim, nullptr) << "cannot start " << VictimPath();
    ASSERT_EQ(victim->ReadLine().value_or("(nothing)"), "connected");
    auto conn = sink->Accept("sink", kHangLimit);
    ASSERT_TRUE(conn.ok()) << conn.status();
    std::memset(target, 0, kTargetBytes);
    Desc desc;
    ASSERT_EQ(sink->RegisterRdmaMemory(*conn, target, kTargetBytes,
                                       RDP_MEM_WRITE, desc.bytes, &desc.len),
              RDP_OK);
    ASSERT_TRUE(victim->WriteLine(desc.Hex()));
    const std::string ready = victim->ReadLine().value_or("(nothing)");
    ASSERT_EQ(ready.rfind("ready ", 0), 0u) << ready;
    const auto fill = static_cast<uint8_t>(std::atoi(ready.c_str() + 6));
    ASSERT_NE(fill, 0);

    // Mid-transfer: the victim's blocks have covered the whole buffer (it
    // writes round and round) ...
    ASSERT_TRUE(WaitFor([&] {
      return target[0] == fill && target[kBlock - 1] == fill &&
             target[kTargetBytes - 1] == fill;
    }));
    // ... and it is still writing: bytes cleared to 0, which it never
    // writes, come back as its fill.
    target[0] = 0;
    target[kTargetBytes - 1] = 0;
    ASSERT_TRUE(WaitFor([&] {
      return target[0] == fill && target[kTargetBytes - 1] == fill;
    })) << "the victim stopped writing before it was killed";
    // Victim: session, arena, its lkey; sink: the registration for it; and
    // the connection.
    EXPECT_TRUE(CountersReach(Plus(steady, 1, 2, 1, 1)));
    const uint64_t reclaimed_before = Snap().sessions_reclaimed;
    const uint64_t rounds_at_kill = bystander.rounds();

    const int status = victim->Kill();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the victim was not running when killed (wait status " << status
        << ")";

    // Reclaimed: everything of the victim, and the sink's registration for
    // the dead connection. The connection object stays until the sink,
    // which still holds its end, lets go.
    EXPECT_TRUE(CountersReach(Plus(steady, 0, 0, 1, 0)));
    EXPECT_EQ(Snap().sessions_reclaimed, reclaimed_before + 1);

    // The sink's end reports the reset, on every post.
    uint8_t* src = static_cast<uint8_t*>(sink->Alloc(64));
    auto lkey = sink->RegisterMemory(src, 64, RDP_MEM_READWRITE);
    ASSERT_TRUE(lkey.ok()) << lkey.status();
    rdp_sge sge{src, 64, *lkey};
    rdp_overlapped ov{};
    const int w = sink->Write(*conn, &sge, 1, desc.bytes, desc.len, 0, 0, &ov);
    EXPECT_TRUE(w == RDP_ERR_CONN_RESET || w == RDP_ERR_NOT_CONNECTED)
        << rdp_status_name(w);
    const int r = sink->Read(*conn, &sge, 1, desc.d()->address, desc.bytes,
                             desc.len, 0, &ov);
    EXPECT_TRUE(r == RDP_ERR_CONN_RESET || r == RDP_ERR_NOT_CONNECTED)
        << rdp_status_name(r);
    // Its registration went with the connection.
    EXPECT_EQ(sink->DeregisterRdmaMemory(*conn, desc.bytes, desc.len),
              RDP_ERR_INVALID);
    ASSERT_TRUE(sink->DeregisterMemory(*lkey).ok());
    ASSERT_TRUE(sink->Free(src).ok());

    // Nothing reaches the sink's buffer any more. It is cleared to 0, a
    // byte the victim never writes; the daemon has one engine, so once the
    // bystanders completed two more verified rounds through it, the engine
    // has gone over everything the victim left queued, and a late write of
    // it would show.
    std::memset(target, 0, kTargetBytes);
    const uint64_t rounds_at_clear = bystander.rounds();
    EXPECT_TRUE(WaitFor([&] { return bystander.rounds() >= rounds_at_clear + 2; },
                        2 * testing::kRoundLimit))
        << bystander.error();
    EXPECT_TRUE(AllBytes(target, kTargetBytes, 0))
        << "a write of the killed victim landed after it was reclaimed";

    EXPECT_TRUE(sink->Disconnect(*conn).ok());
    EXPECT_TRUE(CountersReach(steady));
    after_each.push_back(Counters());

    // The bystanders kept going through all of it.
    EXPECT_TRUE(WaitFor([&] {
      return bystander.rounds() > rounds_at_kill + 3;
    })) << bystander.error();
    EXPECT_EQ(bystander.error(), "");
  }

  bystander.Stop();
  EXPECT_EQ(bystander.error(), "");
  EXPECT_GT(bystander.rounds(), 0u);
  ASSERT_TRUE(bystander.Round(~0ull)) << bystander.error();  // and after
  for (const Held& h : after_each) EXPECT_EQ(h, steady);
  const control::DaemonSnapshot end = Snap();
  EXPECT_EQ(HeldOf(end), steady);
  EXPECT_EQ(end.sessions_reclaimed, before.sessions_reclaimed + 3);
  EXPECT_EQ(end.bad_requests, before.bad_requests);
  EXPECT_EQ(end.rejected_clients, before.rejected_clients);
}

// A victim killed before the sink accepted its connection is reclaimed as
// well; the sink then accepts a connection that is already reset, and
// letting go of it leaves nothing behind.
TEST_F(ProcessTest, SigkillBeforeAcceptIsReclaimed) {
  std::unique_ptr<Client> sink = NewClient();
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(sink->Listen("sink").ok());
  void* mem = sink->Alloc(4096);
  ASSERT_NE(mem, nullptr);
  const Held steady = Settled();

  std::unique_ptr<Child> victim =
      Child::Spawn({VictimPath(), daemon_->socket_path(), "sink"});
  ASSERT_NE(victim, nullptr);
  ASSERT_EQ(victim->ReadLine().value_or("(nothing)"), "connected");
  EXPECT_TRUE(CountersReach(Plus(steady, 1, 0, 1, 0)));
  const int status = victim->Kill();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // A connection nobody accepted yet goes with its connector: nothing is
  // left to accept and nothing is held.
  EXPECT_TRUE(CountersReach(steady));
  auto conn = sink->Accept("sink", absl::Milliseconds(50));
  EXPECT_EQ(RdpCode(conn.status()), RDP_ERR_TIMEOUT);
  (void)mem;
}

// --- Isolation ---------------------------------------------------------------

class IsolationTest : public ProcessTest {
 protected:
  static constexpr uint32_t kBytes = 64u << 10;

  void SetUp() override {
    ProcessTest::SetUp();
    a_ = NewClient();
    b_ = NewClient();
    c_ = NewClient();
    d_ = NewClient();
    ASSERT_TRUE(a_ && b_ && c_ && d_);
    // A and its peer C.
    ASSERT_TRUE(a_->Listen("a").ok());
    auto cc = c_->Connect("a");
    ASSERT_TRUE(cc.ok()) << cc.status();
    auto ac = a_->Accept("a", kHangLimit);
    ASSERT_TRUE(ac.ok()) << ac.status();
    a_conn_ = *ac;
    c_conn_ = *cc;
    a_buf_ = static_cast<uint8_t*>(a_->Alloc(kBytes));
    ASSERT_NE(a_buf_, nullptr);
    for (uint32_t i = 0; i < kBytes; ++i)
      a_buf_[i] = static_cast<uint8_t>(i * 7 + 3);
    a_expected_.assign(a_buf_, a_buf_ + kBytes);
    auto lk = a_->RegisterMemory(a_buf_, kBytes, RDP_MEM_READWRITE);
    ASSERT_TRUE(lk.ok()) << lk.status();
    a_lkey_ = *lk;
    ASSERT_EQ(a_->RegisterRdmaMemory(a_conn_, a_buf_, kBytes, RDP_MEM_READWRITE,
                                     a_desc_.bytes, &a_desc_.len),
              RDP_OK);
    c_buf_ = static_cast<uint8_t*>(c_->Alloc(kBytes));
    ASSERT_NE(c_buf_, nullptr);
    auto cl = c_->RegisterMemory(c_buf_, kBytes, RDP_MEM_READWRITE);
    ASSERT_TRUE(cl.ok());
    c_lkey_ = *cl;
    c_target_ = static_cast<uint8_t*>(c_->Alloc(kBytes));
    ASSERT_NE(c_target_, nullptr);
    ASSERT_EQ(
        c_->RegisterRdmaMemory(c_conn_, c_target_, kBytes, RDP_MEM_READWRITE,
                               c_desc_.bytes, &c_desc_.len),
        RDP_OK);
    // B and its own peer D.
    ASSERT_TRUE(d_->Listen("d").ok());
    b_src_ = static_cast<uint8_t*>(b_->Alloc(kBytes));
    b_dst_ = static_cast<uint8_t*>(b_->Alloc(kBytes));
    ASSERT_TRUE(b_src_ != nullptr && b_dst_ != nullptr);
    std::memset(b_src_, 0xB5, kBytes);
    auto ls = b_->RegisterMemory(b_src_, kBytes, RDP_MEM_READWRITE);
    auto ld = b_->RegisterMemory(b_dst_, kBytes, RDP_MEM_READWRITE);
    ASSERT_TRUE(ls.ok() && ld.ok());
    b_lsrc_ = *ls;
    b_ldst_ = *ld;
    d_buf_ = static_cast<uint8_t*>(d_->Alloc(kBytes));
    ASSERT_NE(d_buf_, nullptr);
    std::memset(d_buf_, 0xD0, kBytes);
    // C, the legitimate peer, can use A's buffer.
    ASSERT_TRUE(AUsableByC());
  }

  // A fresh B->D connection (the previous one, if any, is closed on both
  // ends). D registers its buffer on it when `d_desc` is given.
  void FreshBD(Desc* d_desc = nullptr) {
    if (b_conn_) {
      EXPECT_TRUE(b_->Disconnect(*b_conn_).ok());
      EXPECT_TRUE(d_->Disconnect(*d_conn_).ok());
    }
    auto bc = b_->Connect("d");
    ASSERT_TRUE(bc.ok()) << bc.status();
    auto dc = d_->Accept("d", kHangLimit);
    ASSERT_TRUE(dc.ok()) << dc.status();
    b_conn_ = *bc;
    d_conn_ = *dc;
    if (d_desc != nullptr) {
      *d_desc = Desc();
      ASSERT_EQ(
          d_->RegisterRdmaMemory(*d_conn_, d_buf_, kBytes, RDP_MEM_READWRITE,
                                 d_desc->bytes, &d_desc->len),
          RDP_OK);
    }
  }

  void CloseBD() {
    if (!b_conn_) return;
    EXPECT_TRUE(b_->Disconnect(*b_conn_).ok());
    EXPECT_TRUE(d_->Disconnect(*d_conn_).ok());
    b_conn_.reset();
    d_conn_.reset();
  }

  // A's buffer still holds its pattern, C can still read it through A's
  // descriptor, and A's local key still works as a write source.
  ::testing::AssertionResult AUsableByC() {
    if (std::memcmp(a_buf_, a_expected_.data(), kBytes) != 0) {
      return ::testing::AssertionFailure() << "A's memory changed";
    }
    std::memset(c_buf_, 0, kBytes);
    int r = ReadWait(*c_, c_conn_, c_buf_, kBytes, c_lkey_, a_desc_, 0);
    if (r != RDP_OK || std::memcmp(c_buf_, a_expected_.data(), kBytes) != 0) {
      return ::testing::AssertionFailure()
             << "C cannot read A's buffer: " << rdp_status_name(r);
    }
    std::memset(c_target_, 0, kBytes);
    r = WriteWait(*a_, a_conn_, a_buf_, kBytes, a_lkey_, c_desc_, 0);
    if (r != RDP_OK ||
        std::memcmp(c_target_, a_expected_.data(), kBytes) != 0) {
      return ::testing::AssertionFailure()
             << "A cannot write from its lkey: " << rdp_status_name(r);
    }
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<Client> a_, b_, c_, d_;
  rdp_conn a_conn_ = 0, c_conn_ = 0;
  std::optional<rdp_conn> b_conn_, d_conn_;
  uint8_t* a_buf_ = nullptr;
  std::vector<uint8_t> a_expected_;
  uint32_t a_lkey_ = 0;
  Desc a_desc_;
  uint8_t* c_buf_ = nullptr;
  uint32_t c_lkey_ = 0;
  uint8_t* c_target_ = nullptr;
  Desc c_desc_;
  uint8_t* b_src_ = nullptr;
  uint8_t* b_dst_ = nullptr;
  uint32_t b_lsrc_ = 0, b_ldst_ = 0;
  uint8_t* d_buf_ = nullptr;
};

TEST_F(IsolationTest, CannotDeregisterAnotherClientsKeys) {
  FreshBD();
  EXPECT_EQ(RdpCode(b_->DeregisterMemory(a_lkey_)), RDP_ERR_INVALID);
  EXPECT_EQ(b_->DeregisterRdmaMemory(*b_conn_, a_desc_.bytes, a_desc_.len),
            RDP_ERR_INVALID);
  // Not even with A's own connection slot number.
  EXPECT_EQ(b_->DeregisterRdmaMemory(a_conn_, a_desc_.bytes, a_desc_.len),
            RDP_ERR_INVALID);
  EXPECT_TRUE(AUsableByC());
  // A itself still can.
  EXPECT_TRUE(a_->DeregisterMemory(a_lkey_).ok());
}

TEST_F(IsolationTest, CannotUseAnotherClientsLocalKey) {
  Desc d_desc;
  FreshBD(&d_desc);
  // A's lkey as the source of B's write, with A's address or B's own: nothing
  // of A reaches D.
  for (uint8_t* addr : {a_buf_, b_src_}) {
    EXPECT_EQ(WriteWait(*b_, *b_conn_, addr, 4096, a_lkey_, d_desc, 0),
              RDP_ERR_FAULT);
    EXPECT_TRUE(AllBytes(d_buf_, kBytes, 0xD0));
  }
  // A's lkey as the target of B's read: nothing of D lands in A.
  EXPECT_EQ(ReadWait(*b_, *b_conn_, a_buf_, 4096, a_lkey_, d_desc, 0),
            RDP_ERR_FAULT);
  // A's address under B's own key is outside what that key covers.
  EXPECT_EQ(ReadWait(*b_, *b_conn_, a_buf_, 4096, b_ldst_, d_desc, 0),
            RDP_ERR_FAULT);
  EXPECT_TRUE(AUsableByC());
  // Local key failures leave the connection usable.
  EXPECT_EQ(WriteWait(*b_, *b_conn_, b_src_, kBytes, b_lsrc_, d_desc, 0),
            RDP_OK);
  EXPECT_TRUE(AllBytes(d_buf_, kBytes, 0xB5));
  CloseBD();
}

TEST_F(IsolationTest, CannotRegisterInsideAnotherClientsArena) {
  FreshBD();
  const Held held = Settled();
  EXPECT_EQ(
      RdpCode(b_->RegisterMemory(a_buf_, 4096, RDP_MEM_READWRITE).status()),
      RDP_ERR_FAULT);
  EXPECT_EQ(
      RdpCode(
          b_->RegisterMemory(a_buf_ + kBytes - 1, 1, RDP_MEM_READ).status()),
      RDP_ERR_FAULT);
  Desc d;
  d.len = 1234;
  EXPECT_EQ(b_->RegisterRdmaMemory(*b_conn_, a_buf_, 4096, RDP_MEM_READWRITE,
                                   d.bytes, &d.len),
            RDP_ERR_FAULT);
  EXPECT_EQ(d.len, 1234u);
  // Straddling the end of B's own block into A's memory is refused too when
  // it leaves B's arena; B's arena is a different mapping from A's.
  EXPECT_EQ(
      RdpCode(b_->RegisterMemory(b_src_, 64u << 20, RDP_MEM_READ).status()),
      RDP_ERR_FAULT);
  EXPECT_EQ(Settled(), held);
  EXPECT_TRUE(AUsableByC());
  CloseBD();
}

// B presents A's rkey, every tag at its index and random keys, through its
// own peer D and through a connection of its own to A. Every attempt fails,
// breaks that connection and touches nothing.
TEST_F(IsolationTest, CannotUseOrGuessAnotherClientsRkeys) {
  const Held held = Settled();
  const control::DaemonSnapshot before = Snap();
  const uint32_t rkey = a_desc_.d()->rkey;
  std::vector<uint32_t> keys;
  for (uint32_t tag = 0; tag < 256; ++tag)
    keys.push_back((rkey & ~0xFFu) | tag);
  std::mt19937 rng(12345);
  for (int i = 0; i < 32; ++i) keys.push_back(static_cast<uint32_t>(rng()));
  // Indexes next to A's, where other live registrations sit.
  for (uint32_t delta : {1u, 2u, 3u}) {
    keys.push_back(rkey + (delta << 8));
    keys.push_back(rkey - (delta << 8));
  }
  ASSERT_NE(std::find(keys.begin(), keys.end(), rkey), keys.end());

  bool checked_broken = false;
  size_t attempts = 0;
  for (uint32_t key : keys) {
    SCOPED_TRACE(::testing::Message() << "key 0x" << std::hex << key);
    Desc forged = a_desc_;
    forged.d()->rkey = key;
    FreshBD();
    EXPECT_EQ(WriteWait(*b_, *b_conn_, b_src_, 4096, b_lsrc_, forged, 0),
              RDP_ERR_FAULT);
    if (!checked_broken) {
      // The violation broke B's connection (both ends of it).
      checked_broken = true;
      EXPECT_TRUE(
          WaitFor([&] { return b_->Flush(*b_conn_) == RDP_ERR_CONN_ABORTED; }));
      EXPECT_TRUE(
          WaitFor([&] { return d_->Flush(*d_conn_) == RDP_ERR_CONN_RESET; }));
    }
    std::memset(b_dst_, 0xBB, 4096);
    FreshBD();
    EXPECT_EQ(ReadWait(*b_, *b_conn_, b_dst_, 4096, b_ldst_, forged, 0),
              RDP_ERR_REMOTE_RESOURCES);
    EXPECT_TRUE(AllBytes(b_dst_, 4096, 0xBB));
    ASSERT_EQ(std::memcmp(a_buf_, a_expected_.data(), kBytes), 0);
    if (::testing::Test::HasFailure()) break;
    attempts += 2;
  }
  CloseBD();
  EXPECT_EQ(attempts, 2 * keys.size());

  // A's exact descriptor on a connection B makes to A itself: the
  // registration belongs to A's connection with C, not to this one.
  ASSERT_TRUE(a_->Listen("a2").ok());
  for (int op = 0; op < 2; ++op) {
    auto bc = b_->Connect("a2");
    ASSERT_TRUE(bc.ok()) << bc.status();
    auto ac = a_->Accept("a2", kHangLimit);
    ASSERT_TRUE(ac.ok()) << ac.status();
    if (op == 0) {
      EXPECT_EQ(WriteWait(*b_, *bc, b_src_, 4096, b_lsrc_, a_desc_, 0),
                RDP_ERR_FAULT);
    } else {
      std::memset(b_dst_, 0xBB, 4096);
      EXPECT_EQ(ReadWait(*b_, *bc, b_dst_, 4096, b_ldst_, a_desc_, 0),
                RDP_ERR_REMOTE_RESOURCES);
      EXPECT_TRUE(AllBytes(b_dst_, 4096, 0xBB));
    }
    EXPECT_TRUE(b_->Disconnect(*bc).ok());
    EXPECT_TRUE(a_->Disconnect(*ac).ok());
  }

  EXPECT_TRUE(AUsableByC());
  // Hundreds of broken connections left nothing behind.
  EXPECT_TRUE(CountersReach(held));
  EXPECT_EQ(Snap().bad_requests, before.bad_requests);
}

// Connecting to a service takes none of the listener's connection slots
// until it accepts, and the accept queue is bounded: B, by connecting to A's
// service many times, cannot leave A unable to open connections of its own.
TEST_F(IsolationTest, PeerCannotExhaustListenerSlots) {
  int connected = 0;
  for (int i = 0; i < 32; ++i) connected += b_->Connect("a").ok();
  EXPECT_GT(connected, 0);
  b_.reset();  // B goes away
  ASSERT_TRUE(d_->Listen("d2").ok());
  auto ad = a_->Connect("d2");
  EXPECT_TRUE(ad.ok()) << ad.status();
  EXPECT_TRUE(AUsableByC());
}

// --- Another user ------------------------------------------------------------

std::string FindSetpriv() {
  for (const char* p : {"/usr/bin/setpriv", "/bin/setpriv"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// A copy of the victim that the unprivileged user can execute (the runfiles
// tree usually sits under a private home folder). Removed on destruction.
class WorldExecutableCopy {
 public:
  WorldExecutableCopy() {
    char dir[] = "/tmp/rdp-victim-XXXXXX";
    if (mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    chmod(dir_.c_str(), 0755);
    const std::string path = dir_ + "/victim_client";
    const int in = open(VictimPath().c_str(), O_RDONLY | O_CLOEXEC);
    const int out = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
    bool ok = in >= 0 && out >= 0;
    char buf[1 << 16];
    ssize_t n;
    while (ok && (n = read(in, buf, sizeof(buf))) > 0) {
      ok = write(out, buf, static_cast<size_t>(n)) == n;
    }
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (ok && chmod(path.c_str(), 0755) == 0) path_ = path;
  }
  ~WorldExecutableCopy() {
    if (!dir_.empty()) {
      unlink((dir_ + "/victim_client").c_str());
      rmdir(dir_.c_str());
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

class OtherUserTest : public ProcessTest {
 protected:
  // What the victim prints when Client::Open fails with `status`.
  static std::string ErrorLine(int status) {
    return "error open " + std::to_string(status) + " " +
           rdp_status_name(status);
  }

  // Runs the victim as uid/gid 65534 (nobody); returns its first line
  // (empty when it printed nothing: setpriv itself failed).
  std::string RunAsNobody(const std::string& setpriv, const std::string& victim,
                          int* wait_status) {
    std::unique_ptr<Child> child =
        Child::Spawn({setpriv, "--reuid=65534", "--regid=65534",
                      "--clear-groups", victim, daemon_->socket_path(), "svc"});
    if (child == nullptr) return "(spawn failed)";
    std::string line = child->ReadLine().value_or("");
    child->CloseStdin();  // a connected victim gives up at end of stdin
    *wait_status = child->Wait();
    return line;
  }
};

TEST_F(OtherUserTest, ProcessOfAnotherUidIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as nobody";
  const std::string setpriv = FindSetpriv();
  if (setpriv.empty()) GTEST_SKIP() << "setpriv (util-linux) not installed";
  WorldExecutableCopy victim;
  ASSERT_FALSE(victim.path().empty()) << "cannot copy the victim to /tmp";

  std::unique_ptr<Client> server = NewClient();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Listen("svc").ok());
  const Held held = Settled();
  const uint64_t rejected_before = Snap().rejected_clients;

  // Every attempt is refused and leaves nothing in the daemon. (Which status
  // the client sees is checked by RefusedClientSeesPermission.)
  constexpr int kAttempts = 5;
  int attempts = 0, net_down = 0;
  for (; attempts < kAttempts; ++attempts) {
    int wait_status = 0;
    const std::string line = RunAsNobody(setpriv, victim.path(), &wait_status);
    if (line.empty() && attempts == 0) {
      GTEST_SKIP() << "setpriv could not run the victim as uid 65534 here "
                      "(wait status "
                   << wait_status << ")";
    }
    ASSERT_TRUE(line == ErrorLine(RDP_ERR_PERMISSION) ||
                line == ErrorLine(RDP_ERR_NET_DOWN))
        << "attempt " << attempts << ": " << line;
    ASSERT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 2)
        << wait_status;
    net_down += line == ErrorLine(RDP_ERR_NET_DOWN);
  }
  if (net_down > 0) {
    std::printf(
        "note: %d of %d refused clients saw RDP_ERR_NET_DOWN instead of "
        "RDP_ERR_PERMISSION (hello race in Client::Init)\n",
        net_down, attempts);
  }
  EXPECT_TRUE(WaitFor(
      [&] { return Snap().rejected_clients == rejected_before + attempts; }));
  EXPECT_EQ(Settled(), held);

  // The same binary as root, and as nobody once the policy allows uid 65534:
  // the refusal was the policy, not the environment.
  {
    std::unique_ptr<Child> root =
        Child::Spawn({victim.path(), daemon_->socket_path(), "svc"});
    ASSERT_NE(root, nullptr);
    EXPECT_EQ(root->ReadLine().value_or("(nothing)"), "connected");
    auto conn = server->Accept("svc", kHangLimit);
    ASSERT_TRUE(conn.ok()) << conn.status();
    root->CloseStdin();
    root->Wait();
    EXPECT_TRUE(server->Disconnect(*conn).ok());
  }
  EXPECT_TRUE(CountersReach(held));

  server.reset();
  daemon_->Stop();
  control::DaemonOptions allow;
  allow.allowed_uids = {65534};
  StartDaemon(allow);
  server = NewClient();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Listen("svc").ok());
  int wait_status = 0;
  EXPECT_EQ(RunAsNobody(setpriv, victim.path(), &wait_status), "connected");
  EXPECT_EQ(Snap().rejected_clients, 0u);
}

// A refused client always sees RDP_ERR_PERMISSION, even when the daemon's
// refusal arrives (and the socket closes) before its hello went out.
TEST_F(OtherUserTest, RefusedClientSeesPermission) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as nobody";
  const std::string setpriv = FindSetpriv();
  if (setpriv.empty()) GTEST_SKIP() << "setpriv (util-linux) not installed";
  WorldExecutableCopy victim;
  ASSERT_FALSE(victim.path().empty()) << "cannot copy the victim to /tmp";
  for (int attempt = 0; attempt < 20; ++attempt) {
    int wait_status = 0;
    EXPECT_EQ(RunAsNobody(setpriv, victim.path(), &wait_status),
              ErrorLine(RDP_ERR_PERMISSION))
        << "attempt " << attempt;
  }
}

// A client hands its memory only to a daemon it trusts: a socket that
// another user bound (anyone can bind in /tmp) is refused before any memfd
// is sent.
TEST_F(OtherUserTest, ClientRefusesASocketOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a server as nobody";
  const std::string setpriv = FindSetpriv();
  if (setpriv.empty()) GTEST_SKIP() << "setpriv (util-linux) not installed";
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no python3";
  const std::string path =
      "/tmp/rdp-impostor-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  const std::string script =
      "import socket,sys\n"
      "s=socket.socket(socket.AF_UNIX)\n"
      "s.bind(sys.argv[1]); s.listen(1)\n"
      "print('listening', flush=True)\n"
      "c,_=s.accept(); sys.stdin.read()\n";  // holds it until killed
  std::unique_ptr<Child> impostor =
      Child::Spawn({setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                    "/usr/bin/python3", "-c", script, path});
  ASSERT_NE(impostor, nullptr);
  ASSERT_EQ(impostor->ReadLine().value_or("(nothing)"), "listening");
  ClientOptions o;
  o.socket_path = path;
  o.control_timeout = absl::Seconds(1);
  auto c = Client::Open(o);
  EXPECT_EQ(RdpCode(c.status()), RDP_ERR_PERMISSION) << c.status();
  impostor->Kill();
  unlink(path.c_str());
}

}  // namespace
}  // namespace rdmaplane
