#include "dataplane/wire/cm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dataplane/wire/arp.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

constexpr size_t kBthAt = kOuterHeadersLen;
constexpr size_t kDethAt = kBthAt + kBthLen;
constexpr size_t kMadAt = kDethAt + kDethLen;
constexpr size_t kDataAt = kMadAt + kMadHeaderLen;  // CM message fields

Path ActiveToPassive() {
  Path p;
  p.src_mac = {{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
  p.dst_mac = {{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
  p.src_ip = 0x0A000001;
  p.dst_ip = 0x0A000002;
  p.udp_src_port = 0xC123;
  p.dscp_ecn = 26 << 2;
  return p;
}

void FillPrivateData(CmMessage* m, uint8_t seed) {
  m->private_data_len = static_cast<uint8_t>(CmPrivateDataCapacity(m->type));
  for (size_t i = 0; i < m->private_data_len; ++i) {
    m->private_data[i] = static_cast<uint8_t>(i * 7 + seed);
  }
}

// A message of each type with every field its type carries set to a value
// that is not the default, and full private data.
CmMessage Sample(CmType type) {
  CmMessage m;
  m.type = type;
  m.transaction_id = 0x1122334455667788;
  m.local_comm_id = 0xA1B2C3D4;
  if (type != CmType::kReq) m.remote_comm_id = 0x01020304;  // SIDR: none
  switch (type) {
    case CmType::kReq:
      m.service_id = 0x02ABCDEF01234567;
      m.qpn = Qpn(0xABCDEF);
      m.start_psn = Psn(0xFEDCBA);
      m.path_mtu = kIbMtu4096;
      m.responder_resources = 16;
      m.initiator_depth = 8;
      m.local_ack_timeout = 14;
      m.remote_cm_response_timeout = 19;
      m.local_cm_response_timeout = 13;
      m.max_cm_retries = 9;
      m.retry_count = 5;
      m.rnr_retry_count = 6;
      m.packet_rate = kIbRate40Gbps;
      m.local_ip = 0x0A000001;
      m.remote_ip = 0x0A000002;
      m.srq = true;
      m.flow_control = true;
      break;
    case CmType::kRep:
      m.qpn = Qpn(0x000123);
      m.start_psn = Psn(0x800001);
      m.responder_resources = 4;
      m.initiator_depth = 2;
      m.target_ack_delay = 21;
      m.rnr_retry_count = 3;
      m.srq = true;
      m.flow_control = true;
      break;
    case CmType::kSidrReq:
      m.remote_comm_id = 0;
      m.service_id = IpCmServiceId(kPortSpaceUdp, 7174);
      break;
    case CmType::kSidrRep:
      m.remote_comm_id = 0;
      m.service_id = IpCmServiceId(kPortSpaceUdp, 7174);
      m.qpn = Qpn(0x00ABCD);
      m.qkey = 0x01234567;
      m.sidr_status = kSidrRejected;
      break;
    case CmType::kMra:
      m.refers_to = CmRefersTo::kRep;
      m.service_timeout = 31;
      break;
    case CmType::kRej:
      m.refers_to = CmRefersTo::kOther;
      m.reject_reason = kRejConsumer;
      break;
    case CmType::kDreq:
      m.qpn = Qpn(0x000011);
      break;
    case CmType::kRtu:
    case CmType::kDrep:
      break;
  }
  FillPrivateData(&m, static_cast<uint8_t>(type));
  return m;
}

constexpr CmType kAllTypes[] = {CmType::kReq, CmType::kMra, CmType::kRej,
                                CmType::kRep, CmType::kRtu, CmType::kDreq,
                                CmType::kDrep, CmType::kSidrReq,
                                CmType::kSidrRep};

std::vector<uint8_t> Encode(const CmMessage& m,
                            const Path& path = ActiveToPassive()) {
  std::vector<uint8_t> frame(kCmFrameLen);
  EXPECT_EQ(EncodeCmFrame(path, m, frame), kCmFrameLen);
  return frame;
}

// Recomputes the ICRC so that a frame fails only for what a test changed.
void FixIcrc(std::vector<uint8_t>& frame) {
  const size_t ip_len = frame.size() - kEthHeaderLen - kIcrcLen;
  const uint32_t icrc = ComputeIcrc({frame.data() + kEthHeaderLen, ip_len});
  for (int i = 0; i < 4; ++i) {
    frame[frame.size() - 4 + i] = static_cast<uint8_t>(icrc >> (8 * i));
  }
}

uint32_t Get24At(const std::vector<uint8_t>& f, size_t at) {
  return uint32_t{f[at]} << 16 | uint32_t{f[at + 1]} << 8 | f[at + 2];
}
uint32_t Get32At(const std::vector<uint8_t>& f, size_t at) {
  return Get24At(f, at) << 8 | f[at + 3];
}

TEST(CmTest, RoundTripEveryType) {
  for (CmType type : kAllTypes) {
    SCOPED_TRACE(CmTypeName(type));
    const CmMessage sent = Sample(type);
    const std::vector<uint8_t> frame = Encode(sent);
    EXPECT_EQ(ClassifyFrame(frame), FrameKind::kCm);
    CmMessage got;
    Path from;
    ASSERT_TRUE(ParseCmFrame(frame, &got, &from));
    EXPECT_EQ(got, sent);
    EXPECT_EQ(from.src_mac, ActiveToPassive().src_mac);
    EXPECT_EQ(from.dst_mac, ActiveToPassive().dst_mac);
    EXPECT_EQ(from.src_ip, 0x0A000001u);
    EXPECT_EQ(from.dst_ip, 0x0A000002u);
    EXPECT_EQ(from.udp_src_port, 0xC123);
    EXPECT_EQ(from.ttl, 64);
  }
}

TEST(CmTest, ShortPrivateDataIsZeroFilled) {
  CmMessage m = Sample(CmType::kRtu);
  m.private_data_len = 3;
  m.private_data.fill(0xEE);
  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(Encode(m), &got, nullptr));
  EXPECT_EQ(got.private_data_len, 224);
  EXPECT_EQ(got.private_data[2], 0xEE);
  EXPECT_EQ(got.private_data[3], 0);
  EXPECT_EQ(got.private_data[223], 0);
}

TEST(CmTest, PrivateDataCapacities) {
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kReq), 92u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kMra), 222u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kRej), 148u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kRep), 196u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kRtu), 224u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kDreq), 220u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kDrep), 224u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kSidrReq), 216u);
  EXPECT_EQ(CmPrivateDataCapacity(CmType::kSidrRep), 136u);
  EXPECT_EQ(CmPrivateDataCapacity(static_cast<CmType>(0x19)), 0u);
}

// Spot checks of the layout against IBA vol. 1 ch. 12, independent of the
// parser (golden_test checks every field with tshark).
TEST(CmTest, TransportAndMadHeaderBytes) {
  const std::vector<uint8_t> frame = Encode(Sample(CmType::kRep));
  ASSERT_EQ(frame.size(), 322u);
  EXPECT_EQ(frame[kBthAt], 0x64);                   // UD SEND ONLY
  EXPECT_EQ(Get24At(frame, kBthAt + 5), 1u);        // dest QP
  EXPECT_EQ(Get32At(frame, kDethAt), 0x80010000u);  // Q_Key
  EXPECT_EQ(Get24At(frame, kDethAt + 5), 1u);       // source QP
  EXPECT_EQ(frame[kMadAt + 0], 1);                  // base version
  EXPECT_EQ(frame[kMadAt + 1], 0x07);               // CM
  EXPECT_EQ(frame[kMadAt + 2], 2);                  // class version
  EXPECT_EQ(frame[kMadAt + 3], 0x03);               // SEND
  EXPECT_EQ(Get32At(frame, kMadAt + 8), 0x11223344u);
  EXPECT_EQ(Get32At(frame, kMadAt + 12), 0x55667788u);
  EXPECT_EQ(frame[kMadAt + 16], 0x00);
  EXPECT_EQ(frame[kMadAt + 17], 0x13);  // REP
}

TEST(CmTest, ReqLayout) {
  const std::vector<uint8_t> f = Encode(Sample(CmType::kReq));
  const size_t d = kDataAt;
  EXPECT_EQ(Get32At(f, d + 0), 0xA1B2C3D4u);  // local comm id
  EXPECT_EQ(Get32At(f, d + 8), 0x02ABCDEFu);  // service id
  EXPECT_EQ(Get32At(f, d + 12), 0x01234567u);
  // Local CA GUID: EUI-64 of 02:00:00:00:00:01.
  EXPECT_EQ(Get32At(f, d + 16), 0x000000FFu);
  EXPECT_EQ(Get32At(f, d + 20), 0xFE000001u);
  EXPECT_EQ(Get24At(f, d + 32), 0xABCDEFu);           // local QPN
  EXPECT_EQ(f[d + 35], 16);                           // responder resources
  EXPECT_EQ(f[d + 39], 8);                            // initiator depth
  EXPECT_EQ(f[d + 43], 19 << 3 | 1);                  // RC, flow control
  EXPECT_EQ(Get24At(f, d + 44), 0xFEDCBAu);           // starting PSN
  EXPECT_EQ(f[d + 47], 13 << 3 | 5);                  // retry count 5
  EXPECT_EQ(f[d + 48], 0xFF);                         // P_Key
  EXPECT_EQ(f[d + 49], 0xFF);
  EXPECT_EQ(f[d + 50], 5 << 4 | 6);  // MTU 4096, RNR retry 6
  EXPECT_EQ(f[d + 51], 9 << 4 | 8);  // max CM retries, SRQ
  EXPECT_EQ(f[d + 52], 0xFF);        // permissive LIDs
  EXPECT_EQ(f[d + 55], 0xFF);
  const std::vector<uint8_t> local_gid(f.begin() + d + 56, f.begin() + d + 72);
  EXPECT_EQ(local_gid, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF,
                                             0xFF, 10, 0, 0, 1}));
  EXPECT_EQ(Get32At(f, d + 84), 0x0A000002u);  // remote GID, IPv4 part
  // No flow label, the packet rate in the low six bits.
  EXPECT_EQ(Get32At(f, d + 88), uint32_t{kIbRate40Gbps});
  EXPECT_EQ(f[d + 92], 26 << 2);               // traffic class
  EXPECT_EQ(f[d + 93], 64);                    // hop limit
  EXPECT_EQ(f[d + 95], 14 << 3);               // local ACK timeout
  for (size_t i = 96; i < 140; ++i) EXPECT_EQ(f[d + i], 0) << i;  // no alt
  EXPECT_EQ(f[d + 140], Sample(CmType::kReq).private_data[0]);
}

TEST(CmTest, OtherLayouts) {
  const size_t d = kDataAt;
  const auto rep = Encode(Sample(CmType::kRep));
  EXPECT_EQ(Get32At(rep, d + 4), 0x01020304u);   // remote comm id
  EXPECT_EQ(Get24At(rep, d + 12), 0x000123u);    // local QPN
  EXPECT_EQ(Get24At(rep, d + 20), 0x800001u);    // starting PSN
  EXPECT_EQ(rep[d + 24], 4);                     // responder resources
  EXPECT_EQ(rep[d + 25], 2);                     // initiator depth
  EXPECT_EQ(rep[d + 26], 21 << 3 | 1);           // ACK delay, flow ctl
  EXPECT_EQ(rep[d + 27], 3 << 5 | 0x10);         // RNR retry count, SRQ
  EXPECT_EQ(Get32At(rep, d + 32), 0xFE000001u);  // CA GUID, low half
  EXPECT_EQ(rep[d + 36], Sample(CmType::kRep).private_data[0]);

  const auto mra = Encode(Sample(CmType::kMra));
  EXPECT_EQ(mra[d + 8], 1 << 6);   // REP being acknowledged
  EXPECT_EQ(mra[d + 9], 31 << 3);  // service timeout
  EXPECT_EQ(mra[d + 10], Sample(CmType::kMra).private_data[0]);

  const auto rej = Encode(Sample(CmType::kRej));
  EXPECT_EQ(rej[d + 8], 2 << 6);  // rejecting "other"
  EXPECT_EQ(rej[d + 9], 0);       // no ARI
  EXPECT_EQ(rej[d + 10], 0);
  EXPECT_EQ(rej[d + 11], 28);  // consumer reject
  EXPECT_EQ(rej[d + 84], Sample(CmType::kRej).private_data[0]);

  const auto dreq = Encode(Sample(CmType::kDreq));
  EXPECT_EQ(Get24At(dreq, d + 8), 0x000011u);  // remote QPN
  EXPECT_EQ(dreq[d + 12], Sample(CmType::kDreq).private_data[0]);

  for (CmType type : {CmType::kRtu, CmType::kDrep}) {
    const auto f = Encode(Sample(type));
    EXPECT_EQ(Get32At(f, d + 4), 0x01020304u);
    EXPECT_EQ(f[d + 8], Sample(type).private_data[0]);
  }
}

TEST(CmTest, EncodeRejectsWhatDoesNotFit) {
  std::vector<uint8_t> out(kCmFrameLen);
  EXPECT_EQ(EncodeCmFrame(ActiveToPassive(), Sample(CmType::kReq),
                          std::span<uint8_t>(out).first(kCmFrameLen - 1)),
            0u);
  struct Case {
    const char* name;
    CmMessage m;
  };
  std::vector<Case> cases;
  for (CmType type : kAllTypes) {
    CmMessage m = Sample(type);
    m.private_data_len = static_cast<uint8_t>(CmPrivateDataCapacity(type) + 1);
    cases.push_back({CmTypeName(type), m});
  }
  CmMessage m = Sample(CmType::kReq);
  m.qpn = Qpn(0x1000000);
  cases.push_back({"REQ QPN over 24 bits", m});
  m = Sample(CmType::kReq);
  m.path_mtu = 0;
  cases.push_back({"REQ MTU 0", m});
  m.path_mtu = 6;
  cases.push_back({"REQ MTU 6", m});
  m = Sample(CmType::kReq);
  m.local_ack_timeout = 32;
  cases.push_back({"REQ ACK timeout", m});
  m = Sample(CmType::kReq);
  m.remote_cm_response_timeout = 32;
  cases.push_back({"REQ remote CM response timeout", m});
  m = Sample(CmType::kReq);
  m.local_cm_response_timeout = 32;
  cases.push_back({"REQ local CM response timeout", m});
  m = Sample(CmType::kReq);
  m.max_cm_retries = 16;
  cases.push_back({"REQ max CM retries", m});
  m = Sample(CmType::kReq);
  m.retry_count = 8;
  cases.push_back({"REQ retry count", m});
  m = Sample(CmType::kReq);
  m.rnr_retry_count = 8;
  cases.push_back({"REQ RNR retry count", m});
  m = Sample(CmType::kReq);
  m.packet_rate = 64;
  cases.push_back({"REQ packet rate", m});
  m = Sample(CmType::kRep);
  m.target_ack_delay = 32;
  cases.push_back({"REP ACK delay", m});
  m = Sample(CmType::kRep);
  m.rnr_retry_count = 8;
  cases.push_back({"REP RNR retry count", m});
  m = Sample(CmType::kDreq);
  m.qpn = Qpn(0xFFFFFFFF);
  cases.push_back({"DREQ QPN", m});
  m = Sample(CmType::kMra);
  m.refers_to = static_cast<CmRefersTo>(3);
  cases.push_back({"MRA refers to 3", m});
  m = Sample(CmType::kMra);
  m.service_timeout = 32;
  cases.push_back({"MRA service timeout", m});
  m = Sample(CmType::kRej);
  m.refers_to = static_cast<CmRefersTo>(3);
  cases.push_back({"REJ refers to 3", m});
  m = Sample(CmType::kRtu);
  m.type = static_cast<CmType>(0x0019);  // LAP
  cases.push_back({"unknown type", m});
  for (const Case& c : cases) {
    EXPECT_EQ(EncodeCmFrame(ActiveToPassive(), c.m, out), 0u) << c.name;
  }
}

TEST(CmTest, TruncationAtEveryLengthIsRejected) {
  const std::vector<uint8_t> good = Encode(Sample(CmType::kReq));
  for (size_t len = 0; len < good.size(); ++len) {
    // Exactly sized, so a sanitizer sees any overread.
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    CmMessage m;
    EXPECT_FALSE(ParseCmFrame(cut, &m, nullptr)) << len;
  }
}

TEST(CmTest, CorruptionIsRejected) {
  const std::vector<uint8_t> good = Encode(Sample(CmType::kReq));
  struct Case {
    const char* name;
    size_t offset;
    uint8_t xor_mask;
    bool fix_icrc;
  };
  const Case cases[] = {
      {"MAD byte (ICRC)", kDataAt + 100, 0x01, false},
      {"ICRC", good.size() - 1, 0x80, false},
      {"base version", kMadAt + 0, 0x03, true},
      {"class (SA)", kMadAt + 1, 0x04, true},
      {"class version", kMadAt + 2, 0x01, true},
      {"method (GetResp)", kMadAt + 3, 0x80, true},
      {"attribute 0x0019 (LAP)", kMadAt + 17, 0x09, true},
      {"attribute 0x0110", kMadAt + 16, 0x01, true},
      {"attribute 0x000f", kMadAt + 17, 0x1F, true},
      {"destination QP 3", kBthAt + 7, 0x02, true},
      {"destination QP 0x010001", kBthAt + 5, 0x01, true},
      {"opcode UD SEND ONLY IMM", kBthAt, 0x01, true},
      {"P_Key 0xFF7F", kBthAt + 3, 0x80, true},
      {"Q_Key", kDethAt + 3, 0x01, true},
      {"source QP 0", kDethAt + 7, 0x01, true},
      {"REQ transport UC", kDataAt + 43, 0x02, true},
      {"REQ extended transport XRC", kDataAt + 51, 0x01, true},
      {"REQ MTU 0", kDataAt + 50, 0x50, true},
      {"REQ MTU 6", kDataAt + 50, 0x30, true},
      {"REQ local GID not IPv4-mapped", kDataAt + 56, 0xFE, true},
      {"REQ remote GID not IPv4-mapped", kDataAt + 82, 0x01, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> frame = good;
    frame[c.offset] ^= c.xor_mask;
    if (c.fix_icrc) FixIcrc(frame);
    CmMessage m;
    m.local_comm_id = 42;
    EXPECT_FALSE(ParseCmFrame(frame, &m, nullptr));
    EXPECT_EQ(m.local_comm_id, 42u);  // untouched
  }
}

TEST(CmTest, RejAndMraFieldChecks) {
  auto rej = Encode(Sample(CmType::kRej));
  CmMessage m;
  rej[kDataAt + 9] = 72 << 1;  // the most ARI there is room for
  FixIcrc(rej);
  EXPECT_TRUE(ParseCmFrame(rej, &m, nullptr));
  rej[kDataAt + 9] = 73 << 1;
  FixIcrc(rej);
  EXPECT_FALSE(ParseCmFrame(rej, &m, nullptr));
  rej = Encode(Sample(CmType::kRej));
  rej[kDataAt + 8] = 3 << 6;
  FixIcrc(rej);
  EXPECT_FALSE(ParseCmFrame(rej, &m, nullptr));

  auto mra = Encode(Sample(CmType::kMra));
  mra[kDataAt + 8] = 3 << 6;
  FixIcrc(mra);
  EXPECT_FALSE(ParseCmFrame(mra, &m, nullptr));
}

TEST(CmTest, LimitedPartitionMemberIsAccepted) {
  auto frame = Encode(Sample(CmType::kRtu));
  frame[kBthAt + 2] = 0x7F;
  FixIcrc(frame);
  CmMessage m;
  EXPECT_TRUE(ParseCmFrame(frame, &m, nullptr));
}

TEST(CmTest, NotACmFrame) {
  CmMessage m;
  // An RC frame.
  PacketHeaders h;
  h.path = ActiveToPassive();
  h.bth.opcode = Opcode::kAcknowledge;
  h.bth.dest_qp = kGsiQpn;
  std::vector<uint8_t> ack(FrameLength(Opcode::kAcknowledge, 0));
  ASSERT_EQ(EncodeFrame(h, {}, ack), ack.size());
  EXPECT_FALSE(ParseCmFrame(ack, &m, nullptr));

  // A UD datagram to QP1 whose payload is not 256 bytes.
  h.bth.opcode = Opcode::kUdSendOnly;
  h.deth = {kGsiQkey, kGsiQpn};
  const std::vector<uint8_t> mad(kMadLen + 4, 0);
  for (size_t len : {size_t{0}, size_t{252}, size_t{260}}) {
    std::vector<uint8_t> frame(FrameLength(Opcode::kUdSendOnly, len));
    ASSERT_EQ(EncodeFrame(h, std::span<const uint8_t>(mad.data(), len), frame),
              frame.size());
    EXPECT_FALSE(ParseCmFrame(frame, &m, nullptr)) << len;
  }

  // ARP.
  ArpMessage arp;
  arp.sender_mac = ActiveToPassive().src_mac;
  std::vector<uint8_t> arp_frame(kArpFrameLen);
  ASSERT_EQ(EncodeArp(arp, arp_frame), kArpFrameLen);
  EXPECT_FALSE(ParseCmFrame(arp_frame, &m, nullptr));
}

// A well-formed UD SEND ONLY with immediate data to QP1 carrying a valid MAD
// is a datagram, but not a CM message: MADs never travel with an ImmDt.
TEST(CmTest, UdSendWithImmediateIsNotACmFrame) {
  const std::vector<uint8_t> cm = Encode(Sample(CmType::kRtu));
  PacketHeaders h;
  h.path = ActiveToPassive();
  h.bth.opcode = Opcode::kUdSendOnlyImmediate;
  h.bth.dest_qp = kGsiQpn;
  h.deth = {kGsiQkey, kGsiQpn};
  const std::span<const uint8_t> mad(cm.data() + kMadAt, kMadLen);
  std::vector<uint8_t> frame(FrameLength(h.bth.opcode, kMadLen));
  ASSERT_EQ(EncodeFrame(h, mad, frame), frame.size());
  ParsedPacket pkt;
  ASSERT_EQ(ParseDatagramFrame(frame, &pkt), ParseError::kOk);
  EXPECT_EQ(std::vector<uint8_t>(pkt.payload.begin(), pkt.payload.end()),
            std::vector<uint8_t>(mad.begin(), mad.end()));
  CmMessage m;
  EXPECT_FALSE(ParseCmFrame(frame, &m, nullptr));
  EXPECT_EQ(ClassifyFrame(frame), FrameKind::kRoce);
}

TEST(CmTest, RcParserNeverSeesCmFrames) {
  ParsedPacket pkt;
  EXPECT_EQ(ParseFrame(Encode(Sample(CmType::kReq)), &pkt),
            ParseError::kUnknownOpcode);
}

TEST(CmTest, EthernetTrailerIsIgnored) {
  std::vector<uint8_t> frame = Encode(Sample(CmType::kDrep));
  frame.resize(frame.size() + 4, 0xCC);
  CmMessage m;
  EXPECT_TRUE(ParseCmFrame(frame, &m, nullptr));
}

TEST(CmTest, ClassifyFrame) {
  EXPECT_EQ(ClassifyFrame({}), FrameKind::kOther);

  ArpMessage arp;
  std::vector<uint8_t> arp_frame(kArpFrameLen);
  ASSERT_EQ(EncodeArp(arp, arp_frame), kArpFrameLen);
  EXPECT_EQ(ClassifyFrame(arp_frame), FrameKind::kArp);
  EXPECT_EQ(ClassifyFrame(std::span<const uint8_t>(arp_frame).first(14)),
            FrameKind::kArp);

  const std::vector<uint8_t> cm = Encode(Sample(CmType::kReq));
  EXPECT_EQ(ClassifyFrame(cm), FrameKind::kCm);

  PacketHeaders h;
  h.path = ActiveToPassive();
  h.bth.opcode = Opcode::kWriteOnly;
  h.bth.dest_qp = Qpn(0x123);
  std::vector<uint8_t> write(FrameLength(Opcode::kWriteOnly, 0));
  ASSERT_EQ(EncodeFrame(h, {}, write), write.size());
  EXPECT_EQ(ClassifyFrame(write), FrameKind::kRoce);

  struct Case {
    const char* name;
    size_t offset;
    uint8_t value;
    FrameKind want;
  };
  const Case cases[] = {
      {"UD to QP 2", kBthAt + 7, 2, FrameKind::kRoce},
      {"UD to QP 0x000101", kBthAt + 6, 1, FrameKind::kRoce},
      {"UD to QP 0x010001", kBthAt + 5, 1, FrameKind::kRoce},
      {"RC SEND ONLY to QP 1", kBthAt, 0x04, FrameKind::kRoce},
      {"UD SEND ONLY IMM to QP 1", kBthAt, 0x65, FrameKind::kRoce},
      {"IPv6 ethertype", 12, 0x86, FrameKind::kOther},
      {"VLAN tag", 12, 0x81, FrameKind::kOther},
      {"IPv4 options", kEthHeaderLen, 0x46, FrameKind::kOther},
      {"IP version 6", kEthHeaderLen, 0x65, FrameKind::kOther},
      {"TCP", kEthHeaderLen + 9, 6, FrameKind::kOther},
      {"UDP port 4792", kEthHeaderLen + kIpv4HeaderLen + 3, 0xB8,
       FrameKind::kOther},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> frame = cm;
    frame[c.offset] = c.value;
    EXPECT_EQ(ClassifyFrame(frame), c.want) << c.name;
  }
  // Too short for a BTH: RoCE, for ParseFrame to count as truncated.
  EXPECT_EQ(ClassifyFrame(std::span<const uint8_t>(cm).first(kBthAt + 4)),
            FrameKind::kRoce);
  EXPECT_EQ(ClassifyFrame(std::span<const uint8_t>(cm).first(kBthAt - 1)),
            FrameKind::kOther);
  EXPECT_EQ(ClassifyFrame(std::span<const uint8_t>(cm).first(13)),
            FrameKind::kOther);
}

// A native REQ is an IP CM REQ to RDMA_PS_TCP port 4791 whose consumer data
// name the service: "RDPN", version 1, length, FNV-1a hash, first 42 bytes.
TEST(CmTest, NativeRequestIsAnIpCmRequestNamingTheService) {
  EXPECT_EQ(kNativeServiceId, 0x00000000010612B7u);
  // 64-bit FNV-1a of "rdmaplane/echo".
  EXPECT_EQ(NativeServiceHash("rdmaplane/echo"), 0x5BB20A001DB057BBu);
  EXPECT_EQ(NativeServiceHash(""), 0xCBF29CE484222325u);

  CmMessage req = Sample(CmType::kReq);
  const IpCmHeader h{.src_port = 0, .src_ip = 0xC0A80001,
                     .dst_ip = 0xC0A80002};
  ASSERT_TRUE(SetNativeRequest("storage/7", h, &req));
  EXPECT_EQ(req.service_id, kNativeServiceId);
  EXPECT_EQ(req.private_data_len, kIpCmHeaderLen + 14 + 9);
  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(Encode(req), &got, nullptr));
  IpCmHeader parsed;
  ASSERT_TRUE(ParseIpCmHeader(got, &parsed));
  EXPECT_EQ(parsed, h);
  const uint8_t* record = got.private_data.data() + kIpCmHeaderLen;
  const uint8_t expected[] = {'R', 'D', 'P', 'N', 1, 9};
  EXPECT_EQ(std::memcmp(record, expected, sizeof(expected)), 0);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(record + 14), 9),
            "storage/7");
  NativeService named;
  ASSERT_TRUE(ParseNativeRequest(got, &named));
  EXPECT_EQ(named.length, 9);
  EXPECT_EQ(named.hash, NativeServiceHash("storage/7"));
  EXPECT_TRUE(named.Names("storage/7"));
  EXPECT_FALSE(named.Names("storage/8"));
  EXPECT_FALSE(named.Names("storage/77"));
  EXPECT_EQ(named.Text(), "storage/7");

  // Not a native request: another service id, another type, private data
  // of another consumer, another version, a name that runs past the data
  // or does not hash to what the record says.
  CmMessage other = got;
  other.service_id = IpCmServiceId(kPortSpaceIb, kNativeServicePort);
  EXPECT_FALSE(ParseNativeRequest(other, &named));
  CmMessage rep = got;
  rep.type = CmType::kRep;
  EXPECT_FALSE(ParseNativeRequest(rep, &named));
  CmMessage foreign = got;
  foreign.private_data[kIpCmHeaderLen] = 'X';
  EXPECT_FALSE(ParseNativeRequest(foreign, &named));
  CmMessage version = got;
  version.private_data[kIpCmHeaderLen + 4] = 2;
  EXPECT_FALSE(ParseNativeRequest(version, &named));
  CmMessage cut = got;
  cut.private_data_len = static_cast<uint8_t>(kIpCmHeaderLen + 14 + 8);
  EXPECT_FALSE(ParseNativeRequest(cut, &named));
  CmMessage forged = got;
  forged.private_data[kIpCmHeaderLen + 14] = 'S';
  EXPECT_FALSE(ParseNativeRequest(forged, &named));
  CmMessage no_header = got;
  no_header.private_data[1] = 6 << 4;  // IPv6: not what the daemon sends
  EXPECT_FALSE(ParseNativeRequest(no_header, &named));
}

// A name longer than 42 bytes travels as its length, hash and first bytes.
TEST(CmTest, NativeRequestNameLimits) {
  CmMessage req = Sample(CmType::kReq);
  const CmMessage before = req;
  const IpCmHeader h{};
  EXPECT_FALSE(SetNativeRequest("", h, &req));
  EXPECT_FALSE(SetNativeRequest(std::string(64, 'x'), h, &req));
  CmMessage rep = Sample(CmType::kRep);
  const CmMessage rep_before = rep;
  EXPECT_FALSE(SetNativeRequest("svc", h, &rep));
  EXPECT_EQ(req, before);
  EXPECT_EQ(rep, rep_before);

  const std::string longest = std::string(42, 'y') + std::string(21, 'z');
  ASSERT_EQ(longest.size(), kMaxServiceNameLen);
  ASSERT_TRUE(SetNativeRequest(longest, h, &req));
  EXPECT_EQ(req.private_data_len, CmPrivateDataCapacity(CmType::kReq));
  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(Encode(req), &got, nullptr));
  NativeService named;
  ASSERT_TRUE(ParseNativeRequest(got, &named));
  EXPECT_EQ(named.length, 63);
  EXPECT_EQ(named.prefix, std::string(42, 'y'));
  EXPECT_TRUE(named.Names(longest));
  EXPECT_FALSE(named.Names(std::string(42, 'y') + std::string(21, 'Z')));
  EXPECT_FALSE(named.Names(std::string(42, 'y')));
  EXPECT_EQ(named.Text(), std::string(42, 'y') + "...");
  // A record that says 0 or 64 bytes names nothing.
  CmMessage empty = got;
  empty.private_data[kIpCmHeaderLen + 5] = 0;
  EXPECT_FALSE(ParseNativeRequest(empty, &named));
  CmMessage too_long = got;
  too_long.private_data[kIpCmHeaderLen + 5] = 64;
  EXPECT_FALSE(ParseNativeRequest(too_long, &named));
}

TEST(CmTest, NativeReplyCarriesThePassiveSidesPathMtu) {
  CmMessage rep = Sample(CmType::kRep);
  ASSERT_TRUE(SetNativeReply(IbMtuCode(512), &rep));
  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(Encode(rep), &got, nullptr));
  EXPECT_EQ(NativeReplyMtu(got), IbMtuCode(512));
  EXPECT_EQ(IbMtuBytes(NativeReplyMtu(got)), 512u);
  const uint8_t expected[] = {'R', 'D', 'P', 'N', 1, IbMtuCode(512)};
  EXPECT_EQ(std::memcmp(got.private_data.data(), expected, sizeof(expected)),
            0);

  // Only a REP carries one, and only with a valid code.
  CmMessage req = Sample(CmType::kReq);
  EXPECT_FALSE(SetNativeReply(IbMtuCode(512), &req));
  EXPECT_EQ(NativeReplyMtu(req), 0);
  CmMessage bad = Sample(CmType::kRep);
  const CmMessage before = bad;
  EXPECT_FALSE(SetNativeReply(0, &bad));
  EXPECT_FALSE(SetNativeReply(6, &bad));
  EXPECT_EQ(bad, before);
  // A REP from another consumer (no record, or a record of another
  // version, or an impossible code) names none: the REQ's MTU stands.
  CmMessage foreign = Sample(CmType::kRep);
  foreign.private_data.fill(0);
  foreign.private_data_len = 196;
  EXPECT_EQ(NativeReplyMtu(foreign), 0);
  CmMessage other_version = got;
  other_version.private_data[4] = 2;
  EXPECT_EQ(NativeReplyMtu(other_version), 0);
  CmMessage impossible = got;
  impossible.private_data[5] = 7;
  EXPECT_EQ(NativeReplyMtu(impossible), 0);
  CmMessage cut = got;
  cut.private_data_len = 5;
  EXPECT_EQ(NativeReplyMtu(cut), 0);
}

// The old format's service ids: 0x02 in the top byte.
TEST(CmTest, PreIpCmNativeServiceIds) {
  EXPECT_TRUE(IsPreIpCmNativeServiceId(0x02B20A001DB057BB));
  EXPECT_FALSE(IsPreIpCmNativeServiceId(kNativeServiceId));
  EXPECT_FALSE(IsPreIpCmNativeServiceId(0x0000000001061D2F));
}

TEST(CmTest, ReplyPathAnswersTheSender) {
  Path from;
  CmMessage req;
  const std::vector<uint8_t> frame = Encode(Sample(CmType::kReq));
  ASSERT_TRUE(ParseCmFrame(frame, &req, &from));
  from.dscp_ecn = 26 << 2 | 3;  // CE-marked on the way
  from.ttl = 61;
  const Path reply = ReplyPath(from);
  EXPECT_EQ(reply.src_mac, ActiveToPassive().dst_mac);
  EXPECT_EQ(reply.dst_mac, ActiveToPassive().src_mac);
  EXPECT_EQ(reply.src_ip, 0x0A000002u);
  EXPECT_EQ(reply.dst_ip, 0x0A000001u);
  EXPECT_EQ(reply.udp_src_port, 0xC123);
  EXPECT_EQ(reply.dscp_ecn, 26 << 2);
  EXPECT_EQ(reply.ttl, 64);

  CmMessage rep = Sample(CmType::kRep);
  rep.transaction_id = req.transaction_id;
  rep.remote_comm_id = req.local_comm_id;
  Path back;
  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(Encode(rep, reply), &got, &back));
  EXPECT_EQ(back.src_ip, 0x0A000002u);
  EXPECT_EQ(got.remote_comm_id, req.local_comm_id);
}

TEST(CmTest, IbTimeoutCodesAreTheNearestExponent) {
  EXPECT_EQ(IbTimeoutNs(0), 4096u);
  EXPECT_EQ(IbTimeoutNs(18), 4096u << 18);
  EXPECT_EQ(IbTimeoutNs(32), 0u);
  for (uint8_t code = 0; code <= kIbTimeoutMax; ++code) {
    EXPECT_EQ(IbTimeoutCode(IbTimeoutNs(code)), code);
  }
  EXPECT_EQ(IbTimeoutCode(0), 0);
  EXPECT_EQ(IbTimeoutCode(10'000'000), 11);     // 8.4 ms
  EXPECT_EQ(IbTimeoutCode(250'000'000), 16);    // 268 ms
  EXPECT_EQ(IbTimeoutCode(1'000'000'000), 18);  // 1.07 s
  EXPECT_EQ(IbTimeoutCode(200'000), 6);         // 262 us
  EXPECT_EQ(IbTimeoutCode(~uint64_t{0}), kIbTimeoutMax);
  // Either side of the geometric middle between 2^11 and 2^12 units.
  EXPECT_EQ(IbTimeoutCode(11'863'000), 11);
  EXPECT_EQ(IbTimeoutCode(11'864'000), 12);
  // A Local ACK Timeout of 0 would mean none at all.
  EXPECT_EQ(LocalAckTimeoutCode(1), 1);
  EXPECT_EQ(LocalAckTimeoutCode(10'000'000), 11);
  EXPECT_EQ(LocalAckTimeoutCode(10'000'000), kDefaultLocalAckTimeout);
}

TEST(CmTest, DefaultsAreDefinedValues) {
  const CmMessage req;
  EXPECT_TRUE(IsDefinedIbRate(req.packet_rate));
  EXPECT_FALSE(IsDefinedIbRate(0));
  EXPECT_FALSE(IsDefinedIbRate(1));
  EXPECT_TRUE(IsDefinedIbRate(kIbRate10Gbps));
  EXPECT_GE(req.local_ack_timeout, 1);
  EXPECT_LE(req.retry_count, 7);
  EXPECT_LE(req.max_cm_retries, 15);
}

TEST(CmTest, TransactionIdsNameTransactionAndInitiator) {
  EXPECT_EQ(CmTransactionId(CmTransaction::kConnect, 0x5EC0FFEE),
            0x000000015EC0FFEEu);
  EXPECT_EQ(CmTransactionId(CmTransaction::kDisconnect, 0x5EC0FFEE),
            0x000000025EC0FFEEu);
  EXPECT_NE(CmTransactionId(CmTransaction::kConnect, 1),
            CmTransactionId(CmTransaction::kConnect, 2));
  EXPECT_NE(CmTransactionId(CmTransaction::kConnect, 0), 0u);
}

// A REQ a peer filled in differently (no rate, no ACK timeout) still parses
// and re-encodes as it came.
TEST(CmTest, PeerReqWithRateZeroIsAccepted) {
  CmMessage m = Sample(CmType::kReq);
  m.packet_rate = 0;
  m.local_ack_timeout = 0;
  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(Encode(m), &got, nullptr));
  EXPECT_EQ(got.packet_rate, 0);
  EXPECT_EQ(got.local_ack_timeout, 0);
}

TEST(CmTest, MtuCodes) {
  EXPECT_EQ(IbMtuBytes(0), 0u);
  EXPECT_EQ(IbMtuBytes(1), 256u);
  EXPECT_EQ(IbMtuBytes(3), 1024u);
  EXPECT_EQ(IbMtuBytes(5), 4096u);
  EXPECT_EQ(IbMtuBytes(6), 0u);
  EXPECT_EQ(IbMtuCode(255), 0);
  EXPECT_EQ(IbMtuCode(256), 1);
  EXPECT_EQ(IbMtuCode(1500 - 20 - 8 - 12 - 16 - 4), 3);  // Ethernet 1500
  EXPECT_EQ(IbMtuCode(4096), 5);
  EXPECT_EQ(IbMtuCode(9000), 5);
}


// IBA table 114 and 115: where SIDR REQ and SIDR REP put their fields.
TEST(CmTest, SidrLayouts) {
  const std::vector<uint8_t> req = Encode(Sample(CmType::kSidrReq));
  EXPECT_EQ(req[kMadAt + 16], 0x00);
  EXPECT_EQ(req[kMadAt + 17], 0x17);
  EXPECT_EQ(Get32At(req, kDataAt), 0xA1B2C3D4u);  // request id
  EXPECT_EQ(req[kDataAt + 4], 0xFF);                // P_Key
  EXPECT_EQ(req[kDataAt + 5], 0xFF);
  EXPECT_EQ(Get32At(req, kDataAt + 8), 0u);  // service id, high half
  EXPECT_EQ(Get32At(req, kDataAt + 12), 0x01111C06u);
  EXPECT_EQ(req[kDataAt + 16], Sample(CmType::kSidrReq).private_data[0]);

  const std::vector<uint8_t> rep = Encode(Sample(CmType::kSidrRep));
  EXPECT_EQ(rep[kMadAt + 17], 0x18);
  EXPECT_EQ(Get32At(rep, kDataAt), 0xA1B2C3D4u);
  EXPECT_EQ(rep[kDataAt + 4], kSidrRejected);
  EXPECT_EQ(rep[kDataAt + 5], 0);  // no additional information
  EXPECT_EQ(Get24At(rep, kDataAt + 8), 0x00ABCDu);
  EXPECT_EQ(Get32At(rep, kDataAt + 16), 0x01111C06u);
  EXPECT_EQ(Get32At(rep, kDataAt + 20), 0x01234567u);
  EXPECT_EQ(rep[kDataAt + 96], Sample(CmType::kSidrRep).private_data[0]);

  // A status IBA does not define is refused both ways.
  CmMessage bad = Sample(CmType::kSidrRep);
  bad.sidr_status = 4;
  std::vector<uint8_t> out(kCmFrameLen);
  EXPECT_EQ(EncodeCmFrame(ActiveToPassive(), bad, out), 0u);
  std::vector<uint8_t> forged = rep;
  forged[kDataAt + 4] = 4;
  FixIcrc(forged);
  CmMessage got;
  EXPECT_FALSE(ParseCmFrame(forged, &got, nullptr));
}

// The REQ's and REP's SRQ and end-to-end flow control bits (IBA tables 99
// and 103).
TEST(CmTest, SrqAndFlowControlBits) {
  const std::vector<uint8_t> req = Encode(Sample(CmType::kReq));
  EXPECT_EQ(req[kDataAt + 43] & 1, 1);
  EXPECT_EQ(req[kDataAt + 51] & 8, 8);
  const std::vector<uint8_t> rep = Encode(Sample(CmType::kRep));
  EXPECT_EQ(rep[kDataAt + 26] & 1, 1);
  EXPECT_EQ(rep[kDataAt + 27] & 0x10, 0x10);
  CmMessage plain = Sample(CmType::kReq);
  plain.srq = plain.flow_control = false;
  const std::vector<uint8_t> off = Encode(plain);
  EXPECT_EQ(off[kDataAt + 43] & 1, 0);
  EXPECT_EQ(off[kDataAt + 51] & 8, 0);
}

// Annex A11: the service id and the 36-byte header, as Linux's rdma_cm
// writes them (cma_get_service_id, struct cma_hdr).
TEST(CmTest, IpCmServiceIdAndHeader) {
  EXPECT_EQ(IpCmServiceId(kPortSpaceTcp, 7471), 0x0000000001061D2Fu);
  EXPECT_EQ(IpCmServiceId(kPortSpaceUdp, 1), 0x0000000001110001u);
  EXPECT_EQ(IpCmServiceId(kPortSpaceIb, 0xFFFF), 0x00000000013FFFFFu);
  EXPECT_TRUE(IsIpCmServiceId(0x0000000001061D2F));
  EXPECT_FALSE(IsIpCmServiceId(0x02B20A001DB057BB));  // an old native id
  EXPECT_FALSE(IsIpCmServiceId(0x0000000101061D2F));
  EXPECT_EQ(IpCmPortSpace(0x0000000001061D2F), kPortSpaceTcp);
  EXPECT_EQ(IpCmPort(0x0000000001061D2F), 7471);

  CmMessage m = Sample(CmType::kReq);
  uint8_t consumer[56] = {1, 2, 3};
  consumer[55] = 56;
  const IpCmHeader h{.src_port = 0xBEEF, .src_ip = 0xC0A80001,
                     .dst_ip = 0xC0A80002};
  ASSERT_TRUE(SetIpCmPrivateData(h, consumer, &m));
  EXPECT_EQ(m.private_data_len, 92);
  const std::vector<uint8_t> f = Encode(m);
  const size_t pd = kDataAt + 140;
  EXPECT_EQ(f[pd], 0x00);       // version
  EXPECT_EQ(f[pd + 1], 0x40);   // IPv4
  EXPECT_EQ(f[pd + 2], 0xBE);   // source port
  EXPECT_EQ(f[pd + 3], 0xEF);
  for (int i = 4; i < 16; ++i) EXPECT_EQ(f[pd + i], 0) << i;
  EXPECT_EQ(Get32At(f, pd + 16), 0xC0A80001u);
  for (int i = 20; i < 32; ++i) EXPECT_EQ(f[pd + i], 0) << i;
  EXPECT_EQ(Get32At(f, pd + 32), 0xC0A80002u);
  EXPECT_EQ(f[pd + 36], 1);
  EXPECT_EQ(f[pd + 36 + 55], 56);

  CmMessage got;
  ASSERT_TRUE(ParseCmFrame(f, &got, nullptr));
  IpCmHeader back;
  ASSERT_TRUE(ParseIpCmHeader(got, &back));
  EXPECT_EQ(back, h);

  // 57 consumer bytes do not fit a REQ; 180 fit a SIDR REQ, 181 do not.
  const std::vector<uint8_t> big(181, 0x5A);
  EXPECT_FALSE(SetIpCmPrivateData(h, std::span(big).first(57), &m));
  EXPECT_EQ(m.private_data[36], 1);  // unchanged
  CmMessage sidr = Sample(CmType::kSidrReq);
  EXPECT_TRUE(SetIpCmPrivateData(h, std::span(big).first(180), &sidr));
  EXPECT_FALSE(SetIpCmPrivateData(h, big, &sidr));
  CmMessage rep = Sample(CmType::kRep);
  EXPECT_FALSE(SetIpCmPrivateData(h, {}, &rep));

  // Another version, or IPv6, is not a header this daemon reads.
  CmMessage other = m;
  other.private_data[0] = 0x10;
  EXPECT_FALSE(ParseIpCmHeader(other, &back));
  other = m;
  other.private_data[1] = 0x60;
  EXPECT_FALSE(ParseIpCmHeader(other, &back));
  other = m;
  other.private_data_len = 35;
  EXPECT_FALSE(ParseIpCmHeader(other, &back));
}

}  // namespace
}  // namespace rdmaplane::wire
