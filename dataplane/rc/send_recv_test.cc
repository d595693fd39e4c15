// Two-sided SEND/RECV in the RC transport: receive requests, SENDs of every
// size placed in them, immediate data on SENDs and WRITEs, RNR NAKs and
// their retries, and receives too small for the message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

using testing::Fixture;
using testing::Pattern;
using testing::Send;

constexpr uint64_t kSecond = 1'000'000'000;

// A receive over two buffers of `half` bytes each.
WorkRequest Recv(uint64_t id, uint8_t* dst, uint32_t half) {
  WorkRequest wr;
  wr.wr_id = id;
  wr.num_sge = 2;
  wr.sge[0] = {dst, half};
  wr.sge[1] = {dst + half, half};
  return wr;
}

TEST(SendRecvTest, SendsOfEverySizeAroundMtuLandInTheReceives) {
  Fixture f;  // path MTU 256
  const uint32_t sizes[] = {0, 1, 255, 256, 257, 512, 513, 4096, 10000};
  constexpr uint32_t kHalf = 8192;
  std::vector<std::vector<uint8_t>> sources, targets;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    targets.emplace_back(2 * kHalf, 0xEE);
    ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(100 + i, targets.back().data(), kHalf)),
              PostResult::kOk);
  }
  EXPECT_EQ(f.pair.b.qp->recv_outstanding(), std::size(sizes));
  for (uint32_t len : sizes) {
    sources.push_back(Pattern(len, len + 3));
    ASSERT_EQ(f.pair.a.qp->Post(Send(len, sources.back().data(), len)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), std::size(sizes));
  ASSERT_EQ(f.pair.b.cq.receives.size(), std::size(sizes));
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const Completion& c = f.pair.a.cq.completions[i];
    EXPECT_EQ(c.wr_id, sizes[i]);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WrOpcode::kSend);
    const RecvCompletion& r = f.pair.b.cq.receives[i];
    EXPECT_EQ(r.wr_id, 100 + i);  // in posting order
    EXPECT_EQ(r.status, WcStatus::kSuccess);
    EXPECT_EQ(r.byte_len, sizes[i]);
    EXPECT_FALSE(r.with_imm);
    EXPECT_FALSE(r.write);
    EXPECT_TRUE(std::equal(sources[i].begin(), sources[i].end(),
                           targets[i].begin()));
    EXPECT_EQ(targets[i][sizes[i]], 0xEE) << "wrote past the message";
  }
  EXPECT_EQ(f.pair.b.qp->recv_outstanding(), 0u);
  EXPECT_EQ(f.pair.b.qp->stats().rnr_naks_sent, 0u);
}

TEST(SendRecvTest, ImmediateDataArrivesWithSendsAndWrites) {
  Fixture f;
  std::vector<uint8_t> target(1024, 0);
  for (uint64_t id : {1, 2}) {
    ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(id, target.data(), 512)),
              PostResult::kOk);
  }
  std::vector<uint8_t> msg = Pattern(300, 5);
  ASSERT_EQ(f.pair.a.qp->Post(Send(7, msg.data(), 300,
                                   kWrImmediate | kWrSolicited, 0x04030201)),
            PostResult::kOk);
  std::vector<uint8_t> data = Pattern(700, 6);
  WorkRequest w = Fixture::Write(8, data.data(), 700, 64, kWrImmediate);
  w.imm = 0xA0B0C0D0;
  ASSERT_EQ(f.pair.a.qp->Post(w), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.b.cq.receives.size(), 2u);
  const RecvCompletion& s = f.pair.b.cq.receives[0];
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_TRUE(s.with_imm);
  EXPECT_FALSE(s.write);
  EXPECT_EQ(s.imm, 0x04030201u);
  EXPECT_EQ(s.byte_len, 300u);
  const RecvCompletion& wr = f.pair.b.cq.receives[1];
  EXPECT_EQ(wr.wr_id, 2u);
  EXPECT_TRUE(wr.with_imm);
  EXPECT_TRUE(wr.write);
  EXPECT_EQ(wr.imm, 0xA0B0C0D0u);
  EXPECT_EQ(wr.byte_len, 700u);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), f.b_region.begin() + 64));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[1].opcode, WrOpcode::kWrite);
}

TEST(SendRecvTest, NoReceiveMeansRnrNakThenTheSendIsRetried) {
  QpConfig config = testing::SmallConfig();
  config.min_rnr_timer = 1;  // 10 us
  Fixture f(config);
  std::vector<uint8_t> msg = Pattern(600, 9);  // three packets
  ASSERT_EQ(f.pair.a.qp->Post(Send(1, msg.data(), 600)), PostResult::kOk);
  // A write behind the send waits for it: RC keeps order.
  std::vector<uint8_t> data = Pattern(16, 10);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(2, data.data(), 16, 0)),
            PostResult::kOk);
  f.pair.RunUntil([] { return false; }, 200'000);  // 200 us, no receive
  EXPECT_GE(f.pair.b.qp->stats().rnr_naks_sent, 2u);
  EXPECT_GE(f.pair.a.qp->stats().rnr_naks_received, 2u);
  EXPECT_TRUE(f.pair.a.cq.completions.empty());
  EXPECT_EQ(f.b_region[0], 0) << "the write overtook the send";
  EXPECT_EQ(f.pair.a.qp->state(), QpState::kReadyToSend);
  std::vector<uint8_t> target(1024, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(5, target.data(), 512)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kSuccess);
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_EQ(f.pair.b.cq.receives[0].byte_len, 600u);
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), target.begin()));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), f.b_region.begin()));
  // The RNR waits cost no retries of the transport's own count.
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 0u);
}

// The RNR timer may change while the QP serves (verbs: min_rnr_timer at
// RTS): the RNR NAKs sent from then on carry the new code, and the
// requester waits as long as it says.
TEST(SendRecvTest, TheRnrTimerChangesInPassing) {
  QpConfig config = testing::SmallConfig();
  config.min_rnr_timer = 1;  // 10 us
  Fixture f(config);
  EXPECT_FALSE(f.pair.b.qp->SetMinRnrTimer(32));
  ASSERT_TRUE(f.pair.b.qp->SetMinRnrTimer(31));  // 491.52 ms
  std::vector<uint8_t> msg = Pattern(10, 9);
  ASSERT_EQ(f.pair.a.qp->Post(Send(1, msg.data(), 10)), PostResult::kOk);
  f.pair.RunUntil([] { return false; }, 200'000);  // 200 us, no receive
  EXPECT_EQ(f.pair.b.qp->stats().rnr_naks_sent, 1u)
      << "the requester retried before the new timer ran out";
  EXPECT_EQ(f.pair.a.qp->stats().rnr_naks_received, 1u);
}

TEST(SendRecvTest, WriteWithImmediateWaitsForAReceiveToo) {
  Fixture f;
  std::vector<uint8_t> data = Pattern(32, 11);
  WorkRequest w = Fixture::Write(1, data.data(), 32, 128, kWrImmediate);
  ASSERT_EQ(f.pair.a.qp->Post(w), PostResult::kOk);
  f.pair.RunUntil([] { return false; }, 100'000);
  EXPECT_GE(f.pair.b.qp->stats().rnr_naks_sent, 1u);
  EXPECT_EQ(f.b_region[128], 0) << "placed without a receive";
  std::vector<uint8_t> target(64, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(9, target.data(), 32)), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_TRUE(f.pair.b.cq.receives[0].write);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), f.b_region.begin() + 128));
}

TEST(SendRecvTest, RnrRetriesRunOut) {
  QpConfig config = testing::SmallConfig();
  config.rnr_retry = 2;
  config.min_rnr_timer = 1;
  Fixture f(config);
  std::vector<uint8_t> msg = Pattern(10, 1);
  ASSERT_EQ(f.pair.a.qp->Post(Send(1, msg.data(), 10)), PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Send(2, msg.data(), 10)), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.a.cq.completions.size() == 2; }, kSecond));
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kFlushed);
  EXPECT_EQ(f.pair.a.qp->error_status(), WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(f.pair.a.qp->stats().rnr_naks_received, 3u);  // 1 + 2 retries
  EXPECT_EQ(f.pair.b.qp->state(), QpState::kReadyToSend);
}

TEST(SendRecvTest, SendLongerThanTheReceiveFailsBothEnds) {
  Fixture f;
  std::vector<uint8_t> target(100, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(3, target.data(), 50)),
            PostResult::kOk);
  std::vector<uint8_t> msg = Pattern(101, 2);
  ASSERT_EQ(f.pair.a.qp->Post(Send(1, msg.data(), 101)), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return !f.pair.a.cq.completions.empty(); }, kSecond));
  EXPECT_EQ(f.pair.a.cq.completions[0].status,
            WcStatus::kRemoteInvalidRequest);
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_EQ(f.pair.b.cq.receives[0].wr_id, 3u);
  EXPECT_EQ(f.pair.b.cq.receives[0].status, WcStatus::kLocalLengthError);
  EXPECT_EQ(f.pair.b.qp->state(), QpState::kError);
}

// A receive whose buffer's key stopped reaching it after the post (the
// application deregistered it), or never reached it (no address): nothing
// lands in it, it ends with kLocalProtectionError, the requester's SEND with
// kRemoteOperationalError (NAK 0x63), and the responder's QP enters ERR.
TEST(SendRecvTest, ReceiveOnDeadMemoryFailsBothEndsAndPlacesNothing) {
  for (const bool unresolved : {false, true}) {
    SCOPED_TRACE(unresolved ? "posted without an address" : "key died");
    Fixture f;
    f.pair.b.memory.dead_lkeys.push_back(42);
    std::vector<uint8_t> target(100, 0x5A);
    WorkRequest recv;
    recv.wr_id = 3;
    recv.num_sge = 1;
    recv.sge[0] = {unresolved ? nullptr : target.data(), 100,
                   unresolved ? 7u : 42u};
    ASSERT_EQ(f.pair.b.qp->PostRecv(recv), PostResult::kOk);
    std::vector<uint8_t> msg = Pattern(60, 2);
    ASSERT_EQ(f.pair.a.qp->Post(Send(1, msg.data(), 60)), PostResult::kOk);
    ASSERT_TRUE(f.pair.RunUntil(
        [&] { return !f.pair.a.cq.completions.empty(); }, kSecond));
    EXPECT_EQ(f.pair.a.cq.completions[0].status,
              WcStatus::kRemoteOperationalError);
    ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
    EXPECT_EQ(f.pair.b.cq.receives[0].wr_id, 3u);
    EXPECT_EQ(f.pair.b.cq.receives[0].status,
              WcStatus::kLocalProtectionError);
    EXPECT_EQ(f.pair.b.qp->state(), QpState::kError);
    EXPECT_EQ(f.pair.b.qp->stats().local_protection_errors, 1u);
    EXPECT_TRUE(std::all_of(target.begin(), target.end(),
                            [](uint8_t v) { return v == 0x5A; }));
  }
}

TEST(SendRecvTest, LossDuplicationAndReorderingLoseNoMessage) {
  fault::FaultSpec faults;
  faults.loss = 0.05;
  faults.duplicate = 0.02;
  faults.reorder = 0.02;
  faults.reorder_ns = 20'000;
  faults.seed = 42;
  fault::FaultSpec back = faults;
  back.seed = 43;
  Fixture f(testing::SmallConfig(), faults, back);
  constexpr int kMessages = 60;
  std::vector<std::vector<uint8_t>> sources, targets;
  for (int i = 0; i < kMessages; ++i) {
    targets.emplace_back(4096, 0);
    ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(i, targets.back().data(), 2048)),
              PostResult::kOk);
  }
  for (int i = 0; i < kMessages; ++i) {
    const uint32_t len = 100 + 37 * static_cast<uint32_t>(i);
    sources.push_back(Pattern(len, i));
    ASSERT_EQ(f.pair.a.qp->Post(Send(i, sources.back().data(), len)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(10 * kSecond));
  ASSERT_EQ(f.pair.b.cq.receives.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(f.pair.b.cq.receives[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(f.pair.b.cq.receives[i].byte_len, sources[i].size());
    EXPECT_TRUE(std::equal(sources[i].begin(), sources[i].end(),
                           targets[i].begin()))
        << "message " << i;
  }
  ASSERT_EQ(f.pair.a.cq.completions.size(), static_cast<size_t>(kMessages));
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
}

TEST(SendRecvTest, PostedReceivesEndWithTheQp) {
  Fixture f;
  std::vector<uint8_t> target(64, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(1, target.data(), 32)), PostResult::kOk);
  f.pair.b.qp->Flush();
  EXPECT_EQ(f.pair.b.qp->recv_outstanding(), 0u);
  EXPECT_TRUE(f.pair.b.cq.receives.empty());
  EXPECT_EQ(f.pair.b.qp->PostRecv(Recv(2, target.data(), 32)),
            PostResult::kNotConnected);
}

TEST(SendRecvTest, BadRequestsAreRefusedAtPost) {
  Fixture f;
  std::vector<uint8_t> buf(8);
  WorkRequest r = Fixture::Read(1, buf.data(), 8, 0, kWrImmediate);
  EXPECT_EQ(f.pair.a.qp->Post(r), PostResult::kInvalid);
  WorkRequest recv = Recv(1, buf.data(), 4);
  recv.num_sge = kMaxSge + 1;
  EXPECT_EQ(f.pair.b.qp->PostRecv(recv), PostResult::kInvalid);
  QpConfig small = testing::SmallConfig();
  small.rq_depth = 2;
  Fixture g(small);
  EXPECT_EQ(g.pair.b.qp->PostRecv(Recv(1, buf.data(), 4)), PostResult::kOk);
  EXPECT_EQ(g.pair.b.qp->PostRecv(Recv(2, buf.data(), 4)), PostResult::kOk);
  EXPECT_EQ(g.pair.b.qp->PostRecv(Recv(3, buf.data(), 4)),
            PostResult::kQueueFull);
}

}  // namespace
}  // namespace rdmaplane::rc
