#include "dataplane/wire/roce.h"

#include <cstring>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/icrc.h"

namespace rdmaplane::wire {
namespace {

size_t TransportHeaderLen(Opcode op) { return kBthLen + InfoOf(op).header_len; }

size_t PadFor(size_t payload_len) { return (4 - (payload_len & 3)) & 3; }

void StoreIcrc(uint8_t* p, uint32_t icrc) {
  // The ICRC goes on the wire least significant byte first.
  p[0] = static_cast<uint8_t>(icrc);
  p[1] = static_cast<uint8_t>(icrc >> 8);
  p[2] = static_cast<uint8_t>(icrc >> 16);
  p[3] = static_cast<uint8_t>(icrc >> 24);
}

uint32_t LoadIcrc(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}

}  // namespace

namespace {

constexpr uint16_t kReq = kOpDefined | kOpRequest;
constexpr uint16_t kResp = kOpDefined;
constexpr uint16_t kFirstLast = kOpFirst | kOpLast;

constexpr std::array<OpcodeInfo, 256> MakeOpcodeTable() {
  std::array<OpcodeInfo, 256> t{};
  // Reserved RC opcodes are taken for requests: the responder is the one
  // to refuse them (the IBA's NAK "invalid request").
  for (uint8_t op = 0; op < kRcOpcodeLimit; ++op) {
    t[op] = {"RC_RESERVED", OpcodeClass::kReserved, kOpRequest | kOpPayload, 0};
  }
  auto set = [&t](Opcode op, const char* name, OpcodeClass c, uint16_t flags,
                  uint8_t header_len) {
    t[static_cast<uint8_t>(op)] = {name, c, flags, header_len};
  };
  constexpr uint8_t kImm = kImmDtLen;
  constexpr uint8_t kIeth = kIethLen;            // invalidated R_Key
  constexpr uint8_t kAtomicEth = kAtomicEthLen;  // VA, R_Key, swap/add, compare
  constexpr uint8_t kAtomicAckEth = kAtomicAckEthLen;
  constexpr uint8_t kFeth = 4;
  using C = OpcodeClass;
  // rdmaplane's own: SEND (with immediate data, with Invalidate or plain)
  // and WRITE (with immediate data or not), READ, COMPARE SWAP, FETCH ADD
  // and their acknowledgements.
  constexpr uint16_t kOwn = kOpSupported;
  set(Opcode::kSendFirst, "SEND_FIRST", C::kSend,
      kOwn | kReq | kOpFirst | kOpPayload, 0);
  set(Opcode::kSendMiddle, "SEND_MIDDLE", C::kSend, kOwn | kReq | kOpPayload,
      0);
  set(Opcode::kSendLast, "SEND_LAST", C::kSend,
      kOwn | kReq | kOpLast | kOpPayload, 0);
  set(Opcode::kSendLastImmediate, "SEND_LAST_WITH_IMMEDIATE", C::kSend,
      kOwn | kReq | kOpLast | kOpPayload | kOpImm, kImm);
  set(Opcode::kSendOnly, "SEND_ONLY", C::kSend,
      kOwn | kReq | kFirstLast | kOpPayload, 0);
  set(Opcode::kSendOnlyImmediate, "SEND_ONLY_WITH_IMMEDIATE", C::kSend,
      kOwn | kReq | kFirstLast | kOpPayload | kOpImm, kImm);
  set(Opcode::kWriteFirst, "RDMA_WRITE_FIRST", C::kWrite,
      kOwn | kReq | kOpFirst | kOpPayload | kOpReth, kRethLen);
  set(Opcode::kWriteMiddle, "RDMA_WRITE_MIDDLE", C::kWrite,
      kOwn | kReq | kOpPayload, 0);
  set(Opcode::kWriteLast, "RDMA_WRITE_LAST", C::kWrite,
      kOwn | kReq | kOpLast | kOpPayload, 0);
  set(Opcode::kWriteLastImmediate, "RDMA_WRITE_LAST_WITH_IMMEDIATE", C::kWrite,
      kOwn | kReq | kOpLast | kOpPayload | kOpImm, kImm);
  set(Opcode::kWriteOnly, "RDMA_WRITE_ONLY", C::kWrite,
      kOwn | kReq | kFirstLast | kOpPayload | kOpReth, kRethLen);
  set(Opcode::kWriteOnlyImmediate, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", C::kWrite,
      kOwn | kReq | kFirstLast | kOpPayload | kOpReth | kOpImm,
      kRethLen + kImm);
  set(Opcode::kReadRequest, "RDMA_READ_REQUEST", C::kReadRequest,
      kOwn | kReq | kFirstLast | kOpReth, kRethLen);
  set(Opcode::kReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", C::kReadResponse,
      kOwn | kResp | kOpFirst | kOpPayload | kOpAeth, kAethLen);
  set(Opcode::kReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE",
      C::kReadResponse, kOwn | kResp | kOpPayload, 0);
  set(Opcode::kReadResponseLast, "RDMA_READ_RESPONSE_LAST", C::kReadResponse,
      kOwn | kResp | kOpLast | kOpPayload | kOpAeth, kAethLen);
  set(Opcode::kReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", C::kReadResponse,
      kOwn | kResp | kFirstLast | kOpPayload | kOpAeth, kAethLen);
  set(Opcode::kAcknowledge, "ACKNOWLEDGE", C::kAcknowledge,
      kOwn | kResp | kFirstLast | kOpAeth, kAethLen);
  set(Opcode::kAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", C::kAtomicAcknowledge,
      kOwn | kResp | kFirstLast | kOpAeth | kOpAtomicAckEth,
      kAethLen + kAtomicAckEth);
  set(Opcode::kCompareSwap, "COMPARE_SWAP", C::kAtomic,
      kOwn | kReq | kFirstLast | kOpAtomicEth, kAtomicEth);
  set(Opcode::kFetchAdd, "FETCH_ADD", C::kAtomic,
      kOwn | kReq | kFirstLast | kOpAtomicEth, kAtomicEth);
  set(Opcode::kSendLastInvalidate, "SEND_LAST_WITH_INVALIDATE", C::kSend,
      kOwn | kReq | kOpLast | kOpPayload | kOpIeth, kIeth);
  set(Opcode::kSendOnlyInvalidate, "SEND_ONLY_WITH_INVALIDATE", C::kSend,
      kOwn | kReq | kFirstLast | kOpPayload | kOpIeth, kIeth);
  // IBA 1.5: FETH then RETH; an ATOMIC WRITE's 8 bytes are its payload.
  set(Opcode::kFlush, "FLUSH", C::kFlush, kReq | kFirstLast, kFeth + kRethLen);
  set(Opcode::kAtomicWrite, "ATOMIC_WRITE", C::kAtomicWrite,
      kReq | kFirstLast | kOpPayload | kOpReth, kRethLen);
  // UC: the SENDs and WRITEs of RC with the same headers, which no queue
  // pair of rdmaplane serves yet.
  set(Opcode::kUcSendFirst, "UC_SEND_FIRST", C::kSend,
      kReq | kOpFirst | kOpPayload, 0);
  set(Opcode::kUcSendMiddle, "UC_SEND_MIDDLE", C::kSend, kReq | kOpPayload, 0);
  set(Opcode::kUcSendLast, "UC_SEND_LAST", C::kSend,
      kReq | kOpLast | kOpPayload, 0);
  set(Opcode::kUcSendLastImmediate, "UC_SEND_LAST_WITH_IMMEDIATE", C::kSend,
      kReq | kOpLast | kOpPayload | kOpImm, kImm);
  set(Opcode::kUcSendOnly, "UC_SEND_ONLY", C::kSend,
      kReq | kFirstLast | kOpPayload, 0);
  set(Opcode::kUcSendOnlyImmediate, "UC_SEND_ONLY_WITH_IMMEDIATE", C::kSend,
      kReq | kFirstLast | kOpPayload | kOpImm, kImm);
  set(Opcode::kUcWriteFirst, "UC_RDMA_WRITE_FIRST", C::kWrite,
      kReq | kOpFirst | kOpPayload | kOpReth, kRethLen);
  set(Opcode::kUcWriteMiddle, "UC_RDMA_WRITE_MIDDLE", C::kWrite,
      kReq | kOpPayload, 0);
  set(Opcode::kUcWriteLast, "UC_RDMA_WRITE_LAST", C::kWrite,
      kReq | kOpLast | kOpPayload, 0);
  set(Opcode::kUcWriteLastImmediate, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
      C::kWrite, kReq | kOpLast | kOpPayload | kOpImm, kImm);
  set(Opcode::kUcWriteOnly, "UC_RDMA_WRITE_ONLY", C::kWrite,
      kReq | kFirstLast | kOpPayload | kOpReth, kRethLen);
  set(Opcode::kUcWriteOnlyImmediate, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
      C::kWrite, kReq | kFirstLast | kOpPayload | kOpReth | kOpImm,
      kRethLen + kImm);
  set(Opcode::kUdSendOnly, "UD_SEND_ONLY", C::kDatagram,
      kOwn | kReq | kFirstLast | kOpPayload | kOpDeth, kDethLen);
  set(Opcode::kUdSendOnlyImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", C::kDatagram,
      kReq | kFirstLast | kOpPayload | kOpDeth | kOpImm, kDethLen + kImm);
  return t;
}

// The bytes of the extension headers an opcode's flags name.
constexpr size_t FlaggedHeadersLen(uint16_t flags) {
  return ((flags & kOpDeth) != 0 ? kDethLen : 0) +
         ((flags & kOpReth) != 0 ? kRethLen : 0) +
         ((flags & kOpAtomicEth) != 0 ? kAtomicEthLen : 0) +
         ((flags & kOpImm) != 0 ? kImmDtLen : 0) +
         ((flags & kOpIeth) != 0 ? kIethLen : 0) +
         ((flags & kOpAeth) != 0 ? kAethLen : 0) +
         ((flags & kOpAtomicAckEth) != 0 ? kAtomicAckEthLen : 0);
}

// Every opcode's header_len is the sum of its flagged headers (FLUSH, whose
// FETH and RETH the codec only skips, has none flagged) and fits
// kMaxHeadersLen, so the parser's one length check bounds every header it
// reads.
constexpr bool HeaderLengthsAgree(const std::array<OpcodeInfo, 256>& t) {
  constexpr size_t kLongest = kMaxHeadersLen - kOuterHeadersLen - kBthLen;
  for (size_t op = 0; op < t.size(); ++op) {
    const bool skipped = op == static_cast<uint8_t>(Opcode::kFlush);
    if (t[op].header_len > kLongest ||
        FlaggedHeadersLen(t[op].flags) != (skipped ? 0 : t[op].header_len)) {
      return false;
    }
  }
  return true;
}
static_assert(HeaderLengthsAgree(MakeOpcodeTable()));

}  // namespace

const std::array<OpcodeInfo, 256> kOpcodeTable = MakeOpcodeTable();

const char* ParseErrorName(ParseError e) {
  switch (e) {
    case ParseError::kOk: return "ok";
    case ParseError::kTruncated: return "truncated";
    case ParseError::kNotIpv4: return "not_ipv4";
    case ParseError::kIpVersion: return "ip_version";
    case ParseError::kIpOptions: return "ip_options";
    case ParseError::kIpFragment: return "ip_fragment";
    case ParseError::kIpChecksum: return "ip_checksum";
    case ParseError::kIpLength: return "ip_length";
    case ParseError::kNotUdp: return "not_udp";
    case ParseError::kNotRocePort: return "not_roce_port";
    case ParseError::kUdpLength: return "udp_length";
    case ParseError::kBthVersion: return "bth_version";
    case ParseError::kUnknownOpcode: return "unknown_opcode";
    case ParseError::kBadPad: return "bad_pad";
    case ParseError::kLengthMismatch: return "length_mismatch";
    case ParseError::kBadIcrc: return "bad_icrc";
    case ParseError::kNumReasons: break;
  }
  return "unknown";
}

uint16_t UdpSourcePortForQpn(Qpn qpn) {
  // Fibonacci hashing spreads consecutive QPNs over the 14 free bits.
  uint32_t h = qpn.value() * 0x9E3779B1u;
  return static_cast<uint16_t>(0xC000 | (h >> 18));
}

uint16_t Ipv4HeaderChecksum(std::span<const uint8_t> header) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < header.size(); i += 2) {
    if (i == 10) continue;  // the checksum field itself
    sum += Get16(&header[i]);
  }
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

size_t MaxFrameLength(size_t path_mtu) {
  return FrameLength(Opcode::kWriteOnlyImmediate, path_mtu);
}

size_t FrameLength(Opcode opcode, size_t payload_len) {
  return kOuterHeadersLen + TransportHeaderLen(opcode) + payload_len +
         PadFor(payload_len) + kIcrcLen;
}

size_t EncodeHeaders(const PacketHeaders& h, size_t payload_len,
                     std::span<uint8_t> out) {
  const Opcode op = h.bth.opcode;
  if (payload_len > 0 && !CarriesPayload(op)) return 0;
  const size_t frame_len = FrameLength(op, payload_len);
  if (frame_len > out.size() || frame_len - kEthHeaderLen > 0xFFFF) return 0;
  uint8_t* p = out.data();

  // Ethernet.
  std::memcpy(p, h.path.dst_mac.bytes.data(), 6);
  std::memcpy(p + 6, h.path.src_mac.bytes.data(), 6);
  Put16(p + 12, kEtherTypeIpv4);
  uint8_t* ip = p + kEthHeaderLen;

  // IPv4, DF set, no options.
  const size_t ip_len = frame_len - kEthHeaderLen;
  ip[0] = 0x45;
  ip[1] = h.path.dscp_ecn;
  Put16(ip + 2, static_cast<uint16_t>(ip_len));
  Put16(ip + 4, 0);       // identification: unused with DF
  Put16(ip + 6, 0x4000);  // DF
  ip[8] = h.path.ttl;
  ip[9] = 17;  // UDP
  Put32(ip + 12, h.path.src_ip);
  Put32(ip + 16, h.path.dst_ip);
  Put16(ip + 10, Ipv4HeaderChecksum({ip, kIpv4HeaderLen}));

  // UDP, checksum 0 (the ICRC protects the payload).
  uint8_t* udp = ip + kIpv4HeaderLen;
  Put16(udp, h.path.udp_src_port);
  Put16(udp + 2, kRoceUdpPort);
  Put16(udp + 4, static_cast<uint16_t>(ip_len - kIpv4HeaderLen));
  Put16(udp + 6, 0);

  // BTH.
  uint8_t* bth = udp + kUdpHeaderLen;
  bth[0] = static_cast<uint8_t>(op);
  bth[1] = static_cast<uint8_t>((h.bth.solicited ? 0x80 : 0) |
                                (h.bth.mig_req ? 0x40 : 0) |
                                (PadFor(payload_len) << 4));  // TVer 0
  Put16(bth + 2, h.bth.pkey);
  bth[4] = static_cast<uint8_t>((h.bth.fecn ? 0x80 : 0) |
                                (h.bth.becn ? 0x40 : 0));
  Put24(bth + 5, h.bth.dest_qp.value());
  bth[8] = h.bth.ack_req ? 0x80 : 0;
  Put24(bth + 9, h.bth.psn.value());

  uint8_t* ext = bth + kBthLen;
  // Extension headers the codec has no fields for (FETH and the RETH after
  // it) go out as zeros. The others follow in their wire order (roce.h).
  const uint16_t flags = InfoOf(op).flags;
  std::memset(ext, 0, InfoOf(op).header_len);
  if ((flags & kOpDeth) != 0) {
    Put32(ext, h.deth.qkey);
    ext[4] = 0;
    Put24(ext + 5, h.deth.src_qp.value());
    ext += kDethLen;
  }
  if ((flags & kOpReth) != 0) {
    Put64(ext, h.reth.va);
    Put32(ext + 8, h.reth.rkey.value());
    Put32(ext + 12, h.reth.dma_length);
    ext += kRethLen;
  }
  if ((flags & kOpAtomicEth) != 0) {
    Put64(ext, h.atomic_eth.va);
    Put32(ext + 8, h.atomic_eth.rkey.value());
    Put64(ext + 12, h.atomic_eth.swap_add);
    Put64(ext + 20, h.atomic_eth.compare);
    ext += kAtomicEthLen;
  }
  if ((flags & kOpImm) != 0) {
    std::memcpy(ext, &h.imm, kImmDtLen);
    ext += kImmDtLen;
  }
  if ((flags & kOpIeth) != 0) {
    Put32(ext, h.ieth.rkey.value());
    ext += kIethLen;
  }
  if ((flags & kOpAeth) != 0) {
    ext[0] = h.aeth.syndrome;
    Put24(ext + 1, h.aeth.msn);
    ext += kAethLen;
  }
  if ((flags & kOpAtomicAckEth) != 0) {
    Put64(ext, h.atomic_ack_eth.orig_data);
    ext += kAtomicAckEthLen;
  }
  return kOuterHeadersLen + TransportHeaderLen(op);
}

size_t FinishFrame(std::span<uint8_t> frame) {
  // The IP total length already accounts for pad and ICRC.
  uint8_t* ip = frame.data() + kEthHeaderLen;
  const size_t frame_len = kEthHeaderLen + Get16(ip + 2);
  const size_t pad = (frame.data()[kOuterHeadersLen + 1] >> 4) & 3;
  uint8_t* icrc = frame.data() + frame_len - kIcrcLen;
  std::memset(icrc - pad, 0, pad);
  StoreIcrc(icrc, ComputeIcrc({ip, frame_len - kEthHeaderLen - kIcrcLen}));
  return frame_len;
}

uint64_t RnrTimerNs(uint8_t code) {
  // IBTA vol. 1, table 45, in microseconds.
  static constexpr uint32_t kMicros[32] = {
      655360, 10,    20,    30,    40,    60,     80,     120,
      160,    240,   320,   480,   640,   960,    1280,   1920,
      2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return uint64_t{kMicros[code & 0x1F]} * 1000;
}

uint8_t RnrTimerCode(uint64_t ns) {
  for (uint8_t code = 1; code < 32; ++code) {
    if (RnrTimerNs(code) >= ns) return code;
  }
  return 0;  // the longest
}

uint32_t HeadersIcrc(std::span<const uint8_t> headers) {
  return StartIcrc(headers.subspan(kEthHeaderLen));
}

size_t EncodeTrailer(std::span<const uint8_t> headers, uint32_t icrc,
                     std::span<uint8_t> out) {
  const size_t pad = (headers[kOuterHeadersLen + 1] >> 4) & 3;
  if (out.size() < pad + kIcrcLen) return 0;
  std::memset(out.data(), 0, pad);
  icrc = ExtendIcrc(icrc, out.first(pad));
  StoreIcrc(out.data() + pad, icrc);
  return pad + kIcrcLen;
}

size_t EncodeFrame(const PacketHeaders& headers,
                   std::span<const uint8_t> payload, std::span<uint8_t> out) {
  const size_t hdr_len = EncodeHeaders(headers, payload.size(), out);
  if (hdr_len == 0) return 0;
  if (!payload.empty()) {
    std::memcpy(out.data() + hdr_len, payload.data(), payload.size());
  }
  return FinishFrame(out);
}

namespace {

// Which opcodes a parser accepts.
enum class Accept : uint8_t {
  kRc,  // every RC opcode, defined or reserved
  kUc,  // the defined UC opcodes
  kUd,  // the defined UD opcodes (UD SEND ONLY, with immediate data or not)
  kQueuePair,  // kRc's, kUc's and kUd's
};

// True when the parser for kAccept takes opcode `op`.
template <Accept kAccept>
bool Accepts(uint8_t op) {
  if constexpr (kAccept == Accept::kRc) {
    return IsRcOpcode(op);
  } else if constexpr (kAccept == Accept::kQueuePair) {
    return IsRcOpcode(op) || Accepts<Accept::kUc>(op) ||
           Accepts<Accept::kUd>(op);
  } else {
    constexpr uint8_t kBase =
        kAccept == Accept::kUc ? kUcOpcodeBase : kUdOpcodeBase;
    return (op & kTransportMask) == kBase &&
           (kOpcodeTable[op].flags & kOpDefined) != 0;
  }
}

// The checks shared by ParseFrame, ParseUcFrame and ParseDatagramFrame; only
// the accepted opcodes differ. A template so that the RC path keeps its
// single opcode test.
template <Accept kAccept>
ParseError Parse(std::span<const uint8_t> frame, ParsedPacket* out,
                 ParseCounters* counters) {
  auto reject = [counters](ParseError e) {
    if (counters != nullptr) ++(*counters)[e];
    return e;
  };
  if (frame.size() < kOuterHeadersLen + kBthLen + kIcrcLen) {
    return reject(ParseError::kTruncated);
  }
  const uint8_t* p = frame.data();
  if (Get16(p + 12) != kEtherTypeIpv4) return reject(ParseError::kNotIpv4);

  const uint8_t* ip = p + kEthHeaderLen;
  if ((ip[0] >> 4) != 4) return reject(ParseError::kIpVersion);
  if ((ip[0] & 0x0F) != 5) return reject(ParseError::kIpOptions);
  const size_t ip_len = Get16(ip + 2);
  // Ethernet may pad short frames, so the frame can be longer than IP says.
  if (ip_len < kIpv4HeaderLen + kUdpHeaderLen + kBthLen + kIcrcLen ||
      ip_len > frame.size() - kEthHeaderLen) {
    return reject(ParseError::kIpLength);
  }
  if ((Get16(ip + 6) & 0x3FFF) != 0) return reject(ParseError::kIpFragment);
  if (ip[9] != 17) return reject(ParseError::kNotUdp);
  if (Get16(ip + 10) != Ipv4HeaderChecksum({ip, kIpv4HeaderLen})) {
    return reject(ParseError::kIpChecksum);
  }

  const uint8_t* udp = ip + kIpv4HeaderLen;
  if (Get16(udp + 2) != kRoceUdpPort) return reject(ParseError::kNotRocePort);
  const size_t udp_len = Get16(udp + 4);
  if (udp_len != ip_len - kIpv4HeaderLen) return reject(ParseError::kUdpLength);

  const uint8_t* bth = udp + kUdpHeaderLen;
  if ((bth[1] & 0x0F) != 0) return reject(ParseError::kBthVersion);
  if (!Accepts<kAccept>(bth[0])) return reject(ParseError::kUnknownOpcode);
  const Opcode op = static_cast<Opcode>(bth[0]);
  const size_t transport_len = TransportHeaderLen(op);
  const size_t after_udp = udp_len - kUdpHeaderLen;
  // Every extension header read below lies inside transport_len
  // (HeaderLengthsAgree), so this one check bounds them all.
  if (after_udp < transport_len + kIcrcLen) return reject(ParseError::kTruncated);
  const size_t data_len = after_udp - transport_len - kIcrcLen;
  const size_t pad = (bth[1] >> 4) & 3;
  if (pad > data_len) return reject(ParseError::kBadPad);
  // Payload plus pad fills whole 4-byte words; opcodes without payload have
  // no pad.
  if (data_len % 4 != 0 || (!CarriesPayload(op) && pad != 0)) {
    return reject(ParseError::kBadPad);
  }
  if (!CarriesPayload(op) && data_len != 0) {
    return reject(ParseError::kLengthMismatch);
  }

  const uint8_t* icrc_at = ip + ip_len - kIcrcLen;
  if (LoadIcrc(icrc_at) != ComputeIcrc({ip, ip_len - kIcrcLen})) {
    return reject(ParseError::kBadIcrc);
  }

  ParsedPacket& pkt = *out;
  std::memcpy(pkt.dst_mac.bytes.data(), p, 6);
  std::memcpy(pkt.src_mac.bytes.data(), p + 6, 6);
  pkt.src_ip = Get32(ip + 12);
  pkt.ipv4_header = {ip, kIpv4HeaderLen};
  pkt.dst_ip = Get32(ip + 16);
  pkt.udp_src_port = Get16(udp);
  pkt.bth.opcode = op;
  pkt.bth.solicited = (bth[1] & 0x80) != 0;
  pkt.bth.mig_req = (bth[1] & 0x40) != 0;
  pkt.bth.pad_count = static_cast<uint8_t>(pad);
  pkt.bth.pkey = Get16(bth + 2);
  pkt.bth.fecn = (bth[4] & 0x80) != 0;
  pkt.bth.becn = (bth[4] & 0x40) != 0;
  pkt.bth.dest_qp = Qpn(Get24(bth + 5));
  pkt.bth.ack_req = (bth[8] & 0x80) != 0;
  pkt.bth.psn = Psn(Get24(bth + 9));
  // The extension headers in their wire order (roce.h); the DETH's reserved
  // byte is ignored.
  const uint16_t flags = InfoOf(op).flags;
  const uint8_t* ext = bth + kBthLen;
  if ((flags & kOpDeth) != 0) {
    pkt.deth.qkey = Get32(ext);
    pkt.deth.src_qp = Qpn(Get24(ext + 5));
    ext += kDethLen;
  } else {
    pkt.deth = Deth{};
  }
  if ((flags & kOpReth) != 0) {
    pkt.reth.va = Get64(ext);
    pkt.reth.rkey = Rkey(Get32(ext + 8));
    pkt.reth.dma_length = Get32(ext + 12);
    ext += kRethLen;
  } else {
    pkt.reth = Reth{};
  }
  if ((flags & kOpAtomicEth) != 0) {
    // Alignment of the address is the responder's to check (roce.h).
    pkt.atomic_eth.va = Get64(ext);
    pkt.atomic_eth.rkey = Rkey(Get32(ext + 8));
    pkt.atomic_eth.swap_add = Get64(ext + 12);
    pkt.atomic_eth.compare = Get64(ext + 20);
    ext += kAtomicEthLen;
  } else {
    pkt.atomic_eth = AtomicEth{};
  }
  pkt.imm = 0;
  if ((flags & kOpImm) != 0) {
    std::memcpy(&pkt.imm, ext, kImmDtLen);
    ext += kImmDtLen;
  }
  if ((flags & kOpIeth) != 0) {
    pkt.ieth.rkey = Rkey(Get32(ext));
    ext += kIethLen;
  } else {
    pkt.ieth = Ieth{};
  }
  if ((flags & kOpAeth) != 0) {
    pkt.aeth.syndrome = ext[0];
    pkt.aeth.msn = Get24(ext + 1);
    ext += kAethLen;
  } else {
    pkt.aeth = Aeth{};
  }
  if ((flags & kOpAtomicAckEth) != 0) {
    pkt.atomic_ack_eth.orig_data = Get64(ext);
  } else {
    pkt.atomic_ack_eth = AtomicAckEth{};
  }
  pkt.payload = {bth + transport_len, data_len - pad};
  if (counters != nullptr) ++(*counters)[ParseError::kOk];
  return ParseError::kOk;
}

}  // namespace

ParseError ParseFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                      ParseCounters* counters) {
  return Parse<Accept::kRc>(frame, out, counters);
}

ParseError ParseUcFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                        ParseCounters* counters) {
  return Parse<Accept::kUc>(frame, out, counters);
}

ParseError ParseQueuePairFrame(std::span<const uint8_t> frame,
                               ParsedPacket* out, ParseCounters* counters) {
  return Parse<Accept::kQueuePair>(frame, out, counters);
}

ParseError ParseDatagramFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                              ParseCounters* counters) {
  return Parse<Accept::kUd>(frame, out, counters);
}

}  // namespace rdmaplane::wire
