#include "dataplane/wire/roce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dataplane/wire/icrc.h"

namespace rdmaplane::wire {
namespace {

PacketHeaders SampleHeaders(Opcode op) {
  PacketHeaders h;
  h.path.src_mac = {{0x02, 0, 0, 0, 0, 1}};
  h.path.dst_mac = {{0x02, 0, 0, 0, 0, 2}};
  h.path.src_ip = 0x0A000001;
  h.path.dst_ip = 0x0A000002;
  h.path.udp_src_port = UdpSourcePortForQpn(Qpn(0x11));
  h.bth.opcode = op;
  h.bth.dest_qp = Qpn(0x000123);
  h.bth.psn = Psn(0xFFFFFE);
  h.bth.ack_req = true;
  h.reth = {0x00007f0012345678ull, Rkey(0xABCD0142), 4096};
  h.aeth = {kAethNakRemoteAccess, 0x00ABCD};
  return h;
}

std::vector<uint8_t> Encode(const PacketHeaders& h,
                            std::vector<uint8_t> payload) {
  std::vector<uint8_t> out(FrameLength(h.bth.opcode, payload.size()));
  size_t n = EncodeFrame(h, payload, out);
  EXPECT_EQ(n, out.size());
  return out;
}

TEST(RoceTest, CrcMatchesKnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32({reinterpret_cast<const uint8_t*>(s), 9}), 0xCBF43926u);
}

TEST(RoceTest, RoundTripEveryOpcode) {
  for (Opcode op : {Opcode::kWriteFirst, Opcode::kWriteMiddle,
                    Opcode::kWriteLast, Opcode::kWriteOnly,
                    Opcode::kReadRequest, Opcode::kReadResponseFirst,
                    Opcode::kReadResponseMiddle, Opcode::kReadResponseLast,
                    Opcode::kReadResponseOnly, Opcode::kAcknowledge}) {
    SCOPED_TRACE(OpcodeName(op));
    PacketHeaders h = SampleHeaders(op);
    std::vector<uint8_t> payload;
    if (CarriesPayload(op)) payload = {1, 2, 3, 4, 5};
    auto frame = Encode(h, payload);
    ParsedPacket pkt;
    ParseCounters counters;
    ASSERT_EQ(ParseFrame(frame, &pkt, &counters), ParseError::kOk);
    EXPECT_EQ(counters[ParseError::kOk], 1u);
    EXPECT_EQ(pkt.bth.opcode, op);
    EXPECT_EQ(pkt.bth.dest_qp, Qpn(0x123));
    EXPECT_EQ(pkt.bth.psn, Psn(0xFFFFFE));
    EXPECT_TRUE(pkt.bth.ack_req);
    EXPECT_EQ(pkt.src_ip, 0x0A000001u);
    EXPECT_EQ(pkt.dst_mac, h.path.dst_mac);
    EXPECT_EQ(std::vector<uint8_t>(pkt.payload.begin(), pkt.payload.end()),
              payload);
    if (HasReth(op)) {
      EXPECT_EQ(pkt.reth.va, h.reth.va);
      EXPECT_EQ(pkt.reth.rkey, h.reth.rkey);
      EXPECT_EQ(pkt.reth.dma_length, 4096u);
    }
    if (HasAeth(op)) {
      EXPECT_EQ(pkt.aeth.syndrome, kAethNakRemoteAccess);
      EXPECT_EQ(pkt.aeth.msn, 0xABCDu);
    }
  }
}

// Headers, payload pieces wherever they lie and EncodeTrailer's pad and
// ICRC make the frame EncodeFrame writes, for every pad and every split.
TEST(RoceTest, TrailerOfAScatteredPayloadMatchesEncodeFrame) {
  for (Opcode op : {Opcode::kWriteFirst, Opcode::kWriteOnly,
                    Opcode::kWriteMiddle, Opcode::kReadResponseMiddle,
                    Opcode::kReadResponseLast}) {
    for (size_t len : {1, 2, 3, 4, 5, 7, 255, 256, 257, 1023, 4096}) {
      SCOPED_TRACE(::testing::Message() << OpcodeName(op) << " " << len);
      std::vector<uint8_t> payload(len);
      for (size_t i = 0; i < len; ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
      const PacketHeaders h = SampleHeaders(op);
      const std::vector<uint8_t> expected = Encode(h, payload);
      std::vector<uint8_t> headers(FrameLength(op, len));
      const size_t header_len = EncodeHeaders(h, len, headers);
      ASSERT_GT(header_len, 0u);
      headers.resize(header_len);
      for (size_t split : {size_t{0}, size_t{1}, len / 3, len - 1, len}) {
        uint32_t icrc = HeadersIcrc(headers);
        icrc = ExtendIcrc(icrc, std::span<const uint8_t>(payload).first(split));
        icrc = ExtendIcrc(icrc, std::span<const uint8_t>(payload).subspan(split));
        uint8_t trailer[kMaxTrailerLen];
        const size_t n = EncodeTrailer(headers, icrc, trailer);
        ASSERT_EQ(n, (4 - len % 4) % 4 + kIcrcLen);
        std::vector<uint8_t> frame = headers;
        frame.insert(frame.end(), payload.begin(), payload.end());
        frame.insert(frame.end(), trailer, trailer + n);
        EXPECT_EQ(frame, expected);
      }
      uint8_t small[kIcrcLen];
      EXPECT_EQ(EncodeTrailer(headers, 0, std::span<uint8_t>(small, len % 4 == 0 ? 3 : 4)), 0u);
    }
  }
}

// A port sized by MaxFrameLength carries every frame a queue pair sends
// with a full path-MTU payload, of any opcode the codec supports (a WRITE
// ONLY with immediate data, RETH and ImmDt, is the longest: a port sized
// for a WRITE FIRST stalled its requester for good).
TEST(RoceTest, MaxFrameLengthHoldsEveryFullPayloadFrame) {
  for (size_t mtu : {256u, 1024u, 4096u}) {
    size_t longest = 0;
    for (int op = 0; op < 256; ++op) {
      const OpcodeInfo& info = kOpcodeTable[op];
      if ((info.flags & kOpSupported) == 0 || (info.flags & kOpPayload) == 0) {
        continue;
      }
      const size_t len = FrameLength(static_cast<Opcode>(op), mtu);
      EXPECT_LE(len, MaxFrameLength(mtu)) << info.name << " at MTU " << mtu;
      longest = std::max(longest, len);
    }
    EXPECT_EQ(longest, MaxFrameLength(mtu)) << "MTU " << mtu;
  }
  EXPECT_EQ(MaxFrameLength(4096),
            FrameLength(Opcode::kWriteFirst, 4096) + kImmDtLen);
}

TEST(RoceTest, PayloadIsPaddedToFourBytes) {
  for (size_t len = 0; len < 9; ++len) {
    auto frame = Encode(SampleHeaders(Opcode::kWriteOnly),
                        std::vector<uint8_t>(len, 0xAA));
    EXPECT_EQ(frame.size() % 4, kOuterHeadersLen % 4);
    ParsedPacket pkt;
    ASSERT_EQ(ParseFrame(frame, &pkt), ParseError::kOk);
    EXPECT_EQ(pkt.payload.size(), len);
    EXPECT_EQ(pkt.bth.pad_count, (4 - len % 4) % 4);
  }
}

TEST(RoceTest, EncodeRejectsSmallBufferAndPayloadOnAck) {
  PacketHeaders h = SampleHeaders(Opcode::kWriteOnly);
  std::vector<uint8_t> payload(100);
  std::vector<uint8_t> out(FrameLength(Opcode::kWriteOnly, 100) - 1);
  EXPECT_EQ(EncodeFrame(h, payload, out), 0u);
  out.resize(200);
  EXPECT_EQ(EncodeFrame(SampleHeaders(Opcode::kAcknowledge), payload, out),
            0u);
}

struct Corruption {
  const char* name;
  size_t offset;
  uint8_t xor_mask;
  ParseError expected;
};

TEST(RoceTest, MalformedFramesAreRejectedWithReason) {
  const auto good = Encode(SampleHeaders(Opcode::kWriteOnly),
                           std::vector<uint8_t>(13, 0x5A));
  const size_t ip = kEthHeaderLen;
  const size_t udp = ip + kIpv4HeaderLen;
  const size_t bth = udp + kUdpHeaderLen;
  const Corruption cases[] = {
      {"ethertype", 12, 0x01, ParseError::kNotIpv4},
      {"ip version", ip, 0x20, ParseError::kIpVersion},
      {"ip options", ip, 0x01, ParseError::kIpOptions},
      {"ip fragment", ip + 6, 0x20, ParseError::kIpFragment},
      {"ip protocol", ip + 9, 0x01, ParseError::kNotUdp},
      {"ip checksum", ip + 10, 0x01, ParseError::kIpChecksum},
      {"udp port", udp + 3, 0x01, ParseError::kNotRocePort},
      {"bth version", bth + 1, 0x01, ParseError::kBthVersion},
      {"opcode", bth, 0x40, ParseError::kUnknownOpcode},
      {"payload bit", bth + kBthLen + kRethLen + 2, 0x04, ParseError::kBadIcrc},
      {"icrc", good.size() - 1, 0x80, ParseError::kBadIcrc},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    auto frame = good;
    frame[c.offset] ^= c.xor_mask;
    // Fields that the IP checksum covers would otherwise fail on checksum.
    if (c.offset >= ip && c.offset < ip + 10 && c.expected != ParseError::kIpVersion &&
        c.expected != ParseError::kIpOptions) {
      uint16_t sum = Ipv4HeaderChecksum({frame.data() + ip, kIpv4HeaderLen});
      frame[ip + 10] = static_cast<uint8_t>(sum >> 8);
      frame[ip + 11] = static_cast<uint8_t>(sum);
    }
    ParsedPacket pkt;
    ParseCounters counters;
    EXPECT_EQ(ParseFrame(frame, &pkt, &counters), c.expected)
        << ParseErrorName(ParseFrame(frame, &pkt));
    EXPECT_EQ(counters[c.expected], 1u);
    EXPECT_EQ(counters[ParseError::kOk], 0u);
  }
}

TEST(RoceTest, BadPadCountsAreRejected) {
  ParsedPacket pkt;
  // More pad than data.
  auto empty_write = Encode(SampleHeaders(Opcode::kWriteOnly), {});
  empty_write[kOuterHeadersLen + 1] |= 0x10;
  EXPECT_EQ(ParseFrame(empty_write, &pkt), ParseError::kBadPad);
  // Pad on an opcode that has no payload.
  auto ack = Encode(SampleHeaders(Opcode::kAcknowledge), {});
  ack[kOuterHeadersLen + 1] |= 0x20;
  EXPECT_EQ(ParseFrame(ack, &pkt), ParseError::kBadPad);
}

TEST(RoceTest, TruncationAtEveryLengthIsRejected) {
  const auto good = Encode(SampleHeaders(Opcode::kReadRequest), {});
  for (size_t len = 0; len < good.size(); ++len) {
    // Copy into an exactly-sized buffer so a sanitizer sees any overread.
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    ParsedPacket pkt;
    EXPECT_NE(ParseFrame(cut, &pkt), ParseError::kOk) << len;
  }
}

TEST(RoceTest, EthernetPaddingAfterIpPacketIsIgnored) {
  auto frame = Encode(SampleHeaders(Opcode::kAcknowledge), {});
  frame.resize(frame.size() + 6, 0);
  ParsedPacket pkt;
  EXPECT_EQ(ParseFrame(frame, &pkt), ParseError::kOk);
}

TEST(RoceTest, LengthMismatchesAreRejected) {
  // An ACK with trailing bytes inside the UDP datagram.
  PacketHeaders h = SampleHeaders(Opcode::kAcknowledge);
  auto frame = Encode(SampleHeaders(Opcode::kWriteOnly), {1, 2, 3, 4});
  frame[kOuterHeadersLen] = static_cast<uint8_t>(Opcode::kReadRequest);
  ParsedPacket pkt;
  // Rewrite the ICRC so only the length is wrong.
  const size_t ip_len = frame.size() - kEthHeaderLen;
  uint32_t icrc = ComputeIcrc({frame.data() + kEthHeaderLen, ip_len - 4});
  for (int i = 0; i < 4; ++i) frame[frame.size() - 4 + i] = icrc >> (8 * i);
  EXPECT_EQ(ParseFrame(frame, &pkt), ParseError::kLengthMismatch);

  // UDP length disagreeing with IP length.
  auto frame2 = Encode(h, {});
  frame2[kEthHeaderLen + kIpv4HeaderLen + 5] ^= 0x04;
  EXPECT_EQ(ParseFrame(frame2, &pkt), ParseError::kUdpLength);

  // IP total length longer than the frame.
  auto frame3 = Encode(h, {});
  frame3[kEthHeaderLen + 3] += 8;
  uint16_t sum = Ipv4HeaderChecksum({frame3.data() + kEthHeaderLen, 20});
  frame3[kEthHeaderLen + 10] = sum >> 8;
  frame3[kEthHeaderLen + 11] = sum & 0xFF;
  EXPECT_EQ(ParseFrame(frame3, &pkt), ParseError::kIpLength);
}

TEST(RoceTest, DatagramRoundTripAndSeparation) {
  PacketHeaders h = SampleHeaders(Opcode::kUdSendOnly);
  h.deth = {0x80010000, Qpn(0x000001)};
  const std::vector<uint8_t> payload(256, 0x3C);
  auto frame = Encode(h, payload);
  EXPECT_EQ(frame.size(), kOuterHeadersLen + kBthLen + kDethLen + 256 + 4);
  // DETH right after the BTH: Q_Key, a reserved byte, source QP.
  EXPECT_EQ(std::vector<uint8_t>(
                frame.begin() + kOuterHeadersLen + kBthLen,
                frame.begin() + kOuterHeadersLen + kBthLen + kDethLen),
            (std::vector<uint8_t>{0x80, 0x01, 0x00, 0x00, 0, 0, 0, 1}));
  ParsedPacket pkt;
  ParseCounters counters;
  ASSERT_EQ(ParseDatagramFrame(frame, &pkt, &counters), ParseError::kOk);
  EXPECT_EQ(counters[ParseError::kOk], 1u);
  EXPECT_EQ(pkt.bth.opcode, Opcode::kUdSendOnly);
  EXPECT_EQ(pkt.deth.qkey, 0x80010000u);
  EXPECT_EQ(pkt.deth.src_qp, Qpn(1));
  EXPECT_EQ(std::vector<uint8_t>(pkt.payload.begin(), pkt.payload.end()),
            payload);
  // The RC parser refuses datagrams, and the datagram parser RC frames.
  EXPECT_EQ(ParseFrame(frame, &pkt), ParseError::kUnknownOpcode);
  EXPECT_FALSE(IsRcOpcode(static_cast<uint8_t>(Opcode::kUdSendOnly)));
  EXPECT_EQ(
      ParseDatagramFrame(Encode(SampleHeaders(Opcode::kWriteOnly), {1}), &pkt),
      ParseError::kUnknownOpcode);
  // A corrupted DETH fails the ICRC.
  frame[kOuterHeadersLen + kBthLen + 7] ^= 1;
  EXPECT_EQ(ParseDatagramFrame(frame, &pkt), ParseError::kBadIcrc);
}

// IBA table 38 and 9.3: which RC opcodes exist, which extension headers
// they carry (bytes between BTH and payload), and where a message starts
// and ends.
TEST(RoceTest, OpcodeTableFollowsTheIba) {
  struct Row {
    uint8_t op;
    uint8_t header_len;
    bool first, last, payload, request;
  };
  const Row kDefined[] = {
      {0x00, 0, true, false, true, true},    // SEND FIRST
      {0x01, 0, false, false, true, true},   // SEND MIDDLE
      {0x02, 0, false, true, true, true},    // SEND LAST
      {0x03, 4, false, true, true, true},    // SEND LAST with ImmDt
      {0x04, 0, true, true, true, true},     // SEND ONLY
      {0x05, 4, true, true, true, true},     // SEND ONLY with ImmDt
      {0x06, 16, true, false, true, true},   // WRITE FIRST: RETH
      {0x07, 0, false, false, true, true},   // WRITE MIDDLE
      {0x08, 0, false, true, true, true},    // WRITE LAST
      {0x09, 4, false, true, true, true},    // WRITE LAST with ImmDt
      {0x0a, 16, true, true, true, true},    // WRITE ONLY: RETH
      {0x0b, 20, true, true, true, true},    // WRITE ONLY: RETH, ImmDt
      {0x0c, 16, true, true, false, true},   // READ REQUEST: RETH
      {0x0d, 4, true, false, true, false},   // READ RESPONSE FIRST: AETH
      {0x0e, 0, false, false, true, false},  // READ RESPONSE MIDDLE
      {0x0f, 4, false, true, true, false},   // READ RESPONSE LAST: AETH
      {0x10, 4, true, true, true, false},    // READ RESPONSE ONLY: AETH
      {0x11, 4, true, true, false, false},   // ACKNOWLEDGE: AETH
      {0x12, 12, true, true, false, false},  // ATOMIC ACK: AETH, AtomicAckETH
      {0x13, 28, true, true, false, true},   // COMPARE SWAP: AtomicETH
      {0x14, 28, true, true, false, true},   // FETCH ADD: AtomicETH
      {0x16, 4, false, true, true, true},    // SEND LAST with IETH
      {0x17, 4, true, true, true, true},     // SEND ONLY with IETH
      {0x1c, 20, true, true, false, true},   // FLUSH: FETH, RETH
      {0x1d, 16, true, true, true, true},    // ATOMIC WRITE: RETH
  };
  int defined = 0;
  for (const Row& r : kDefined) {
    const OpcodeInfo& info = kOpcodeTable[r.op];
    SCOPED_TRACE(info.name);
    EXPECT_NE(info.flags & kOpDefined, 0);
    EXPECT_EQ(info.header_len, r.header_len);
    EXPECT_EQ((info.flags & kOpFirst) != 0, r.first);
    EXPECT_EQ((info.flags & kOpLast) != 0, r.last);
    EXPECT_EQ((info.flags & kOpPayload) != 0, r.payload);
    EXPECT_EQ((info.flags & kOpRequest) != 0, r.request);
    EXPECT_NE(info.op_class, OpcodeClass::kReserved);
  }
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = kOpcodeTable[op];
    if ((info.flags & kOpDefined) != 0) ++defined;
    if (op >= kRcOpcodeLimit && !IsUcOpcode(op) && !IsUdOpcode(op)) {
      EXPECT_EQ(info.flags, 0) << op;  // a transport without a codec
    }
  }
  // + 12 UC and 2 UD opcodes (roce_headers_test.cc).
  EXPECT_EQ(defined, static_cast<int>(std::size(kDefined)) + 12 + 2);
  // Reserved RC opcodes are requests the responder refuses.
  for (uint8_t op : {0x15, 0x18, 0x19, 0x1a, 0x1b, 0x1e, 0x1f}) {
    const OpcodeInfo& info = kOpcodeTable[op];
    EXPECT_EQ(info.op_class, OpcodeClass::kReserved) << int{op};
    EXPECT_EQ(info.flags & kOpDefined, 0) << int{op};
    EXPECT_TRUE(IsRequest(static_cast<Opcode>(op))) << int{op};
  }
  // rdmaplane serves SEND (with immediate data, with Invalidate or plain),
  // WRITE (with immediate data or not), READ, the atomics and the
  // acknowledgements only; the ImmDt and IETH opcodes say so.
  std::vector<int> supported;
  std::vector<int> with_imm;
  std::vector<int> with_ieth;
  for (int op = 0; op < kRcOpcodeLimit; ++op) {
    if (IsSupported(static_cast<Opcode>(op))) supported.push_back(op);
    if (HasImm(static_cast<Opcode>(op))) with_imm.push_back(op);
    if (HasIeth(static_cast<Opcode>(op))) with_ieth.push_back(op);
  }
  EXPECT_EQ(supported,
            (std::vector<int>{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                              0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
                              0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17}));
  EXPECT_EQ(with_imm, (std::vector<int>{0x03, 0x05, 0x09, 0x0b}));
  EXPECT_EQ(with_ieth, (std::vector<int>{0x16, 0x17}));
}

// Immediate data travels as the 4 bytes it is, after the RETH when there is
// one.
TEST(RoceTest, ImmediateDataRoundTrips) {
  for (Opcode op : {Opcode::kSendOnlyImmediate, Opcode::kSendLastImmediate,
                    Opcode::kWriteOnlyImmediate,
                    Opcode::kWriteLastImmediate}) {
    SCOPED_TRACE(OpcodeName(op));
    PacketHeaders h = SampleHeaders(op);
    const uint8_t raw[4] = {0x12, 0x34, 0x56, 0x78};
    std::memcpy(&h.imm, raw, 4);
    const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
    std::vector<uint8_t> frame(FrameLength(op, payload.size()));
    ASSERT_EQ(EncodeFrame(h, payload, frame), frame.size());
    const size_t imm_at = kOuterHeadersLen + kBthLen + (HasReth(op) ? 16 : 0);
    EXPECT_EQ(0, std::memcmp(frame.data() + imm_at, raw, 4));
    ParsedPacket pkt;
    ASSERT_EQ(ParseFrame(frame, &pkt), ParseError::kOk);
    EXPECT_EQ(pkt.imm, h.imm);
    EXPECT_EQ(std::vector<uint8_t>(pkt.payload.begin(), pkt.payload.end()),
              payload);
    if (HasReth(op)) {
      EXPECT_EQ(pkt.reth.va, h.reth.va);
      EXPECT_EQ(pkt.reth.dma_length, h.reth.dma_length);
    }
  }
}

TEST(RoceTest, RnrTimerFollowsTheIba) {
  EXPECT_EQ(RnrTimerNs(0), 655'360'000u);
  EXPECT_EQ(RnrTimerNs(1), 10'000u);
  EXPECT_EQ(RnrTimerNs(12), 640'000u);
  EXPECT_EQ(RnrTimerNs(14), 1'280'000u);
  EXPECT_EQ(RnrTimerNs(31), 491'520'000u);
  EXPECT_EQ(RnrTimerCode(10'000), 1u);
  EXPECT_EQ(RnrTimerCode(600'000), 12u);
  EXPECT_EQ(RnrTimerCode(1'000'000'000), 0u);
  EXPECT_TRUE(IsRnrNak(static_cast<uint8_t>(kAethRnrNak | 12)));
  EXPECT_FALSE(IsRnrNak(kAethNakPsnSeqError));
}

// Every RC opcode parses, the ones rdmaplane does not serve and the reserved
// ones included, so that the responder can NAK them; extension headers are
// skipped by their IBA lengths.
TEST(RoceTest, EveryRcOpcodeParses) {
  for (int op = 0; op < kRcOpcodeLimit; ++op) {
    const Opcode opcode = static_cast<Opcode>(op);
    SCOPED_TRACE(op);
    PacketHeaders h = SampleHeaders(opcode);
    std::vector<uint8_t> payload;
    if (CarriesPayload(opcode)) payload = {9, 8, 7, 6, 5, 4, 3, 2};
    auto frame = Encode(h, payload);
    EXPECT_EQ(frame.size(), kOuterHeadersLen + kBthLen +
                                kOpcodeTable[op].header_len + payload.size() +
                                kIcrcLen);
    ParsedPacket pkt;
    ASSERT_EQ(ParseFrame(frame, &pkt), ParseError::kOk);
    EXPECT_EQ(pkt.bth.opcode, opcode);
    EXPECT_EQ(pkt.bth.psn, Psn(0xFFFFFE));
    EXPECT_EQ(std::vector<uint8_t>(pkt.payload.begin(), pkt.payload.end()),
              payload);
  }
  // Other transports' opcodes (UC, RD, UD, CNP, XRC) are not RC frames.
  for (int op : {0x20, 0x24, 0x40, 0x64, 0x81, 0xa4, 0xc0, 0xff}) {
    auto frame = Encode(SampleHeaders(Opcode::kAcknowledge), {});
    frame[kOuterHeadersLen] = static_cast<uint8_t>(op);
    FinishFrame(frame);
    ParsedPacket pkt;
    EXPECT_EQ(ParseFrame(frame, &pkt), ParseError::kUnknownOpcode) << op;
  }
}

TEST(RoceTest, PkeysMatchAsTheIbaSays) {
  EXPECT_TRUE(PkeysMatch(0xFFFF, 0xFFFF));
  EXPECT_TRUE(PkeysMatch(0x7FFF, 0xFFFF));  // limited with full
  EXPECT_TRUE(PkeysMatch(0xFFFF, 0x7FFF));
  EXPECT_FALSE(PkeysMatch(0x7FFF, 0x7FFF));  // two limited members
  EXPECT_FALSE(PkeysMatch(0x8001, 0xFFFF));  // another partition
  EXPECT_FALSE(PkeysMatch(0x8000, 0x8000));  // invalid
  EXPECT_FALSE(PkeysMatch(0x0000, 0x8000));
  EXPECT_TRUE(PkeysMatch(0x8001, 0x0001));
}

TEST(RoceTest, UdpSourcePortStaysInRoceRange) {
  for (uint32_t q = 0; q < 100000; q += 7) {
    uint16_t port = UdpSourcePortForQpn(Qpn(q));
    EXPECT_GE(port, 0xC000);
  }
  EXPECT_NE(UdpSourcePortForQpn(Qpn(1)), UdpSourcePortForQpn(Qpn(2)));
}

}  // namespace
}  // namespace rdmaplane::wire
