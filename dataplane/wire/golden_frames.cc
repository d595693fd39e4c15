#include "dataplane/wire/golden_frames.h"

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
  auto add = [&frames](std::string name, const Path& path, CmMessage m) {
    GoldenCmFrame g;
    g.name = std::move(name);
    g.path = path;
    g.message = m;
    g.frame.resize(kCmFrameLen);
    g.frame.resize(EncodeCmFrame(path, m, g.frame));
    frames.push_back(std::move(g));
  };

  CmMessage req;
  req.type = CmType::kReq;
  req.transaction_id = kConnectTid;
  req.local_comm_id = kActiveCommId;
  SetServiceName("rdmaplane/golden", &req);
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
  add("cm_req", active, req);

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
  SetServiceName("rdmaplane/nobody", &refused);
  add("cm_req_unknown_service", active, refused);
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
