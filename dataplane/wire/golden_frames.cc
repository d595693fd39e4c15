#include "dataplane/wire/golden_frames.h"

#include <tuple>
#include <utility>

namespace rdmaplane::wire {
namespace {

constexpr Qpn kRequesterQpn(0x000011);
constexpr Qpn kResponderQpn(0x000123);
constexpr uint32_t kRequesterIp = 0x0A000001;  // 10.0.0.1
constexpr uint32_t kResponderIp = 0x0A000002;  // 10.0.0.2
constexpr MacAddr kRequesterMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
constexpr MacAddr kResponderMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
// DSCP 26 (the usual RoCE traffic class) with ECT(0).
constexpr uint8_t kDscpEct0 = 26 << 2 | 0x2;
constexpr uint8_t kDscpCe = 26 << 2 | 0x3;

constexpr uint64_t kWriteVa = 0x00007F3A12340000;
constexpr uint64_t kReadVa = 0x00007F3A56780010;
constexpr Rkey kWriteRkey(0x00012A05);
constexpr Rkey kReadRkey(0x80003B07);

PacketHeaders RequesterToResponder(Opcode op, uint32_t psn) {
  PacketHeaders h;
  h.path.src_mac = kRequesterMac;
  h.path.dst_mac = kResponderMac;
  h.path.src_ip = kRequesterIp;
  h.path.dst_ip = kResponderIp;
  h.path.udp_src_port = UdpSourcePortForQpn(kRequesterQpn);
  h.path.dscp_ecn = kDscpEct0;
  h.bth.opcode = op;
  h.bth.dest_qp = kResponderQpn;
  h.bth.psn = Psn(psn);
  return h;
}

PacketHeaders ResponderToRequester(Opcode op, uint32_t psn, uint8_t syndrome,
                                   uint32_t msn) {
  PacketHeaders h;
  h.path.src_mac = kResponderMac;
  h.path.dst_mac = kRequesterMac;
  h.path.src_ip = kResponderIp;
  h.path.dst_ip = kRequesterIp;
  h.path.udp_src_port = UdpSourcePortForQpn(kResponderQpn);
  h.path.dscp_ecn = kDscpEct0;
  h.bth.opcode = op;
  h.bth.dest_qp = kRequesterQpn;
  h.bth.psn = Psn(psn);
  h.aeth = {syndrome, msn};
  return h;
}

std::vector<uint8_t> Pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> out(len);
  for (size_t i = 0; i < len; ++i) {
    out[i] = static_cast<uint8_t>(i * 131 + seed);
  }
  return out;
}

GoldenFrame Make(std::string name, PacketHeaders headers,
                 std::vector<uint8_t> payload) {
  GoldenFrame g;
  g.name = std::move(name);
  g.headers = headers;
  g.headers.bth.pad_count = static_cast<uint8_t>((4 - payload.size() % 4) % 4);
  g.payload = std::move(payload);
  g.frame.resize(FrameLength(headers.bth.opcode, g.payload.size()));
  g.frame.resize(EncodeFrame(headers, g.payload, g.frame));
  return g;
}

}  // namespace

std::vector<GoldenFrame> MakeGoldenFrames() {
  constexpr uint8_t kAck = kAethAck | kAethCreditsInvalid;
  std::vector<GoldenFrame> frames;

  // A 2501-byte WRITE at a 1024-byte path MTU whose PSNs wrap past 2^24.
  PacketHeaders h = RequesterToResponder(Opcode::kWriteFirst, 0xFFFFFE);
  h.reth = {kWriteVa, kWriteRkey, 2501};
  frames.push_back(Make("write_first", h, Pattern(1024, 1)));
  // Marked by a congested switch one hop later: the ICRC must not change.
  h = RequesterToResponder(Opcode::kWriteMiddle, 0xFFFFFF);
  h.path.dscp_ecn = kDscpCe;
  h.path.ttl = 63;
  h.bth.fecn = true;
  h.bth.becn = true;
  frames.push_back(Make("write_middle_ecn", h, Pattern(1024, 2)));
  h = RequesterToResponder(Opcode::kWriteLast, 0x000000);
  h.bth.ack_req = true;
  frames.push_back(Make("write_last_pad3", h, Pattern(453, 3)));

  for (auto [name, len, psn] : {std::tuple{"write_only_pad1", 63u, 1u},
                                std::tuple{"write_only_4k", 4096u, 2u},
                                std::tuple{"write_only_empty", 0u, 3u}}) {
    h = RequesterToResponder(Opcode::kWriteOnly, psn);
    h.bth.ack_req = true;
    h.reth = {kWriteVa + 4096 * psn, kWriteRkey, len};
    frames.push_back(Make(name, h, Pattern(len, static_cast<uint8_t>(psn))));
  }

  // A 2979-byte READ (PSNs 4..6) and a 250-byte READ (PSN 7).
  h = RequesterToResponder(Opcode::kReadRequest, 4);
  h.reth = {kReadVa, kReadRkey, 2979};
  frames.push_back(Make("read_request", h, {}));
  h = RequesterToResponder(Opcode::kReadRequest, 7);
  h.reth = {kReadVa + 8192, kReadRkey, 250};
  frames.push_back(Make("read_request_small", h, {}));

  frames.push_back(
      Make("read_response_first",
           ResponderToRequester(Opcode::kReadResponseFirst, 4, kAck, 5),
           Pattern(1024, 4)));
  frames.push_back(
      Make("read_response_middle",
           ResponderToRequester(Opcode::kReadResponseMiddle, 5, kAck, 0),
           Pattern(1024, 5)));
  frames.push_back(
      Make("read_response_last_pad1",
           ResponderToRequester(Opcode::kReadResponseLast, 6, kAck, 5),
           Pattern(931, 6)));
  frames.push_back(
      Make("read_response_only_pad2",
           ResponderToRequester(Opcode::kReadResponseOnly, 7, kAck, 6),
           Pattern(250, 7)));

  frames.push_back(
      Make("ack", ResponderToRequester(Opcode::kAcknowledge, 3, kAck, 4), {}));
  frames.push_back(Make(
      "nak_psn_sequence_error",
      ResponderToRequester(Opcode::kAcknowledge, 8, kAethNakPsnSeqError, 6),
      {}));
  frames.push_back(Make(
      "nak_remote_access_error",
      ResponderToRequester(Opcode::kAcknowledge, 8, kAethNakRemoteAccess, 6),
      {}));
  return frames;
}

}  // namespace rdmaplane::wire
