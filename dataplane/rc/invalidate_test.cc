// SEND with Invalidate in the RC transport: the last (or only) packet of a
// SEND carries an IETH naming an R_Key of the responder's side, which the
// responder invalidates once the message is placed and before its receive
// completes; a key it may not invalidate fails the receive and ends the
// connection after an ACK (IBA responder class J); duplicates and resends
// never invalidate twice; UC and UD have no such opcode.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

using testing::Decode;
using testing::Fixture;
using testing::kKeyOnB;
using testing::Pattern;
using testing::Recv;
using testing::Send;
using wire::Opcode;

constexpr uint64_t kSecond = 1'000'000'000;

WorkRequest SendInvalidate(uint64_t id, uint8_t* src, uint32_t len,
                           wire::Rkey rkey, uint32_t flags = 0) {
  WorkRequest wr = Send(id, src, len, flags | kWrInvalidate);
  wr.invalidate_rkey = rkey;
  return wr;
}

wire::Qpn QpnOf(const SimPair::Side& side) {
  return side.qp->config().local_qpn;
}

// The frames one direction of a SimPair carries, as parsed (their spans
// point into a reused buffer: `payloads` keeps copies).
struct FrameLog {
  std::vector<wire::ParsedPacket> frames;
  std::vector<std::vector<uint8_t>> payloads;
  void Attach(SimWire& w) {
    w.tap = [this](std::span<const uint8_t> frame) {
      frames.push_back(Decode(frame));
      payloads.emplace_back(frames.back().payload.begin(),
                            frames.back().payload.end());
      frames.back().payload = {};
      frames.back().ipv4_header = {};
    };
  }
  std::vector<wire::ParsedPacket> Requests() const {
    std::vector<wire::ParsedPacket> out;
    for (const wire::ParsedPacket& p : frames) {
      if (wire::IsRequest(p.bth.opcode)) out.push_back(p);
    }
    return out;
  }
  size_t Count(Opcode op) const {
    return std::count_if(
        frames.begin(), frames.end(),
        [op](const wire::ParsedPacket& p) { return p.bth.opcode == op; });
  }
};

TEST(InvalidateTest, EverySizeInvalidatesTheKeyOnceThePayloadIsPlaced) {
  for (uint32_t len : {0u, 1u, 256u, 257u, 600u, 1024u}) {
    SCOPED_TRACE(len);
    Fixture f;  // path MTU 256
    TestMemory& memory = f.pair.b.memory;
    memory.AllowInvalidate(QpnOf(f.pair.b), kKeyOnB);
    FrameLog sent;
    sent.Attach(f.pair.a_to_b);
    std::vector<uint8_t> src = Pattern(len, len + 1);
    std::vector<uint8_t> target(len + 16, 0xEE);
    // When the key goes, the whole message is in the receive's buffer and
    // the receive has not completed yet.
    bool placed_first = false;
    memory.on_invalidate = [&](wire::Rkey) {
      placed_first = f.pair.b.cq.receives.empty() &&
                     std::equal(src.begin(), src.end(), target.begin());
    };
    ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(50, target.data(), target.size())),
              PostResult::kOk);
    ASSERT_EQ(f.pair.a.qp->Post(
                  SendInvalidate(1, src.data(), len, kKeyOnB, kWrSolicited)),
              PostResult::kOk);
    ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));

    ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
    const Completion& c = f.pair.a.cq.completions[0];
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WrOpcode::kSend);
    EXPECT_EQ(c.byte_len, len);
    ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
    const RecvCompletion& r = f.pair.b.cq.receives[0];
    EXPECT_EQ(r.wr_id, 50u);
    EXPECT_EQ(r.status, WcStatus::kSuccess);
    EXPECT_EQ(r.byte_len, len);
    EXPECT_TRUE(r.invalidated);
    EXPECT_EQ(r.invalidated_rkey, kKeyOnB);
    EXPECT_FALSE(r.with_imm);
    EXPECT_TRUE(r.solicited);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin()));
    EXPECT_EQ(target[len], 0xEE) << "placed past the message";
    EXPECT_TRUE(placed_first);
    EXPECT_EQ(memory.invalidate_calls(), 1u);
    EXPECT_EQ(memory.invalidations(), 1u);
    EXPECT_EQ(f.pair.b.qp->stats().invalidations, 1u);
    EXPECT_EQ(f.pair.b.qp->stats().invalidate_errors, 0u);

    // FIRST, MIDDLE... as any SEND; only the last packet carries the IETH.
    const std::vector<wire::ParsedPacket> requests = sent.Requests();
    const size_t packets = len == 0 ? 1 : (len + 255) / 256;
    ASSERT_EQ(requests.size(), packets);
    for (size_t i = 0; i + 1 < packets; ++i) {
      EXPECT_EQ(requests[i].bth.opcode,
                i == 0 ? Opcode::kSendFirst : Opcode::kSendMiddle);
      EXPECT_FALSE(requests[i].bth.solicited);
    }
    EXPECT_EQ(requests.back().bth.opcode, packets == 1
                                              ? Opcode::kSendOnlyInvalidate
                                              : Opcode::kSendLastInvalidate);
    EXPECT_EQ(requests.back().ieth.rkey, kKeyOnB);
    EXPECT_TRUE(requests.back().bth.solicited);

    // The key no longer resolves: a WRITE with it is refused.
    uint8_t byte = 1;
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(2, &byte, 1, 0)),
              PostResult::kOk);
    ASSERT_TRUE(f.pair.RunUntil(
        [&] { return f.pair.a.cq.completions.size() == 2; }, kSecond));
    EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kRemoteAccessError);
    EXPECT_EQ(f.pair.b.qp->error_status(), WcStatus::kPeerAccessError);
    EXPECT_EQ(f.b_region[0], 0);
  }
}

// IBA class J: the data are placed and acknowledged, the receive fails, and
// the responder's queue pair enters the error state once the ACK is out.
TEST(InvalidateTest, AKeyThatCannotBeInvalidatedFailsTheReceiveAndTheQp) {
  Fixture f;
  TestMemory& memory = f.pair.b.memory;
  // The key is a window of A's connection, not of B's: B may not
  // invalidate it.
  memory.AllowInvalidate(QpnOf(f.pair.a), kKeyOnB);
  FrameLog sent, answers;
  sent.Attach(f.pair.a_to_b);
  answers.Attach(f.pair.b_to_a);
  std::vector<uint8_t> src = Pattern(600, 3);
  std::vector<uint8_t> target(1024, 0xEE);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(50, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(51, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(SendInvalidate(1, src.data(), 600, kKeyOnB)),
            PostResult::kOk);
  uint8_t bytes[4] = {1, 2, 3, 4};
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Write(2, bytes, 4, 0)), PostResult::kOk);
  f.pair.Step();  // A sends the SEND's three packets and the WRITE
  ASSERT_EQ(sent.Requests().size(), 4u);
  // B has a request of its own queued when its QP fails: it is flushed.
  uint8_t byte = 9;
  ASSERT_EQ(
      f.pair.b.qp->Post(Fixture::Write(7, &byte, 1, 0, 0, testing::kKeyOnA)),
      PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.a.cq.completions.size() == 2; }, kSecond));

  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  const RecvCompletion& r = f.pair.b.cq.receives[0];
  EXPECT_EQ(r.wr_id, 50u);
  EXPECT_EQ(r.status, WcStatus::kInvalidateError);
  EXPECT_EQ(r.byte_len, 600u);
  EXPECT_FALSE(r.invalidated);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin()));
  EXPECT_EQ(memory.invalidate_calls(), 1u);
  EXPECT_EQ(memory.invalidations(), 0u);
  EXPECT_EQ(f.pair.b.qp->stats().invalidate_errors, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().invalidations, 0u);
  // Nothing was invalidated: the key still resolves.
  const ResolvedMemory still = memory.Resolve(
      QpnOf(f.pair.b), kKeyOnB, testing::kRemoteVa, 4, RemoteAccess::kWrite);
  EXPECT_EQ(still.check, AccessCheck::kOk);
  memory.Release(kKeyOnB);

  // The SEND is acknowledged, positively and once; nothing else is answered.
  const std::vector<wire::ParsedPacket> requests = sent.Requests();
  ASSERT_EQ(answers.frames.size(), 1u);
  EXPECT_EQ(answers.frames[0].bth.opcode, Opcode::kAcknowledge);
  EXPECT_EQ(answers.frames[0].aeth.syndrome >> 5, 0);
  EXPECT_EQ(answers.frames[0].bth.psn, requests[2].bth.psn);
  EXPECT_EQ(requests[2].bth.opcode, Opcode::kSendLastInvalidate);
  EXPECT_EQ(f.pair.a.cq.completions[0].wr_id, 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  // The WRITE behind it was never executed, and never answered.
  EXPECT_EQ(f.pair.a.cq.completions[1].wr_id, 2u);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(f.b_region[0], 0);

  EXPECT_EQ(f.pair.b.qp->state(), QpState::kError);
  EXPECT_EQ(f.pair.b.qp->error_status(), WcStatus::kPeerInvalidRequest);
  ASSERT_EQ(f.pair.b.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.b.cq.completions[0].wr_id, 7u);
  EXPECT_EQ(f.pair.b.cq.completions[0].status, WcStatus::kFlushed);
  EXPECT_EQ(f.pair.b.qp->stats().naks_sent, 0u);
  EXPECT_EQ(memory.pins(), 0);
}

// Frames from A's address straight to B's responder, at B's expected PSN
// plus an offset; B's answers are collected.
class Injector {
 public:
  Injector() { answers_.Attach(f_.pair.b_to_a); }

  void Inject(Opcode op, uint32_t psn_offset, uint32_t payload_len,
              wire::Rkey ieth_rkey = kKeyOnB, bool ack_req = true) {
    const QpConfig& bc = qp().config();
    wire::PacketHeaders h;
    h.path.src_ip = bc.path.dst_ip;
    h.path.dst_ip = bc.path.src_ip;
    h.bth.opcode = op;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = bc.recv_psn + psn_offset;
    h.bth.ack_req = ack_req;
    h.ieth.rkey = ieth_rkey;
    const std::vector<uint8_t> payload = Pattern(payload_len, psn_offset + 1);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload_len));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    const wire::ParsedPacket pkt = Decode(frame);
    ASSERT_EQ(pkt.bth.opcode, op);
    qp().HandleFrame(pkt);
    qp().Poll(32);
  }

  RcQp& qp() { return *f_.pair.b.qp; }
  TestMemory& memory() { return f_.pair.b.memory; }
  const std::vector<wire::ParsedPacket>& answers() const {
    return answers_.frames;
  }
  uint8_t LastSyndrome() const {
    return answers_.frames.empty() ? 0xFF
                                   : answers_.frames.back().aeth.syndrome;
  }

  Fixture f_;

 private:
  FrameLog answers_;
};

TEST(InvalidateTest, DuplicatesAreAcknowledgedAgainButNeverInvalidateAgain) {
  Injector in;
  const wire::Qpn b = QpnOf(in.f_.pair.b);
  const wire::Rkey window(0x3003);  // a key with no region of its own
  in.memory().AllowInvalidate(b, kKeyOnB);
  in.memory().AllowInvalidate(b, window);
  std::vector<uint8_t> target(1024, 0);
  for (uint64_t id = 0; id < 3; ++id) {
    ASSERT_EQ(in.qp().PostRecv(Recv(id, target.data(), target.size())),
              PostResult::kOk);
  }
  in.Inject(Opcode::kSendOnlyInvalidate, 0, 8, kKeyOnB);
  in.Inject(Opcode::kSendFirst, 1, 256, window, /*ack_req=*/false);
  in.Inject(Opcode::kSendLastInvalidate, 2, 10, window);
  ASSERT_EQ(in.f_.pair.b.cq.receives.size(), 2u);
  EXPECT_TRUE(in.f_.pair.b.cq.receives[0].invalidated);
  EXPECT_EQ(in.f_.pair.b.cq.receives[0].invalidated_rkey, kKeyOnB);
  EXPECT_TRUE(in.f_.pair.b.cq.receives[1].invalidated);
  EXPECT_EQ(in.f_.pair.b.cq.receives[1].invalidated_rkey, window);
  EXPECT_EQ(in.f_.pair.b.cq.receives[1].byte_len, 266u);
  ASSERT_EQ(in.memory().invalidations(), 2u);
  ASSERT_EQ(in.answers().size(), 2u);

  // Both keys could be invalidated again: the resent messages, every
  // packet of them, are answered and do nothing else.
  in.memory().AllowInvalidate(b, kKeyOnB);
  in.memory().AllowInvalidate(b, window);
  in.Inject(Opcode::kSendOnlyInvalidate, 0, 8, kKeyOnB);
  in.Inject(Opcode::kSendFirst, 1, 256, window);
  in.Inject(Opcode::kSendLastInvalidate, 2, 10, window);
  EXPECT_EQ(in.memory().invalidate_calls(), 2u);
  EXPECT_EQ(in.memory().invalidations(), 2u);
  EXPECT_EQ(in.f_.pair.b.cq.receives.size(), 2u);
  EXPECT_EQ(in.qp().recv_outstanding(), 1u);
  EXPECT_EQ(in.qp().stats().duplicate_requests, 3u);
  ASSERT_EQ(in.answers().size(), 5u);
  for (const wire::ParsedPacket& a : in.answers()) {
    EXPECT_EQ(a.bth.opcode, Opcode::kAcknowledge);
    EXPECT_EQ(a.aeth.syndrome >> 5, 0);
  }
  EXPECT_EQ(in.answers().back().bth.psn, in.qp().config().recv_psn + 2);
  EXPECT_EQ(in.qp().state(), QpState::kReadyToSend);
  // The keys are still allowed: nothing took them.
  EXPECT_TRUE(in.memory().Invalidate(b, kKeyOnB));
  EXPECT_TRUE(in.memory().Invalidate(b, window));
}

TEST(InvalidateTest, InvalidateOpcodesOutOfSequenceOrTooLongAreRefused) {
  {
    Injector in;  // a LAST with no message begun
    in.memory().AllowInvalidate(QpnOf(in.f_.pair.b), kKeyOnB);
    std::vector<uint8_t> target(64, 0);
    ASSERT_EQ(in.qp().PostRecv(Recv(1, target.data(), 64)), PostResult::kOk);
    in.Inject(Opcode::kSendLastInvalidate, 0, 8);
    EXPECT_EQ(in.LastSyndrome(), wire::kAethNakInvalidRequest);
    EXPECT_EQ(in.qp().state(), QpState::kError);
    EXPECT_EQ(in.memory().invalidate_calls(), 0u);
  }
  {
    Injector in;  // an ONLY inside a message
    in.memory().AllowInvalidate(QpnOf(in.f_.pair.b), kKeyOnB);
    std::vector<uint8_t> target(1024, 0);
    ASSERT_EQ(in.qp().PostRecv(Recv(1, target.data(), 1024)), PostResult::kOk);
    in.Inject(Opcode::kSendFirst, 0, 256, kKeyOnB, /*ack_req=*/false);
    in.Inject(Opcode::kSendOnlyInvalidate, 1, 8);
    EXPECT_EQ(in.LastSyndrome(), wire::kAethNakInvalidRequest);
    EXPECT_EQ(in.answers().back().bth.psn, in.qp().config().recv_psn + 1);
    EXPECT_EQ(in.qp().state(), QpState::kError);
    EXPECT_EQ(in.memory().invalidate_calls(), 0u);
    EXPECT_TRUE(in.f_.pair.b.cq.receives.empty());
  }
  {
    Injector in;  // longer than the receive: nothing is invalidated
    in.memory().AllowInvalidate(QpnOf(in.f_.pair.b), kKeyOnB);
    std::vector<uint8_t> target(16, 0);
    ASSERT_EQ(in.qp().PostRecv(Recv(1, target.data(), 16)), PostResult::kOk);
    in.Inject(Opcode::kSendOnlyInvalidate, 0, 17);
    EXPECT_EQ(in.LastSyndrome(), wire::kAethNakInvalidRequest);
    ASSERT_EQ(in.f_.pair.b.cq.receives.size(), 1u);
    EXPECT_EQ(in.f_.pair.b.cq.receives[0].status, WcStatus::kLocalLengthError);
    EXPECT_FALSE(in.f_.pair.b.cq.receives[0].invalidated);
    EXPECT_EQ(in.memory().invalidate_calls(), 0u);
  }
}

// The ACK of an executed SEND with Invalidate is lost, and the key could be
// invalidated again by then: the requester resends the same packet, IETH
// and all, and the responder takes it for the duplicate it is.
TEST(InvalidateTest, AResendAfterALostAckDoesNotInvalidateAgain) {
  Fixture f;
  TestMemory& memory = f.pair.b.memory;
  const wire::Qpn b = QpnOf(f.pair.b);
  memory.AllowInvalidate(b, kKeyOnB);
  FrameLog sent;
  sent.Attach(f.pair.a_to_b);
  bool dropped = false;
  f.pair.b_to_a.drop = [&](std::span<const uint8_t> frame) {
    if (dropped || Decode(frame).bth.opcode != Opcode::kAcknowledge) {
      return false;
    }
    memory.AllowInvalidate(b, kKeyOnB);
    return dropped = true;
  };
  std::vector<uint8_t> src = Pattern(200, 5);
  std::vector<uint8_t> target(1024, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(50, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(51, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(SendInvalidate(1, src.data(), 200, kKeyOnB)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_TRUE(dropped);
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.a.qp->stats().retransmitted_packets, 1u);
  ASSERT_EQ(sent.frames.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const wire::ParsedPacket& p = sent.frames[i];
    EXPECT_EQ(p.bth.opcode, Opcode::kSendOnlyInvalidate);
    EXPECT_EQ(p.bth.psn, sent.frames[0].bth.psn);
    EXPECT_EQ(p.ieth.rkey, kKeyOnB);
    EXPECT_EQ(sent.payloads[i], src);
  }
  EXPECT_EQ(f.pair.b.qp->stats().duplicate_requests, 1u);
  EXPECT_EQ(memory.invalidate_calls(), 1u);
  EXPECT_EQ(memory.invalidations(), 1u);
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_TRUE(f.pair.b.cq.receives[0].invalidated);
  EXPECT_EQ(f.pair.b.qp->recv_outstanding(), 1u);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin()));
}

// The last packet, the one with the IETH, is lost: nothing is invalidated
// until the resend completes the message, and then once.
TEST(InvalidateTest, ALostLastPacketIsResentWithItsIeth) {
  Fixture f;
  TestMemory& memory = f.pair.b.memory;
  memory.AllowInvalidate(QpnOf(f.pair.b), kKeyOnB);
  FrameLog sent;
  sent.Attach(f.pair.a_to_b);
  bool dropped = false;
  f.pair.a_to_b.drop = [&](std::span<const uint8_t> frame) {
    if (dropped || Decode(frame).bth.opcode != Opcode::kSendLastInvalidate) {
      return false;
    }
    return dropped = true;
  };
  std::vector<uint8_t> src = Pattern(700, 6);
  std::vector<uint8_t> target(1024, 0);
  bool placed_first = false;
  memory.on_invalidate = [&](wire::Rkey) {
    placed_first = f.pair.b.cq.receives.empty() &&
                   std::equal(src.begin(), src.end(), target.begin());
  };
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(50, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(SendInvalidate(1, src.data(), 700, kKeyOnB)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_TRUE(dropped);
  EXPECT_GE(f.pair.a.qp->stats().timeouts, 1u);
  EXPECT_EQ(sent.Count(Opcode::kSendLastInvalidate), 2u);
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_EQ(f.pair.b.cq.receives[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(f.pair.b.cq.receives[0].invalidated);
  EXPECT_EQ(f.pair.b.cq.receives[0].byte_len, 700u);
  EXPECT_TRUE(placed_first);
  EXPECT_EQ(memory.invalidate_calls(), 1u);
  EXPECT_EQ(memory.invalidations(), 1u);
}

// Over a link that loses, duplicates and reorders frames both ways, every
// SEND with Invalidate invalidates its own key, exactly once, in order.
TEST(InvalidateTest, LossDuplicationAndReorderingInvalidateEachKeyOnce) {
  fault::FaultSpec faults;
  faults.loss = 0.08;
  faults.duplicate = 0.05;
  faults.reorder = 0.05;
  faults.reorder_ns = 20'000;
  faults.seed = 7;
  fault::FaultSpec back = faults;
  back.seed = 8;
  Fixture f(testing::SmallConfig(), faults, back);
  TestMemory& memory = f.pair.b.memory;
  constexpr uint32_t kMessages = 40;
  auto key = [](uint32_t i) { return wire::Rkey(0x5000 + i); };
  std::vector<std::vector<uint8_t>> sources, targets;
  for (uint32_t i = 0; i < kMessages; ++i) {
    memory.AllowInvalidate(QpnOf(f.pair.b), key(i));
    targets.emplace_back(1024, 0);
    ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(i, targets.back().data(), 1024)),
              PostResult::kOk);
  }
  for (uint32_t i = 0; i < kMessages; ++i) {
    const uint32_t len = (i * 97) % 900;
    sources.push_back(Pattern(len, i + 1));
    ASSERT_EQ(f.pair.a.qp->Post(
                  SendInvalidate(i, sources.back().data(), len, key(i))),
              PostResult::kOk);
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(10 * kSecond));
  EXPECT_EQ(f.pair.rejected_frames, 0u);
  EXPECT_GT(f.pair.a_to_b.faults().dropped, 0u);
  EXPECT_GT(f.pair.b_to_a.faults().dropped, 0u);
  EXPECT_GT(f.pair.b.qp->stats().duplicate_requests, 0u);
  ASSERT_EQ(f.pair.a.cq.completions.size(), kMessages);
  ASSERT_EQ(f.pair.b.cq.receives.size(), kMessages);
  for (uint32_t i = 0; i < kMessages; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(f.pair.a.cq.completions[i].status, WcStatus::kSuccess);
    const RecvCompletion& r = f.pair.b.cq.receives[i];
    EXPECT_EQ(r.wr_id, i);
    EXPECT_EQ(r.status, WcStatus::kSuccess);
    EXPECT_TRUE(r.invalidated);
    EXPECT_EQ(r.invalidated_rkey, key(i));
    EXPECT_EQ(r.byte_len, sources[i].size());
    EXPECT_TRUE(
        std::equal(sources[i].begin(), sources[i].end(), targets[i].begin()));
  }
  EXPECT_EQ(memory.invalidate_calls(), kMessages);
  EXPECT_EQ(memory.invalidations(), kMessages);
}

TEST(InvalidateTest, WithoutAReceiveTheSendIsRnrNakedAndInvalidatesNothing) {
  QpConfig config = testing::SmallConfig();
  config.rnr_retry = 7;  // for ever
  config.min_rnr_timer = 1;
  Fixture f(config);
  TestMemory& memory = f.pair.b.memory;
  memory.AllowInvalidate(QpnOf(f.pair.b), kKeyOnB);
  std::vector<uint8_t> src = Pattern(600, 8);
  ASSERT_EQ(f.pair.a.qp->Post(SendInvalidate(1, src.data(), 600, kKeyOnB)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntil(
      [&] { return f.pair.b.qp->stats().rnr_naks_sent >= 2; }, kSecond));
  EXPECT_EQ(memory.invalidate_calls(), 0u);
  EXPECT_TRUE(f.pair.b.cq.receives.empty());
  EXPECT_TRUE(f.pair.a.cq.completions.empty());
  std::vector<uint8_t> target(1024, 0);
  ASSERT_EQ(f.pair.b.qp->PostRecv(Recv(50, target.data(), target.size())),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_TRUE(f.pair.b.cq.receives[0].invalidated);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin()));
  EXPECT_EQ(memory.invalidate_calls(), 1u);
  EXPECT_EQ(memory.invalidations(), 1u);
}

TEST(InvalidateTest, PostTakesInvalidateOnlyForAnRcSendWithoutImmediate) {
  uint8_t buf[8] = {};
  {
    Fixture f;
    RcQp& qp = *f.pair.a.qp;
    EXPECT_EQ(qp.Post(SendInvalidate(1, buf, 8, kKeyOnB, kWrImmediate)),
              PostResult::kInvalid);
    for (WrOpcode op : {WrOpcode::kWrite, WrOpcode::kRead,
                        WrOpcode::kCompareSwap, WrOpcode::kFetchAdd}) {
      SCOPED_TRACE(static_cast<int>(op));
      WorkRequest wr = Fixture::Write(1, buf, 8, 0, kWrInvalidate);
      wr.opcode = op;
      wr.invalidate_rkey = kKeyOnB;
      // Valid without the flag: only the flag is refused.
      WorkRequest without = wr;
      without.flags = 0;
      EXPECT_EQ(qp.Post(wr), PostResult::kInvalid);
      EXPECT_EQ(qp.Post(without), PostResult::kOk);
    }
    EXPECT_EQ(qp.outstanding(), 4u);
    EXPECT_EQ(qp.Post(SendInvalidate(2, buf, 8, kKeyOnB, kWrSolicited)),
              PostResult::kOk);
  }
  {
    QpConfig uc = testing::SmallConfig();
    uc.type = lifecycle::QpType::kUc;
    Fixture f(uc);
    EXPECT_EQ(f.pair.a.qp->Post(SendInvalidate(1, buf, 8, kKeyOnB)),
              PostResult::kInvalid);
    EXPECT_EQ(f.pair.a.qp->Post(Send(1, buf, 8)), PostResult::kOk);
    EXPECT_EQ(f.pair.a.qp->outstanding(), 1u);
  }
  {
    QpConfig ud = testing::SmallConfig();
    ud.type = lifecycle::QpType::kUd;
    ud.qkey = 0x11111111;
    SimPair pair(ud, {}, {});
    WorkRequest wr = SendInvalidate(1, buf, 8, kKeyOnB);
    const QpConfig& to = pair.b.qp->config();
    wr.ud = {to.path.src_mac, to.path.src_ip, to.local_qpn, ud.qkey};
    EXPECT_EQ(pair.a.qp->Post(wr), PostResult::kInvalid);
    wr.flags = 0;
    EXPECT_EQ(pair.a.qp->Post(wr), PostResult::kOk);
    EXPECT_EQ(pair.a.qp->outstanding(), 1u);
  }
}

// The UC opcodes have no SEND with Invalidate; RC's, sent to a UC queue
// pair by its own peer at the right PSN, are foreign and dropped.
TEST(InvalidateTest, AUcQueuePairDropsTheRcInvalidateOpcodes) {
  QpConfig uc = testing::SmallConfig();
  uc.type = lifecycle::QpType::kUc;
  Fixture f(uc);
  RcQp& qp = *f.pair.b.qp;
  f.pair.b.memory.AllowInvalidate(QpnOf(f.pair.b), kKeyOnB);
  std::vector<uint8_t> target(64, 0);
  ASSERT_EQ(qp.PostRecv(Recv(1, target.data(), 64)), PostResult::kOk);
  for (Opcode op : {Opcode::kSendOnlyInvalidate, Opcode::kSendLastInvalidate}) {
    const QpConfig& bc = qp.config();
    wire::PacketHeaders h;
    h.path.src_ip = bc.path.dst_ip;
    h.path.dst_ip = bc.path.src_ip;
    h.bth.opcode = op;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = bc.recv_psn;
    h.ieth.rkey = kKeyOnB;
    const std::vector<uint8_t> payload = Pattern(8, 1);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload.size()));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    qp.HandleFrame(Decode(frame));
  }
  qp.Poll(32);
  EXPECT_EQ(qp.stats().ignored_packets, 2u);
  EXPECT_EQ(qp.stats().rx_packets, 0u);
  EXPECT_EQ(qp.recv_outstanding(), 1u);
  EXPECT_TRUE(f.pair.b.cq.receives.empty());
  EXPECT_EQ(f.pair.b.memory.invalidate_calls(), 0u);
  EXPECT_EQ(target[0], 0);
  // The queue pair still serves its own transport.
  std::vector<uint8_t> src = Pattern(8, 2);
  ASSERT_EQ(f.pair.a.qp->Post(Send(5, src.data(), 8)), PostResult::kOk);
  ASSERT_TRUE(testing::RunUntilQuiet(f.pair));
  ASSERT_EQ(f.pair.b.cq.receives.size(), 1u);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin()));
}

}  // namespace
}  // namespace rdmaplane::rc
