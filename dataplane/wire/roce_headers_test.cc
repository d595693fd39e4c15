// The extension headers beyond RETH and AETH (DETH, AtomicETH, AtomicAckETH,
// IETH, ImmDt after a DETH) and the UC and UD transports: layout, round trips
// through the parser of each transport, truncation, limits and the ICRC.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "dataplane/wire/icrc.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

using Parser = ParseError (*)(std::span<const uint8_t>, ParsedPacket*,
                              ParseCounters*);

constexpr size_t kIpAt = kEthHeaderLen;
constexpr size_t kUdpAt = kIpAt + kIpv4HeaderLen;
constexpr size_t kBthAt = kOuterHeadersLen;
constexpr size_t kExtAt = kBthAt + kBthLen;

// Every opcode this file is about: the RC opcodes with AtomicETH,
// AtomicAckETH or IETH, every UC opcode and both UD opcodes.
constexpr Opcode kNewOpcodes[] = {
    Opcode::kAtomicAcknowledge,
    Opcode::kCompareSwap,
    Opcode::kFetchAdd,
    Opcode::kSendLastInvalidate,
    Opcode::kSendOnlyInvalidate,
    Opcode::kUcSendFirst,
    Opcode::kUcSendMiddle,
    Opcode::kUcSendLast,
    Opcode::kUcSendLastImmediate,
    Opcode::kUcSendOnly,
    Opcode::kUcSendOnlyImmediate,
    Opcode::kUcWriteFirst,
    Opcode::kUcWriteMiddle,
    Opcode::kUcWriteLast,
    Opcode::kUcWriteLastImmediate,
    Opcode::kUcWriteOnly,
    Opcode::kUcWriteOnlyImmediate,
    Opcode::kUdSendOnly,
    Opcode::kUdSendOnlyImmediate,
};

Parser ParserFor(Opcode op) {
  const uint8_t v = static_cast<uint8_t>(op);
  if (IsUcOpcode(v)) return &ParseUcFrame;
  if (IsUdOpcode(v)) return &ParseDatagramFrame;
  return &ParseFrame;
}

constexpr uint8_t kImmBytes[4] = {0xA1, 0xB2, 0xC3, 0xD4};

// Every header filled with a value unlike its default, whether the opcode
// carries it or not.
PacketHeaders Sample(Opcode op) {
  PacketHeaders h;
  h.path.src_mac = {{0x02, 0, 0, 0, 0, 3}};
  h.path.dst_mac = {{0x02, 0, 0, 0, 0, 4}};
  h.path.src_ip = 0x0A000003;
  h.path.dst_ip = 0x0A000004;
  h.path.udp_src_port = UdpSourcePortForQpn(Qpn(0x21));
  h.bth.opcode = op;
  h.bth.dest_qp = Qpn(0x000456);
  h.bth.psn = Psn(0x000789);
  h.reth = {0x00007F0012345678, Rkey(0xABCD0142), 4096};
  h.aeth = {kAethAck | kAethCreditsInvalid, 0x00ABCD};
  h.deth = {0x0000C0DE, Qpn(0x000321)};
  h.atomic_eth = {0x00007F00DEADBEE8, Rkey(0x12345678), 0x1111222233334444,
                  0x5555666677778888};
  h.atomic_ack_eth = {0x9999AAAABBBBCCCC};
  h.ieth = {Rkey(0xFEDCBA98)};
  std::memcpy(&h.imm, kImmBytes, 4);
  return h;
}

std::vector<uint8_t> PayloadFor(Opcode op, size_t len = 7) {
  std::vector<uint8_t> payload;
  if (CarriesPayload(op)) {
    for (size_t i = 0; i < len; ++i) {
      payload.push_back(static_cast<uint8_t>(i * 29 + 3));
    }
  }
  return payload;
}

std::vector<uint8_t> Encode(const PacketHeaders& h,
                            const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(FrameLength(h.bth.opcode, payload.size()));
  EXPECT_EQ(EncodeFrame(h, payload, out), out.size());
  return out;
}

void Put16At(std::vector<uint8_t>& f, size_t at, uint16_t v) {
  f[at] = static_cast<uint8_t>(v >> 8);
  f[at + 1] = static_cast<uint8_t>(v);
}

// Makes the IPv4 and UDP lengths, the IPv4 checksum and the ICRC (the last
// four bytes) agree with the frame's size and contents, so that a frame is
// wrong only where a test makes it so.
void Refresh(std::vector<uint8_t>& f) {
  const size_t ip_len = f.size() - kEthHeaderLen;
  Put16At(f, kIpAt + 2, static_cast<uint16_t>(ip_len));
  Put16At(f, kUdpAt + 4, static_cast<uint16_t>(ip_len - kIpv4HeaderLen));
  Put16At(f, kIpAt + 10,
          Ipv4HeaderChecksum({f.data() + kIpAt, kIpv4HeaderLen}));
  const uint32_t icrc = ComputeIcrc({f.data() + kIpAt, ip_len - kIcrcLen});
  for (int i = 0; i < 4; ++i) {
    f[f.size() - kIcrcLen + i] = static_cast<uint8_t>(icrc >> (8 * i));
  }
}

// The headers `h` encoded for `op`, as the parser returned them: each one
// the opcode carries as encoded, every other one at its default.
void ExpectHeaders(const ParsedPacket& pkt, const PacketHeaders& h) {
  const Opcode op = h.bth.opcode;
  EXPECT_EQ(pkt.bth.opcode, op);
  EXPECT_EQ(pkt.bth.dest_qp, h.bth.dest_qp);
  EXPECT_EQ(pkt.bth.psn, h.bth.psn);
  EXPECT_EQ(pkt.bth.solicited, h.bth.solicited);
  EXPECT_EQ(pkt.bth.ack_req, h.bth.ack_req);
  const PacketHeaders none;
  const PacketHeaders& r = HasReth(op) ? h : none;
  EXPECT_EQ(pkt.reth.va, r.reth.va);
  EXPECT_EQ(pkt.reth.rkey, r.reth.rkey);
  EXPECT_EQ(pkt.reth.dma_length, r.reth.dma_length);
  const PacketHeaders& a = HasAeth(op) ? h : none;
  EXPECT_EQ(pkt.aeth.syndrome, a.aeth.syndrome);
  EXPECT_EQ(pkt.aeth.msn, a.aeth.msn);
  const PacketHeaders& d = HasDeth(op) ? h : none;
  EXPECT_EQ(pkt.deth.qkey, d.deth.qkey);
  EXPECT_EQ(pkt.deth.src_qp, Qpn(d.deth.src_qp.value() & 0xFFFFFF));
  const PacketHeaders& at = HasAtomicEth(op) ? h : none;
  EXPECT_EQ(pkt.atomic_eth.va, at.atomic_eth.va);
  EXPECT_EQ(pkt.atomic_eth.rkey, at.atomic_eth.rkey);
  EXPECT_EQ(pkt.atomic_eth.swap_add, at.atomic_eth.swap_add);
  EXPECT_EQ(pkt.atomic_eth.compare, at.atomic_eth.compare);
  const PacketHeaders& ack = HasAtomicAckEth(op) ? h : none;
  EXPECT_EQ(pkt.atomic_ack_eth.orig_data, ack.atomic_ack_eth.orig_data);
  const PacketHeaders& i = HasIeth(op) ? h : none;
  EXPECT_EQ(pkt.ieth.rkey, i.ieth.rkey);
  EXPECT_EQ(pkt.imm, HasImm(op) ? h.imm : 0u);
}

TEST(RoceHeadersTest, EveryNewOpcodeRoundTripsThroughItsParser) {
  for (Opcode op : kNewOpcodes) {
    SCOPED_TRACE(OpcodeName(op));
    PacketHeaders h = Sample(op);
    h.bth.solicited = true;
    h.bth.ack_req = IsRcOpcode(static_cast<uint8_t>(op));
    const std::vector<uint8_t> payload = PayloadFor(op);
    const std::vector<uint8_t> frame = Encode(h, payload);
    EXPECT_EQ(frame.size(), kExtAt + InfoOf(op).header_len + payload.size() +
                                (4 - payload.size() % 4) % 4 + kIcrcLen);
    ParsedPacket pkt;
    ParseCounters counters;
    ASSERT_EQ(ParserFor(op)(frame, &pkt, &counters), ParseError::kOk);
    EXPECT_EQ(counters[ParseError::kOk], 1u);
    ExpectHeaders(pkt, h);
    EXPECT_EQ(std::vector<uint8_t>(pkt.payload.begin(), pkt.payload.end()),
              payload);
    EXPECT_EQ(pkt.src_ip, h.path.src_ip);
    EXPECT_EQ(pkt.udp_src_port, h.path.udp_src_port);
  }
}

// What goes after the BTH, byte for byte, as IBA vol. 1, 9.3 lays it out.
TEST(RoceHeadersTest, HeadersSitWhereTheIbaPutsThem) {
  struct Case {
    Opcode op;
    std::vector<uint8_t> bytes;
  };
  const Case cases[] = {
      // DETH: Q_Key, reserved byte, source QP.
      {Opcode::kUdSendOnly, {0x00, 0x00, 0xC0, 0xDE, 0x00, 0x00, 0x03, 0x21}},
      // DETH, then ImmDt as given.
      {Opcode::kUdSendOnlyImmediate,
       {0x00, 0x00, 0xC0, 0xDE, 0x00, 0x00, 0x03, 0x21, 0xA1, 0xB2, 0xC3,
        0xD4}},
      // AtomicETH: VA, R_Key, swap or add data, compare data.
      {Opcode::kCompareSwap,
       {0x00, 0x00, 0x7F, 0x00, 0xDE, 0xAD, 0xBE, 0xE8, 0x12, 0x34,
        0x56, 0x78, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44,
        0x55, 0x55, 0x66, 0x66, 0x77, 0x77, 0x88, 0x88}},
      // AETH (syndrome, MSN), then AtomicAckETH.
      {Opcode::kAtomicAcknowledge,
       {0x1F, 0x00, 0xAB, 0xCD, 0x99, 0x99, 0xAA, 0xAA, 0xBB, 0xBB, 0xCC,
        0xCC}},
      // IETH: the R_Key to invalidate.
      {Opcode::kSendOnlyInvalidate, {0xFE, 0xDC, 0xBA, 0x98}},
      {Opcode::kSendLastInvalidate, {0xFE, 0xDC, 0xBA, 0x98}},
      // UC WRITE: RETH, then ImmDt.
      {Opcode::kUcWriteOnlyImmediate,
       {0x00, 0x00, 0x7F, 0x00, 0x12, 0x34, 0x56, 0x78, 0xAB, 0xCD,
        0x01, 0x42, 0x00, 0x00, 0x10, 0x00, 0xA1, 0xB2, 0xC3, 0xD4}},
      {Opcode::kUcSendLastImmediate, {0xA1, 0xB2, 0xC3, 0xD4}},
      {Opcode::kUcSendOnly, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(OpcodeName(c.op));
    const std::vector<uint8_t> frame = Encode(Sample(c.op), PayloadFor(c.op));
    EXPECT_EQ(InfoOf(c.op).header_len, c.bytes.size());
    EXPECT_EQ(std::vector<uint8_t>(frame.begin() + kExtAt,
                                   frame.begin() + kExtAt + c.bytes.size()),
              c.bytes);
    EXPECT_EQ(frame[kBthAt], static_cast<uint8_t>(c.op));
  }
}

TEST(RoceHeadersTest, OpcodeTableForUcAndUd) {
  struct Row {
    Opcode op;
    OpcodeClass op_class;
    uint8_t header_len;
    uint16_t headers;  // kOpReth, kOpImm, kOpDeth
    bool first, last;
  };
  const Row rows[] = {
      {Opcode::kUcSendFirst, OpcodeClass::kSend, 0, 0, true, false},
      {Opcode::kUcSendMiddle, OpcodeClass::kSend, 0, 0, false, false},
      {Opcode::kUcSendLast, OpcodeClass::kSend, 0, 0, false, true},
      {Opcode::kUcSendLastImmediate, OpcodeClass::kSend, 4, kOpImm, false,
       true},
      {Opcode::kUcSendOnly, OpcodeClass::kSend, 0, 0, true, true},
      {Opcode::kUcSendOnlyImmediate, OpcodeClass::kSend, 4, kOpImm, true, true},
      {Opcode::kUcWriteFirst, OpcodeClass::kWrite, 16, kOpReth, true, false},
      {Opcode::kUcWriteMiddle, OpcodeClass::kWrite, 0, 0, false, false},
      {Opcode::kUcWriteLast, OpcodeClass::kWrite, 0, 0, false, true},
      {Opcode::kUcWriteLastImmediate, OpcodeClass::kWrite, 4, kOpImm, false,
       true},
      {Opcode::kUcWriteOnly, OpcodeClass::kWrite, 16, kOpReth, true, true},
      {Opcode::kUcWriteOnlyImmediate, OpcodeClass::kWrite, 20, kOpReth | kOpImm,
       true, true},
      {Opcode::kUdSendOnly, OpcodeClass::kDatagram, 8, kOpDeth, true, true},
      {Opcode::kUdSendOnlyImmediate, OpcodeClass::kDatagram, 12,
       kOpDeth | kOpImm, true, true},
  };
  constexpr uint16_t kHeaderFlags = kOpReth | kOpAeth | kOpDeth | kOpImm |
                                    kOpAtomicEth | kOpAtomicAckEth | kOpIeth;
  for (const Row& r : rows) {
    SCOPED_TRACE(OpcodeName(r.op));
    const OpcodeInfo& info = InfoOf(r.op);
    EXPECT_TRUE(IsDefined(r.op));
    EXPECT_TRUE(IsRequest(r.op));
    EXPECT_TRUE(CarriesPayload(r.op));
    EXPECT_EQ(info.op_class, r.op_class);
    EXPECT_EQ(info.header_len, r.header_len);
    EXPECT_EQ(info.flags & kHeaderFlags, r.headers);
    EXPECT_EQ((info.flags & kOpFirst) != 0, r.first);
    EXPECT_EQ((info.flags & kOpLast) != 0, r.last);
    // UC's opcode is its RC namesake's plus 0x20, with the same headers.
    const uint8_t v = static_cast<uint8_t>(r.op);
    if (IsUcOpcode(v)) {
      const OpcodeInfo& rc = kOpcodeTable[v - kUcOpcodeBase];
      EXPECT_EQ(info.header_len, rc.header_len);
      EXPECT_EQ(info.flags & ~kOpSupported, rc.flags & ~kOpSupported);
      EXPECT_EQ(info.op_class, rc.op_class);
    }
  }
  // Only UD SEND ONLY (the CM's) is rdmaplane's own among them.
  EXPECT_TRUE(IsSupported(Opcode::kUdSendOnly));
  EXPECT_FALSE(IsSupported(Opcode::kUdSendOnlyImmediate));
  EXPECT_FALSE(IsSupported(Opcode::kUcWriteOnly));
  // The other RC headers.
  EXPECT_EQ(InfoOf(Opcode::kCompareSwap).flags & kHeaderFlags, kOpAtomicEth);
  EXPECT_EQ(InfoOf(Opcode::kFetchAdd).flags & kHeaderFlags, kOpAtomicEth);
  EXPECT_EQ(InfoOf(Opcode::kAtomicAcknowledge).flags & kHeaderFlags,
            kOpAeth | kOpAtomicAckEth);
  EXPECT_EQ(InfoOf(Opcode::kSendOnlyInvalidate).flags & kHeaderFlags, kOpIeth);
  EXPECT_EQ(InfoOf(Opcode::kSendLastInvalidate).flags & kHeaderFlags, kOpIeth);
  // FLUSH's FETH and RETH are skipped, not read.
  EXPECT_EQ(InfoOf(Opcode::kFlush).flags & kHeaderFlags, 0);
  // The longest headers of all.
  for (int op = 0; op < 256; ++op) {
    EXPECT_LE(kOuterHeadersLen + kBthLen + kOpcodeTable[op].header_len,
              kMaxHeadersLen);
  }
  EXPECT_EQ(kMaxHeadersLen, FrameLength(Opcode::kCompareSwap, 0) - kIcrcLen);
}

// Each parser takes exactly its transport's opcodes: ParseFrame every RC
// opcode (reserved ones too, for the responder to NAK), ParseUcFrame and
// ParseDatagramFrame only the defined UC and UD opcodes; RD, CNP, XRC and
// the rest are nobody's.
TEST(RoceHeadersTest, EachParserTakesOnlyItsTransport) {
  const Parser parsers[] = {&ParseFrame, &ParseUcFrame, &ParseDatagramFrame};
  for (int v = 0; v < 256; ++v) {
    SCOPED_TRACE(v);
    const Opcode op = static_cast<Opcode>(v);
    const uint8_t byte = static_cast<uint8_t>(v);
    std::vector<uint8_t> frame = Encode(Sample(op), PayloadFor(op, 8));
    int taker = -1;
    if (IsRcOpcode(byte)) taker = 0;
    if (IsUcOpcode(byte) && IsDefined(op)) taker = 1;
    if (IsUdOpcode(byte) && IsDefined(op)) taker = 2;
    for (int p = 0; p < 3; ++p) {
      ParsedPacket pkt;
      ParseCounters counters;
      const ParseError want =
          p == taker ? ParseError::kOk : ParseError::kUnknownOpcode;
      EXPECT_EQ(parsers[p](frame, &pkt, &counters), want) << p;
      EXPECT_EQ(counters[want], 1u);
    }
  }
}

// A frame cut anywhere, in a buffer of exactly that size, is refused.
TEST(RoceHeadersTest, TruncationAtEveryLengthIsRejected) {
  for (Opcode op : kNewOpcodes) {
    SCOPED_TRACE(OpcodeName(op));
    const std::vector<uint8_t> good = Encode(Sample(op), PayloadFor(op, 5));
    for (size_t len = 0; len < good.size(); ++len) {
      const std::vector<uint8_t> cut(good.begin(), good.begin() + len);
      ParsedPacket pkt;
      EXPECT_NE(ParserFor(op)(cut, &pkt, nullptr), ParseError::kOk) << len;
    }
  }
}

// A frame whose lengths, checksum and ICRC are all consistent but that ends
// inside its extension headers, at every byte of them, is kTruncated: no
// header is read past the end.
TEST(RoceHeadersTest, ShortExtensionHeadersAreTruncated) {
  for (Opcode op : kNewOpcodes) {
    SCOPED_TRACE(OpcodeName(op));
    const std::vector<uint8_t> good = Encode(Sample(op), PayloadFor(op));
    for (size_t n = 0; n < InfoOf(op).header_len; ++n) {
      std::vector<uint8_t> frame(good.begin(), good.begin() + kExtAt + n);
      frame[kBthAt + 1] &= 0xCF;  // no pad
      frame.resize(frame.size() + kIcrcLen);
      Refresh(frame);
      ParsedPacket pkt;
      ParseCounters counters;
      EXPECT_EQ(ParserFor(op)(frame, &pkt, &counters), ParseError::kTruncated)
          << n;
      EXPECT_EQ(counters[ParseError::kTruncated], 1u);
    }
  }
}

// Atomic requests and their acknowledgements are their headers and nothing
// else: any byte more, or a pad count, is refused; so is payload at the
// encoder.
TEST(RoceHeadersTest, AtomicsCarryNoPayload) {
  for (Opcode op :
       {Opcode::kCompareSwap, Opcode::kFetchAdd, Opcode::kAtomicAcknowledge}) {
    SCOPED_TRACE(OpcodeName(op));
    EXPECT_FALSE(CarriesPayload(op));
    const std::vector<uint8_t> good = Encode(Sample(op), {});
    ParsedPacket pkt;
    for (size_t extra : {size_t{4}, size_t{8}}) {
      std::vector<uint8_t> longer = good;
      longer.insert(longer.end() - kIcrcLen, extra, 0x5A);
      Refresh(longer);
      EXPECT_EQ(ParseFrame(longer, &pkt), ParseError::kLengthMismatch) << extra;
    }
    std::vector<uint8_t> padded = good;
    padded.insert(padded.end() - kIcrcLen, 4, 0);
    padded[kBthAt + 1] |= 0x30;
    Refresh(padded);
    EXPECT_EQ(ParseFrame(padded, &pkt), ParseError::kBadPad);
    std::vector<uint8_t> out(FrameLength(op, 8));
    const std::vector<uint8_t> payload(8, 1);
    EXPECT_EQ(EncodeFrame(Sample(op), payload, out), 0u);
  }
}

// A UD frame's datagram-only opcode and a UC frame need their whole header
// set too: a UD SEND ONLY WITH IMMEDIATE whose ImmDt is missing is short,
// not a UD SEND ONLY with payload.
TEST(RoceHeadersTest, MissingImmediateDataIsTruncated) {
  PacketHeaders h = Sample(Opcode::kUdSendOnly);
  std::vector<uint8_t> frame = Encode(h, {});
  frame[kBthAt] = static_cast<uint8_t>(Opcode::kUdSendOnlyImmediate);
  Refresh(frame);
  ParsedPacket pkt;
  EXPECT_EQ(ParseDatagramFrame(frame, &pkt), ParseError::kTruncated);
  // With four bytes of payload instead, the same bytes are the ImmDt.
  frame = Encode(h, {0xA1, 0xB2, 0xC3, 0xD4});
  frame[kBthAt] = static_cast<uint8_t>(Opcode::kUdSendOnlyImmediate);
  Refresh(frame);
  ASSERT_EQ(ParseDatagramFrame(frame, &pkt), ParseError::kOk);
  EXPECT_EQ(pkt.imm, Sample(Opcode::kUdSendOnly).imm);
  EXPECT_TRUE(pkt.payload.empty());
}

TEST(RoceHeadersTest, FieldValuesAtTheirLimits) {
  for (bool high : {false, true}) {
    SCOPED_TRACE(high);
    const uint64_t u64 = high ? ~uint64_t{0} : 0;
    const uint32_t u32 = high ? ~uint32_t{0} : 0;
    for (Opcode op : kNewOpcodes) {
      SCOPED_TRACE(OpcodeName(op));
      PacketHeaders h = Sample(op);
      h.bth.dest_qp = Qpn(high ? 0xFFFFFF : 0);
      h.bth.psn = Psn(high ? 0xFFFFFF : 0);
      h.bth.pkey = static_cast<uint16_t>(u32);
      h.reth = {u64, Rkey(u32), u32};
      h.aeth = {static_cast<uint8_t>(u32), high ? 0xFFFFFFu : 0u};
      h.deth = {u32, Qpn(high ? 0xFFFFFF : 0)};
      // An address at the top of the space, not 8-byte aligned: the
      // responder's to refuse, the parser's to pass on.
      h.atomic_eth = {u64, Rkey(u32), u64, u64};
      h.atomic_ack_eth = {u64};
      h.ieth = {Rkey(u32)};
      h.imm = u32;
      const std::vector<uint8_t> payload = PayloadFor(op, high ? 4096 : 0);
      const std::vector<uint8_t> frame = Encode(h, payload);
      ParsedPacket pkt;
      ASSERT_EQ(ParserFor(op)(frame, &pkt, nullptr), ParseError::kOk);
      ExpectHeaders(pkt, h);
      EXPECT_EQ(pkt.bth.pkey, h.bth.pkey);
      EXPECT_EQ(pkt.payload.size(), payload.size());
    }
  }
}

// A source QP beyond 24 bits goes out as its low 24 bits, like the BTH's
// destination QP.
TEST(RoceHeadersTest, SourceQpIsTwentyFourBits) {
  PacketHeaders h = Sample(Opcode::kUdSendOnly);
  h.deth.src_qp = Qpn(0x01ABCDEF);
  const std::vector<uint8_t> frame = Encode(h, {1, 2, 3, 4});
  EXPECT_EQ(frame[kExtAt + 4], 0);  // the reserved byte stays 0
  ParsedPacket pkt;
  ASSERT_EQ(ParseDatagramFrame(frame, &pkt), ParseError::kOk);
  EXPECT_EQ(pkt.deth.src_qp, Qpn(0xABCDEF));
}

// The DETH's reserved byte is written as 0 and ignored when read.
TEST(RoceHeadersTest, DethReservedByteIsIgnored) {
  std::vector<uint8_t> frame = Encode(Sample(Opcode::kUdSendOnly), {1, 2});
  frame[kExtAt + 4] = 0xFF;
  Refresh(frame);
  ParsedPacket pkt;
  ASSERT_EQ(ParseDatagramFrame(frame, &pkt), ParseError::kOk);
  EXPECT_EQ(pkt.deth.qkey, 0x0000C0DEu);
  EXPECT_EQ(pkt.deth.src_qp, Qpn(0x000321));
}

// Every address is passed on, aligned or not: alignment is the responder's
// check (NAK "invalid request"), not the parser's.
TEST(RoceHeadersTest, MisalignedAtomicAddressesParse) {
  for (Opcode op : {Opcode::kCompareSwap, Opcode::kFetchAdd}) {
    for (uint64_t low = 0; low < 8; ++low) {
      PacketHeaders h = Sample(op);
      h.atomic_eth.va = 0x00007F0000001000 + low;
      ParsedPacket pkt;
      ASSERT_EQ(ParseFrame(Encode(h, {}), &pkt), ParseError::kOk) << low;
      EXPECT_EQ(pkt.atomic_eth.va, h.atomic_eth.va);
    }
  }
}

// The ICRC covers every byte of every extension header (none of them is a
// variant field), while the variant fields of IPv4, UDP and BTH stay outside
// it for the new transports too.
TEST(RoceHeadersTest, IcrcCoversTheExtensionHeaders) {
  for (Opcode op : kNewOpcodes) {
    SCOPED_TRACE(OpcodeName(op));
    const std::vector<uint8_t> good = Encode(Sample(op), PayloadFor(op));
    for (size_t at = kExtAt; at < kExtAt + InfoOf(op).header_len; ++at) {
      std::vector<uint8_t> frame = good;
      frame[at] ^= 0x10;
      ParsedPacket pkt;
      EXPECT_EQ(ParserFor(op)(frame, &pkt, nullptr), ParseError::kBadIcrc)
          << at;
    }
    // TTL, ECN and FECN/BECN as a switch rewrites them (IPv4 checksum
    // fixed): the ICRC still holds.
    std::vector<uint8_t> remarked = good;
    remarked[kIpAt + 1] |= 0x03;
    remarked[kIpAt + 8] -= 1;
    remarked[kBthAt + 4] |= 0xC0;
    Put16At(remarked, kIpAt + 10,
            Ipv4HeaderChecksum({remarked.data() + kIpAt, kIpv4HeaderLen}));
    ParsedPacket pkt;
    ASSERT_EQ(ParserFor(op)(remarked, &pkt, nullptr), ParseError::kOk);
    EXPECT_TRUE(pkt.bth.fecn);
    EXPECT_TRUE(pkt.bth.becn);
  }
}

// Headers an opcode lacks come back at their defaults, whatever the packet
// before left in the ParsedPacket.
TEST(RoceHeadersTest, AbsentHeadersAreReset) {
  ParsedPacket pkt;
  ASSERT_EQ(ParseFrame(Encode(Sample(Opcode::kCompareSwap), {}), &pkt),
            ParseError::kOk);
  ASSERT_EQ(pkt.atomic_eth.swap_add, 0x1111222233334444u);
  ASSERT_EQ(ParseFrame(Encode(Sample(Opcode::kAtomicAcknowledge), {}), &pkt),
            ParseError::kOk);
  EXPECT_EQ(pkt.atomic_eth.va, 0u);
  EXPECT_EQ(pkt.atomic_eth.swap_add, 0u);
  EXPECT_EQ(pkt.atomic_ack_eth.orig_data, 0x9999AAAABBBBCCCCu);
  ASSERT_EQ(ParseFrame(Encode(Sample(Opcode::kSendOnlyInvalidate), {1}), &pkt),
            ParseError::kOk);
  EXPECT_EQ(pkt.atomic_ack_eth.orig_data, 0u);
  EXPECT_EQ(pkt.aeth.msn, 0u);
  EXPECT_EQ(pkt.ieth.rkey, Rkey(0xFEDCBA98));
  ASSERT_EQ(ParseDatagramFrame(
                Encode(Sample(Opcode::kUdSendOnlyImmediate), {1}), &pkt),
            ParseError::kOk);
  EXPECT_EQ(pkt.ieth.rkey, Rkey(0));
  EXPECT_EQ(pkt.deth.src_qp, Qpn(0x000321));
  ASSERT_EQ(ParseUcFrame(Encode(Sample(Opcode::kUcSendOnly), {1}), &pkt),
            ParseError::kOk);
  EXPECT_EQ(pkt.deth.qkey, 0u);
  EXPECT_EQ(pkt.imm, 0u);
}

// The frames a WRITE, READ or ACK were before these headers existed are
// unchanged: none of the new fields reaches them.
TEST(RoceHeadersTest, ExistingOpcodesIgnoreTheNewFields) {
  for (Opcode op : {Opcode::kWriteOnly, Opcode::kReadRequest,
                    Opcode::kAcknowledge, Opcode::kSendOnlyImmediate}) {
    SCOPED_TRACE(OpcodeName(op));
    PacketHeaders with = Sample(op);
    PacketHeaders without = with;
    without.deth = {};
    without.atomic_eth = {};
    without.atomic_ack_eth = {};
    without.ieth = {};
    EXPECT_EQ(Encode(with, PayloadFor(op)), Encode(without, PayloadFor(op)));
  }
}

}  // namespace
}  // namespace rdmaplane::wire
