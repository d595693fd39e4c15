// The endpoint as the one owner of its requests: what it takes from the
// send ring ends exactly once -- a completion entry, a silent retirement, or
// the connection's final status -- whatever closes the connection first.
// Two endpoints of one engine, wired directly, over a session region in
// plain memory; no engine thread, no daemon.
#include "dataplane/engine/endpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/engine/testing/session_region.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::engine {
namespace {

using Region = SessionRegion;

constexpr uint32_t kRequester = 1;  // session ids
constexpr uint32_t kResponder = 2;
constexpr uint32_t kRequesterScope = 10;
constexpr uint32_t kResponderScope = 11;
constexpr size_t kBytes = 4u << 20;
constexpr uint64_t kClientVa = 0x7f0000000000ull;

class EndpointTest : public ::testing::Test {
 protected:
  EndpointTest() : table_(64, 1), source_(kBytes, 0x5A), target_(kBytes, 0) {
    a_ = Make(a_region_, kRequester, kRequesterScope, 2, 3);
    b_ = Make(b_region_, kResponder, kResponderScope, 3, 2);
    a_->Wire(b_.get());
    b_->Wire(a_.get());
    mr::Registration src;
    src.owner = kRequester;
    src.address = kClientVa;
    src.length = kBytes;
    src.host = source_.data();
    src.access = mr::kAccessLocal | mr::kAccessLocalWrite;
    lkey_ = *table_.Insert(src);
    mr::Registration dst;
    dst.owner = kResponder;
    dst.connection = kResponderScope;
    dst.address = kClientVa;
    dst.length = kBytes;
    dst.host = target_.data();
    dst.access = mr::kAccessRemoteWrite | mr::kAccessRemoteRead;
    rkey_ = *table_.Insert(dst);
  }

  std::unique_ptr<Endpoint> Make(Region& r, uint32_t session, uint32_t scope,
                                 uint32_t qpn, uint32_t peer_qpn) {
    EndpointInfo info;
    info.connection_id = scope;
    info.registration_scope = scope;
    info.session_id = session;
    info.header = r.header;
    info.slot = 0;
    info.send = r.send;
    info.completion = r.completion;
    info.qp.local_qpn = wire::Qpn(qpn);
    info.qp.remote_qpn = wire::Qpn(peer_qpn);
    info.qp.path.src_ip = info.qp.path.dst_ip = 0x7F000001;
    return std::make_unique<Endpoint>(info, &table_, &clock_,
                                      fault::FaultSpec{});
  }

  // Posts a write of `len` bytes at `offset`, as the client library would.
  void PostWrite(uint64_t id, uint32_t len, uint32_t offset = 0,
                 uint32_t flags = 0) {
    shm::SendEntry e{};
    e.wr_id = id;
    e.op = shm::kSendWrite;
    e.flags = flags;
    e.num_sge = 1;
    e.sge[0] = {kClientVa + offset, len, lkey_};
    e.remote_address = kClientVa + offset;
    e.rkey = rkey_;
    ASSERT_TRUE(a_region_.send.TryPush(e));
  }

  // b's client becomes the process behind `pidfd`, and its liveness mutex
  // says its owner thread (`tid`) died.
  void MarkResponderOwnerDied(int pidfd, uint32_t tid) {
    EndpointInfo info = b_->info();
    info.owner_pidfd = pidfd;
    b_ = std::make_unique<Endpoint>(info, &table_, &clock_,
                                    fault::FaultSpec{});
    a_->Wire(b_.get());
    b_->Wire(a_.get());
    b_region_.Liveness(shm::kFutexOwnerDied | tid);
  }

  ManualClock clock_;
  mr::RegistrationTable table_;
  std::vector<uint8_t> source_;
  std::vector<uint8_t> target_;
  Region a_region_, b_region_;
  std::unique_ptr<Endpoint> a_, b_;
  uint32_t lkey_ = 0, rkey_ = 0;
};

TEST_F(EndpointTest, CompletionsCarryTheRetiredCountAndSilentOnesRetire) {
  PostWrite(1, 64);
  PostWrite(2, 64, 64, shm::kFlagSilentSuccess);
  PostWrite(3, 64, 128);
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 2u) << "the silent success was reported";
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, shm::kStatusOk);
  EXPECT_EQ(done[0].retired, 1u);
  EXPECT_EQ(done[1].wr_id, 3u);
  EXPECT_EQ(done[1].retired, 3u) << "the silent request before it is done";
  EXPECT_EQ(a_region_.retired(), 3u);
  EXPECT_EQ(a_region_.final_status(), 0);
  EXPECT_EQ(target_[128], 0x5A);
}

TEST_F(EndpointTest, CloseEndsWhatWasTakenAndLeavesTheRingToTheFinalStatus) {
  PostWrite(1, 64);
  a_->Poll(32);
  ASSERT_EQ(a_region_.Completions().size(), 1u);
  PostWrite(2, 64);  // never taken
  b_->Close(CloseReason::kClosedByClient);
  a_->Close(CloseReason::kPeerClosed);
  EXPECT_EQ(a_region_.final_status(), shm::kStatusConnReset);
  EXPECT_EQ(a_region_.state(), shm::kConnReset);
  EXPECT_EQ(a_region_.retired(), 1u);
  EXPECT_EQ(b_region_.final_status(), shm::kStatusAborted);
  EXPECT_EQ(b_region_.state(), shm::kConnFree);
  // Nothing after the final status: the request in the ring stays there.
  a_->Poll(32);
  EXPECT_TRUE(a_region_.Completions().empty());
  EXPECT_EQ(a_region_.send.Size(), 1u);
}

TEST_F(EndpointTest, TheFirstCloseReasonWins) {
  a_->Close(CloseReason::kClientBroke);
  a_->Close(CloseReason::kPeerClosed);
  a_->Close(CloseReason::kClosedByClient);
  EXPECT_EQ(a_region_.final_status(), shm::kStatusConnAborted);
  EXPECT_EQ(a_region_.state(), shm::kConnAborted);
  EXPECT_EQ(a_->close_reason(), CloseReason::kClientBroke);
}

TEST_F(EndpointTest, EveryReasonHasItsStateAndStatus) {
  EXPECT_EQ(OutcomeOf(CloseReason::kClosedByClient).status,
            shm::kStatusAborted);
  EXPECT_EQ(OutcomeOf(CloseReason::kPeerClosed).status, shm::kStatusConnReset);
  EXPECT_EQ(OutcomeOf(CloseReason::kTransportError).status,
            shm::kStatusConnAborted);
  EXPECT_EQ(OutcomeOf(CloseReason::kClientBroke).status,
            shm::kStatusConnAborted);
  EXPECT_EQ(OutcomeOf(CloseReason::kDaemonStopping).state,
            shm::kConnDaemonGone);
}

TEST_F(EndpointTest, ALargeRequestIsCopiedInPiecesAndACloseStopsIt) {
  PostWrite(1, static_cast<uint32_t>(kBytes));
  a_->Poll(32);
  EXPECT_TRUE(a_region_.Completions().empty()) << "copied in one turn";
  EXPECT_EQ(target_[0], 0x5A);
  EXPECT_EQ(target_[kBytes - 1], 0) << "copied in one turn";
  EXPECT_EQ(a_region_.retired(), 0u);
  // Its keys are pinned while it runs.
  EXPECT_EQ(table_.Remove(rkey_), mr::RegistrationTable::RemoveResult::kInUse);
  a_->Close(CloseReason::kClosedByClient);
  b_->Close(CloseReason::kPeerClosed);
  EXPECT_EQ(a_region_.final_status(), shm::kStatusAborted);
  EXPECT_EQ(a_region_.retired(), 0u) << "the cut request is not retired";
  EXPECT_TRUE(a_region_.Completions().empty());
  // Released with the close.
  EXPECT_EQ(table_.Remove(rkey_), mr::RegistrationTable::RemoveResult::kOk);
  EXPECT_EQ(table_.Remove(lkey_), mr::RegistrationTable::RemoveResult::kOk);
}

// Within one daemon the engine makes the peer responder's checks itself;
// a refusal ends the request as a NAK "remote access error" would across
// daemons: the same status, the same detail, and the connection broken.
TEST_F(EndpointTest, ARefusedDirectRequestEndsAsARemoteAccessError) {
  shm::SendEntry e{};
  e.wr_id = 1;
  e.op = shm::kSendWrite;
  e.num_sge = 1;
  e.sge[0] = {kClientVa, 64, lkey_};
  e.remote_address = kClientVa + kBytes - 32;  // past the peer's region
  e.rkey = rkey_;
  ASSERT_TRUE(a_region_.send.TryPush(e));
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, shm::kStatusFault);
  EXPECT_EQ(done[0].detail, shm::kDetailRemoteAccess);
  EXPECT_EQ(a_region_.state(), shm::kConnAborted);
  EXPECT_EQ(b_region_.state(), shm::kConnReset);
  EXPECT_EQ(target_[kBytes - 1], 0) << "a refused write touched memory";
}

// Atomics inside one engine: the peer endpoint's checks, one atomic
// instruction on its client's word, the word as it was in the local SGE.
class DirectAtomicTest : public EndpointTest {
 protected:
  DirectAtomicTest() {
    mr::Registration atomic;
    atomic.owner = kResponder;
    atomic.connection = kResponderScope;
    atomic.address = kAtomicVa;
    atomic.length = 64;
    atomic.host = target_.data();
    atomic.access = mr::kAccessRemoteAtomic;
    atomic_key_ = *table_.Insert(atomic);
  }
  void PostAtomic(uint64_t id, uint8_t op, uint64_t remote_va, uint64_t compare,
                  uint64_t swap_add, uint32_t rkey, uint32_t local_offset = 0,
                  uint32_t len = 8) {
    shm::SendEntry e{};
    e.wr_id = id;
    e.op = op;
    e.num_sge = 1;
    e.sge[0] = {kClientVa + local_offset, len, lkey_};
    e.remote_address = remote_va;
    e.rkey = rkey;
    e.compare = compare;
    e.swap_add = swap_add;
    ASSERT_TRUE(a_region_.send.TryPush(e));
  }
  uint64_t Word(const std::vector<uint8_t>& v, size_t offset) const {
    uint64_t w;
    std::memcpy(&w, v.data() + offset, sizeof(w));
    return w;
  }
  static constexpr uint64_t kAtomicVa = 0x7f1000000000ull;
  uint32_t atomic_key_ = 0;
};

TEST_F(DirectAtomicTest, CompareSwapAndFetchAddRunOnThePeersWord) {
  const uint64_t start = 40;
  std::memcpy(target_.data() + 8, &start, sizeof(start));
  PostAtomic(1, shm::kSendCompareSwap, kAtomicVa + 8, 40, 50, atomic_key_, 0);
  PostAtomic(2, shm::kSendCompareSwap, kAtomicVa + 8, 40, 60, atomic_key_, 8);
  PostAtomic(3, shm::kSendFetchAdd, kAtomicVa + 8, 0, 7, atomic_key_, 16);
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 3u);
  const uint8_t ops[] = {shm::kSendCompareSwap, shm::kSendCompareSwap,
                         shm::kSendFetchAdd};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].status, shm::kStatusOk);
    EXPECT_EQ(done[i].op, ops[i]);
    EXPECT_EQ(done[i].byte_len, 8u);
  }
  EXPECT_EQ(Word(source_, 0), 40u);   // matched: swapped in 50
  EXPECT_EQ(Word(source_, 8), 50u);   // did not match: unchanged
  EXPECT_EQ(Word(source_, 16), 50u);  // then 7 added
  EXPECT_EQ(Word(target_, 8), 57u);
  EXPECT_EQ(table_.in_flight(atomic_key_), 0u);
  EXPECT_EQ(table_.in_flight(lkey_), 0u);
  EXPECT_EQ(a_region_.state(), shm::kConnUp);
}

TEST_F(DirectAtomicTest, AKeyWithoutAtomicAccessIsARemoteAccessError) {
  PostAtomic(1, shm::kSendFetchAdd, kClientVa, 0, 1, rkey_);
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, shm::kStatusRemoteResources);
  EXPECT_EQ(done[0].detail, shm::kDetailRemoteAccess);
  EXPECT_EQ(a_region_.state(), shm::kConnAborted);
  EXPECT_EQ(b_region_.state(), shm::kConnReset);
  EXPECT_EQ(Word(target_, 0), 0u);
}

TEST_F(DirectAtomicTest, AMisalignedAddressIsAnInvalidRequest) {
  PostAtomic(1, shm::kSendFetchAdd, kAtomicVa + 4, 0, 1, atomic_key_);
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, shm::kStatusConnAborted);
  EXPECT_EQ(done[0].detail, shm::kDetailRemoteInvalid);
  EXPECT_EQ(a_region_.state(), shm::kConnAborted);
  EXPECT_EQ(Word(target_, 0), 0u);
  EXPECT_EQ(Word(target_, 8), 0u);
  EXPECT_EQ(table_.in_flight(atomic_key_), 0u);
}

TEST_F(DirectAtomicTest, AnythingButOneEightByteBufferIsRefused) {
  PostAtomic(1, shm::kSendFetchAdd, kAtomicVa, 0, 1, atomic_key_, 0, 4);
  PostAtomic(2, shm::kSendCompareSwap, kAtomicVa, 0, 1, atomic_key_, 0, 16);
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, shm::kStatusInvalid);
  EXPECT_EQ(done[1].status, shm::kStatusInvalid);
  EXPECT_EQ(a_region_.state(), shm::kConnUp);
  EXPECT_EQ(Word(target_, 0), 0u);
}

TEST_F(EndpointTest, ALargeRequestCompletesAfterEnoughTurns) {
  PostWrite(1, static_cast<uint32_t>(kBytes));
  int turns = 0;
  std::vector<shm::CompletionEntry> done;
  while (done.empty() && turns < 100) {
    a_->Poll(32);
    ++turns;
    done = a_region_.Completions();
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].byte_len, kBytes);
  EXPECT_GT(turns, 1);
  EXPECT_EQ(target_[kBytes - 1], 0x5A);
}

TEST_F(EndpointTest, ABrokenCompletionRingAbortsTheConnection) {
  PostWrite(1, static_cast<uint32_t>(kBytes));  // spans several turns
  a_->Poll(32);
  ASSERT_EQ(a_region_.final_status(), 0);
  // The client moves its consumer index back a whole ring: the room the
  // endpoint kept for the request is gone.
  auto* consumer = reinterpret_cast<std::atomic<uint32_t>*>(
      a_region_.memory.get() + sizeof(shm::SessionHeader) + Region::kSendBytes +
      shm::kRingConsumerOffset);
  consumer->store(consumer->load() - shm::kCompletionRingEntries);
  for (int i = 0; i < 8 && a_region_.final_status() == 0; ++i) a_->Poll(32);
  EXPECT_EQ(a_region_.final_status(), shm::kStatusConnAborted);
  EXPECT_EQ(a_->close_reason(), CloseReason::kClientBroke);
  EXPECT_EQ(b_region_.final_status(), shm::kStatusConnReset);
  EXPECT_EQ(a_->stats().completions_lost, 1u);
}

// The client process exited: its mutex is marked and its pidfd readable.
TEST_F(EndpointTest, APeerWhoseProcessExitedIsNeverWrittenAgain) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  ASSERT_GE(pidfd, 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  // b's client is that process.
  MarkResponderOwnerDied(pidfd, static_cast<uint32_t>(child));
  PostWrite(1, 64);
  a_->Poll(32);
  EXPECT_EQ(target_[0], 0) << "written into a dead client's memory";
  EXPECT_TRUE(a_region_.Completions().empty());
  EXPECT_EQ(a_region_.final_status(), shm::kStatusConnReset);
  EXPECT_EQ(b_->close_reason(), CloseReason::kClosedByClient);
  close(pidfd);
}

// Only the thread that opened the session ended: after a bounded wait the
// client counts as alive, and requests go on.
TEST_F(EndpointTest, AMarkedMutexOfALiveProcessOnlyDelaysRequests) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  ASSERT_GE(pidfd, 0);
  MarkResponderOwnerDied(pidfd, 12345);
  PostWrite(1, 64);
  a_->Poll(32);
  EXPECT_EQ(target_[0], 0) << "written while the client may be dying";
  EXPECT_EQ(a_region_.final_status(), 0);
  clock_.now += 2 * 100'000'000;  // past the suspicion
  a_->Poll(32);
  a_->Poll(32);
  const auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, shm::kStatusOk);
  EXPECT_EQ(target_[0], 0x5A);
  close(pidfd);
}

// A client slower to exit than the wait (a large address space torn down,
// a sanitizer's shadow): its requests run once the wait is over, but the
// moment it is reaped nothing more runs for it.
TEST_F(EndpointTest, AClientSlowToExitIsStillSeenToExit) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(go[1]);
    char c;
    (void)!read(go[0], &c, 1);  // exits when the test closes its end
    _exit(0);
  }
  ASSERT_GT(child, 0);
  close(go[0]);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  ASSERT_GE(pidfd, 0);
  MarkResponderOwnerDied(pidfd, static_cast<uint32_t>(child));
  PostWrite(1, 64);
  a_->Poll(32);
  EXPECT_EQ(target_[0], 0) << "written while the client may be dying";
  clock_.now += 2 * 100'000'000;  // past the wait: the client still runs
  a_->Poll(32);
  a_->Poll(32);
  auto done = a_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, shm::kStatusOk);
  EXPECT_EQ(target_[0], 0x5A);
  // Now it exits and is reaped; a request posted after that never runs.
  close(go[1]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  PostWrite(2, 64, 64);
  a_->Poll(32);
  a_->Poll(32);
  EXPECT_EQ(target_[64], 0) << "written into a reaped client's memory";
  EXPECT_TRUE(a_region_.Completions().empty());
  EXPECT_EQ(a_region_.final_status(), shm::kStatusConnReset);
  EXPECT_EQ(b_->close_reason(), CloseReason::kClosedByClient);
  close(pidfd);
}

// --- An endpoint towards another daemon
// --------------------------------------- Its frames go through a port; it
// closes as for any transport error once its queue pair enters the error state,
// whatever put it there.

// Frames the endpoint sends, kept for inspection.
class CaptureSink : public rc::FrameSink {
 public:
  std::span<uint8_t> Reserve(size_t max_len) override {
    buf_.assign(max_len, 0);
    return buf_;
  }
  void Commit(size_t len) override {
    frames_.emplace_back(buf_.begin(), buf_.begin() + len);
    wire::ParsedPacket pkt;
    EXPECT_EQ(wire::ParseFrame(frames_.back(), &pkt), wire::ParseError::kOk);
    sent.push_back(pkt);
  }
  std::vector<wire::ParsedPacket> sent;  // payloads point into frames_

 private:
  std::vector<uint8_t> buf_;
  std::vector<std::vector<uint8_t>> frames_;
};

constexpr uint32_t kPortScope = 12;
constexpr uint32_t kPeerIp = 0x0A000002;
constexpr uint32_t kOurIp = 0x0A000001;
constexpr uint32_t kRecvPsn = 5000;

class PortEndpointTest : public EndpointTest {
 protected:
  PortEndpointTest() {
    EndpointInfo info;
    info.connection_id = kPortScope;
    info.registration_scope = kPortScope;
    info.session_id = kRequester;
    info.header = port_region_.header;
    info.slot = 0;
    info.send = port_region_.send;
    info.completion = port_region_.completion;
    info.qp.local_qpn = wire::Qpn(0x10);
    info.qp.remote_qpn = wire::Qpn(0x20);
    info.qp.send_psn = wire::Psn(1000);
    info.qp.recv_psn = wire::Psn(kRecvPsn);
    info.qp.path.src_ip = kOurIp;
    info.qp.path.dst_ip = kPeerIp;
    info.qp.pmtu = 256;
    port_ = std::make_unique<Endpoint>(info, &table_, &clock_,
                                       fault::FaultSpec{}, &sink_);
  }

  void Post(uint64_t id, uint8_t op, uint32_t len) {
    shm::SendEntry e{};
    e.wr_id = id;
    e.op = op;
    e.num_sge = 1;
    e.sge[0] = {kClientVa, len, lkey_};
    e.remote_address = 0x7F0000000000;
    e.rkey = 0x1234;
    ASSERT_TRUE(port_region_.send.TryPush(e));
  }

  // A frame from the peer to our QP.
  void Receive(wire::Opcode op, wire::Psn psn, uint32_t payload_len,
               uint16_t pkey = wire::kDefaultPkey) {
    wire::PacketHeaders h;
    h.path.src_ip = kPeerIp;
    h.path.dst_ip = kOurIp;
    h.bth.opcode = op;
    h.bth.pkey = pkey;
    h.bth.dest_qp = wire::Qpn(0x10);
    h.bth.psn = psn;
    h.bth.ack_req = true;
    h.reth = {0x7F0000000000, wire::Rkey(0x99), payload_len};
    std::vector<uint8_t> payload(payload_len, 0x42);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload_len));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    wire::ParsedPacket pkt;
    ASSERT_EQ(wire::ParseFrame(frame, &pkt), wire::ParseError::kOk);
    port_->HandleFrame(pkt);
  }

  // The connection ended as transport errors end it: the final status says
  // aborted, the control plane is told once, nothing more is taken. The
  // state says why (`reason`: a request our responder refused, or any
  // other transport error).
  void ExpectClosedAsTransportError(
      CloseReason reason = CloseReason::kTransportError) {
    EXPECT_EQ(port_->close_reason(), reason);
    EXPECT_EQ(port_region_.state(), OutcomeOf(reason).state);
    EXPECT_EQ(port_region_.final_status(), shm::kStatusConnAborted);
    EXPECT_TRUE(port_->TakeTransportError());
    EXPECT_FALSE(port_->TakeTransportError());
    const size_t sent = sink_.sent.size();
    Post(99, shm::kSendWrite, 8);
    port_->Poll(32);
    EXPECT_EQ(sink_.sent.size(), sent);
    EXPECT_TRUE(port_region_.Completions().empty());
  }

  Region port_region_;
  CaptureSink sink_;
  std::unique_ptr<Endpoint> port_;
};

// The peer sends an opcode rdmaplane does not serve: our responder answers
// NAK "invalid request", then the QP is in error and the endpoint closes;
// our WRITE, taken but not sent, ends with the final status.
TEST_F(PortEndpointTest, RefusedRequestClosesTheConnection) {
  Post(1, shm::kSendWrite, 100);
  Receive(static_cast<wire::Opcode>(0x15), wire::Psn(kRecvPsn), 16);
  port_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);  // the NAK, and not our WRITE
  EXPECT_EQ(sink_.sent[0].bth.opcode, wire::Opcode::kAcknowledge);
  EXPECT_EQ(sink_.sent[0].aeth.syndrome, wire::kAethNakInvalidRequest);
  EXPECT_EQ(sink_.sent[0].bth.psn, wire::Psn(kRecvPsn));
  EXPECT_EQ(sink_.sent[0].bth.dest_qp, wire::Qpn(0x20));
  EXPECT_EQ(port_->qp_error(), rc::WcStatus::kPeerInvalidRequest);
  EXPECT_TRUE(port_region_.Completions().empty());
  EXPECT_EQ(port_region_.retired(), 0u);
  EXPECT_EQ(OutcomeOf(CloseReason::kRequestRefused).state,
            shm::kConnRequestRefused);
  ExpectClosedAsTransportError(CloseReason::kRequestRefused);
}

// A WRITE to a key we never registered: NAK "remote access error", and the
// same close.
TEST_F(PortEndpointTest, RemoteAccessErrorClosesTheConnection) {
  Receive(wire::Opcode::kWriteOnly, wire::Psn(kRecvPsn), 16);
  port_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].aeth.syndrome, wire::kAethNakRemoteAccess);
  EXPECT_EQ(port_->qp_error(), rc::WcStatus::kPeerAccessError);
  EXPECT_EQ(OutcomeOf(CloseReason::kAccessRefused).state,
            shm::kConnAccessRefused);
  ExpectClosedAsTransportError(CloseReason::kAccessRefused);
}

// A read response out of order fails our READ on the frame, before the
// endpoint polls: a request the client posted meanwhile is not handed to
// the broken QP (it stays for the final status).
TEST_F(PortEndpointTest, BadResponseClosesTheConnection) {
  Post(1, shm::kSendRead, 600);
  port_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].bth.opcode, wire::Opcode::kReadRequest);
  Receive(wire::Opcode::kReadResponseMiddle, sink_.sent[0].bth.psn, 256);
  Post(2, shm::kSendWrite, 8);
  port_->Poll(32);
  EXPECT_EQ(port_->qp_error(), rc::WcStatus::kBadResponse);
  const auto done = port_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, shm::kStatusConnAborted);
  EXPECT_EQ(port_region_.send.Size(), 1u) << "the WRITE was taken";
  EXPECT_EQ(sink_.sent.size(), 1u);
  ExpectClosedAsTransportError();
}

// A silent WRITE sent and not yet acknowledged when the client closes: the
// QP flushes it, and it is not counted as retired (a silent request below
// the retired count is a success to the client); the final status ends it.
TEST_F(PortEndpointTest, ARequestFlushedAtCloseIsNotRetired) {
  shm::SendEntry e{};
  e.wr_id = 1;
  e.op = shm::kSendWrite;
  e.flags = shm::kFlagSilentSuccess;
  e.num_sge = 1;
  e.sge[0] = {kClientVa, 8, lkey_};
  e.remote_address = 0x7F0000000000;
  e.rkey = 0x1234;
  ASSERT_TRUE(port_region_.send.TryPush(e));
  port_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);  // on the wire, no ACK yet
  port_->Close(CloseReason::kClosedByClient);
  EXPECT_EQ(port_region_.retired(), 0u);
  EXPECT_EQ(port_region_.final_status(), shm::kStatusAborted);
  EXPECT_TRUE(port_region_.Completions().empty());
}

// Frames of another partition change nothing.
// A memory window request waits for every earlier request, then for the
// control plane; a close while it waits abandons it (the final status ends
// it, and the control plane can no longer claim it), but one the control
// plane carried out completes as it ended, close or not.
TEST_F(PortEndpointTest, AWindowRequestEndsOnceAsItEnded) {
  auto window_entry = [](uint64_t id) {
    shm::SendEntry e{};
    e.wr_id = id;
    e.op = shm::kSendBindMw;
    return e;
  };
  shm::SendEntry taken;
  uint32_t seq = 0;
  {
    // Answered, not yet seen by the engine when the connection closes.
    ASSERT_TRUE(port_region_.send.TryPush(window_entry(1)));
    port_->Poll(32);
    ASSERT_TRUE(port_->TakeLocalOp(&taken, &seq));
    EXPECT_EQ(taken.wr_id, 1u);
    port_->LocalOpPassedUp();
    EXPECT_FALSE(port_->TakeLocalOp(&taken, &seq));
    // What comes after it waits for it.
    Post(2, shm::kSendWrite, 8);
    port_->Poll(32);
    EXPECT_TRUE(sink_.sent.empty());
    EXPECT_FALSE(port_->HasWork());
    ASSERT_TRUE(port_->ClaimLocalOp(seq));
    port_->AnswerLocalOp(seq, shm::kStatusOk, shm::kDetailNone);
    port_->Close(CloseReason::kClosedByClient);
    const std::vector<shm::CompletionEntry> done = port_region_.Completions();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].wr_id, 1u);
    EXPECT_EQ(done[0].status, shm::kStatusOk);
    EXPECT_EQ(done[0].op, shm::kSendBindMw);
    EXPECT_EQ(port_region_.retired(), 1u);  // the WRITE ends by the close
  }
}

TEST_F(PortEndpointTest, AWindowRequestAbandonedAtCloseIsNotRetired) {
  shm::SendEntry e{};
  e.wr_id = 7;
  e.op = shm::kSendLocalInvalidate;
  ASSERT_TRUE(port_region_.send.TryPush(e));
  port_->Poll(32);
  shm::SendEntry taken;
  uint32_t seq = 0;
  ASSERT_TRUE(port_->TakeLocalOp(&taken, &seq));
  port_->Close(CloseReason::kClosedByClient);
  EXPECT_FALSE(port_->ClaimLocalOp(seq));  // too late: it ended
  EXPECT_TRUE(port_region_.Completions().empty());
  EXPECT_EQ(port_region_.retired(), 0u);
  EXPECT_EQ(port_region_.final_status(), shm::kStatusAborted);
}

TEST_F(PortEndpointTest, ARefusedWindowRequestBreaksTheConnection) {
  shm::SendEntry e{};
  e.wr_id = 8;
  e.op = shm::kSendBindMw;
  ASSERT_TRUE(port_region_.send.TryPush(e));
  Post(9, shm::kSendWrite, 8);
  port_->Poll(32);
  shm::SendEntry taken;
  uint32_t seq = 0;
  ASSERT_TRUE(port_->TakeLocalOp(&taken, &seq));
  ASSERT_TRUE(port_->ClaimLocalOp(seq));
  port_->AnswerLocalOp(seq, shm::kStatusInvalid, shm::kDetailMwBind);
  port_->Poll(32);
  const std::vector<shm::CompletionEntry> done = port_region_.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 8u);
  EXPECT_EQ(done[0].status, shm::kStatusInvalid);
  EXPECT_EQ(done[0].detail, shm::kDetailMwBind);
  EXPECT_TRUE(port_->closed());
  EXPECT_EQ(port_region_.retired(), 1u);  // the WRITE never ran
  EXPECT_TRUE(sink_.sent.empty());
  EXPECT_TRUE(port_->TakeTransportError());
}

// The control thread answers a window request while the engine closes the
// endpoint, many times over on two threads: the request ends exactly once,
// as the control plane carried it out (a completion) or abandoned (the
// final status, not retired), never both, never neither.
TEST_F(EndpointTest, AWindowRequestRacingACloseEndsOnce) {
  constexpr int kRounds = 300;
  int answered = 0, abandoned = 0;
  for (int round = 0; round < kRounds; ++round) {
    Region region;
    EndpointInfo info;
    info.connection_id = 40;
    info.registration_scope = 40;
    info.session_id = kRequester;
    info.header = region.header;
    info.send = region.send;
    info.completion = region.completion;
    info.qp.local_qpn = wire::Qpn(0x10);
    info.qp.remote_qpn = wire::Qpn(0x20);
    info.qp.path.src_ip = 0x0A000001;
    info.qp.path.dst_ip = 0x0A000002;
    CaptureSink sink;
    Endpoint e(info, &table_, &clock_, fault::FaultSpec{}, &sink);
    shm::SendEntry w{};
    w.wr_id = 5;
    w.op = shm::kSendBindMw;
    ASSERT_TRUE(region.send.TryPush(w));
    e.Poll(32);
    shm::SendEntry taken;
    uint32_t seq = 0;
    ASSERT_TRUE(e.TakeLocalOp(&taken, &seq));
    e.LocalOpPassedUp();
    std::atomic<bool> go{false};
    bool claimed = false;
    std::thread control([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      claimed = e.ClaimLocalOp(seq);
      if (claimed) e.AnswerLocalOp(seq, shm::kStatusOk, shm::kDetailNone);
    });
    go.store(true, std::memory_order_release);
    if (round % 2 == 0) e.Poll(32);  // may see the answer first
    e.Close(CloseReason::kClosedByClient);
    control.join();
    const std::vector<shm::CompletionEntry> done = region.Completions();
    if (claimed) {
      ++answered;
      ASSERT_EQ(done.size(), 1u) << "round " << round;
      EXPECT_EQ(done[0].status, shm::kStatusOk);
      EXPECT_EQ(region.retired(), 1u);
    } else {
      ++abandoned;
      EXPECT_TRUE(done.empty()) << "round " << round;
      EXPECT_EQ(region.retired(), 0u);
    }
  }
  EXPECT_EQ(answered + abandoned, kRounds);
}

TEST_F(PortEndpointTest, ForeignPartitionIsIgnored) {
  Receive(wire::Opcode::kSendOnly, wire::Psn(kRecvPsn), 16, 0x8001);
  port_->Poll(32);
  EXPECT_TRUE(sink_.sent.empty());
  EXPECT_EQ(port_->qp_stats().pkey_violations, 1u);
  EXPECT_EQ(port_region_.state(), shm::kConnUp);
  EXPECT_FALSE(port_->TakeTransportError());
}

}  // namespace
}  // namespace rdmaplane::engine
