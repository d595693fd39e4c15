// The UC transport of a connected queue pair: SENDs and WRITEs with the UC
// opcodes, never acknowledged or resent; a request completes once its last
// packet is sent; a message that lost a packet, found no receive request or
// broke a rule is dropped by the responder alone, which starts over at the
// next message's first packet. READs and atomics are not UC operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

using testing::Decode;
using testing::Fixture;
using testing::Pattern;
using testing::Recv;
using testing::RunUntilQuiet;
using testing::Send;

constexpr uint64_t kSecond = 1'000'000'000;

QpConfig UcConfig() {
  QpConfig c = testing::SmallConfig();  // path MTU 256, window 64 packets
  c.type = lifecycle::QpType::kUc;
  return c;
}

// Counts the frames one direction carries, by opcode, through its tap.
struct OpcodeLog {
  std::vector<wire::Opcode> ops;
  std::vector<uint32_t> psns;
  void Attach(SimWire& w) {
    w.tap = [this](std::span<const uint8_t> frame) {
      const wire::ParsedPacket pkt = Decode(frame);
      ops.push_back(pkt.bth.opcode);
      psns.push_back(pkt.bth.psn.value());
    };
  }
};

TEST(UcTest, WritesAndSendsLandWithoutAnyAcknowledgement) {
  Fixture f(UcConfig());
  OpcodeLog a_to_b, b_to_a;
  a_to_b.Attach(f.pair.a_to_b);
  b_to_a.Attach(f.pair.b_to_a);
  // 64 KiB is 256 packets: four times RC's window, which UC does not keep.
  std::vector<uint8_t> big = Pattern(64 * 1024, 1);
  std::vector<uint8_t> msg = Pattern(1000, 2);
  std::vector<uint8_t> target(2000, 0xEE), imm_target(16, 0xEE);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(70, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(71, imm_target.data(), 16)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, big.data(), big.size(), 0)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Send(2, msg.data(), msg.size(), kWrImmediate,
                                   0x01020304)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(3, msg.data(), 300, 100000,
                                             kWrImmediate | kWrSolicited)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.b.cq.receives.size() == 2; }, kSecond));

  ASSERT_EQ(f.pair.a.cq.completions.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f.pair.a.cq.completions[i].wr_id, i + 1);
    EXPECT_EQ(f.pair.a.cq.completions[i].status, WcStatus::kSuccess);
  }
  EXPECT_EQ(f.pair.a.cq.completions[0].byte_len, big.size());
  EXPECT_TRUE(std::equal(big.begin(), big.end(), f.b_region.begin()));
  EXPECT_TRUE(std::equal(msg.begin(), msg.begin() + 300,
                         f.b_region.begin() + 100000));
  const RecvCompletion& r0 = f.pair.b.cq.receives[0];
  EXPECT_EQ(r0.wr_id, 70u);
  EXPECT_EQ(r0.status, WcStatus::kSuccess);
  EXPECT_EQ(r0.byte_len, msg.size());
  EXPECT_TRUE(r0.with_imm);
  EXPECT_EQ(r0.imm, 0x01020304u);
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), target.begin()));
  EXPECT_EQ(target[msg.size()], 0xEE);
  const RecvCompletion& r1 = f.pair.b.cq.receives[1];
  EXPECT_EQ(r1.wr_id, 71u);
  EXPECT_TRUE(r1.write);
  EXPECT_TRUE(r1.solicited);
  EXPECT_EQ(r1.byte_len, 300u);

  // Every frame A sent is a UC request that asks for no acknowledgement,
  // and B sent nothing back.
  EXPECT_EQ(a_to_b.ops.size(), 256u + 4u + 2u);
  for (wire::Opcode op : a_to_b.ops) {
    EXPECT_TRUE(wire::IsUcOpcode(static_cast<uint8_t>(op)))
        << wire::InfoOf(op).name;
  }
  EXPECT_EQ(a_to_b.ops.front(), wire::Opcode::kUcWriteFirst);
  EXPECT_EQ(a_to_b.ops.back(), wire::Opcode::kUcWriteLastImmediate);
  EXPECT_TRUE(b_to_a.ops.empty());
  EXPECT_EQ(f.pair.b.qp->stats().acks_sent, 0u);
  EXPECT_EQ(f.pair.a.qp->stats().retransmitted_packets, 0u);
  EXPECT_EQ(f.pair.a.qp->timer_deadline_ns(), 0u);
  EXPECT_EQ(f.pair.b.qp->stats().uc_messages_dropped, 0u);
  EXPECT_EQ(f.pair.rejected_frames, 0u);
}

TEST(UcTest, ReadsAndAtomicsAreRefusedWhenPosted) {
  Fixture f(UcConfig());
  uint8_t buf[64];
  uint64_t orig = 0;
  EXPECT_EQ(f.pair.a.qp->Post(Fixture::Read(1, buf, sizeof(buf), 0)),
            PostResult::kInvalid);
  EXPECT_EQ(f.pair.a.qp->Post(Fixture::CompareSwap(2, &orig, 0, 0, 1)),
            PostResult::kInvalid);
  EXPECT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(3, &orig, 0, 1)),
            PostResult::kInvalid);
  EXPECT_EQ(f.pair.a.qp->outstanding(), 0u);
}

// Three SENDs of three packets each; one packet of the second is lost. The
// first and third land in the first two receive requests, and the second
// is gone without a trace at the requester.
void LoseOnePacketOfTheSecondMessage(uint32_t lost_index) {
  Fixture f(UcConfig());
  uint32_t frame_no = 0;
  f.pair.a_to_b.drop = [&](std::span<const uint8_t>) {
    return frame_no++ == lost_index;
  };
  std::vector<std::vector<uint8_t>> msgs = {Pattern(700, 1), Pattern(600, 2),
                                            Pattern(650, 3)};
  std::vector<std::vector<uint8_t>> targets(3, std::vector<uint8_t>(1024, 0));
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(10 + i, targets[i].data(), 1024)),
              PostResult::kOk);
  }
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Send(i, msgs[i].data(), msgs[i].size())),
              PostResult::kOk);
  }
  ASSERT_TRUE(RunUntilQuiet(f.pair));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 3u);
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  ASSERT_EQ(f.pair.b.cq.receives.size(), 2u);
  EXPECT_EQ(f.pair.b.cq.receives[0].wr_id, 10u);
  EXPECT_EQ(f.pair.b.cq.receives[0].byte_len, 700u);
  EXPECT_TRUE(std::equal(msgs[0].begin(), msgs[0].end(), targets[0].begin()));
  // The receive the lost message had begun to fill takes the next one.
  EXPECT_EQ(f.pair.b.cq.receives[1].wr_id, 11u);
  EXPECT_EQ(f.pair.b.cq.receives[1].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.b.cq.receives[1].byte_len, 650u);
  EXPECT_TRUE(std::equal(msgs[2].begin(), msgs[2].end(), targets[1].begin()));
  EXPECT_EQ(f.pair.b.qp->recv_outstanding(), 1u);
  EXPECT_EQ(f.pair.b.qp->stats().uc_messages_dropped, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().acks_sent, 0u);
  EXPECT_EQ(f.pair.b.qp->stats().naks_sent, 0u);
  EXPECT_EQ(f.pair.a.qp->stats().retransmitted_packets, 0u);
  EXPECT_EQ(f.pair.b.qp->state(), QpState::kReadyToSend);
}

TEST(UcTest, ALostFirstPacketDropsItsMessageOnly) {
  LoseOnePacketOfTheSecondMessage(3);
}
TEST(UcTest, ALostMiddlePacketDropsItsMessageOnly) {
  LoseOnePacketOfTheSecondMessage(4);
}
// The next message's FIRST arrives while the second still waits for its
// LAST: the second is given up and the third starts.
TEST(UcTest, ALostLastPacketDropsItsMessageOnly) {
  LoseOnePacketOfTheSecondMessage(5);
}

TEST(UcTest, ASendWithoutAReceiveIsDroppedAndTheNextOneLands) {
  Fixture f(UcConfig());
  std::vector<uint8_t> first = Pattern(500, 4), second = Pattern(40, 5);
  std::vector<uint8_t> target(512, 0);
  ASSERT_EQ(f.pair.a.qp->Post(Send(1, first.data(), first.size())),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(f.pair));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(f.pair.b.cq.receives.empty());
  EXPECT_EQ(f.pair.b.qp->stats().uc_messages_dropped, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().rnr_naks_sent, 0u);

  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(9, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Send(2, second.data(), second.size())),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(f.pair));
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_EQ(f.pair.b.cq.receives[0].wr_id, 9u);
  EXPECT_EQ(f.pair.b.cq.receives[0].byte_len, 40u);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), target.begin()));
}

TEST(UcTest, AWriteTheResponderRefusesIsDroppedAndTheQueuePairGoesOn) {
  Fixture f(UcConfig());
  std::vector<uint8_t> data = Pattern(600, 6);
  // An rkey B does not know, then one past B's region, then a good one.
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(1, data.data(), data.size(), 0,
                                             0, wire::Rkey(0x7777))),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(2, data.data(), data.size(),
                                             f.b_region.size() - 100)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(3, data.data(), data.size(), 64)),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(f.pair));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 3u);
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);  // UC's requester never knows
  }
  EXPECT_EQ(f.pair.b.qp->stats().access_errors, 2u);
  EXPECT_EQ(f.pair.b.qp->stats().uc_messages_dropped, 2u);
  EXPECT_EQ(f.pair.b.qp->stats().naks_sent, 0u);
  EXPECT_EQ(f.pair.b.qp->state(), QpState::kReadyToSend);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), f.b_region.begin() + 64));
  EXPECT_EQ(f.pair.b.memory.pins(), 0);
}

TEST(UcTest, AReceiveTooSmallEndsWithALengthErrorAndTheNextMessageLands) {
  Fixture f(UcConfig());
  std::vector<uint8_t> big = Pattern(700, 7), small = Pattern(30, 8);
  std::vector<uint8_t> t0(100, 0), t1(100, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(20, t0.data(), t0.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(21, t1.data(), t1.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Send(1, big.data(), big.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Send(2, small.data(), small.size())),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(f.pair));
  ASSERT_EQ(f.pair.b.cq.receives.size(), 2u);
  EXPECT_EQ(f.pair.b.cq.receives[0].wr_id, 20u);
  EXPECT_EQ(f.pair.b.cq.receives[0].status, WcStatus::kLocalLengthError);
  EXPECT_EQ(f.pair.b.cq.receives[1].wr_id, 21u);
  EXPECT_EQ(f.pair.b.cq.receives[1].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.b.cq.receives[1].byte_len, 30u);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), t1.begin()));
}

// A UC queue pair takes only UC frames, and an RC one only RC frames, even
// from its peer at the right PSN.
TEST(UcTest, TheOtherTransportsFramesAreIgnored) {
  QpConfig rc_config = testing::SmallConfig();
  Fixture rc(rc_config), uc(UcConfig());
  std::vector<uint8_t> data = Pattern(100, 9);
  std::vector<std::vector<uint8_t>> rc_frames, uc_frames;
  rc.pair.a_to_b.drop = [&](std::span<const uint8_t> frame) {
    rc_frames.emplace_back(frame.begin(), frame.end());
    return true;
  };
  uc.pair.a_to_b.drop = [&](std::span<const uint8_t> frame) {
    uc_frames.emplace_back(frame.begin(), frame.end());
    return true;
  };
  ASSERT_EQ(rc.pair.a.qp->Post(Fixture::Write(1, data.data(), 100, 0)),
            PostResult::kOk);
  ASSERT_EQ(uc.pair.a.qp->Post(Fixture::Write(1, data.data(), 100, 0)),
            PostResult::kOk);
  rc.pair.Step();
  uc.pair.Step();
  ASSERT_EQ(rc_frames.size(), 1u);
  ASSERT_EQ(uc_frames.size(), 1u);
  // Each pair's B has the same QPN and addresses: only the transport
  // differs.
  wire::ParsedPacket to_uc = Decode(rc_frames[0]);
  wire::ParsedPacket to_rc = Decode(uc_frames[0]);
  ASSERT_EQ(to_uc.bth.opcode, wire::Opcode::kWriteOnly);
  ASSERT_EQ(to_rc.bth.opcode, wire::Opcode::kUcWriteOnly);
  uc.pair.b.qp->HandleFrame(to_uc);
  rc.pair.b.qp->HandleFrame(to_rc);
  EXPECT_EQ(uc.pair.b.qp->stats().ignored_packets, 1u);
  EXPECT_EQ(rc.pair.b.qp->stats().ignored_packets, 1u);
  EXPECT_EQ(uc.pair.b.qp->stats().rx_packets, 0u);
  EXPECT_EQ(rc.pair.b.qp->stats().rx_packets, 0u);
  auto untouched = [](const std::vector<uint8_t>& region) {
    return std::all_of(region.begin(), region.begin() + 100,
                       [](uint8_t b) { return b == 0; });
  };
  EXPECT_TRUE(untouched(uc.b_region));
  EXPECT_TRUE(untouched(rc.b_region));
}

}  // namespace
}  // namespace rdmaplane::rc
