// The UD transport: one-packet SENDs (UD SEND ONLY, with immediate data or
// not) to the destination each request names, with a DETH carrying the
// Q_Key and the sender's queue pair; a request completes once sent; the
// receiver takes a datagram with its own Q_Key into the next receive
// request, behind a 40-byte GRH that holds the IPv4 header, and drops the
// others without a word.
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
using testing::Pattern;
using testing::Recv;
using testing::RunUntilQuiet;

constexpr uint32_t kQkey = 0x11111111;

QpConfig UdConfig() {
  QpConfig c = testing::SmallConfig();  // path MTU 256
  c.type = lifecycle::QpType::kUd;
  c.qkey = kQkey;
  return c;
}

// A SEND from `from` to `to`'s queue pair.
WorkRequest Datagram(uint64_t id, const SimPair::Side& to, uint8_t* src,
                     uint32_t len, uint32_t qkey = kQkey, uint32_t flags = 0,
                     uint32_t imm = 0) {
  WorkRequest wr = testing::Send(id, src, len, flags, imm);
  const QpConfig& c = to.qp->config();
  wr.ud.mac = c.path.src_mac;
  wr.ud.ip = c.path.src_ip;
  wr.ud.qpn = c.local_qpn;
  wr.ud.qkey = qkey;
  return wr;
}

TEST(UdTest, DatagramsLandBehindAGrhThatHoldsTheirIpv4Header) {
  SimPair pair(UdConfig(), {}, {});
  std::vector<wire::ParsedPacket> frames;
  std::vector<std::vector<uint8_t>> raw;
  pair.a_to_b.tap = [&](std::span<const uint8_t> f) {
    raw.emplace_back(f.begin(), f.end());
  };
  size_t b_sent = 0;
  pair.b_to_a.tap = [&](std::span<const uint8_t>) { ++b_sent; };
  const uint32_t sizes[] = {0, 100, 256};
  std::vector<std::vector<uint8_t>> sources, targets;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    targets.emplace_back(512, 0xEE);
    ASSERT_EQ(pair.b.qp->PostRecv(Recv(50 + i, targets.back().data(), 512)),
              PostResult::kOk);
  }
  for (size_t i = 0; i < std::size(sizes); ++i) {
    sources.push_back(Pattern(sizes[i], 3 + i));
    const bool imm = i == 1;
    ASSERT_EQ(pair.a.qp->Post(Datagram(i, pair.b, sources.back().data(),
                                       sizes[i], kQkey,
                                       imm ? kWrImmediate | kWrSolicited : 0,
                                       imm ? 0x0A0B0C0D : 0)),
              PostResult::kOk);
  }
  ASSERT_TRUE(RunUntilQuiet(pair));
  ASSERT_EQ(pair.a.cq.completions.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(pair.a.cq.completions[i].wr_id, i);
    EXPECT_EQ(pair.a.cq.completions[i].status, WcStatus::kSuccess);
  }
  ASSERT_EQ(pair.b.cq.receives.size(), 3u);
  ASSERT_EQ(raw.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const RecvCompletion& r = pair.b.cq.receives[i];
    EXPECT_EQ(r.wr_id, 50 + i);
    EXPECT_EQ(r.status, WcStatus::kSuccess);
    EXPECT_TRUE(r.grh);
    EXPECT_EQ(r.src_qp, pair.a.qp->config().local_qpn);
    EXPECT_EQ(r.byte_len, kGrhBytes + sizes[i]);
    EXPECT_EQ(r.with_imm, i == 1);
    EXPECT_EQ(r.solicited, i == 1);
    // 20 bytes of zeros, then the IPv4 header as it was on the wire.
    const std::vector<uint8_t>& t = targets[i];
    EXPECT_TRUE(std::all_of(t.begin(), t.begin() + 20,
                            [](uint8_t b) { return b == 0; }));
    EXPECT_TRUE(std::equal(t.begin() + 20, t.begin() + 40,
                           raw[i].begin() + wire::kEthHeaderLen));
    const uint32_t src_ip = uint32_t{t[32]} << 24 | uint32_t{t[33]} << 16 |
                            uint32_t{t[34]} << 8 | t[35];
    EXPECT_EQ(src_ip, pair.a.qp->config().path.src_ip);
    EXPECT_TRUE(std::equal(sources[i].begin(), sources[i].end(),
                           t.begin() + kGrhBytes));
    EXPECT_EQ(t[kGrhBytes + sizes[i]], 0xEE) << "wrote past the datagram";
    const wire::ParsedPacket pkt = Decode(raw[i]);
    EXPECT_EQ(pkt.bth.opcode, i == 1 ? wire::Opcode::kUdSendOnlyImmediate
                                     : wire::Opcode::kUdSendOnly);
    EXPECT_EQ(pkt.deth.qkey, kQkey);
    EXPECT_EQ(pkt.deth.src_qp, pair.a.qp->config().local_qpn);
    EXPECT_EQ(pkt.bth.dest_qp, pair.b.qp->config().local_qpn);
    EXPECT_FALSE(pkt.bth.ack_req);
  }
  EXPECT_EQ(pair.b.cq.receives[1].imm, 0x0A0B0C0Du);
  EXPECT_EQ(b_sent, 0u) << "UD answers nothing";
  EXPECT_EQ(pair.rejected_frames, 0u);
}

TEST(UdTest, WhatIsNotAOnePacketSendIsRefusedWhenPosted) {
  SimPair pair(UdConfig(), {}, {});
  std::vector<uint8_t> buf(257);
  EXPECT_EQ(pair.a.qp->Post(Datagram(1, pair.b, buf.data(), 257)),
            PostResult::kInvalid);  // more than the path MTU
  WorkRequest write = Datagram(2, pair.b, buf.data(), 8);
  write.opcode = WrOpcode::kWrite;
  EXPECT_EQ(pair.a.qp->Post(write), PostResult::kInvalid);
  WorkRequest read = write;
  read.opcode = WrOpcode::kRead;
  EXPECT_EQ(pair.a.qp->Post(read), PostResult::kInvalid);
  WorkRequest to_zero = Datagram(3, pair.b, buf.data(), 8);
  to_zero.ud.qpn = wire::Qpn(0);
  EXPECT_EQ(pair.a.qp->Post(to_zero), PostResult::kInvalid);
  EXPECT_EQ(pair.a.qp->outstanding(), 0u);
}

TEST(UdTest, AnotherQkeyIsDroppedAndTheTopBitTakesTheSendersOwn) {
  SimPair pair(UdConfig(), {}, {});
  std::vector<uint8_t> data = Pattern(64, 9), target(256, 0);
  ASSERT_EQ(pair.b.qp->PostRecv(Recv(7, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(pair.a.qp->Post(Datagram(1, pair.b, data.data(), 64, kQkey + 1)),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(pair));
  EXPECT_TRUE(pair.b.cq.receives.empty());
  EXPECT_EQ(pair.b.qp->stats().qkey_violations, 1u);
  EXPECT_EQ(pair.b.qp->recv_outstanding(), 1u);
  // The top bit: A's own Q_Key, which is B's.
  ASSERT_EQ(pair.a.qp->Post(Datagram(2, pair.b, data.data(), 64, 0x80000000u)),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(pair));
  ASSERT_EQ(pair.b.cq.receives.size(), 1u);
  EXPECT_EQ(pair.b.cq.receives[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), target.begin() + kGrhBytes));
  ASSERT_EQ(pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(pair.a.cq.completions[0].status, WcStatus::kSuccess);
}

TEST(UdTest, WithoutAReceiveTheDatagramIsLostAndTheNextOneLands) {
  SimPair pair(UdConfig(), {}, {});
  std::vector<uint8_t> first = Pattern(30, 1), second = Pattern(40, 2);
  std::vector<uint8_t> target(128, 0);
  ASSERT_EQ(pair.a.qp->Post(Datagram(1, pair.b, first.data(), 30)),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(pair));
  EXPECT_EQ(pair.b.qp->stats().ud_no_receive, 1u);
  ASSERT_EQ(pair.b.qp->PostRecv(Recv(9, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(pair.a.qp->Post(Datagram(2, pair.b, second.data(), 40)),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(pair));
  ASSERT_EQ(pair.b.cq.receives.size(), 1u);
  EXPECT_EQ(pair.b.cq.receives[0].byte_len, kGrhBytes + 40);
  EXPECT_TRUE(
      std::equal(second.begin(), second.end(), target.begin() + kGrhBytes));
}

TEST(UdTest, AReceiveWithoutRoomForTheGrhAndDataEndsWithALengthError) {
  SimPair pair(UdConfig(), {}, {});
  std::vector<uint8_t> data = Pattern(100, 4);
  std::vector<uint8_t> small(kGrhBytes + 99, 0), fits(kGrhBytes + 100, 0);
  ASSERT_EQ(pair.b.qp->PostRecv(Recv(1, small.data(), small.size())),
            PostResult::kOk);
  ASSERT_EQ(pair.b.qp->PostRecv(Recv(2, fits.data(), fits.size())),
            PostResult::kOk);
  ASSERT_EQ(pair.a.qp->Post(Datagram(1, pair.b, data.data(), 100)),
            PostResult::kOk);
  ASSERT_EQ(pair.a.qp->Post(Datagram(2, pair.b, data.data(), 100)),
            PostResult::kOk);
  ASSERT_TRUE(RunUntilQuiet(pair));
  ASSERT_EQ(pair.b.cq.receives.size(), 2u);
  EXPECT_EQ(pair.b.cq.receives[0].status, WcStatus::kLocalLengthError);
  EXPECT_EQ(pair.b.cq.receives[1].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), fits.begin() + kGrhBytes));
  EXPECT_EQ(pair.b.qp->state(), QpState::kReadyToSend);
}

// A UD queue pair takes UD frames only, and connected ones take none.
TEST(UdTest, FramesOfOtherTransportsAndOtherQueuePairsAreIgnored) {
  SimPair ud(UdConfig(), {}, {});
  SimPair rc(testing::SmallConfig(), {}, {});
  std::vector<uint8_t> data = Pattern(16, 5), target(128, 0);
  std::vector<std::vector<uint8_t>> ud_frames, rc_frames;
  ud.a_to_b.drop = [&](std::span<const uint8_t> f) {
    ud_frames.emplace_back(f.begin(), f.end());
    return true;
  };
  rc.a_to_b.drop = [&](std::span<const uint8_t> f) {
    rc_frames.emplace_back(f.begin(), f.end());
    return true;
  };
  ASSERT_EQ(ud.b.qp->PostRecv(Recv(1, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(rc.b.qp->PostRecv(Recv(1, target.data(), target.size())),
            PostResult::kOk);
  WorkRequest send = Datagram(1, ud.b, data.data(), 16);
  ASSERT_EQ(ud.a.qp->Post(send), PostResult::kOk);
  WorkRequest rc_send = send;
  rc_send.ud = {};
  ASSERT_EQ(rc.a.qp->Post(rc_send), PostResult::kOk);
  ud.a.qp->Poll(8);
  rc.a.qp->Poll(8);
  ASSERT_EQ(ud_frames.size(), 1u);
  ASSERT_EQ(rc_frames.size(), 1u);
  const wire::ParsedPacket datagram = Decode(ud_frames[0]);
  const wire::ParsedPacket connected = Decode(rc_frames[0]);
  // Same QPN and peer on both sides of the swap: only the transport differs.
  rc.b.qp->HandleFrame(datagram);
  ud.b.qp->HandleFrame(connected);
  EXPECT_EQ(rc.b.qp->stats().ignored_packets, 1u);
  EXPECT_EQ(ud.b.qp->stats().ignored_packets, 1u);
  EXPECT_EQ(rc.b.qp->state(), QpState::kReadyToSend);
  EXPECT_TRUE(rc.b.cq.receives.empty());
  EXPECT_TRUE(ud.b.cq.receives.empty());
  // For another queue pair of the same host.
  wire::ParsedPacket elsewhere = datagram;
  elsewhere.bth.dest_qp = wire::Qpn(0x33);
  ud.b.qp->HandleFrame(elsewhere);
  EXPECT_EQ(ud.b.qp->stats().ignored_packets, 2u);
  ud.b.qp->HandleFrame(datagram);
  ASSERT_EQ(ud.b.cq.receives.size(), 1u);
  EXPECT_EQ(ud.b.cq.receives[0].status, WcStatus::kSuccess);
}

}  // namespace
}  // namespace rdmaplane::rc
