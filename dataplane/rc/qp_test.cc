#include "dataplane/rc/qp.h"

#include <gtest/gtest.h>

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

// Responder checks driven with hand-made request frames.
class ResponderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    f_.pair.b_to_a.tap = [this](std::span<const uint8_t> frame) {
      responses_.push_back(Decode(frame));
    };
  }

  void Inject(Opcode op, uint32_t psn_offset, uint32_t payload_len,
              uint32_t dma_length, bool ack_req = true) {
    const QpConfig& bc = f_.pair.b.qp->config();
    wire::PacketHeaders h;
    h.path.src_ip = bc.path.dst_ip;
    h.path.dst_ip = bc.path.src_ip;
    h.bth.opcode = op;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = bc.recv_psn + psn_offset;
    h.bth.ack_req = ack_req;
    h.reth = {testing::kRemoteVa, testing::kKeyOnB, dma_length};
    std::vector<uint8_t> payload(payload_len, 0xAB);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload_len));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    auto pkt = Decode(frame);
    f_.pair.b.qp->HandleFrame(pkt);
    f_.pair.b.qp->Poll(32);
  }

  uint8_t LastSyndrome() const {
    return responses_.empty() ? 0xFF : responses_.back().aeth.syndrome;
  }

  Fixture f_;
  std::vector<wire::ParsedPacket> responses_;
};

TEST_F(ResponderTest, PsnAheadGetsOneSequenceNak) {
  Inject(Opcode::kWriteOnly, 2, 4, 4);
  Inject(Opcode::kWriteOnly, 3, 4, 4);
  Inject(Opcode::kWriteOnly, 4, 4, 4);
  ASSERT_EQ(responses_.size(), 1u);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakPsnSeqError);
  EXPECT_EQ(responses_[0].bth.psn, f_.pair.b.qp->config().recv_psn);
  EXPECT_EQ(f_.b_region[0], 0);  // nothing executed
  // The expected PSN clears the gap; a later gap gets a new NAK.
  Inject(Opcode::kWriteOnly, 0, 4, 4);
  EXPECT_EQ(LastSyndrome(), wire::kAethAck | wire::kAethCreditsInvalid);
  Inject(Opcode::kWriteOnly, 5, 4, 4);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakPsnSeqError);
  EXPECT_EQ(f_.pair.b.qp->stats().seq_naks_sent, 2u);
}

TEST_F(ResponderTest, OpcodeSequenceErrorsGetInvalidRequestNak) {
  Inject(Opcode::kWriteMiddle, 0, 256, 0);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakInvalidRequest);
  Inject(Opcode::kWriteLast, 0, 4, 0);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakInvalidRequest);
  EXPECT_EQ(f_.b_region[0], 0);
}

TEST_F(ResponderTest, ReadInsideWriteIsInvalid) {
  Inject(Opcode::kWriteFirst, 0, 256, 1000, false);
  Inject(Opcode::kReadRequest, 1, 0, 16);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakInvalidRequest);
}

TEST_F(ResponderTest, LengthErrorsGetInvalidRequestNak) {
  // FIRST shorter than the MTU.
  Inject(Opcode::kWriteFirst, 0, 100, 1000);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakInvalidRequest);
  // ONLY whose payload disagrees with the RETH length.
  Inject(Opcode::kWriteOnly, 0, 10, 20);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakInvalidRequest);
  // LAST carrying more than what remains.
  Inject(Opcode::kWriteFirst, 0, 256, 300, false);
  Inject(Opcode::kWriteLast, 1, 100, 0);
  EXPECT_EQ(LastSyndrome(), wire::kAethNakInvalidRequest);
  EXPECT_EQ(f_.pair.b.qp->stats().naks_sent, 3u);
}

TEST_F(ResponderTest, PacketsFromAnotherHostOrQpAreIgnored) {
  const QpConfig& bc = f_.pair.b.qp->config();
  wire::PacketHeaders h;
  h.path.src_ip = 0x0A0000FE;  // not the connected peer
  h.path.dst_ip = bc.path.src_ip;
  h.bth.opcode = Opcode::kWriteOnly;
  h.bth.dest_qp = bc.local_qpn;
  h.bth.psn = bc.recv_psn;
  h.reth = {testing::kRemoteVa, testing::kKeyOnB, 4};
  std::vector<uint8_t> payload(4, 0xAB), frame(100);
  frame.resize(wire::EncodeFrame(h, payload, frame));
  f_.pair.b.qp->HandleFrame(Decode(frame));
  h.path.src_ip = bc.path.dst_ip;
  h.bth.dest_qp = wire::Qpn(0x999);
  frame.resize(100);
  frame.resize(wire::EncodeFrame(h, payload, frame));
  f_.pair.b.qp->HandleFrame(Decode(frame));
  f_.pair.b.qp->Poll(32);
  EXPECT_TRUE(responses_.empty());
  EXPECT_EQ(f_.b_region[0], 0);
  EXPECT_EQ(f_.pair.b.qp->stats().ignored_packets, 2u);
}

}  // namespace
}  // namespace rdmaplane::rc
