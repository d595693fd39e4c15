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

#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::engine {
namespace {

class ManualClock : public rc::Clock {
 public:
  uint64_t NowNs() const override { return now; }
  uint64_t now = 1'000'000'000;
};

struct AlignedDelete {
  void operator()(uint8_t* p) const {
    ::operator delete[](p, std::align_val_t(4096));
  }
};

// One client's session region: the header and, for slot 0, its rings.
struct Region {
  static constexpr size_t kSendBytes =
      shm::SpscRing<shm::SendEntry>::BytesFor(shm::kSendRingEntries);
  static constexpr size_t kCompletionBytes =
      shm::SpscRing<shm::CompletionEntry>::BytesFor(
          shm::kCompletionRingEntries);
  Region()
      : memory(static_cast<uint8_t*>(::operator new[](
            sizeof(shm::SessionHeader) + kSendBytes + kCompletionBytes,
            std::align_val_t(4096)))) {
    header = new (memory.get()) shm::SessionHeader{};
    send = *shm::SpscRing<shm::SendEntry>::Create(
        memory.get() + sizeof(shm::SessionHeader), kSendBytes,
        shm::kSendRingEntries);
    completion = *shm::SpscRing<shm::CompletionEntry>::Create(
        memory.get() + sizeof(shm::SessionHeader) + kSendBytes,
        kCompletionBytes, shm::kCompletionRingEntries);
    shm::ResetSlot(header, 0);
    // Held by a live thread (ours), as the client library does.
    Liveness(static_cast<uint32_t>(syscall(SYS_gettid)));
  }
  void Liveness(uint32_t word) {
    std::memcpy(header->liveness, &word, sizeof(word));
  }
  std::vector<shm::CompletionEntry> Completions() {
    std::vector<shm::CompletionEntry> out;
    shm::CompletionEntry c;
    while (completion.TryPop(&c) == shm::PopResult::kOk) out.push_back(c);
    return out;
  }
  int32_t final_status() const {
    return header->final_status[0].load(std::memory_order_acquire);
  }
  uint32_t retired() const {
    return header->retired[0].load(std::memory_order_acquire);
  }
  uint32_t state() const {
    return header->connection_state[0].load(std::memory_order_acquire);
  }
  std::unique_ptr<uint8_t[], AlignedDelete> memory;
  shm::SessionHeader* header;
  shm::SpscRing<shm::SendEntry> send;
  shm::SpscRing<shm::CompletionEntry> completion;
};

constexpr uint32_t kRequester = 1;  // session ids
constexpr uint32_t kResponder = 2;
constexpr uint32_t kRequesterScope = 10;
constexpr uint32_t kResponderScope = 11;
constexpr size_t kBytes = 4u << 20;
constexpr uint64_t kClientVa = 0x7f0000000000ull;

class EndpointTest : public ::testing::Test {
 protected:
  EndpointTest()
      : table_(64, 1), source_(kBytes, 0x5A), target_(kBytes, 0) {
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
  EXPECT_EQ(OutcomeOf(CloseReason::kPeerClosed).status,
            shm::kStatusConnReset);
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
      a_region_.memory.get() + sizeof(shm::SessionHeader) +
      Region::kSendBytes + shm::kRingConsumerOffset);
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
  EndpointInfo info = b_->info();
  info.owner_pidfd = pidfd;
  b_ = std::make_unique<Endpoint>(info, &table_, &clock_, fault::FaultSpec{});
  a_->Wire(b_.get());
  b_->Wire(a_.get());
  b_region_.Liveness(shm::kFutexOwnerDied | static_cast<uint32_t>(child));
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
  EndpointInfo info = b_->info();
  info.owner_pidfd = pidfd;
  b_ = std::make_unique<Endpoint>(info, &table_, &clock_, fault::FaultSpec{});
  a_->Wire(b_.get());
  b_->Wire(a_.get());
  b_region_.Liveness(shm::kFutexOwnerDied | 12345);
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

}  // namespace
}  // namespace rdmaplane::engine
