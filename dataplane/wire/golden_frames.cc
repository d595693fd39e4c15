#include "dataplane/wire/golden_frames.h"

#include <algorithm>
#include <string_view>
#include <tuple>
#include <utility>

namespace rdmaplane::wire {
namespace {

constexpr Qpn kRequesterQpn(0x000011);
constexpr Qpn kResponderQpn(0x000123);
constexpr Qpn kOtherRequesterQpn(0x000012);
constexpr Qpn kOtherResponderQpn(0x000124);
constexpr Qpn kSendRequesterQpn(0x000013);
constexpr Qpn kSendResponderQpn(0x000125);
constexpr uint32_t kRequesterIp = 0x0A000001;  // 10.0.0.1
constexpr uint32_t kResponderIp = 0x0A000002;  // 10.0.0.2
constexpr MacAddr kRequesterMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
constexpr MacAddr kResponderMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
// DSCP 26 (the usual RoCE traffic class) with ECT(0).
constexpr uint8_t kDscpEct0 = 26 << 2 | 0x2;
constexpr uint8_t kDscpCe = 26 << 2 | 0x3;

// The queue pairs of other peers: atomics and invalidation over RC, UC and
// UD.
constexpr Qpn kAtomicRequesterQpn(0x000014);
constexpr Qpn kAtomicResponderQpn(0x000126);
constexpr Qpn kUcSenderQpn(0x000015);
constexpr Qpn kUcReceiverQpn(0x000127);
constexpr Qpn kUdSenderQpn(0x000016);
constexpr Qpn kUdReceiverQpn(0x000128);

constexpr uint64_t kWriteVa = 0x00007F3A12340000;
constexpr uint64_t kReadVa = 0x00007F3A56780010;
constexpr Rkey kWriteRkey(0x00012A05);
constexpr Rkey kReadRkey(0x80003B07);
constexpr uint64_t kAtomicVa = 0x00007F3A9ABC0040;  // 8-byte aligned
constexpr Rkey kAtomicRkey(0x00045A11);
constexpr uint32_t kUdQkey = 0x0000C0DE;

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

// `h` moved onto the queue pairs `from` -> `to` of the other peers.
PacketHeaders Between(PacketHeaders h, Qpn from, Qpn to) {
  h.path.udp_src_port = UdpSourcePortForQpn(from);
  h.bth.dest_qp = to;
  return h;
}

// `len` bytes of `text` over and over: private data that says in a hex dump
// whose it is.
std::vector<uint8_t> Text(size_t len, std::string_view text) {
  std::vector<uint8_t> out(len);
  for (size_t i = 0; i < len; ++i) {
    out[i] = static_cast<uint8_t>(text[i % text.size()]);
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

  // A 2979-byte READ (PSNs 4..6) and a 250-byte READ (PSN 7). A READ
  // request is a whole message: it asks for an acknowledgement.
  h = RequesterToResponder(Opcode::kReadRequest, 4);
  h.bth.ack_req = true;
  h.reth = {kReadVa, kReadRkey, 2979};
  frames.push_back(Make("read_request", h, {}));
  h = RequesterToResponder(Opcode::kReadRequest, 7);
  h.bth.ack_req = true;
  h.reth = {kReadVa + 8192, kReadRkey, 250};
  frames.push_back(Make("read_request_small", h, {}));

  // The responder's side, in the order it answers: the writes (4 messages),
  // then the READs (messages 5 and 6). Every AETH carries the MSN current
  // when it is sent.
  frames.push_back(
      Make("ack", ResponderToRequester(Opcode::kAcknowledge, 3, kAck, 4), {}));
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

  // PSN 8 was lost: a sequence NAK, the WRITE again (message 7), its ACK;
  // then the small READ once more, whose replayed response counts all seven
  // messages, not the six of its first answer.
  h = RequesterToResponder(Opcode::kWriteOnly, 9);
  h.bth.ack_req = true;
  h.reth = {kWriteVa + 8192, kWriteRkey, 8};
  frames.push_back(Make("write_only_after_a_gap", h, Pattern(8, 9)));
  frames.push_back(Make(
      "nak_psn_sequence_error",
      ResponderToRequester(Opcode::kAcknowledge, 8, kAethNakPsnSeqError, 6),
      {}));
  h = RequesterToResponder(Opcode::kWriteOnly, 8);
  h.bth.ack_req = true;
  h.reth = {kWriteVa + 8192, kWriteRkey, 8};
  frames.push_back(Make("write_only_resent", h, Pattern(8, 8)));
  frames.push_back(Make("ack_after_the_gap",
                        ResponderToRequester(Opcode::kAcknowledge, 8, kAck, 7),
                        {}));
  h = RequesterToResponder(Opcode::kReadRequest, 7);
  h.bth.ack_req = true;
  h.reth = {kReadVa + 8192, kReadRkey, 250};
  frames.push_back(Make("read_request_small_again", h, {}));
  frames.push_back(
      Make("read_response_only_replayed",
           ResponderToRequester(Opcode::kReadResponseOnly, 7, kAck, 7),
           Pattern(250, 7)));

  // Two-sided SENDs (between a third pair of QPs): a three-packet SEND
  // whose last packet carries immediate data and a solicited event, its
  // ACK; a SEND ONLY that finds no receive, answered with an RNR NAK (timer
  // code 12, 0.64 ms), and sent again; a WRITE ONLY with immediate data.
  auto other = [](PacketHeaders p) {
    p.bth.dest_qp = p.bth.opcode == Opcode::kAcknowledge ? kSendRequesterQpn
                                                         : kSendResponderQpn;
    return p;
  };
  const uint32_t kImm = 0x78563412;  // bytes 12 34 56 78 on the wire
  h = other(RequesterToResponder(Opcode::kSendFirst, 40));
  frames.push_back(Make("send_first", h, Pattern(256, 13)));
  h = other(RequesterToResponder(Opcode::kSendMiddle, 41));
  frames.push_back(Make("send_middle", h, Pattern(256, 14)));
  h = other(RequesterToResponder(Opcode::kSendLastImmediate, 42));
  h.bth.ack_req = true;
  h.bth.solicited = true;
  h.imm = kImm;
  frames.push_back(Make("send_last_with_immediate", h, Pattern(10, 15)));
  frames.push_back(Make(
      "ack_of_the_send",
      other(ResponderToRequester(Opcode::kAcknowledge, 42, kAck, 1)), {}));
  h = other(RequesterToResponder(Opcode::kSendOnly, 43));
  h.bth.ack_req = true;
  frames.push_back(Make("send_only", h, Pattern(24, 16)));
  frames.push_back(Make(
      "rnr_nak",
      other(ResponderToRequester(Opcode::kAcknowledge, 43,
                                 static_cast<uint8_t>(kAethRnrNak | 12), 1)),
      {}));
  frames.push_back(Make("send_only_again", h, Pattern(24, 16)));
  frames.push_back(Make(
      "ack_of_the_send_again",
      other(ResponderToRequester(Opcode::kAcknowledge, 43, kAck, 2)), {}));
  h = other(RequesterToResponder(Opcode::kWriteOnlyImmediate, 44));
  h.bth.ack_req = true;
  h.reth = {kWriteVa, kWriteRkey, 12};
  h.imm = kImm;
  frames.push_back(Make("write_only_with_immediate", h, Pattern(12, 17)));
  frames.push_back(Make(
      "ack_of_the_write_with_immediate",
      other(ResponderToRequester(Opcode::kAcknowledge, 44, kAck, 3)), {}));

  // Requests rdmaplane does not serve, answered with NAK "invalid request"
  // (after which the responder's QP is in the error state), and a WRITE to
  // a key the responder does not know, answered with NAK "remote access
  // error". A frame of another partition gets no answer.
  h = RequesterToResponder(Opcode::kFlush, 9);
  h.bth.ack_req = true;
  frames.push_back(Make("flush_unsupported", h, {}));
  frames.push_back(Make(
      "nak_invalid_request",
      ResponderToRequester(Opcode::kAcknowledge, 9, kAethNakInvalidRequest, 7),
      {}));
  // (Between another pair of QPs: a refusal ends the connection.)
  h = RequesterToResponder(Opcode::kWriteOnly, 20);
  h.bth.dest_qp = kOtherResponderQpn;
  h.bth.ack_req = true;
  h.reth = {kWriteVa, Rkey(0x0BADBAD0), 16};
  frames.push_back(Make("write_only_unknown_key", h, Pattern(16, 11)));
  h = ResponderToRequester(Opcode::kAcknowledge, 20, kAethNakRemoteAccess, 0);
  h.bth.dest_qp = kOtherRequesterQpn;
  frames.push_back(Make("nak_remote_access_error", h, {}));
  h = RequesterToResponder(Opcode::kWriteOnly, 9);
  h.bth.ack_req = true;
  h.bth.pkey = 0x8001;
  h.reth = {kWriteVa, kWriteRkey, 4};
  frames.push_back(Make("write_only_other_partition", h, Pattern(4, 12)));

  // Other peers, with atomics and invalidation: a COMPARE SWAP that
  // finds the value it compares with and swaps in all ones, a FETCH ADD
  // of 1 to the next word, each answered with the word as it was; a SEND
  // that invalidates the key the atomics used, and a two-packet SEND whose
  // last packet invalidates the largest key; their ACKs.
  const size_t other_peers_from = frames.size();
  auto to_responder = [](Opcode op, uint32_t psn) {
    return Between(RequesterToResponder(op, psn), kAtomicRequesterQpn,
                   kAtomicResponderQpn);
  };
  auto to_requester = [](Opcode op, uint32_t psn, uint32_t msn) {
    return Between(ResponderToRequester(op, psn, kAck, msn),
                   kAtomicResponderQpn, kAtomicRequesterQpn);
  };
  h = to_responder(Opcode::kCompareSwap, 50);
  h.bth.ack_req = true;
  h.atomic_eth = {kAtomicVa, kAtomicRkey, 0xFFFFFFFFFFFFFFFF,
                  0x0123456789ABCDEF};
  frames.push_back(Make("compare_swap", h, {}));
  h = to_requester(Opcode::kAtomicAcknowledge, 50, 1);
  h.atomic_ack_eth.orig_data = 0x0123456789ABCDEF;
  frames.push_back(Make("atomic_acknowledge_of_compare_swap", h, {}));
  h = to_responder(Opcode::kFetchAdd, 51);
  h.bth.ack_req = true;
  h.atomic_eth = {kAtomicVa + 8, kAtomicRkey, 1, 0};
  frames.push_back(Make("fetch_add", h, {}));
  h = to_requester(Opcode::kAtomicAcknowledge, 51, 2);
  h.atomic_ack_eth.orig_data = 0x7FFFFFFFFFFFFFFF;
  frames.push_back(Make("atomic_acknowledge_of_fetch_add", h, {}));
  h = to_responder(Opcode::kSendOnlyInvalidate, 52);
  h.bth.ack_req = true;
  h.bth.solicited = true;
  h.ieth.rkey = kAtomicRkey;
  frames.push_back(Make("send_only_with_invalidate", h, Pattern(48, 18)));
  frames.push_back(Make("ack_of_the_send_with_invalidate",
                        to_requester(Opcode::kAcknowledge, 52, 3), {}));
  h = to_responder(Opcode::kSendFirst, 53);
  frames.push_back(Make("send_first_to_invalidate", h, Pattern(256, 19)));
  h = to_responder(Opcode::kSendLastInvalidate, 54);
  h.bth.ack_req = true;
  h.ieth.rkey = Rkey(0xFFFFFFFF);
  frames.push_back(Make("send_last_with_invalidate", h, Pattern(17, 20)));
  frames.push_back(Make("ack_of_the_send_last_with_invalidate",
                        to_requester(Opcode::kAcknowledge, 54, 4), {}));

  // UC: a WRITE and a SEND with immediate data, never acknowledged.
  h = Between(RequesterToResponder(Opcode::kUcWriteOnly, 0x000100),
              kUcSenderQpn, kUcReceiverQpn);
  h.reth = {kWriteVa + 0x20000, kWriteRkey, 40};
  frames.push_back(Make("uc_write_only", h, Pattern(40, 21)));
  h = Between(RequesterToResponder(Opcode::kUcSendOnlyImmediate, 0x000101),
              kUcSenderQpn, kUcReceiverQpn);
  h.imm = kImm;
  frames.push_back(Make("uc_send_only_with_immediate", h, Pattern(22, 22)));

  // UD: datagrams to a QP other than the CM's, with a Q_Key of their own.
  h = Between(RequesterToResponder(Opcode::kUdSendOnly, 0x000200), kUdSenderQpn,
              kUdReceiverQpn);
  h.deth = {kUdQkey, kUdSenderQpn};
  frames.push_back(Make("ud_send_only", h, Pattern(64, 23)));
  h = Between(RequesterToResponder(Opcode::kUdSendOnlyImmediate, 0x000201),
              kUdSenderQpn, kUdReceiverQpn);
  h.bth.solicited = true;
  h.deth = {kUdQkey, kUdSenderQpn};
  h.imm = kImm;
  frames.push_back(Make("ud_send_only_with_immediate", h, Pattern(61, 24)));
  for (size_t i = other_peers_from; i < frames.size(); ++i) {
    frames[i].other_peers = true;
  }
  return frames;
}

std::vector<GoldenCmFrame> MakeGoldenCmFrames() {
  constexpr uint32_t kActiveCommId = 0x5EC0FFEE;
  constexpr uint32_t kPassiveCommId = 0x0B0E0F01;
  // One transaction for REQ, MRA, REP and RTU, another for DREQ and DREP,
  // both named after the side that began them.
  constexpr uint64_t kConnectTid =
      CmTransactionId(CmTransaction::kConnect, kActiveCommId);
  constexpr uint64_t kCloseTid =
      CmTransactionId(CmTransaction::kDisconnect, kActiveCommId);
  constexpr uint64_t kRefusedTid =
      CmTransactionId(CmTransaction::kConnect, kActiveCommId + 1);

  Path active;  // the requester's side opens and closes the connection
  active.src_mac = kRequesterMac;
  active.dst_mac = kResponderMac;
  active.src_ip = kRequesterIp;
  active.dst_ip = kResponderIp;
  active.udp_src_port = UdpSourcePortForQpn(kGsiQpn);
  active.dscp_ecn = kDscpEct0 & 0xFC;
  const Path passive = ReplyPath(active);

  std::vector<GoldenCmFrame> frames;
  auto add = [&frames](std::string name, const Path& path, CmMessage m,
                       std::string service = "") {
    GoldenCmFrame g;
    g.name = std::move(name);
    g.path = path;
    g.message = m;
    g.service_name = std::move(service);
    // A REQ: the IP CM header, then the name record as the consumer's data.
    IpCmHeader h;
    if (m.type == CmType::kReq && ParseIpCmHeader(m, &h)) {
      g.ip_cm = h;
      g.consumer_private_data.assign(
          m.private_data.begin() + kIpCmHeaderLen,
          m.private_data.begin() + m.private_data_len);
    }
    g.frame.resize(kCmFrameLen);
    g.frame.resize(EncodeCmFrame(path, m, g.frame));
    frames.push_back(std::move(g));
  };

  CmMessage req;
  req.type = CmType::kReq;
  req.transaction_id = kConnectTid;
  req.local_comm_id = kActiveCommId;
  req.qpn = kRequesterQpn;
  req.start_psn = Psn(0xFFFFFE);  // the first WRITE of MakeGoldenFrames
  req.path_mtu = kIbMtu1024;
  // What rdmaplaned's defaults make its REQ say: 16 READs served and kept
  // in flight, a first retransmission after 10 ms (code 11), answers
  // expected within 250 ms (code 16) and the REQ tried 8 times (7 retries),
  // 7 transport retries, no RNR NAKs to retry, 100 Gb/s.
  req.responder_resources = 16;
  req.initiator_depth = 16;
  req.local_ack_timeout = LocalAckTimeoutCode(10'000'000);
  req.remote_cm_response_timeout = IbTimeoutCode(250'000'000);
  req.local_cm_response_timeout = IbTimeoutCode(250'000'000);
  req.max_cm_retries = 7;
  req.retry_count = 7;
  req.rnr_retry_count = 7;
  req.packet_rate = kIbRate100Gbps;
  req.local_ip = kRequesterIp;
  req.remote_ip = kResponderIp;
  // Native connections have no port: the IP CM header's source port is 0.
  const IpCmHeader header{.src_port = 0, .src_ip = kRequesterIp,
                          .dst_ip = kResponderIp};
  const std::string service = "rdmaplane/golden";
  SetNativeRequest(service, header, &req);
  add("cm_req", active, req, service);

  CmMessage mra;
  mra.type = CmType::kMra;
  mra.transaction_id = kConnectTid;
  mra.local_comm_id = kPassiveCommId;
  mra.remote_comm_id = kActiveCommId;
  mra.refers_to = CmRefersTo::kReq;
  // The REQ is held until the listener accepts; the active side repeats it
  // every second meanwhile, each repetition answered by an MRA.
  mra.service_timeout = IbTimeoutCode(1'000'000'000);
  add("cm_mra", passive, mra);

  CmMessage rep;
  rep.type = CmType::kRep;
  rep.transaction_id = kConnectTid;
  rep.local_comm_id = kPassiveCommId;
  rep.remote_comm_id = kActiveCommId;
  rep.qpn = kResponderQpn;
  rep.start_psn = Psn(0x000456);
  rep.responder_resources = 16;
  rep.initiator_depth = 16;
  rep.target_ack_delay = IbTimeoutCode(200'000);  // a napping engine
  rep.rnr_retry_count = 7;
  SetNativeReply(kIbMtu1024, &rep);  // the passive side's MTU: the REQ's
  add("cm_rep", passive, rep);

  CmMessage rtu;
  rtu.type = CmType::kRtu;
  rtu.transaction_id = kConnectTid;
  rtu.local_comm_id = kActiveCommId;
  rtu.remote_comm_id = kPassiveCommId;
  add("cm_rtu", active, rtu);

  CmMessage dreq;
  dreq.type = CmType::kDreq;
  dreq.transaction_id = kCloseTid;
  dreq.local_comm_id = kActiveCommId;
  dreq.remote_comm_id = kPassiveCommId;
  dreq.qpn = kResponderQpn;
  add("cm_dreq", active, dreq);

  CmMessage drep;
  drep.type = CmType::kDrep;
  drep.transaction_id = kCloseTid;
  drep.local_comm_id = kPassiveCommId;
  drep.remote_comm_id = kActiveCommId;
  add("cm_drep", passive, drep);

  // Another peer's REQ, with other values in every field that varies.
  CmMessage refused = req;
  refused.transaction_id = kRefusedTid;
  refused.local_comm_id = kActiveCommId + 1;
  refused.responder_resources = 4;
  refused.initiator_depth = 2;
  refused.local_ack_timeout = 14;
  refused.remote_cm_response_timeout = 20;
  refused.local_cm_response_timeout = 18;
  refused.max_cm_retries = 15;
  refused.retry_count = 6;
  refused.rnr_retry_count = 3;
  refused.packet_rate = kIbRate40Gbps;
  // A name longer than a REQ carries whole: its first 42 bytes travel.
  const std::string nobody =
      "rdmaplane/a-service-name-longer-than-a-req-carries-whole";
  SetNativeRequest(nobody, header, &refused);
  add("cm_req_unknown_service", active, refused, nobody);
  CmMessage rej;
  rej.type = CmType::kRej;
  rej.transaction_id = kRefusedTid;
  rej.local_comm_id = 0;  // the passive side never allocated one
  rej.remote_comm_id = kActiveCommId + 1;
  rej.refers_to = CmRefersTo::kReq;
  rej.reject_reason = kRejInvalidServiceId;
  add("cm_rej_invalid_service", passive, rej);
  return frames;
}

std::vector<GoldenCmFrame> MakeGoldenIpCmFrames() {
  // Communication ids as control/ip_cm.cc hands them out: the top bit set
  // (IpCm::kCommIdBit), which keeps them apart from the native CM's. A SIDR
  // REQ's request id is one as well.
  constexpr uint32_t kClientCommId = 0x80000A01;
  constexpr uint32_t kServerCommId = 0x80000B01;
  constexpr uint32_t kLonelyCommId = kClientCommId + 1;
  constexpr uint32_t kRefusedCommId = kClientCommId + 2;
  constexpr uint32_t kSidrRequestId = kClientCommId + 3;
  constexpr uint16_t kServerPort = 7471;   // rdma_server's and cmatose's
  constexpr uint16_t kNobodysPort = 7472;  // where nobody listens
  constexpr uint16_t kUdaddyPort = 7174;   // udaddy's
  // The client's ids are bound to ephemeral ports (32768..60999).
  constexpr uint16_t kClientPort = 40001;
  constexpr Qpn kClientQpn(0x000211);
  constexpr Qpn kServerQpn(0x000322);
  constexpr Qpn kUdServerQpn(0x000433);
  constexpr uint32_t kRdmaUdpQkey = 0x01234567;  // librdmacm's RDMA_UDP_QKEY

  std::vector<GoldenCmFrame> frames;
  // As the daemon's link sends them (ConnectionManager::SendCm): the UDP
  // source port from the sender's comm id, no DSCP, the default TTL.
  auto add = [&frames](std::string name, bool from_client, CmMessage m,
                       std::optional<IpCmHeader> ip_cm = std::nullopt,
                       std::vector<uint8_t> data = {}) {
    GoldenCmFrame g;
    g.name = std::move(name);
    g.path.src_mac = from_client ? kRequesterMac : kResponderMac;
    g.path.dst_mac = from_client ? kResponderMac : kRequesterMac;
    g.path.src_ip = from_client ? kRequesterIp : kResponderIp;
    g.path.dst_ip = from_client ? kResponderIp : kRequesterIp;
    g.path.udp_src_port =
        static_cast<uint16_t>(0xC000 | (m.local_comm_id & 0x3FFF));
    bool ok = true;
    if (ip_cm.has_value()) {
      ok = SetIpCmPrivateData(*ip_cm, data, &m);
    } else if (data.size() <= CmPrivateDataCapacity(m.type)) {
      std::copy(data.begin(), data.end(), m.private_data.begin());
      m.private_data_len = static_cast<uint8_t>(data.size());
    } else {
      ok = false;
    }
    g.message = m;
    g.ip_cm_service = true;
    g.ip_cm = ip_cm;
    g.consumer_private_data = std::move(data);
    // An empty frame when the private data did not fit: golden_frames
    // then reports the encoding failed.
    g.frame.resize(kCmFrameLen);
    g.frame.resize(ok ? EncodeCmFrame(g.path, m, g.frame) : 0);
    frames.push_back(std::move(g));
  };

  // rdma_connect to port 7471 (RDMA_PS_TCP), as IpCm::Connect fills the
  // REQ: the application's conn_param (16 READs each way, the device's
  // most; 7 retries and RNR retries; end-to-end flow control asked for),
  // REQs 250 ms apart tried 8 times, a 1024-byte path MTU (an Ethernet MTU
  // of 1500); the IP CM header names the client's port and both addresses.
  CmMessage req;
  req.type = CmType::kReq;
  req.transaction_id = CmTransactionId(CmTransaction::kConnect, kClientCommId);
  req.local_comm_id = kClientCommId;
  req.service_id = IpCmServiceId(kPortSpaceTcp, kServerPort);
  req.qpn = kClientQpn;
  req.start_psn = Psn(0x3A5C71);
  req.path_mtu = kIbMtu1024;
  req.responder_resources = 16;
  req.initiator_depth = 16;
  req.flow_control = true;
  req.retry_count = 7;
  req.rnr_retry_count = 7;
  req.remote_cm_response_timeout = IbTimeoutCode(250'000'000);
  req.local_cm_response_timeout = IbTimeoutCode(250'000'000);
  req.max_cm_retries = 7;
  req.local_ip = kRequesterIp;
  req.remote_ip = kResponderIp;
  const IpCmHeader header{
      .src_port = kClientPort, .src_ip = kRequesterIp, .dst_ip = kResponderIp};
  add("ip_cm_req", true, req, header, Text(56, "REQ consumer data. "));

  // The listener holds the REQ until its application accepts.
  CmMessage mra;
  mra.type = CmType::kMra;
  mra.transaction_id = req.transaction_id;
  mra.local_comm_id = kServerCommId;
  mra.remote_comm_id = kClientCommId;
  mra.refers_to = CmRefersTo::kReq;
  mra.service_timeout = IbTimeoutCode(1'000'000'000);
  add("ip_cm_mra", false, mra);

  // rdma_accept: the server's queue pair (its receives from an SRQ) and
  // 196 bytes of the application's private data; no MTU record.
  CmMessage rep;
  rep.type = CmType::kRep;
  rep.transaction_id = req.transaction_id;
  rep.local_comm_id = kServerCommId;
  rep.remote_comm_id = kClientCommId;
  rep.qpn = kServerQpn;
  rep.start_psn = Psn(0x1F0E0D);
  rep.responder_resources = 16;
  rep.initiator_depth = 16;
  rep.rnr_retry_count = 7;
  rep.srq = true;
  rep.flow_control = true;
  add("ip_cm_rep", false, rep, std::nullopt, Text(196, "REP consumer data. "));

  CmMessage rtu;
  rtu.type = CmType::kRtu;
  rtu.transaction_id = req.transaction_id;
  rtu.local_comm_id = kClientCommId;
  rtu.remote_comm_id = kServerCommId;
  add("ip_cm_rtu", true, rtu);

  // rdma_disconnect by the client, answered at once.
  CmMessage dreq;
  dreq.type = CmType::kDreq;
  dreq.transaction_id =
      CmTransactionId(CmTransaction::kDisconnect, kClientCommId);
  dreq.local_comm_id = kClientCommId;
  dreq.remote_comm_id = kServerCommId;
  dreq.qpn = kServerQpn;
  add("ip_cm_dreq", true, dreq);
  add("ip_cm_drep", false, DisconnectReply(dreq));

  // A REQ to a port nobody listens on: REJ "invalid service id" (8), from
  // no communication id, without private data.
  CmMessage lonely = req;
  lonely.transaction_id =
      CmTransactionId(CmTransaction::kConnect, kLonelyCommId);
  lonely.local_comm_id = kLonelyCommId;
  lonely.service_id = IpCmServiceId(kPortSpaceTcp, kNobodysPort);
  lonely.qpn = Qpn(kClientQpn.value() + 1);
  lonely.start_psn = Psn(0x000001);
  IpCmHeader lonely_header = header;
  lonely_header.src_port = kClientPort + 1;
  add("ip_cm_req_no_listener", true, lonely, lonely_header,
      Text(56, "REQ to nobody. "));
  CmMessage invalid;
  invalid.type = CmType::kRej;
  invalid.transaction_id = lonely.transaction_id;
  invalid.local_comm_id = 0;
  invalid.remote_comm_id = kLonelyCommId;
  invalid.refers_to = CmRefersTo::kReq;
  invalid.reject_reason = kRejInvalidServiceId;
  add("ip_cm_rej_invalid_service", false, invalid);

  // A REQ the listening application turns down with rdma_reject: REJ
  // "consumer reject" (28) with its private data. (The MRA that held the
  // REQ meanwhile is left out.)
  CmMessage refused = req;
  refused.transaction_id =
      CmTransactionId(CmTransaction::kConnect, kRefusedCommId);
  refused.local_comm_id = kRefusedCommId;
  refused.qpn = Qpn(kClientQpn.value() + 2);
  refused.start_psn = Psn(0xFFFFFF);
  refused.flow_control = false;
  IpCmHeader refused_header = header;
  refused_header.src_port = kClientPort + 2;
  add("ip_cm_req_to_be_rejected", true, refused, refused_header,
      Text(40, "REQ turned down. "));
  CmMessage consumer_rej;
  consumer_rej.type = CmType::kRej;
  consumer_rej.transaction_id = refused.transaction_id;
  consumer_rej.local_comm_id = kServerCommId + 1;
  consumer_rej.remote_comm_id = kRefusedCommId;
  consumer_rej.refers_to = CmRefersTo::kReq;
  consumer_rej.reject_reason = kRejConsumer;
  add("ip_cm_rej_consumer", false, consumer_rej, std::nullopt,
      Text(64, "rdma_reject data. "));

  // rdma_resolve_route's SIDR REQ for an RDMA_PS_UDP port (udaddy's), with
  // the IP CM header and 180 bytes of the application's data; rdma_accept
  // answers with the UD queue pair's QPN and librdmacm's Q_Key.
  CmMessage sidr_req;
  sidr_req.type = CmType::kSidrReq;
  sidr_req.transaction_id =
      CmTransactionId(CmTransaction::kConnect, kSidrRequestId);
  sidr_req.local_comm_id = kSidrRequestId;
  sidr_req.service_id = IpCmServiceId(kPortSpaceUdp, kUdaddyPort);
  IpCmHeader sidr_header = header;
  sidr_header.src_port = kClientPort + 3;
  add("ip_cm_sidr_req", true, sidr_req, sidr_header,
      Text(180, "SIDR REQ consumer data. "));
  CmMessage sidr_rep;
  sidr_rep.type = CmType::kSidrRep;
  sidr_rep.transaction_id = sidr_req.transaction_id;
  sidr_rep.local_comm_id = kSidrRequestId;
  sidr_rep.sidr_status = kSidrValid;
  sidr_rep.qpn = kUdServerQpn;
  sidr_rep.qkey = kRdmaUdpQkey;
  sidr_rep.service_id = sidr_req.service_id;
  add("ip_cm_sidr_rep", false, sidr_rep, std::nullopt,
      Text(48, "SIDR REP data. "));
  return frames;
}

std::vector<GoldenArpFrame> MakeGoldenArpFrames() {
  std::vector<GoldenArpFrame> frames;
  auto add = [&frames](std::string name, const ArpMessage& m) {
    GoldenArpFrame g;
    g.name = std::move(name);
    g.message = m;
    g.frame.resize(kArpFrameLen);
    g.frame.resize(EncodeArp(m, g.frame));
    frames.push_back(std::move(g));
  };
  ArpMessage request;
  request.op = kArpOpRequest;
  request.sender_mac = kRequesterMac;
  request.sender_ip = kRequesterIp;
  request.target_ip = kResponderIp;
  add("arp_request", request);
  add("arp_reply", MakeArpReply(request, kResponderMac));
  return frames;
}

}  // namespace rdmaplane::wire
