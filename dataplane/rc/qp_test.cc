#include "dataplane/rc/qp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

using testing::Decode;
using testing::Fixture;
using testing::Pattern;
using testing::SmallConfig;
using wire::Opcode;

constexpr uint64_t kSecond = 1'000'000'000;

TEST(QpConfigTest, RejectsBadValues) {
  EXPECT_EQ(RcQp::ValidateConfig(SmallConfig()), nullptr);
  QpConfig c = SmallConfig();
  c.pmtu = 1000;
  EXPECT_NE(RcQp::ValidateConfig(c), nullptr);
  c = SmallConfig();
  c.sq_depth = 100;
  EXPECT_NE(RcQp::ValidateConfig(c), nullptr);
  c = SmallConfig();
  c.max_dest_rd_atomic = 3;
  EXPECT_NE(RcQp::ValidateConfig(c), nullptr);
  c = SmallConfig();
  c.retransmit_timeout_ns = 0;
  EXPECT_NE(RcQp::ValidateConfig(c), nullptr);
  c = SmallConfig();
  c.local_qpn = wire::Qpn(1u << 24);
  EXPECT_NE(RcQp::ValidateConfig(c), nullptr);
}

TEST(QpTest, WriteOfEverySizeAroundMtuArrivesIntact) {
  Fixture f;
  const uint32_t sizes[] = {0, 1, 3, 255, 256, 257, 511, 512, 513, 4096, 65537};
  uint64_t offset = 0;
  std::vector<std::vector<uint8_t>> sources;
  for (uint32_t len : sizes) {
    sources.push_back(Pattern(len, len + 1));
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(len, sources.back().data(), len,
                                               offset)),
              PostResult::kOk);
    offset += len + 7;
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), std::size(sizes));
  offset = 0;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const Completion& c = f.pair.a.cq.completions[i];
    EXPECT_EQ(c.wr_id, sizes[i]);  // in posting order
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WrOpcode::kWrite);
    EXPECT_EQ(c.byte_len, sizes[i]);
    EXPECT_TRUE(std::equal(sources[i].begin(), sources[i].end(),
                           f.b_region.begin() + offset));
    offset += sizes[i] + 7;
  }
  EXPECT_EQ(f.pair.rejected_frames, 0u);
}

TEST(QpTest, ReadOfEverySizeAroundMtuArrivesIntact) {
  Fixture f;
  auto content = Pattern(f.b_region.size(), 7);
  std::copy(content.begin(), content.end(), f.b_region.begin());
  const uint32_t sizes[] = {0, 1, 255, 256, 257, 1024, 70000};
  std::vector<std::vector<uint8_t>> dests;
  for (uint32_t len : sizes) dests.emplace_back(len + 1, 0xEE);
  for (size_t i = 0; i < std::size(sizes); ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(
                  Fixture::Read(i, dests[i].data(), sizes[i], 1000 * i)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), std::size(sizes));
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const Completion& c = f.pair.a.cq.completions[i];
    EXPECT_EQ(c.wr_id, i);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WrOpcode::kRead);
    EXPECT_EQ(c.byte_len, sizes[i]);
    EXPECT_TRUE(std::equal(dests[i].begin(), dests[i].begin() + sizes[i],
                           content.begin() + 1000 * i));
    EXPECT_EQ(dests[i][sizes[i]], 0xEE) << "wrote past the SGL";
  }
}

TEST(QpTest, ScatterGatherListsAreGatheredAndScattered) {
  Fixture f;
  auto src = Pattern(1000, 3);
  WorkRequest wr = Fixture::Write(1, nullptr, 0, 0);
  wr.num_sge = 3;
  wr.sge[0] = {src.data(), 100};
  wr.sge[1] = {src.data() + 100, 0};
  wr.sge[2] = {src.data() + 100, 900};
  ASSERT_EQ(f.pair.a.qp->Post(wr), PostResult::kOk);
  std::vector<uint8_t> d1(333), d2(667);
  WorkRequest rd = Fixture::Read(2, nullptr, 0, 0);
  rd.num_sge = 2;
  rd.sge[0] = {d1.data(), 333};
  rd.sge[1] = {d2.data(), 667};
  ASSERT_EQ(f.pair.a.qp->Post(rd), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[1].byte_len, 1000u);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), f.b_region.begin()));
  EXPECT_TRUE(std::equal(d1.begin(), d1.end(), src.begin()));
  EXPECT_TRUE(std::equal(d2.begin(), d2.end(), src.begin() + 333));
}

TEST(QpTest, PostRejectsBadRequests) {
  Fixture f;
  uint8_t buf[8];
  WorkRequest wr = Fixture::Write(1, buf, 8, 0);
  wr.flags = 0x80;
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::Write(1, buf, 8, 0);
  wr.num_sge = kMaxSge + 1;
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::Write(1, nullptr, 8, 0);
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::Write(1, buf, 0x80000000u, 0);
  wr.num_sge = 2;
  wr.sge[1] = {buf, 0x80000000u};
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  EXPECT_EQ(f.pair.a.qp->outstanding(), 0u);
}

TEST(QpTest, FullSendQueueIsReportedAndRecovers) {
  QpConfig c = SmallConfig();
  c.sq_depth = 4;
  Fixture f(c);
  uint8_t buf[4] = {1, 2, 3, 4};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(i, buf, 4, 0)), PostResult::kOk);
  }
  EXPECT_EQ(f.pair.a.qp->Post(Fixture::Write(9, buf, 4, 0)),
            PostResult::kQueueFull);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(f.pair.a.qp->Post(Fixture::Write(9, buf, 4, 0)), PostResult::kOk);
}

TEST(QpTest, SilentSuccessCompletesOnlyOnFailure) {
  Fixture f;
  auto src = Pattern(100, 1);
  ASSERT_EQ(f.pair.a.qp->Post(
                Fixture::Write(1, src.data(), 100, 0, kWrSilentSuccess)),
            PostResult::kOk);
  std::vector<uint8_t> dst(100);
  ASSERT_EQ(f.pair.a.qp->Post(
                Fixture::Read(2, dst.data(), 100, 0, kWrSilentSuccess)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(3, src.data(), 100, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].wr_id, 3u);
  EXPECT_EQ(f.pair.a.cq.silent, 2u);  // retired, but not reported
  EXPECT_EQ(dst, src);
  // A silent request that fails still completes, with its error.
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(4, src.data(), 100, 0,
                                             kWrSilentSuccess,
                                             wire::Rkey(0xBAD))),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[1].wr_id, 4u);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kRemoteAccessError);
  // The NAK broke the connection, and the QP says why.
  EXPECT_EQ(f.pair.a.qp->state(), QpState::kError);
  EXPECT_EQ(f.pair.a.qp->error_status(), WcStatus::kRemoteAccessError);
}

// Events seen by A in order: read requests A sent and completions A got.
struct EventLog {
  std::vector<std::string> events;
  void Attach(Fixture& f) {
    f.pair.a_to_b.tap = [this](std::span<const uint8_t> frame) {
      auto pkt = Decode(frame);
      if (pkt.bth.opcode == Opcode::kReadRequest) {
        events.push_back("req " + std::to_string(pkt.reth.dma_length));
      }
    };
    f.pair.a.cq.on_complete = [this](const Completion& c) {
      events.push_back("done " + std::to_string(c.wr_id));
    };
  }
};

TEST(QpTest, ReadFenceWaitsForEarlierReads) {
  Fixture f;
  EventLog log;
  log.Attach(f);
  std::vector<uint8_t> big(20000), small(4);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(1, big.data(), 20000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(
                Fixture::Read(2, small.data(), 4, 0, kWrReadFence)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(log.events, (std::vector<std::string>{"req 20000", "done 1",
                                                  "req 4", "done 2"}));
}

TEST(QpTest, ReadsWithoutFenceArePipelined) {
  Fixture f;
  EventLog log;
  log.Attach(f);
  std::vector<uint8_t> big(20000), small(4);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(1, big.data(), 20000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, small.data(), 4, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(log.events, (std::vector<std::string>{"req 20000", "req 4",
                                                  "done 1", "done 2"}));
}

TEST(QpTest, OutstandingReadsAreLimited) {
  QpConfig c = SmallConfig();
  c.max_rd_atomic = 2;
  Fixture f(c);
  int in_flight = 0, max_in_flight = 0;
  f.pair.a_to_b.tap = [&](std::span<const uint8_t> frame) {
    if (Decode(frame).bth.opcode == Opcode::kReadRequest) {
      max_in_flight = std::max(max_in_flight, ++in_flight);
    }
  };
  f.pair.a.cq.on_complete = [&](const Completion&) { --in_flight; };
  std::vector<uint8_t> dst(8 * 600);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(i, dst.data() + 600 * i, 600, 0)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(f.pair.a.cq.completions.size(), 8u);
  EXPECT_EQ(max_in_flight, 2);
}

// Drops the first transmission of each listed (opcode, PSN offset from the
// first PSN the sender used).
struct DropOnce {
  std::vector<std::pair<Opcode, uint32_t>> targets;
  std::vector<bool> dropped;
  bool have_base = false;
  wire::Psn base;
  bool operator()(std::span<const uint8_t> frame) {
    auto pkt = Decode(frame);
    if (!have_base && wire::IsRequest(pkt.bth.opcode)) {
      have_base = true;
      base = pkt.bth.psn;
    }
    if (dropped.size() != targets.size()) dropped.assign(targets.size(), false);
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!dropped[i] && pkt.bth.opcode == targets[i].first &&
          pkt.bth.psn == base + targets[i].second) {
        dropped[i] = true;
        return true;
      }
    }
    return false;
  }
};

TEST(QpTest, LostMiddlePacketIsResentAfterSequenceNak) {
  Fixture f;
  auto drop = std::make_shared<DropOnce>();
  drop->targets = {{Opcode::kWriteMiddle, 3}};
  f.pair.a_to_b.drop = [drop](auto frame) { return (*drop)(frame); };
  auto src = Pattern(10 * 256, 5);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), src.size(), 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_TRUE(drop->dropped[0]);
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), f.b_region.begin()));
  EXPECT_EQ(f.pair.b.qp->stats().seq_naks_sent, 1u);
  EXPECT_EQ(f.pair.a.qp->stats().naks_received, 1u);
  EXPECT_GE(f.pair.a.qp->stats().retransmitted_packets, 7u);
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 0u);  // the NAK was enough
}

TEST(QpTest, LostAckIsRecoveredByTimeoutAndDuplicateReAck) {
  Fixture f;
  auto drop = std::make_shared<DropOnce>();
  f.pair.b_to_a.drop = [](std::span<const uint8_t> frame) {
    static bool done = false;  // drop B's first ACK only
    if (!done && Decode(frame).bth.opcode == Opcode::kAcknowledge) {
      return done = true;
    }
    return false;
  };
  auto src = Pattern(100, 9);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 100, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().duplicate_requests, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().acks_sent, 2u);
}

TEST(QpTest, LostReadResponsesAreReplayedFromTheResourceRing) {
  Fixture f;
  auto content = Pattern(4096, 11);
  std::copy(content.begin(), content.end(), f.b_region.begin());
  // Lose a middle response (detected by the gap), then the last response of
  // the replay (detected only by the timer).
  struct {
    int middle = 0, last = 0;
  } seen;
  f.pair.b_to_a.drop = [&seen](std::span<const uint8_t> frame) {
    auto op = Decode(frame).bth.opcode;
    if (op == Opcode::kReadResponseMiddle && ++seen.middle == 2) return true;
    if (op == Opcode::kReadResponseLast && ++seen.last == 2) return true;
    return false;
  };
  std::vector<uint8_t> dst(4096);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(1, dst.data(), 4096, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, content);
  EXPECT_GE(f.pair.b.qp->stats().duplicate_requests, 2u);
  EXPECT_GE(f.pair.a.qp->stats().out_of_order_responses, 1u);
  EXPECT_GE(f.pair.a.qp->stats().timeouts, 1u);
}

TEST(QpTest, LostAckBeforeReadIsImpliedByTheReadResponse) {
  Fixture f;
  f.pair.b_to_a.drop = [](std::span<const uint8_t> frame) {
    return Decode(frame).bth.opcode == Opcode::kAcknowledge;  // every ACK
  };
  auto src = Pattern(600, 2);
  std::vector<uint8_t> dst(600);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 600, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 600, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 0u);
}

TEST(QpTest, ExhaustedRetriesFailTheRequestAndFlushTheRest) {
  QpConfig c = SmallConfig();
  c.retry_count = 3;
  fault::FaultSpec blackhole;
  blackhole.loss = 1.0;
  Fixture f(c, blackhole);
  auto src = Pattern(1000, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(i, src.data(), 1000, 0)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.a.cq.completions.size() == 3; }, kSecond));
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kFlushed);
  EXPECT_EQ(f.pair.a.cq.completions[2].status, WcStatus::kFlushed);
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 4u);  // 3 retries + the last try
  EXPECT_EQ(f.pair.a.qp->state(), QpState::kError);
  EXPECT_EQ(f.pair.a.qp->error_status(), WcStatus::kRetryExceeded);
  EXPECT_EQ(f.pair.a.qp->Post(Fixture::Write(9, src.data(), 10, 0)),
            PostResult::kNotConnected);
  EXPECT_EQ(f.pair.a.qp->outstanding(), 0u);
}

TEST(QpTest, EachTimeoutWithoutProgressDoublesTheNext) {
  QpConfig c = SmallConfig();
  c.retry_count = 3;
  fault::FaultSpec blackhole;
  blackhole.loss = 1.0;
  Fixture f(c, blackhole);
  auto src = Pattern(100, 1);
  const uint64_t start = f.pair.clock.NowNs();
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 100, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.a.cq.completions.size() == 1; }, kSecond));
  // Timeouts after T, 2T, 4T and 8T: the error comes 15T after posting,
  // not 4T as with a fixed timeout.
  const uint64_t t = c.retransmit_timeout_ns;
  const uint64_t took = f.pair.clock.NowNs() - start;
  EXPECT_GE(took, 15 * t);
  EXPECT_LT(took, 16 * t);
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 4u);
}

TEST(QpTest, FlushAbortsOutstandingWork) {
  Fixture f;
  auto src = Pattern(1000, 1);
  std::vector<uint8_t> dst(1000);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 1000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 1000, 0)),
            PostResult::kOk);
  f.pair.a.qp->Flush();
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kFlushed);
  }
  EXPECT_EQ(f.pair.a.qp->Poll(32), 0u);
}

TEST(QpTest, DuplicatedFramesAreHarmless) {
  fault::FaultSpec dup_all;
  dup_all.duplicate = 1.0;
  dup_all.jitter_ns = 3000;
  Fixture f(SmallConfig(), dup_all, dup_all);
  auto src = Pattern(5000, 4);
  std::vector<uint8_t> dst(5000);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 5000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 5000, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
  EXPECT_GT(f.pair.b.qp->stats().duplicate_requests, 0u);
}

TEST(QpTest, AcksAreCoalesced) {
  Fixture f;
  uint8_t byte = 1;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(i, &byte, 1, i)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(f.pair.a.cq.completions.size(), 100u);
  // Every write asked for an ACK, but B answers each received burst once.
  EXPECT_LT(f.pair.b.qp->stats().acks_sent, 20u);
}

TEST(QpTest, WindowBoundsPacketsInFlight) {
  QpConfig c = SmallConfig();
  c.max_inflight_packets = 16;
  fault::FaultSpec slow;
  slow.delay_ns = 50'000;
  Fixture f(c, slow, slow);
  int sent_before_first_ack = 0;
  bool acked = false;
  f.pair.a_to_b.tap = [&](auto) {
    if (!acked) ++sent_before_first_ack;
  };
  f.pair.b_to_a.tap = [&](auto) { acked = true; };
  auto src = Pattern(100 * 256, 3);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), src.size(), 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(sent_before_first_ack, 16);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), f.b_region.begin()));
}

// A timeout means the whole window was lost (a receive ring overflowed,
// the peer stalled): what is resent then is one packet, and each
// acknowledgement of progress doubles the window back, instead of the
// same window overflowing the same ring again.
TEST(QpTest, TimeoutShrinksTheWindowToOnePacketThatAcksDoubleBack) {
  QpConfig c = SmallConfig();  // a window of 64 packets of 256 bytes
  fault::FaultSpec slow;
  slow.delay_ns = 20'000;
  Fixture f(c, slow, slow);
  // The first window is lost entirely.
  f.pair.a_to_b.drop = [&](auto) {
    return f.pair.a.qp->stats().timeouts == 0;
  };
  // Packets A sends after the timeout between two of B's ACKs.
  std::vector<int> rounds;
  f.pair.a_to_b.tap = [&](auto) {
    if (f.pair.a.qp->stats().timeouts == 0) return;
    if (rounds.empty()) rounds.push_back(0);
    ++rounds.back();
  };
  f.pair.b_to_a.tap = [&](auto) {
    if (!rounds.empty()) rounds.push_back(0);
  };
  auto src = Pattern(64 * 256, 5);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), src.size(), 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), f.b_region.begin()));
  EXPECT_EQ(f.pair.a.qp->stats().timeouts, 1u);
  ASSERT_GE(rounds.size(), 4u);
  EXPECT_EQ(rounds[0], 1) << "one packet resent until the peer answers";
  EXPECT_EQ(rounds[1], 2);
  EXPECT_EQ(rounds[2], 4);
  // 1 + 2 + 4 + ... covers the 64 packets, each resent once.
  int resent = 0;
  for (int n : rounds) resent += n;
  EXPECT_EQ(resent, 64);
}

TEST(QpTest, ResponderPinsRemoteMemoryOnlyWhileUsingIt) {
  Fixture f;
  // Let the FIRST packet of a write through, then lose everything.
  int sent = 0;
  f.pair.a_to_b.drop = [&sent](auto) { return ++sent > 1; };
  auto src = Pattern(2000, 1);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 2000, 0)),
            PostResult::kOk);
  f.pair.RunUntil([] { return false; }, 50'000);
  EXPECT_EQ(f.pair.b.memory.pins(), 1) << "mid-message write holds its target";
  f.pair.a_to_b.drop = nullptr;
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(f.pair.b.memory.pins(), 0);
  std::vector<uint8_t> dst(5000);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 5000, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(f.pair.b.memory.pins(), 0) << "read stream released its source";
  // A QP that fails mid-message releases what it held.
  sent = 0;
  f.pair.a_to_b.drop = [&sent](auto) { return ++sent > 1; };
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(3, src.data(), 2000, 0)),
            PostResult::kOk);
  f.pair.RunUntil([] { return false; }, 50'000);
  EXPECT_EQ(f.pair.b.memory.pins(), 1);
  f.pair.b.qp->Flush();
  EXPECT_EQ(f.pair.b.memory.pins(), 0);
}

TEST(QpTest, BothDirectionsAtOnce) {
  Fixture f;
  auto a_src = Pattern(30000, 1), b_src = Pattern(30000, 2);
  std::vector<uint8_t> a_dst(30000), b_dst(30000);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, a_src.data(), 30000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.b.qp->Post(Fixture::Write(1, b_src.data(), 30000, 0, 0,
                                             testing::kKeyOnA)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, a_dst.data(), 30000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.b.qp->Post(Fixture::Read(2, b_dst.data(), 30000, 0, 0,
                                            testing::kKeyOnA)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(a_dst, a_src);
  EXPECT_EQ(b_dst, b_src);
  EXPECT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.b.cq.completions.size(), 2u);
}

// Responder checks driven with hand-made request frames into B.
class Responder {
 public:
  Responder() {
    f_.pair.b_to_a.tap = [this](std::span<const uint8_t> frame) {
      responses_.push_back(Decode(frame));
    };
  }

  // A request to B at its expected PSN plus `psn_offset`, from A's address
  // (so that B takes it for its peer's), handled and answered at once
  // unless `poll` is false.
  void Inject(Opcode op, uint32_t psn_offset, uint32_t payload_len,
              uint32_t dma_length, bool ack_req = true, bool poll = true,
              uint16_t pkey = wire::kDefaultPkey) {
    const QpConfig& bc = f_.pair.b.qp->config();
    wire::PacketHeaders h;
    h.path.src_ip = bc.path.dst_ip;
    h.path.dst_ip = bc.path.src_ip;
    h.bth.opcode = op;
    h.bth.pkey = pkey;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = bc.recv_psn + psn_offset;
    h.bth.ack_req = ack_req;
    h.reth = {testing::kRemoteVa, testing::kKeyOnB, dma_length};
    std::vector<uint8_t> payload(payload_len, 0xAB);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload_len));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    auto pkt = Decode(frame);
    ASSERT_EQ(pkt.bth.opcode, op);
    qp().HandleFrame(pkt);
    if (poll) qp().Poll(32);
  }

  // B answered exactly one NAK `syndrome` for the request at `psn_offset`,
  // then entered the error state, for `cause`; the bytes of its region are
  // untouched.
  void ExpectRefused(uint8_t syndrome, uint32_t psn_offset, WcStatus cause) {
    ASSERT_EQ(responses_.size(), 1u);
    EXPECT_EQ(responses_[0].bth.opcode, Opcode::kAcknowledge);
    EXPECT_EQ(responses_[0].aeth.syndrome, syndrome);
    EXPECT_EQ(responses_[0].bth.psn, qp().config().recv_psn + psn_offset);
    EXPECT_EQ(qp().state(), QpState::kError);
    EXPECT_EQ(qp().error_status(), cause);
    EXPECT_EQ(f_.b_region[0], 0);
    EXPECT_EQ(f_.pair.b.memory.pins(), 0);
    // Nothing more is answered, or executed.
    Inject(Opcode::kWriteOnly, psn_offset + 1, 4, 4);
    EXPECT_EQ(responses_.size(), 1u);
    EXPECT_EQ(f_.b_region[0], 0);
  }

  uint8_t LastSyndrome() const {
    return responses_.empty() ? 0xFF : responses_.back().aeth.syndrome;
  }
  RcQp& qp() { return *f_.pair.b.qp; }

  Fixture f_;
  std::vector<wire::ParsedPacket> responses_;
};

TEST(ResponderTest, PsnAheadGetsOneSequenceNak) {
  Responder r;
  r.Inject(Opcode::kWriteOnly, 2, 4, 4);
  r.Inject(Opcode::kWriteOnly, 3, 4, 4);
  r.Inject(Opcode::kWriteOnly, 4, 4, 4);
  ASSERT_EQ(r.responses_.size(), 1u);
  EXPECT_EQ(r.LastSyndrome(), wire::kAethNakPsnSeqError);
  EXPECT_EQ(r.responses_[0].bth.psn, r.qp().config().recv_psn);
  EXPECT_EQ(r.f_.b_region[0], 0);  // nothing executed
  // The expected PSN clears the gap; a later gap gets a new NAK. A sequence
  // NAK leaves the QP usable.
  r.Inject(Opcode::kWriteOnly, 0, 4, 4);
  EXPECT_EQ(r.LastSyndrome(), wire::kAethAck | wire::kAethCreditsInvalid);
  r.Inject(Opcode::kWriteOnly, 5, 4, 4);
  EXPECT_EQ(r.LastSyndrome(), wire::kAethNakPsnSeqError);
  EXPECT_EQ(r.qp().stats().seq_naks_sent, 2u);
  EXPECT_EQ(r.qp().state(), QpState::kReadyToSend);
}

TEST(ResponderTest, OpcodeSequenceErrorsAreRefusedAsInvalid) {
  {
    Responder r;  // a MIDDLE outside a message
    r.Inject(Opcode::kWriteMiddle, 0, 256, 0);
    r.ExpectRefused(wire::kAethNakInvalidRequest, 0,
                    WcStatus::kPeerInvalidRequest);
  }
  {
    Responder r;  // a LAST outside a message
    r.Inject(Opcode::kWriteLast, 0, 4, 0);
    r.ExpectRefused(wire::kAethNakInvalidRequest, 0,
                    WcStatus::kPeerInvalidRequest);
  }
  {
    Responder r;  // a READ inside a write
    r.Inject(Opcode::kWriteFirst, 0, 256, 1000, false);
    r.Inject(Opcode::kReadRequest, 1, 0, 16);
    ASSERT_EQ(r.responses_.size(), 1u);
    EXPECT_EQ(r.LastSyndrome(), wire::kAethNakInvalidRequest);
    EXPECT_EQ(r.responses_[0].bth.psn, r.qp().config().recv_psn + 1);
    EXPECT_EQ(r.qp().state(), QpState::kError);
    EXPECT_EQ(r.f_.pair.b.memory.pins(), 0) << "the write's pin is released";
  }
  {
    Responder r;  // a new FIRST inside a write
    r.Inject(Opcode::kWriteFirst, 0, 256, 1000, false);
    r.Inject(Opcode::kWriteFirst, 1, 256, 1000);
    EXPECT_EQ(r.LastSyndrome(), wire::kAethNakInvalidRequest);
    EXPECT_EQ(r.qp().state(), QpState::kError);
  }
}

TEST(ResponderTest, LengthErrorsAreRefusedAsInvalid) {
  {
    Responder r;  // FIRST shorter than the MTU
    r.Inject(Opcode::kWriteFirst, 0, 100, 1000);
    r.ExpectRefused(wire::kAethNakInvalidRequest, 0,
                    WcStatus::kPeerInvalidRequest);
  }
  {
    Responder r;  // ONLY whose payload disagrees with the RETH length
    r.Inject(Opcode::kWriteOnly, 0, 10, 20);
    r.ExpectRefused(wire::kAethNakInvalidRequest, 0,
                    WcStatus::kPeerInvalidRequest);
  }
  {
    Responder r;  // LAST carrying more than what remains
    r.Inject(Opcode::kWriteFirst, 0, 256, 300, false);
    r.Inject(Opcode::kWriteLast, 1, 100, 0);
    EXPECT_EQ(r.LastSyndrome(), wire::kAethNakInvalidRequest);
    EXPECT_EQ(r.qp().state(), QpState::kError);
    EXPECT_EQ(r.qp().stats().naks_sent, 1u);
    EXPECT_EQ(r.qp().stats().invalid_requests, 1u);
  }
  {
    Responder r;  // a READ over 2 GiB
    r.Inject(Opcode::kReadRequest, 0, 0, 0x80000001u);
    r.ExpectRefused(wire::kAethNakInvalidRequest, 0,
                    WcStatus::kPeerInvalidRequest);
  }
}

// FLUSH and ATOMIC WRITE are defined but not served; the reserved RC
// opcodes are invalid. The IBA's answer to all of them: NAK
// "invalid request", and the responder's QP in the error state.
TEST(ResponderTest, UnsupportedAndReservedOpcodesAreRefused) {
  for (int op = 0; op < wire::kRcOpcodeLimit; ++op) {
    const Opcode opcode = static_cast<Opcode>(op);
    if (!wire::IsRequest(opcode) || wire::IsSupported(opcode)) continue;
    SCOPED_TRACE(wire::OpcodeName(opcode));
    Responder r;
    // B has a request of its own queued: it is flushed.
    uint8_t byte = 1;
    ASSERT_EQ(r.qp().Post(Fixture::Write(7, &byte, 1, 0, 0, testing::kKeyOnA)),
              PostResult::kOk);
    r.Inject(opcode, 0, wire::CarriesPayload(opcode) ? 8 : 0, 8);
    r.ExpectRefused(wire::kAethNakInvalidRequest, 0,
                    WcStatus::kPeerInvalidRequest);
    EXPECT_EQ(r.qp().stats().invalid_requests, 1u);
    ASSERT_EQ(r.f_.pair.b.cq.completions.size(), 1u);
    EXPECT_EQ(r.f_.pair.b.cq.completions[0].status, WcStatus::kFlushed);
  }
}

// An RC opcode the IBA reserves (table 38), which no responder serves.
constexpr Opcode kReservedRcOpcode = static_cast<Opcode>(0x15);

TEST(ResponderTest, RequestsAfterARefusalAreDroppedUntilTheNakLeaves) {
  Responder r;
  r.Inject(kReservedRcOpcode, 0, 8, 0, true, /*poll=*/false);
  EXPECT_EQ(r.qp().state(), QpState::kReadyToSend);  // the NAK is not out
  r.Inject(Opcode::kWriteOnly, 0, 4, 4, true, /*poll=*/false);
  r.Inject(Opcode::kWriteOnly, 1, 4, 4, true, /*poll=*/false);
  EXPECT_EQ(r.f_.b_region[0], 0);
  r.qp().Poll(32);
  ASSERT_EQ(r.responses_.size(), 1u);
  EXPECT_EQ(r.LastSyndrome(), wire::kAethNakInvalidRequest);
  EXPECT_EQ(r.qp().state(), QpState::kError);
  EXPECT_EQ(r.f_.b_region[0], 0);
}

TEST(ResponderTest, DuplicateOfAnUnservedOpcodeIsDropped) {
  Responder r;
  r.Inject(Opcode::kWriteOnly, 0, 4, 4);  // ePSN + 1
  ASSERT_EQ(r.responses_.size(), 1u);
  r.Inject(kReservedRcOpcode, 0, 8, 0);  // behind: nothing ran
  EXPECT_EQ(r.responses_.size(), 1u);
  EXPECT_EQ(r.qp().state(), QpState::kReadyToSend);
}

TEST(ResponderTest, AccessErrorsAreRefusedAndEndTheConnection) {
  {
    Responder r;  // a READ with a key B does not know
    const QpConfig& bc = r.qp().config();
    wire::PacketHeaders h;
    h.path.src_ip = bc.path.dst_ip;
    h.path.dst_ip = bc.path.src_ip;
    h.bth.opcode = Opcode::kReadRequest;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = bc.recv_psn;
    h.reth = {testing::kRemoteVa, wire::Rkey(0xBAD), 64};
    std::vector<uint8_t> frame(wire::FrameLength(h.bth.opcode, 0));
    ASSERT_GT(wire::EncodeFrame(h, {}, frame), 0u);
    r.qp().HandleFrame(Decode(frame));
    r.qp().Poll(32);
    r.ExpectRefused(wire::kAethNakRemoteAccess, 0, WcStatus::kPeerAccessError);
    EXPECT_EQ(r.qp().stats().access_errors, 1u);
  }
}

TEST(ResponderTest, FramesOfAnotherPartitionAreDroppedAndCounted) {
  Responder r;
  r.Inject(Opcode::kWriteOnly, 0, 4, 4, true, true, /*pkey=*/0x8001);
  r.Inject(Opcode::kSendOnly, 0, 4, 4, true, true, /*pkey=*/0x0000);
  EXPECT_TRUE(r.responses_.empty());
  EXPECT_EQ(r.f_.b_region[0], 0);
  EXPECT_EQ(r.qp().stats().pkey_violations, 2u);
  EXPECT_EQ(r.qp().state(), QpState::kReadyToSend);
  // A limited member of the default partition may talk to B, a full one.
  r.Inject(Opcode::kWriteOnly, 0, 4, 4, true, true, /*pkey=*/0x7FFF);
  ASSERT_EQ(r.responses_.size(), 1u);
  EXPECT_EQ(r.LastSyndrome(), wire::kAethAck | wire::kAethCreditsInvalid);
  EXPECT_EQ(r.f_.b_region[0], 0xAB);
}

TEST(QpTest, LimitedMembersOfOnePartitionCannotTalk) {
  QpConfig c = SmallConfig();
  c.pkey = 0x7FFF;
  c.retry_count = 1;
  Fixture f(c);
  uint8_t byte = 1;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, &byte, 1, 0)), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.a.cq.completions.size() == 1; }, kSecond));
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kRetryExceeded);
  EXPECT_GE(f.pair.b.qp->stats().pkey_violations, 1u);
  EXPECT_EQ(f.b_region[0], 0);
}

TEST(QpTest, FramesCarryTheConfiguredPartition) {
  QpConfig c = SmallConfig();
  c.pkey = 0x8123;
  Fixture f(c);
  std::vector<uint16_t> pkeys;
  auto tap = [&pkeys](std::span<const uint8_t> frame) {
    pkeys.push_back(Decode(frame).bth.pkey);
  };
  f.pair.a_to_b.tap = tap;
  f.pair.b_to_a.tap = tap;
  auto src = Pattern(1000, 1);
  std::vector<uint8_t> dst(1000);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, src.data(), 1000, 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 1000, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(dst, src);
  ASSERT_FALSE(pkeys.empty());
  for (uint16_t k : pkeys) EXPECT_EQ(k, 0x8123);
  QpConfig bad = SmallConfig();
  bad.pkey = 0x8000;
  EXPECT_NE(RcQp::ValidateConfig(bad), nullptr);
}

TEST(ResponderTest, PacketsFromAnotherHostOrQpAreIgnored) {
  Responder r;
  const QpConfig& bc = r.qp().config();
  wire::PacketHeaders h;
  h.path.src_ip = 0x0A0000FE;  // not the connected peer
  h.path.dst_ip = bc.path.src_ip;
  h.bth.opcode = Opcode::kWriteOnly;
  h.bth.dest_qp = bc.local_qpn;
  h.bth.psn = bc.recv_psn;
  h.reth = {testing::kRemoteVa, testing::kKeyOnB, 4};
  std::vector<uint8_t> payload(4, 0xAB), frame(100);
  frame.resize(wire::EncodeFrame(h, payload, frame));
  r.qp().HandleFrame(Decode(frame));
  h.path.src_ip = bc.path.dst_ip;
  h.bth.dest_qp = wire::Qpn(0x999);
  frame.resize(100);
  frame.resize(wire::EncodeFrame(h, payload, frame));
  r.qp().HandleFrame(Decode(frame));
  r.qp().Poll(32);
  EXPECT_TRUE(r.responses_.empty());
  EXPECT_EQ(r.f_.b_region[0], 0);
  EXPECT_EQ(r.qp().stats().ignored_packets, 2u);
}

TEST(QpTest, RemoteAccessErrorEndsTheConnectionOnBothSides) {
  Fixture f;
  uint8_t buf[16] = {};
  ASSERT_EQ(
      f.pair.a.qp->Post(Fixture::Write(1, buf, 16, 0, 0, wire::Rkey(0xBAD))),
      PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(2, buf, 16, 0)), PostResult::kOk);
  ASSERT_EQ(
      f.pair.b.qp->Post(Fixture::Write(3, buf, 16, 0, 0, testing::kKeyOnA)),
      PostResult::kOk);
  f.pair.RunUntil([&] { return f.pair.a.cq.completions.size() == 2; }, kSecond);
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kFlushed);
  EXPECT_EQ(f.pair.a.qp->error_status(), WcStatus::kRemoteAccessError);
  EXPECT_EQ(f.pair.b.qp->state(), QpState::kError);
  EXPECT_EQ(f.pair.b.qp->error_status(), WcStatus::kPeerAccessError);
  EXPECT_EQ(f.pair.b.memory.pins(), 0);
}

// Every READ request is a whole message: its packet asks for an ACK, and the
// read responses are that ACK (the responder sends no other).
TEST(QpTest, ReadRequestsAskForAnAcknowledgement) {
  Fixture f;
  int reads = 0;
  f.pair.a_to_b.tap = [&reads](std::span<const uint8_t> frame) {
    auto pkt = Decode(frame);
    if (pkt.bth.opcode == Opcode::kReadRequest) {
      ++reads;
      EXPECT_TRUE(pkt.bth.ack_req);
    }
  };
  std::vector<uint8_t> dst(3000);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(i, dst.data(), 600 * i, 0)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(reads, 5);
  EXPECT_EQ(f.pair.b.qp->stats().acks_sent, 0u);
  EXPECT_EQ(f.pair.a.cq.completions.size(), 5u);
}

// The MSN of every response B sends, in order (FIRST, LAST, ONLY and ACK
// carry one).
struct MsnLog {
  std::vector<uint32_t> msns;
  std::vector<Opcode> opcodes;
  void Attach(SimWire& wire) {
    wire.tap = [this](std::span<const uint8_t> frame) {
      auto pkt = Decode(frame);
      if (wire::HasAeth(pkt.bth.opcode)) {
        msns.push_back(pkt.aeth.msn);
        opcodes.push_back(pkt.bth.opcode);
      }
    };
  }
  bool Monotonic() const {
    for (size_t i = 1; i < msns.size(); ++i) {
      if (wire::Psn(msns[i]).DistanceFrom(wire::Psn(msns[i - 1])) < 0) {
        return false;
      }
    }
    return true;
  }
};

// A READ's responses are lost after writes behind it completed: the replay
// carries the MSN that counts those writes, never the older one.
TEST(QpTest, ReplayedReadResponsesKeepTheMsnMonotonic) {
  Fixture f;
  MsnLog log;
  log.Attach(f.pair.b_to_a);
  // Lose the READ's LAST response once: only the timer notices.
  f.pair.b_to_a.drop = [](std::span<const uint8_t> frame) {
    static bool done = false;
    if (!done && Decode(frame).bth.opcode == Opcode::kReadResponseLast) {
      return done = true;
    }
    return false;
  };
  auto content = Pattern(1000, 4);
  std::copy(content.begin(), content.end(), f.b_region.begin());
  std::vector<uint8_t> dst(1000);
  uint8_t byte = 5;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(1, dst.data(), 1000, 0)),
            PostResult::kOk);
  // The writes reach B after it answered the READ.
  ASSERT_TRUE(f.pair.RunUntil([&] { return !log.msns.empty(); }, kSecond));
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(10 + i, &byte, 1, 4096 + i)),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 4u);
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  EXPECT_EQ(dst, content);
  EXPECT_GE(f.pair.b.qp->stats().duplicate_requests, 1u);
  EXPECT_TRUE(log.Monotonic()) << ::testing::PrintToString(log.msns);
  // The replay of the last packet alone (an ONLY) came after B had
  // acknowledged the writes, and counts all four messages (the first stream
  // said 1).
  const auto only = std::find(log.opcodes.begin(), log.opcodes.end(),
                              Opcode::kReadResponseOnly);
  ASSERT_NE(only, log.opcodes.end());
  EXPECT_EQ(log.msns[only - log.opcodes.begin()], 4u);
  EXPECT_EQ(log.msns.front(), 1u);
}

// Read responses hand-made for A, whose READ request B never sees.
class Requester {
 public:
  explicit Requester(uint32_t read_len) : dst_(read_len) {
    f_.pair.a_to_b.drop = [this](std::span<const uint8_t> frame) {
      auto pkt = Decode(frame);
      if (pkt.bth.opcode == Opcode::kReadRequest) requests_.push_back(pkt);
      return true;
    };
    EXPECT_EQ(f_.pair.a.qp->Post(Fixture::Read(1, dst_.data(), read_len, 0)),
              PostResult::kOk);
    f_.pair.a.qp->Poll(32);
    EXPECT_EQ(requests_.size(), 1u);
  }

  // A response to A at the first request's PSN plus `psn_offset`, carrying
  // `len` bytes.
  void Respond(Opcode op, uint32_t psn_offset, uint32_t len,
               uint8_t syndrome = wire::kAethAck | wire::kAethCreditsInvalid) {
    const QpConfig& ac = f_.pair.a.qp->config();
    wire::PacketHeaders h;
    h.path.src_ip = ac.path.dst_ip;
    h.path.dst_ip = ac.path.src_ip;
    h.bth.opcode = op;
    h.bth.dest_qp = ac.local_qpn;
    h.bth.psn = requests_[0].bth.psn + psn_offset;
    h.aeth = {syndrome, 1};
    std::vector<uint8_t> payload(len, 0x5A);
    std::vector<uint8_t> frame(wire::FrameLength(op, len));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    f_.pair.a.qp->HandleFrame(Decode(frame));
    f_.pair.a.qp->Poll(32);
  }

  void ExpectBadResponse() {
    ASSERT_EQ(f_.pair.a.cq.completions.size(), 1u);
    EXPECT_EQ(f_.pair.a.cq.completions[0].status, WcStatus::kBadResponse);
    EXPECT_EQ(f_.pair.a.qp->state(), QpState::kError);
    EXPECT_EQ(f_.pair.a.qp->error_status(), WcStatus::kBadResponse);
    EXPECT_EQ(f_.pair.a.qp->stats().bad_responses, 1u);
  }
  void ExpectSuccess() {
    ASSERT_EQ(f_.pair.a.cq.completions.size(), 1u);
    EXPECT_EQ(f_.pair.a.cq.completions[0].status, WcStatus::kSuccess);
    EXPECT_EQ(dst_, std::vector<uint8_t>(dst_.size(), 0x5A));
  }
  void Timeout() {
    f_.pair.clock.Advance(10 * f_.pair.a.qp->config().retransmit_timeout_ns);
    f_.pair.a.qp->Poll(32);
  }

  Fixture f_;
  std::vector<uint8_t> dst_;
  std::vector<wire::ParsedPacket> requests_;
};

TEST(RequesterTest, ReadResponsesInOrderComplete) {
  Requester r(600);  // three packets at a 256-byte MTU
  r.Respond(Opcode::kReadResponseFirst, 0, 256);
  r.Respond(Opcode::kReadResponseMiddle, 1, 256);
  r.Respond(Opcode::kReadResponseLast, 2, 88);
  r.ExpectSuccess();
  Requester one(100);
  one.Respond(Opcode::kReadResponseOnly, 0, 100);
  one.ExpectSuccess();
  Requester empty(0);
  empty.Respond(Opcode::kReadResponseOnly, 0, 0);
  ASSERT_EQ(empty.f_.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(empty.f_.pair.a.cq.completions[0].status, WcStatus::kSuccess);
}

TEST(RequesterTest, ReadResponsesOutOfOrderAreBadResponses) {
  {
    Requester r(600);  // MIDDLE where the stream must begin
    r.Respond(Opcode::kReadResponseMiddle, 0, 256);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // ONLY for a three-packet read
    r.Respond(Opcode::kReadResponseOnly, 0, 256);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // LAST where the stream must begin
    r.Respond(Opcode::kReadResponseLast, 0, 256);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // a second FIRST
    r.Respond(Opcode::kReadResponseFirst, 0, 256);
    r.Respond(Opcode::kReadResponseFirst, 1, 256);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // LAST before the last PSN
    r.Respond(Opcode::kReadResponseFirst, 0, 256);
    r.Respond(Opcode::kReadResponseLast, 1, 256);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // MIDDLE at the last PSN
    r.Respond(Opcode::kReadResponseFirst, 0, 256);
    r.Respond(Opcode::kReadResponseMiddle, 1, 256);
    r.Respond(Opcode::kReadResponseMiddle, 2, 88);
    r.ExpectBadResponse();
  }
  {
    Requester r(100);  // FIRST for a one-packet read
    r.Respond(Opcode::kReadResponseFirst, 0, 100);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // a FIRST shorter than the MTU
    r.Respond(Opcode::kReadResponseFirst, 0, 200);
    r.ExpectBadResponse();
  }
  {
    Requester r(600);  // a NAK syndrome in a read response's AETH
    r.Respond(Opcode::kReadResponseFirst, 0, 256, wire::kAethNakInvalidRequest);
    r.ExpectBadResponse();
  }
}

TEST(RequesterTest, StaleAndGappedResponsesAreNotBadResponses) {
  Requester r(600);
  r.Respond(Opcode::kReadResponseFirst, 0, 256);
  r.Respond(Opcode::kReadResponseFirst, 0, 256);  // a duplicate: ignored
  r.Respond(Opcode::kReadResponseLast, 2, 88);    // a gap: ask again
  EXPECT_EQ(r.f_.pair.a.qp->state(), QpState::kReadyToSend);
  ASSERT_EQ(r.requests_.size(), 2u);
  EXPECT_EQ(r.requests_[1].bth.psn, r.requests_[0].bth.psn + 1);
  EXPECT_EQ(r.requests_[1].reth.dma_length, 600u - 256u);
  // The answer to the second request begins with a FIRST at its PSN...
  r.Respond(Opcode::kReadResponseFirst, 1, 256);
  r.Respond(Opcode::kReadResponseLast, 2, 88);
  r.ExpectSuccess();
  EXPECT_EQ(r.f_.pair.a.qp->stats().bad_responses, 0u);
}

TEST(RequesterTest, TheFirstStreamMayGoOnAfterARequestForTheRest) {
  Requester r(600);
  r.Respond(Opcode::kReadResponseFirst, 0, 256);
  r.Timeout();  // asks for the rest again
  ASSERT_EQ(r.requests_.size(), 2u);
  // ...and the first stream's MIDDLE and LAST, late, still fit.
  r.Respond(Opcode::kReadResponseMiddle, 1, 256);
  r.Respond(Opcode::kReadResponseLast, 2, 88);
  r.ExpectSuccess();
}

// An ATOMIC ACKNOWLEDGE answers an atomic only: at a READ's PSN it is a bad
// response; stale, it is ignored.
TEST(RequesterTest, AtomicAcknowledgeOfAReadIsABadResponse) {
  {
    Requester r(600);
    r.Respond(Opcode::kAtomicAcknowledge, 0, 0);
    r.ExpectBadResponse();
  }
  {
    Requester r(100);
    r.Respond(Opcode::kReadResponseOnly, 0, 100);
    r.Respond(Opcode::kAtomicAcknowledge, 0, 0);  // after it completed
    r.ExpectSuccess();
    EXPECT_EQ(r.f_.pair.a.qp->state(), QpState::kReadyToSend);
    EXPECT_EQ(r.f_.pair.a.qp->stats().ignored_packets, 1u);
  }
}

}  // namespace
}  // namespace rdmaplane::rc
