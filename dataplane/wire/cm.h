// InfiniBand Communication Management (IBA vol. 1, ch. 12) over RoCEv2, as
// hardware RoCE devices and Linux's CM carry it: a 256-byte CM MAD in a
// UD SEND ONLY datagram from QP1 to QP1 with the GSI Q_Key, so that a capture
// decodes as "CM ConnectRequest" and friends and a hardware peer could, in
// principle, answer.
//
//   Ethernet 14 | IPv4 20 | UDP 8 (dst 4791) | BTH 12 (opcode 0x64, dest QP 1)
//   | DETH 8 (Q_Key 0x80010000, source QP 1) | MAD 256 | ICRC 4
//
// The MAD is a common MAD header (base version 1, class 0x07 CM, class
// version 2, method SEND, transaction id, attribute id) and 232 bytes of
// message laid out at the byte/bit offsets of IBA tables 106-113. Only RC
// connections over IPv4 are expressed: REQ always asks for transport RC with
// an IPv4-mapped primary path and no alternate path.
//
// Also ClassifyFrame, the cheap first look the engine takes at every frame.
// Thread-safe (pure functions).
#ifndef RDMAPLANE_DATAPLANE_WIRE_CM_H_
#define RDMAPLANE_DATAPLANE_WIRE_CM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dataplane/wire/arp.h"
#include "dataplane/wire/psn.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {

// The general services interface: CM MADs go from QP1 to QP1 with this Q_Key.
inline constexpr Qpn kGsiQpn(1);
inline constexpr uint32_t kGsiQkey = 0x80010000;

inline constexpr size_t kMadLen = 256;
inline constexpr size_t kMadHeaderLen = 24;
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMadMethodSend = 0x03;
inline constexpr size_t kCmFrameLen =
    kOuterHeadersLen + kBthLen + kDethLen + kMadLen + kIcrcLen;

// IBA time values are exponents: 4.096 us * 2^code (CM response timeouts,
// the MRA's service timeout, local ACK timeout, target ACK delay).
inline constexpr uint8_t kIbTimeoutMax = 31;
constexpr uint64_t IbTimeoutNs(uint8_t code) {
  return code > kIbTimeoutMax ? 0 : uint64_t{4096} << code;
}
// The code nearest to `ns` (nearest on the exponent's scale, so 10 ms is 11,
// 8.4 ms, and 250 ms is 16, 268 ms), 0..31.
constexpr uint8_t IbTimeoutCode(uint64_t ns) {
  // Past the geometric middle between code and code + 1, code + 1 is nearer.
  constexpr double kSqrt2 = 1.4142135623730951;
  const double wanted = static_cast<double>(ns);
  uint8_t code = 0;
  for (; code < kIbTimeoutMax; ++code) {
    const double middle = static_cast<double>(IbTimeoutNs(code)) * kSqrt2;
    if (wanted <= middle) break;
  }
  return code;
}
// The Local ACK Timeout code that describes a requester that first
// retransmits after `retransmit_ns`: the nearest code, at least 1 (0 means
// "no timeout" to a peer).
constexpr uint8_t LocalAckTimeoutCode(uint64_t retransmit_ns) {
  const uint8_t code = IbTimeoutCode(retransmit_ns);
  return code == 0 ? 1 : code;
}

// Static rate codes (IBA PathRecord Rate, as REQ's Primary Packet Rate
// carries them): 2 is 2.5 Gb/s, 3 10 Gb/s, ... 16 100 Gb/s, ... 22 600 Gb/s.
// 0 and 1 are not rates.
inline constexpr uint8_t kIbRate10Gbps = 3;
inline constexpr uint8_t kIbRate40Gbps = 7;
inline constexpr uint8_t kIbRate100Gbps = 16;
constexpr bool IsDefinedIbRate(uint8_t code) { return code >= 2 && code <= 22; }

// Transaction ids. Like Linux's CM, the messages of one transaction share
// the id its first message got: REQ and its repetitions, MRA, REP, RTU and
// a REJ of the REQ or REP carry the active side's connect transaction; each
// DREQ (repeated or not) the disconnect transaction of its sender, and the
// DREP repeats the DREQ's. An id names the transaction and the initiator's
// communication id, so it is unique per daemon run.
enum class CmTransaction : uint8_t { kConnect = 1, kDisconnect = 2 };
constexpr uint64_t CmTransactionId(CmTransaction t,
                                   uint32_t initiator_comm_id) {
  return uint64_t{static_cast<uint8_t>(t)} << 32 | initiator_comm_id;
}

// The defaults of REQ and REP fields; the daemon fills them in from what its
// connection manager and queue pairs do.
inline constexpr uint8_t kCmResponseTimeout = 16;  // about 268 ms
inline constexpr uint8_t kMaxCmRetries = 7;
inline constexpr uint8_t kRcRetryCount = 7;
// RNR NAK retries: rdmaplane never sends an RNR NAK (it serves no SEND), so
// any peer's requester may retry without limit (7).
inline constexpr uint8_t kRnrRetryCount = 7;
// About 8.4 ms: the nearest code to the daemon's 10 ms first retransmit
// timeout over its data port.
inline constexpr uint8_t kDefaultLocalAckTimeout = 11;

// Path MTU codes of IBA 9.6.2 (1..5 = 256..4096 bytes).
inline constexpr uint8_t kIbMtu256 = 1;
inline constexpr uint8_t kIbMtu1024 = 3;
inline constexpr uint8_t kIbMtu4096 = 5;
// Bytes for an MTU code; 0 for anything but 1..5.
constexpr uint32_t IbMtuBytes(uint8_t code) {
  return code >= kIbMtu256 && code <= kIbMtu4096 ? 128u << code : 0;
}
// The largest MTU code whose size fits in `bytes`; 0 below 256.
constexpr uint8_t IbMtuCode(uint32_t bytes) {
  uint8_t code = 0;
  while (code < kIbMtu4096 &&
         IbMtuBytes(static_cast<uint8_t>(code + 1)) <= bytes) {
    ++code;
  }
  return code;
}

// MAD attribute ids of the CM messages rdmaplane speaks.
enum class CmType : uint16_t {
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  // Service ID Resolution (IBA 12.11): a UD queue pair's QPN and Q_Key
  // for a service, as rdma_cm's RDMA_PS_UDP resolves them.
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
};
bool IsKnownCmType(uint16_t attribute_id);
const char* CmTypeName(CmType type);

// The message an MRA acknowledges or a REJ rejects (2: LAP for an MRA, any
// other message for a REJ).
enum class CmRefersTo : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// REJ reasons (IBA table 109) rdmaplane sends.
inline constexpr uint16_t kRejNoQp = 1;
inline constexpr uint16_t kRejNoResources = 3;
inline constexpr uint16_t kRejTimeout = 4;
inline constexpr uint16_t kRejInvalidServiceId = 8;
inline constexpr uint16_t kRejStaleConnection = 10;
inline constexpr uint16_t kRejConsumer = 28;
inline constexpr uint16_t kRejInvalidClassVersion = 31;

// SIDR REP status (IBA table 116).
inline constexpr uint8_t kSidrValid = 0;
inline constexpr uint8_t kSidrServiceIdNotSupported = 1;
inline constexpr uint8_t kSidrRejected = 2;
inline constexpr uint8_t kSidrNoQp = 3;

// Private data bytes each message carries on the wire: REQ 92, MRA 222,
// REJ 148, REP 196, RTU 224, DREQ 220, DREP 224, SIDR REQ 216, SIDR REP
// 136; 0 for an unknown type.
size_t CmPrivateDataCapacity(CmType type);
inline constexpr size_t kCmMaxPrivateData = 224;

// One CM message. Each type uses only some fields; the encoder ignores the
// others and the parser leaves them at their defaults.
struct CmMessage {
  CmType type = CmType::kReq;
  uint64_t transaction_id = 0;  // all; see CmTransactionId
  uint32_t local_comm_id = 0;   // all: the sender's connection id
  uint32_t remote_comm_id = 0;  // all but REQ: the receiver's connection id
  // REQ, SIDR REQ, SIDR REP. (A SIDR message's request id travels in
  // local_comm_id.)
  uint64_t service_id = 0;
  // REQ, REP, SIDR REP: the sender's QP. DREQ: the receiver's QP.
  Qpn qpn;
  uint32_t qkey = 0;        // SIDR REP: the Q_Key of the UD queue pair
  uint8_t sidr_status = 0;  // SIDR REP: kSidr*
  // REQ, REP: the sender's receives come from a shared receive queue, and
  // it offers end-to-end credits (the AETH's credit field).
  bool srq = false;
  bool flow_control = false;
  Psn start_psn;                    // REQ, REP: the sender's first PSN
  uint8_t path_mtu = kIbMtu1024;    // REQ: code 1..5
  uint8_t responder_resources = 0;  // REQ, REP: READs the sender will serve
  uint8_t initiator_depth = 0;      // REQ, REP: READs it keeps in flight
  // REQ: 5 bits; 0 would mean "no timeout", so what rdmaplane sends comes
  // from LocalAckTimeoutCode.
  uint8_t local_ack_timeout = kDefaultLocalAckTimeout;
  uint8_t target_ack_delay = 0;                         // REP: 5 bits
  // REQ: how long the sender waits for an answer to the REQ (remote) and
  // how long the receiver may wait for the sender's answer to its REP
  // (local), 5-bit IbTimeoutCode values; how often the sender repeats a
  // REQ (and the passive side a REP) before giving up, 4 bits.
  uint8_t remote_cm_response_timeout = kCmResponseTimeout;
  uint8_t local_cm_response_timeout = kCmResponseTimeout;
  uint8_t max_cm_retries = kMaxCmRetries;
  // REQ: retransmissions the passive side's requester may make without
  // progress (3 bits, 7 is 7); REQ, REP: its RNR NAK retries (3 bits, 7 is
  // without limit).
  uint8_t retry_count = kRcRetryCount;
  uint8_t rnr_retry_count = kRnrRetryCount;
  // REQ: a rate code (6 bits). The encoder takes any, as the parser does
  // (a peer may send 0, "the port's current rate"); what rdmaplane sends is
  // a defined one (IsDefinedIbRate).
  uint8_t packet_rate = kIbRate100Gbps;
  // REQ: primary path GIDs as IPv4-mapped IPv6 addresses (::ffff:a.b.c.d);
  // local is the sender's. Host order.
  uint32_t local_ip = 0;
  uint32_t remote_ip = 0;
  uint16_t reject_reason = 0;               // REJ
  CmRefersTo refers_to = CmRefersTo::kReq;  // MRA, REJ
  uint8_t service_timeout = 0;              // MRA: 5 bits
  // Up to CmPrivateDataCapacity(type) bytes; the rest of the field goes out
  // as zeros. A parsed message always has the full capacity.
  uint8_t private_data_len = 0;
  std::array<uint8_t, kCmMaxPrivateData> private_data{};

  friend bool operator==(const CmMessage&, const CmMessage&) = default;
};

// The RDMA IP CM Service (IBA Annex A11), as Linux's rdma_cm speaks it:
// service id 0x0000000001000000 | port_space << 16 | port, where the port
// space is rdma_cm's RDMA_PS_* value (0x0106 TCP: RC; 0x0111 UDP: UD, by
// SIDR; 0x013F IB), and a 36-byte header at the start of the private data
// of a REQ or SIDR REQ: version 0, IP version << 4, the source port, then
// the source and destination addresses (an IPv4 address in the last 4 of
// 16 bytes). The consumer's private data follows it: 56 bytes in a REQ,
// 180 in a SIDR REQ.
inline constexpr uint16_t kPortSpaceTcp = 0x0106;
inline constexpr uint16_t kPortSpaceUdp = 0x0111;
inline constexpr uint16_t kPortSpaceIb = 0x013F;
inline constexpr size_t kIpCmHeaderLen = 36;
// The header's first byte is the IP CM version, major in the high nibble and
// minor in the low one (0.0); the second has the IP version in its high
// nibble.
inline constexpr uint8_t kIpCmMajorVersion = 0;
inline constexpr uint8_t kIpCmMinorVersion = 0;
inline constexpr uint8_t kIpCmIpv4 = 4;
constexpr uint64_t IpCmServiceId(uint16_t port_space, uint16_t port) {
  return uint64_t{port_space} << 16 | port;
}
constexpr bool IsIpCmServiceId(uint64_t service_id) {
  return (service_id >> 24) == 1;
}
constexpr uint16_t IpCmPortSpace(uint64_t service_id) {
  return static_cast<uint16_t>(service_id >> 16);
}
constexpr uint16_t IpCmPort(uint64_t service_id) {
  return static_cast<uint16_t>(service_id);
}
// The addresses the header carries (IPv4 only; host order).
struct IpCmHeader {
  uint16_t src_port = 0;
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  friend bool operator==(const IpCmHeader&, const IpCmHeader&) = default;
};
// Sets m's private data (a REQ or SIDR REQ) to the header and then
// `consumer`; false, leaving m unchanged, for another type or consumer
// data longer than the room after the header.
bool SetIpCmPrivateData(const IpCmHeader& h, std::span<const uint8_t> consumer,
                        CmMessage* m);
// The header at the start of m's private data: false unless m is a REQ or
// SIDR REQ whose header has version 0 and IP version 4.
bool ParseIpCmHeader(const CmMessage& m, IpCmHeader* h);

// rdmaplane's native connections (rdp_connect_to, by service name) are one
// more consumer of the IP CM Service: their REQ goes to one service id,
// kNativeServiceId (RDMA_PS_TCP, port 4791, RoCEv2's UDP port), with the IP
// CM header, and the 56 bytes of consumer data after it name the service:
// "RDPN", version 1, the name's length (1..63), its 64-bit FNV-1a hash (big
// endian) and its first 42 bytes (zeros after a shorter name). A name of up
// to 42 bytes travels whole; a longer one is matched by its length, hash and
// first bytes. The REP's private data is the native consumer's too: "RDPN",
// version 1 and the passive side's path MTU code (an IBA REP has no path
// MTU; both ends use the smaller of the REQ's and the passive side's).
// Not RDMA_PS_IB: Wireshark decodes the rest of a connection whose service
// id has bit 16 set as SDP (Sockets Direct Protocol). rdma_cm ids cannot
// bind this port (IpCm::Bind).
inline constexpr uint16_t kNativeServicePort = 4791;
inline constexpr uint64_t kNativeServiceId =
    IpCmServiceId(kPortSpaceTcp, kNativeServicePort);
inline constexpr size_t kMaxServiceNameLen = 63;
inline constexpr size_t kNativeNameBytes = 42;
// What a native REQ names.
struct NativeService {
  uint8_t length = 0;
  uint64_t hash = 0;
  std::string_view prefix;  // the name's first bytes, in the message
  // Whether `name` is the service named.
  bool Names(std::string_view name) const;
  // For messages: the name, or its first bytes and "...".
  std::string Text() const;
};
uint64_t NativeServiceHash(std::string_view name);
// Sets a REQ's service id and private data (the IP CM header `h` and the
// name); false, leaving `req` unchanged, for another type or an empty or
// too long name.
bool SetNativeRequest(std::string_view name, const IpCmHeader& h,
                      CmMessage* req);
// True, with *s pointing into m, when m is a REQ to kNativeServiceId with
// an IP CM header and a well-formed name record.
bool ParseNativeRequest(const CmMessage& m, NativeService* s);
// Sets a REP's private data to the native record; false, leaving `rep`
// unchanged, for another type or an MTU code not 1..5.
bool SetNativeReply(uint8_t mtu_code, CmMessage* rep);
// The MTU code of a REP's native record; 0 when it has none.
uint8_t NativeReplyMtu(const CmMessage& m);
// Before it spoke the IP CM Service, rdmaplane sent native REQs to service
// ids of its own: a name's hash with 0x02 in the top byte, the range
// Linux's CM uses for ids it assigns locally. Such a REQ comes from an old
// daemon; it is refused with a reason the old daemon shows its client.
constexpr bool IsPreIpCmNativeServiceId(uint64_t service_id) {
  return (service_id >> 56) == 0x02;
}

// The DREP that answers `dreq`: its transaction, the comm ids turned round.
CmMessage DisconnectReply(const CmMessage& dreq);

// Writes the whole frame for `m` along `path` (UDP source port, DSCP and TTL
// as given). Returns kCmFrameLen, or 0 when `out` is too small or `m` does
// not fit its fields (private data longer than its type's capacity, QPN over
// 24 bits, MTU code outside 1..5, a 3-, 4-, 5- or 6-bit field over its
// width, unknown type or CmRefersTo value).
size_t EncodeCmFrame(const Path& path, const CmMessage& m,
                     std::span<uint8_t> out);

// Decodes a CM frame, checking everything EncodeCmFrame writes that a peer must
// get right: IPv4/UDP/BTH as ParseDatagramFrame (lengths, checksums, ICRC),
// opcode UD SEND ONLY, destination and source QP 1, the GSI Q_Key, a default
// P_Key, a 256-byte MAD with base version 1, class CM, class version 2, method
// SEND and a known attribute; for a REQ, transport RC and IPv4-mapped GIDs with
// an MTU code 1..5; for a REJ, an ARI length of at most 72; for an MRA or REJ a
// known CmRefersTo. On success fills `out` and, if not null, `from`: src_* is
// the sender, dst_* is us, with the sender's UDP source port, DSCP/ECN and TTL
// (see ReplyPath).
bool ParseCmFrame(std::span<const uint8_t> frame, CmMessage* out, Path* from);

// The path for answering a frame that arrived along `from`: addresses
// swapped, the same UDP source port and DSCP without ECN bits, default TTL.
Path ReplyPath(const Path& from);

enum class FrameKind : uint8_t { kRoce, kCm, kArp, kOther };

// Where a received frame goes: ARP by ethertype; IPv4 (20-byte header) UDP
// to port 4791 is CM when its BTH is UD SEND ONLY to QP 1 and RoCE otherwise
// (including frames too short for a BTH, which ParseFrame then rejects with a
// reason); anything else is kOther. Only looks: no lengths, checksums or ICRC
// are verified here.
inline FrameKind ClassifyFrame(std::span<const uint8_t> frame) {
  if (frame.size() < kEthHeaderLen) return FrameKind::kOther;
  const uint8_t* p = frame.data();
  const uint16_t ethertype = static_cast<uint16_t>(p[12] << 8 | p[13]);
  if (ethertype == kEtherTypeArp) return FrameKind::kArp;
  if (ethertype != kEtherTypeIpv4 || frame.size() < kOuterHeadersLen) {
    return FrameKind::kOther;
  }
  const uint8_t* ip = p + kEthHeaderLen;
  const uint8_t* udp = ip + kIpv4HeaderLen;
  if (ip[0] != 0x45 || ip[9] != 17 || (udp[2] << 8 | udp[3]) != kRoceUdpPort) {
    return FrameKind::kOther;
  }
  const uint8_t* bth = udp + kUdpHeaderLen;
  if (frame.size() >= kOuterHeadersLen + kBthLen &&
      bth[0] == static_cast<uint8_t>(Opcode::kUdSendOnly) && bth[5] == 0 &&
      bth[6] == 0 && bth[7] == kGsiQpn.value()) {
    return FrameKind::kCm;
  }
  return FrameKind::kRoce;
}

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_CM_H_
