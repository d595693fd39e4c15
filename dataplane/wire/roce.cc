#include "dataplane/wire/roce.h"

#include <cstring>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/icrc.h"

namespace rdmaplane::wire {
namespace {


size_t TransportHeaderLen(Opcode op) {
  return kBthLen + (HasDeth(op) ? kDethLen : 0) + (HasReth(op) ? kRethLen : 0) +
         (HasAeth(op) ? kAethLen : 0);
}

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

bool IsKnownOpcode(uint8_t op) {
  switch (static_cast<Opcode>(op)) {
    case Opcode::kWriteFirst:
    case Opcode::kWriteMiddle:
    case Opcode::kWriteLast:
    case Opcode::kWriteOnly:
    case Opcode::kReadRequest:
    case Opcode::kReadResponseFirst:
    case Opcode::kReadResponseMiddle:
    case Opcode::kReadResponseLast:
    case Opcode::kReadResponseOnly:
    case Opcode::kAcknowledge:
      return true;
    case Opcode::kUdSendOnly:
      return false;
  }
  return false;
}

bool HasReth(Opcode op) {
  return op == Opcode::kWriteFirst || op == Opcode::kWriteOnly ||
         op == Opcode::kReadRequest;
}

bool HasAeth(Opcode op) {
  return op == Opcode::kReadResponseFirst || op == Opcode::kReadResponseLast ||
         op == Opcode::kReadResponseOnly || op == Opcode::kAcknowledge;
}

bool HasDeth(Opcode op) { return op == Opcode::kUdSendOnly; }

bool IsRequest(Opcode op) {
  return op == Opcode::kWriteFirst || op == Opcode::kWriteMiddle ||
         op == Opcode::kWriteLast || op == Opcode::kWriteOnly ||
         op == Opcode::kReadRequest;
}

bool CarriesPayload(Opcode op) {
  return op != Opcode::kReadRequest && op != Opcode::kAcknowledge;
}

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kWriteFirst: return "RDMA_WRITE_FIRST";
    case Opcode::kWriteMiddle: return "RDMA_WRITE_MIDDLE";
    case Opcode::kWriteLast: return "RDMA_WRITE_LAST";
    case Opcode::kWriteOnly: return "RDMA_WRITE_ONLY";
    case Opcode::kReadRequest: return "RDMA_READ_REQUEST";
    case Opcode::kReadResponseFirst: return "RDMA_READ_RESPONSE_FIRST";
    case Opcode::kReadResponseMiddle: return "RDMA_READ_RESPONSE_MIDDLE";
    case Opcode::kReadResponseLast: return "RDMA_READ_RESPONSE_LAST";
    case Opcode::kReadResponseOnly: return "RDMA_READ_RESPONSE_ONLY";
    case Opcode::kAcknowledge: return "ACKNOWLEDGE";
    case Opcode::kUdSendOnly: return "UD_SEND_ONLY";
  }
  return "UNKNOWN";
}

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
  if (HasDeth(op)) {
    Put32(ext, h.deth.qkey);
    ext[4] = 0;
    Put24(ext + 5, h.deth.src_qp.value());
    ext += kDethLen;
  }
  if (HasReth(op)) {
    Put64(ext, h.reth.va);
    Put32(ext + 8, h.reth.rkey.value());
    Put32(ext + 12, h.reth.dma_length);
    ext += kRethLen;
  }
  if (HasAeth(op)) {
    ext[0] = h.aeth.syndrome;
    Put24(ext + 1, h.aeth.msn);
    ext += kAethLen;
  }
  return static_cast<size_t>(ext - p);
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

// The checks shared by ParseFrame and ParseDatagramFrame; only the accepted
// opcodes differ. A template so that the RC path keeps its single opcode test.
template <bool kDatagram>
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
  const bool known = kDatagram
                         ? bth[0] == static_cast<uint8_t>(Opcode::kUdSendOnly)
                         : IsKnownOpcode(bth[0]);
  if (!known) return reject(ParseError::kUnknownOpcode);
  const Opcode op = static_cast<Opcode>(bth[0]);
  const size_t transport_len = TransportHeaderLen(op);
  const size_t after_udp = udp_len - kUdpHeaderLen;
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
  const uint8_t* ext = bth + kBthLen;
  if constexpr (kDatagram) {
    pkt.deth.qkey = Get32(ext);
    pkt.deth.src_qp = Qpn(Get24(ext + 5));
    ext += kDethLen;
  } else {
    pkt.deth = Deth{};
  }
  if (HasReth(op)) {
    pkt.reth.va = Get64(ext);
    pkt.reth.rkey = Rkey(Get32(ext + 8));
    pkt.reth.dma_length = Get32(ext + 12);
    ext += kRethLen;
  } else {
    pkt.reth = Reth{};
  }
  if (HasAeth(op)) {
    pkt.aeth.syndrome = ext[0];
    pkt.aeth.msn = Get24(ext + 1);
    ext += kAethLen;
  } else {
    pkt.aeth = Aeth{};
  }
  pkt.payload = {ext, data_len - pad};
  if (counters != nullptr) ++(*counters)[ParseError::kOk];
  return ParseError::kOk;
}

}  // namespace

ParseError ParseFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                      ParseCounters* counters) {
  return Parse</*kDatagram=*/false>(frame, out, counters);
}

ParseError ParseDatagramFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                              ParseCounters* counters) {
  return Parse</*kDatagram=*/true>(frame, out, counters);
}

}  // namespace rdmaplane::wire
