// RDMA atomics in the RC transport: COMPARE SWAP and FETCH ADD executed on
// the responder's memory with one atomic instruction, the original value
// returned into the requester's 8-byte buffer, resends answered from the
// responder's atomic resources without executing again, the responder's
// refusals (a misaligned address, a key without atomic access), the
// initiator depth READs and atomics share, and atomicity against other
// queue pairs and the local CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

using testing::Decode;
using testing::Fixture;
using testing::SmallConfig;
using wire::Opcode;

constexpr uint64_t kSecond = 1'000'000'000;

uint64_t WordAt(const std::vector<uint8_t>& region, size_t offset) {
  uint64_t v;
  std::memcpy(&v, region.data() + offset, sizeof(v));
  return v;
}

void SetWord(std::vector<uint8_t>& region, size_t offset, uint64_t v) {
  std::memcpy(region.data() + offset, &v, sizeof(v));
}

TEST(AtomicTest, CompareSwapThatMatchesSwaps) {
  Fixture f;
  SetWord(f.b_region, 64, 5);
  uint64_t orig = 0xEEEE;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::CompareSwap(1, &orig, 64, 5, 9)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  const Completion& c = f.pair.a.cq.completions[0];
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WrOpcode::kCompareSwap);
  EXPECT_EQ(c.byte_len, 8u);
  EXPECT_EQ(orig, 5u);
  EXPECT_EQ(WordAt(f.b_region, 64), 9u);
  EXPECT_EQ(f.pair.b.qp->stats().atomics_executed, 1u);
  EXPECT_EQ(f.pair.b.memory.pins(), 0);
}

TEST(AtomicTest, CompareSwapThatDoesNotMatchLeavesTheWord) {
  Fixture f;
  SetWord(f.b_region, 0, 7);
  uint64_t orig = 0;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::CompareSwap(1, &orig, 0, 5, 9)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(orig, 7u);  // the word as it is: the swap did not happen
  EXPECT_EQ(WordAt(f.b_region, 0), 7u);
}

TEST(AtomicTest, FetchAddReturnsTheOriginalValueAndWraps) {
  Fixture f;
  SetWord(f.b_region, 8, 100);
  SetWord(f.b_region, 16, ~uint64_t{0});
  uint64_t orig1 = 0, orig2 = 0, orig3 = 0;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(1, &orig1, 8, 23)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(2, &orig2, 8, 1)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(3, &orig3, 16, 2)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 3u);
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WrOpcode::kFetchAdd);
    EXPECT_EQ(c.byte_len, 8u);
  }
  EXPECT_EQ(orig1, 100u);
  EXPECT_EQ(orig2, 123u);
  EXPECT_EQ(WordAt(f.b_region, 8), 124u);
  EXPECT_EQ(orig3, ~uint64_t{0});
  EXPECT_EQ(WordAt(f.b_region, 16), 1u);  // modulo 2^64
}

// The operands are big-endian on the wire; the word is in the target's
// memory in its own (host) order, and the original value lands in the
// requester's buffer in host order too.
TEST(AtomicTest, OperandsTravelBigEndianAndTheWordIsInHostOrder) {
  Fixture f;
  std::vector<wire::ParsedPacket> requests, answers;
  std::vector<std::vector<uint8_t>> request_frames;
  f.pair.a_to_b.tap = [&](std::span<const uint8_t> frame) {
    requests.push_back(Decode(frame));
    request_frames.emplace_back(frame.begin(), frame.end());
  };
  f.pair.b_to_a.tap = [&](std::span<const uint8_t> frame) {
    answers.push_back(Decode(frame));
  };
  SetWord(f.b_region, 0, 0x0102030405060708ull);
  uint64_t orig = 0;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::CompareSwap(
                1, &orig, 0, 0x0102030405060708ull, 0x1112131415161718ull)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].bth.opcode, Opcode::kCompareSwap);
  EXPECT_TRUE(requests[0].bth.ack_req);
  EXPECT_EQ(requests[0].atomic_eth.va, testing::kRemoteVa);
  EXPECT_EQ(requests[0].atomic_eth.rkey, testing::kKeyOnB);
  EXPECT_EQ(requests[0].atomic_eth.compare, 0x0102030405060708ull);
  EXPECT_EQ(requests[0].atomic_eth.swap_add, 0x1112131415161718ull);
  // AtomicETH after the BTH: VA, R_Key, swap, compare, most significant
  // byte first.
  const size_t eth = wire::kOuterHeadersLen + wire::kBthLen;
  const std::vector<uint8_t>& raw = request_frames[0];
  EXPECT_EQ(raw[eth + 12], 0x11);
  EXPECT_EQ(raw[eth + 19], 0x18);
  EXPECT_EQ(raw[eth + 20], 0x01);
  EXPECT_EQ(raw[eth + 27], 0x08);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].bth.opcode, Opcode::kAtomicAcknowledge);
  EXPECT_EQ(answers[0].bth.psn, requests[0].bth.psn);
  EXPECT_EQ(answers[0].atomic_ack_eth.orig_data, 0x0102030405060708ull);
  EXPECT_EQ(orig, 0x0102030405060708ull);
  const uint8_t little_endian[8] = {0x18, 0x17, 0x16, 0x15,
                                    0x14, 0x13, 0x12, 0x11};
  EXPECT_TRUE(std::equal(std::begin(little_endian), std::end(little_endian),
                         f.b_region.begin()));
}

TEST(AtomicTest, PostRefusesAnythingButOneEightByteBuffer) {
  Fixture f;
  uint64_t buf[2] = {};
  WorkRequest wr = Fixture::FetchAdd(1, buf, 0, 1);
  wr.num_sge = 0;
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::FetchAdd(1, buf, 0, 1);
  wr.num_sge = 2;
  wr.sge[1] = {reinterpret_cast<uint8_t*>(&buf[1]), 8};
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::CompareSwap(1, buf, 0, 1, 2);
  wr.sge[0].length = 4;
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::CompareSwap(1, buf, 0, 1, 2);
  wr.sge[0].length = 16;
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::FetchAdd(1, buf, 0, 1);
  wr.flags = kWrImmediate;
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  wr = Fixture::FetchAdd(1, buf, 0, 1);
  wr.opcode = static_cast<WrOpcode>(5);
  EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kInvalid);
  EXPECT_EQ(f.pair.a.qp->outstanding(), 0u);
}

TEST(AtomicTest, MisalignedAddressIsAnInvalidRequestNak) {
  Fixture f;
  SetWord(f.b_region, 0, 1);
  SetWord(f.b_region, 8, 2);
  uint64_t orig = 0xAAAA;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(1, &orig, 4, 1)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kRemoteInvalidRequest);
  EXPECT_EQ(f.pair.a.cq.completions[0].byte_len, 0u);
  EXPECT_EQ(orig, 0xAAAAu);
  EXPECT_EQ(WordAt(f.b_region, 0), 1u);
  EXPECT_EQ(WordAt(f.b_region, 8), 2u);
  EXPECT_EQ(f.pair.b.qp->stats().invalid_requests, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().atomics_executed, 0u);
  EXPECT_EQ(f.pair.b.memory.lookups(), 0u) << "refused before any key";
  EXPECT_EQ(f.pair.a.qp->state(), QpState::kError);
  EXPECT_EQ(f.pair.b.qp->state(), QpState::kError);
  EXPECT_EQ(f.pair.b.qp->error_status(), WcStatus::kPeerInvalidRequest);
}

TEST(AtomicTest, KeyWithoutAtomicAccessIsARemoteAccessNak) {
  const wire::Rkey kReadWriteOnly{0x4001};
  constexpr uint64_t kVa = 0x500000000ull;
  for (const bool out_of_range : {false, true}) {
    SCOPED_TRACE(out_of_range ? "outside the region" : "no atomic right");
    Fixture f;
    std::vector<uint8_t> rw(64, 0);
    SetWord(rw, 0, 41);
    // Read and write access, no atomic access.
    f.pair.b.memory.Add({f.pair.b.qp->config().local_qpn, kReadWriteOnly, kVa,
                         rw.data(), 64, true, true});
    uint64_t orig = 0;
    WorkRequest wr = out_of_range
                         ? Fixture::FetchAdd(1, &orig, f.b_region.size(), 1)
                         : Fixture::FetchAdd(1, &orig, 0, 1, kReadWriteOnly);
    if (!out_of_range) wr.remote_va = kVa;
    ASSERT_EQ(f.pair.a.qp->Post(wr), PostResult::kOk);
    ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
    ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
    EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kRemoteAccessError);
    EXPECT_EQ(WordAt(rw, 0), 41u);
    EXPECT_EQ(f.pair.b.qp->stats().access_errors, 1u);
    EXPECT_EQ(f.pair.b.qp->stats().atomics_executed, 0u);
    EXPECT_EQ(f.pair.b.qp->error_status(), WcStatus::kPeerAccessError);
    EXPECT_EQ(f.pair.b.memory.pins(), 0);
  }
}

// The ATOMIC ACKNOWLEDGE is lost: the requester times out and resends the
// atomic with its PSN; the responder answers from its atomic resources, and
// the word is added to once.
TEST(AtomicTest, ResentAtomicIsAnsweredFromTheResourcesNotExecutedAgain) {
  Fixture f;
  bool dropped = false;
  f.pair.b_to_a.drop = [&](std::span<const uint8_t> frame) {
    if (!dropped && Decode(frame).bth.opcode == Opcode::kAtomicAcknowledge) {
      return dropped = true;
    }
    return false;
  };
  int requests = 0;
  f.pair.a_to_b.tap = [&](std::span<const uint8_t> frame) {
    if (Decode(frame).bth.opcode == Opcode::kFetchAdd) ++requests;
  };
  SetWord(f.b_region, 0, 1000);
  uint64_t orig = 0;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(1, &orig, 0, 5)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_TRUE(dropped);
  EXPECT_EQ(requests, 2);
  ASSERT_EQ(f.pair.a.cq.completions.size(), 1u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(orig, 1000u);  // the first execution's answer, replayed
  EXPECT_EQ(WordAt(f.b_region, 0), 1005u);
  EXPECT_EQ(f.pair.b.qp->stats().atomics_executed, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().atomic_replays, 1u);
  EXPECT_EQ(f.pair.b.qp->stats().duplicate_requests, 1u);
  EXPECT_GE(f.pair.a.qp->stats().timeouts, 1u);
}

// Every frame in both directions arrives twice.
TEST(AtomicTest, DuplicatedFramesExecuteEachAtomicOnce) {
  fault::FaultSpec dup_all;
  dup_all.duplicate = 1.0;
  dup_all.jitter_ns = 3000;
  Fixture f(SmallConfig(), dup_all, dup_all);
  constexpr int kOps = 40;
  std::vector<uint64_t> orig(kOps, ~uint64_t{0});
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(i, &orig[i], 0, 1)),
              PostResult::kOk);
  }
  uint64_t cas_orig = 0;
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::CompareSwap(kOps, &cas_orig, 8, 0, 77)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), kOps + 1u);
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  EXPECT_EQ(WordAt(f.b_region, 0), uint64_t{kOps});
  for (int i = 0; i < kOps; ++i) EXPECT_EQ(orig[i], uint64_t(i));
  EXPECT_EQ(cas_orig, 0u);
  EXPECT_EQ(WordAt(f.b_region, 8), 77u);
  EXPECT_EQ(f.pair.b.qp->stats().atomics_executed, kOps + 1u);
  EXPECT_GT(f.pair.b.qp->stats().duplicate_requests, 0u);
}

// A lossy, reordering link both ways: every atomic still runs exactly once,
// in posting order.
TEST(AtomicTest, LossyLinkExecutesEachAtomicExactlyOnce) {
  fault::FaultSpec lossy;
  lossy.loss = 0.15;
  lossy.duplicate = 0.1;
  lossy.reorder = 0.1;
  lossy.reorder_ns = 20'000;
  lossy.jitter_ns = 2000;
  lossy.seed = 7;
  fault::FaultSpec back = lossy;
  back.seed = 8;
  Fixture f(SmallConfig(), lossy, back);
  constexpr int kOps = 200;
  std::vector<uint64_t> orig(kOps, ~uint64_t{0});
  std::vector<uint8_t> src(300, 0x5C), dst(300);
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(i, &orig[i], 0, 1)),
              PostResult::kOk);
    if (i % 50 == 25) {  // WRITEs and READs in between
      ASSERT_EQ(
          f.pair.a.qp->Post(Fixture::Write(1000 + i, src.data(), 300, 4096)),
          PostResult::kOk);
      ASSERT_EQ(
          f.pair.a.qp->Post(Fixture::Read(2000 + i, dst.data(), 300, 4096)),
          PostResult::kOk);
    }
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(100 * kSecond));
  for (const Completion& c : f.pair.a.cq.completions) {
    ASSERT_EQ(c.status, WcStatus::kSuccess) << c.wr_id;
  }
  EXPECT_EQ(f.pair.a.cq.completions.size(), kOps + 8u);
  EXPECT_EQ(WordAt(f.b_region, 0), uint64_t{kOps});
  for (int i = 0; i < kOps; ++i) EXPECT_EQ(orig[i], uint64_t(i)) << i;
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.pair.b.qp->stats().atomics_executed, uint64_t{kOps});
  EXPECT_GT(f.pair.a.qp->stats().retransmitted_packets, 0u);
}

// READs and atomics together never exceed max_rd_atomic outstanding.
TEST(AtomicTest, AtomicsShareTheInitiatorDepthWithReads) {
  QpConfig c = SmallConfig();
  c.max_rd_atomic = 2;
  Fixture f(c);
  int in_flight = 0, max_in_flight = 0;
  f.pair.a_to_b.tap = [&](std::span<const uint8_t> frame) {
    const Opcode op = Decode(frame).bth.opcode;
    if (op == Opcode::kReadRequest || op == Opcode::kFetchAdd ||
        op == Opcode::kCompareSwap) {
      max_in_flight = std::max(max_in_flight, ++in_flight);
    }
  };
  f.pair.a.cq.on_complete = [&](const Completion&) { --in_flight; };
  std::vector<uint64_t> orig(8);
  std::vector<uint8_t> dst(4 * 600);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(i, &orig[i], 0, 1)),
              PostResult::kOk);
    if (i % 2 == 0) {
      ASSERT_EQ(f.pair.a.qp->Post(
                    Fixture::Read(100 + i, dst.data() + 300 * i, 600, 1024)),
                PostResult::kOk);
    }
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(f.pair.a.cq.completions.size(), 12u);
  EXPECT_EQ(max_in_flight, 2);
  EXPECT_EQ(WordAt(f.b_region, 0), 8u);
}

// A fenced request waits for the atomics before it.
TEST(AtomicTest, FenceWaitsForEarlierAtomics) {
  Fixture f;
  std::vector<std::string> events;
  f.pair.a_to_b.tap = [&](std::span<const uint8_t> frame) {
    const Opcode op = Decode(frame).bth.opcode;
    if (op == Opcode::kFetchAdd) events.push_back("atomic");
    if (op == Opcode::kReadRequest) events.push_back("read");
  };
  f.pair.a.cq.on_complete = [&](const Completion& c) {
    events.push_back("done " + std::to_string(c.wr_id));
  };
  uint64_t orig = 0;
  std::vector<uint8_t> dst(8);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::FetchAdd(1, &orig, 0, 3)),
            PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 8, 0, kWrReadFence)),
            PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  EXPECT_EQ(events,
            (std::vector<std::string>{"atomic", "done 1", "read", "done 2"}));
  EXPECT_EQ(WordAt(dst, 0), 3u);  // the READ saw the atomic's result
}

// Hand-made atomic requests into B (responder) at its expected PSN.
class AtomicResponder {
 public:
  AtomicResponder() {
    f_.pair.b_to_a.tap = [this](std::span<const uint8_t> frame) {
      responses_.push_back(Decode(frame));
    };
  }
  void Inject(Opcode op, uint32_t psn_offset, uint64_t va_offset,
              uint64_t swap_add, uint64_t compare = 0) {
    const QpConfig& bc = f_.pair.b.qp->config();
    wire::PacketHeaders h;
    h.path.src_ip = bc.path.dst_ip;
    h.path.dst_ip = bc.path.src_ip;
    h.bth.opcode = op;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = bc.recv_psn + psn_offset;
    h.bth.ack_req = true;
    h.atomic_eth = {testing::kRemoteVa + va_offset, testing::kKeyOnB, swap_add,
                    compare};
    std::vector<uint8_t> frame(wire::FrameLength(op, 0));
    ASSERT_GT(wire::EncodeFrame(h, {}, frame), 0u);
    f_.pair.b.qp->HandleFrame(Decode(frame));
    f_.pair.b.qp->Poll(32);
  }
  Fixture f_;
  std::vector<wire::ParsedPacket> responses_;
};

TEST(AtomicResponderTest, DuplicatesAreAnsweredFromTheResources) {
  AtomicResponder r;
  SetWord(r.f_.b_region, 0, 10);
  r.Inject(Opcode::kFetchAdd, 0, 0, 5);
  r.Inject(Opcode::kCompareSwap, 1, 0, 99, 15);
  r.Inject(Opcode::kFetchAdd, 2, 0, 1);
  EXPECT_EQ(WordAt(r.f_.b_region, 0), 100u);
  // The first two again (their answers were lost): the same answers, and
  // nothing executed again.
  r.Inject(Opcode::kFetchAdd, 0, 0, 5);
  r.Inject(Opcode::kCompareSwap, 1, 0, 99, 15);
  EXPECT_EQ(WordAt(r.f_.b_region, 0), 100u);
  ASSERT_EQ(r.responses_.size(), 5u);
  const uint64_t expected[] = {10, 15, 99, 10, 15};
  const uint32_t psns[] = {0, 1, 2, 0, 1};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(r.responses_[i].bth.opcode, Opcode::kAtomicAcknowledge);
    EXPECT_EQ(r.responses_[i].atomic_ack_eth.orig_data, expected[i]) << i;
    EXPECT_EQ(r.responses_[i].bth.psn,
              r.f_.pair.b.qp->config().recv_psn + psns[i]);
    EXPECT_EQ(r.responses_[i].aeth.syndrome >> 5, 0);
  }
  // The MSN counts each atomic once and never goes back.
  EXPECT_EQ(r.responses_[2].aeth.msn, 3u);
  EXPECT_EQ(r.responses_[4].aeth.msn, 3u);
  EXPECT_EQ(r.f_.pair.b.qp->stats().atomics_executed, 3u);
  EXPECT_EQ(r.f_.pair.b.qp->stats().atomic_replays, 2u);
}

TEST(AtomicResponderTest, AResendThatDiffersIsNoResendAndIsDropped) {
  AtomicResponder r;
  r.Inject(Opcode::kFetchAdd, 0, 0, 5);
  r.Inject(Opcode::kFetchAdd, 0, 8, 5);     // another address
  r.Inject(Opcode::kCompareSwap, 0, 0, 5);  // another operation
  EXPECT_EQ(r.responses_.size(), 1u);
  EXPECT_EQ(WordAt(r.f_.b_region, 0), 5u);
  EXPECT_EQ(WordAt(r.f_.b_region, 8), 0u);
  EXPECT_EQ(r.f_.pair.b.qp->state(), QpState::kReadyToSend);
}

TEST(AtomicResponderTest, OnlyTheLastMaxDestRdAtomicAreKept) {
  AtomicResponder r;
  const uint32_t depth = r.f_.pair.b.qp->config().max_dest_rd_atomic;
  for (uint32_t i = 0; i <= depth; ++i) r.Inject(Opcode::kFetchAdd, i, 0, 1);
  ASSERT_EQ(r.responses_.size(), depth + 1);
  r.Inject(Opcode::kFetchAdd, 0, 0, 1);  // forgotten: dropped
  EXPECT_EQ(r.responses_.size(), depth + 1);
  r.Inject(Opcode::kFetchAdd, 1, 0, 1);  // still kept
  ASSERT_EQ(r.responses_.size(), depth + 2);
  EXPECT_EQ(r.responses_.back().atomic_ack_eth.orig_data, 1u);
  EXPECT_EQ(WordAt(r.f_.b_region, 0), uint64_t{depth} + 1);
}

// Two requester queue pairs, each with its own responder queue pair on its
// own thread (as two engines serve two connections), and the CPU of the
// process owning the memory, all add to one word: nothing is lost, and each
// fetch returns a value no other one returned.
TEST(AtomicConcurrencyTest, FetchAddsFromTwoQueuePairsAndTheCpuAddUp) {
  constexpr int kRounds = 10;
  constexpr int kPerRound = 100;
  constexpr int kPerPair = kRounds * kPerRound;
  constexpr int kLocal = 5000;
  alignas(8) static uint64_t word;
  word = 0;
  struct Side {
    std::unique_ptr<Fixture> f;
    std::vector<uint64_t> orig = std::vector<uint64_t>(kPerPair);
    bool ok = false;
  };
  Side sides[2];
  for (Side& s : sides) {
    s.f = std::make_unique<Fixture>();
    // B's region and a second key for the shared word.
    s.f->pair.b.memory.Add(
        {s.f->pair.b.qp->config().local_qpn, wire::Rkey(0x5001), 0x600000000ull,
         reinterpret_cast<uint8_t*>(&word), 8, true, true, nullptr, true});
  }
  std::atomic<bool> go{false};
  auto hammer = [&go](Side* s) {
    while (!go.load(std::memory_order_acquire)) {
    }
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kPerRound; ++i) {
        const int k = round * kPerRound + i;
        WorkRequest wr =
            Fixture::FetchAdd(k, &s->orig[k], 0, 1, wire::Rkey(0x5001));
        wr.remote_va = 0x600000000ull;
        if (s->f->pair.a.qp->Post(wr) != PostResult::kOk) return;
      }
      if (!s->f->pair.RunUntilIdle(kSecond)) return;
    }
    s->ok = true;
  };
  std::atomic<int> finished{0};
  auto run = [&](Side* s) {
    hammer(s);
    finished.fetch_add(1, std::memory_order_release);
  };
  std::thread t0(run, &sides[0]);
  std::thread t1(run, &sides[1]);
  // The CPU adds for as long as the queue pairs do (at least kLocal times).
  std::vector<uint64_t> local;
  go.store(true, std::memory_order_release);
  while (finished.load(std::memory_order_acquire) < 2 ||
         local.size() < size_t{kLocal}) {
    local.push_back(__atomic_fetch_add(&word, 1, __ATOMIC_SEQ_CST));
  }
  t0.join();
  t1.join();
  ASSERT_TRUE(sides[0].ok);
  ASSERT_TRUE(sides[1].ok);
  EXPECT_EQ(__atomic_load_n(&word, __ATOMIC_SEQ_CST),
            2 * kPerPair + local.size());
  std::vector<uint64_t> all = local;
  for (Side& s : sides) {
    EXPECT_EQ(s.f->pair.a.cq.completions.size(), size_t{kPerPair});
    for (const Completion& c : s.f->pair.a.cq.completions) {
      EXPECT_EQ(c.status, WcStatus::kSuccess);
    }
    all.insert(all.end(), s.orig.begin(), s.orig.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> each(2 * kPerPair + local.size());
  std::iota(each.begin(), each.end(), 0);
  EXPECT_EQ(all, each) << "a value was fetched twice, or an add was lost";
}

}  // namespace
}  // namespace rdmaplane::rc
