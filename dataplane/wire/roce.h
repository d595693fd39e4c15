// RoCEv2 frame layout and codec: Ethernet / IPv4 / UDP / BTH, the extension
// headers (RETH, AETH, DETH, ImmDt, AtomicETH, AtomicAckETH, IETH), payload
// padding and the invariant CRC (ICRC). Three transports: RC (every opcode,
// ParseFrame), UC (ParseUcFrame) and UD (UD SEND ONLY, with immediate data or
// not: ParseDatagramFrame; rdmaplane itself sends UD SEND ONLY with the
// connection management MADs of cm.h). The opcode table (kOpcodeTable)
// describes every opcode value.
//
// Encoding writes a whole frame into a caller-provided buffer; decoding
// validates every field it relies on and returns a reason on rejection. Neither
// allocates and neither reads outside the span it is given.
// Thread-compatible: ParseCounters belongs to one engine thread.
#ifndef RDMAPLANE_DATAPLANE_WIRE_ROCE_H_
#define RDMAPLANE_DATAPLANE_WIRE_ROCE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/wire/psn.h"

namespace rdmaplane::wire {

inline constexpr uint16_t kRoceUdpPort = 4791;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr size_t kEthHeaderLen = 14;
inline constexpr size_t kIpv4HeaderLen = 20;
inline constexpr size_t kUdpHeaderLen = 8;
inline constexpr size_t kBthLen = 12;
inline constexpr size_t kRethLen = 16;
inline constexpr size_t kAethLen = 4;
inline constexpr size_t kDethLen = 8;
inline constexpr size_t kImmDtLen = 4;
inline constexpr size_t kAtomicEthLen = 28;
inline constexpr size_t kAtomicAckEthLen = 8;
inline constexpr size_t kIethLen = 4;
inline constexpr size_t kIcrcLen = 4;
// Everything before the IB transport headers.
inline constexpr size_t kOuterHeadersLen =
    kEthHeaderLen + kIpv4HeaderLen + kUdpHeaderLen;
// The longest set of extension headers is a COMPARE SWAP's or FETCH ADD's
// AtomicETH (roce.cc checks every opcode against it).
inline constexpr size_t kMaxHeadersLen =
    kOuterHeadersLen + kBthLen + kAtomicEthLen;
// The default partition: full membership, the P_Key every RoCE port has.
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
// The IBA's partition rule: two P_Keys match when their low 15 bits are
// equal and not 0 (0x0000 and 0x8000 are invalid), and at least one of them
// is a full member's (top bit set): limited members cannot talk to each
// other.
constexpr bool PkeysMatch(uint16_t a, uint16_t b) {
  return (a & 0x7FFF) != 0 && (a & 0x7FFF) == (b & 0x7FFF) &&
         ((a | b) & 0x8000) != 0;
}

// BTH opcodes (IBTA vol. 1, table 38): every RC opcode the IBA defines
// (rdmaplane itself sends and serves SEND, SEND with Invalidate, WRITE,
// READ, the atomics COMPARE SWAP and FETCH ADD, and their
// acknowledgements; see OpcodeInfo), every UC opcode and both UD opcodes.
// The top three bits name the transport (RC 000, UC 001, UD 011), the low
// five the operation.
enum class Opcode : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImmediate = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImmediate = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImmediate = 0x09,
  kWriteOnly = 0x0a,
  kWriteOnlyImmediate = 0x0b,
  kReadRequest = 0x0c,
  kReadResponseFirst = 0x0d,
  kReadResponseMiddle = 0x0e,
  kReadResponseLast = 0x0f,
  kReadResponseOnly = 0x10,
  kAcknowledge = 0x11,
  kAtomicAcknowledge = 0x12,
  kCompareSwap = 0x13,
  kFetchAdd = 0x14,
  kSendLastInvalidate = 0x16,
  kSendOnlyInvalidate = 0x17,
  kFlush = 0x1c,
  kAtomicWrite = 0x1d,
  // Unreliable connection: SEND and RDMA WRITE only, with the headers of
  // their RC namesakes; never acknowledged (see ParseUcFrame).
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImmediate = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImmediate = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImmediate = 0x29,
  kUcWriteOnly = 0x2a,
  kUcWriteOnlyImmediate = 0x2b,
  // Unreliable datagram; never part of a connection (see
  // ParseDatagramFrame).
  kUdSendOnly = 0x64,
  kUdSendOnlyImmediate = 0x65,
};

// The opcodes of the RC transport are 0x00-0x1f (transport bits 000); the
// ones table 38 leaves out (0x15, 0x18-0x1b, 0x1e, 0x1f) are reserved.
inline constexpr uint8_t kRcOpcodeLimit = 0x20;
// UC opcodes are 0x20-0x3f (001) and UD opcodes 0x60-0x7f (011); only the
// ones listed in Opcode are defined, the rest are reserved.
inline constexpr uint8_t kTransportMask = 0xE0;
inline constexpr uint8_t kUcOpcodeBase = 0x20;
inline constexpr uint8_t kUdOpcodeBase = 0x60;

// What a message of an opcode is.
enum class OpcodeClass : uint8_t {
  kReserved,  // not defined by the IBA (or not an RC opcode)
  kSend,
  kWrite,
  kReadRequest,
  kReadResponse,
  kAcknowledge,
  kAtomic,  // COMPARE SWAP, FETCH ADD
  kAtomicAcknowledge,
  kFlush,
  kAtomicWrite,
  kDatagram,  // UD SEND ONLY (with immediate data or not)
};

// Opcode properties, one table entry per opcode value, so that the codec,
// the responder's checks and the completer's response-order checks read
// them instead of listing opcodes (rxe's rxe_opcode[] does the same). UC
// opcodes have the class of their RC namesakes (kSend, kWrite).
inline constexpr uint16_t kOpDefined = 1 << 0;  // the IBA defines it
inline constexpr uint16_t kOpSupported = 1
                                         << 1;  // rdmaplane sends and serves it
inline constexpr uint16_t kOpRequest = 1 << 2;  // a requester sends it
inline constexpr uint16_t kOpFirst = 1 << 3;  // starts a message (FIRST, ONLY)
inline constexpr uint16_t kOpLast = 1 << 4;   // ends a message (LAST, ONLY)
inline constexpr uint16_t kOpPayload = 1 << 5;  // may carry payload bytes
// Extension headers the codec reads and writes. On the wire they follow the
// BTH in this order, each present only when its flag is set: DETH, RETH,
// AtomicETH, ImmDt, IETH, AETH, AtomicAckETH. The combinations that occur
// are DETH [ImmDt] (UD SEND), RETH [ImmDt] (WRITE, READ REQUEST), AETH
// [AtomicAckETH] (responses) and one of the others alone.
inline constexpr uint16_t kOpReth = 1 << 6;
inline constexpr uint16_t kOpAeth = 1 << 7;
inline constexpr uint16_t kOpDeth = 1 << 8;
// Immediate data (ImmDt, 4 bytes) after the DETH or RETH, if any.
inline constexpr uint16_t kOpImm = 1 << 9;
inline constexpr uint16_t kOpAtomicEth = 1 << 10;     // COMPARE SWAP, FETCH ADD
inline constexpr uint16_t kOpAtomicAckEth = 1 << 11;  // after the AETH
inline constexpr uint16_t kOpIeth = 1 << 12;          // SEND with invalidate

struct OpcodeInfo {
  const char* name = "RESERVED";
  OpcodeClass op_class = OpcodeClass::kReserved;
  uint16_t flags = 0;
  // Bytes of extension headers between the BTH and the payload (RETH,
  // AETH, DETH, ImmDt, IETH, AtomicETH, AtomicAckETH, FETH): the sum of the
  // flagged headers' lengths, plus FLUSH's FETH, which the codec only
  // skips. 0 for reserved opcodes, whose layout nobody knows: everything
  // after their BTH counts as payload.
  uint8_t header_len = 0;
};

// Entries for all 256 opcode values: the reserved RC opcodes are requests
// (a responder answers them with NAK "invalid request"); reserved opcodes
// of other transports, and those of transports rdmaplane has no codec for
// (RD, CNP, XRC), have no flags at all.
extern const std::array<OpcodeInfo, 256> kOpcodeTable;
inline const OpcodeInfo& InfoOf(Opcode op) {
  return kOpcodeTable[static_cast<uint8_t>(op)];
}

// True for the RC opcodes, defined or reserved: the ones ParseFrame accepts.
constexpr bool IsRcOpcode(uint8_t op) { return op < kRcOpcodeLimit; }
// True for the UC and UD opcodes, defined or reserved (ParseUcFrame and
// ParseDatagramFrame accept only the defined ones).
constexpr bool IsUcOpcode(uint8_t op) {
  return (op & kTransportMask) == kUcOpcodeBase;
}
constexpr bool IsUdOpcode(uint8_t op) {
  return (op & kTransportMask) == kUdOpcodeBase;
}
inline bool IsDefined(Opcode op) {
  return (InfoOf(op).flags & kOpDefined) != 0;
}
inline bool HasReth(Opcode op) { return (InfoOf(op).flags & kOpReth) != 0; }
inline bool HasAeth(Opcode op) { return (InfoOf(op).flags & kOpAeth) != 0; }
inline bool HasDeth(Opcode op) { return (InfoOf(op).flags & kOpDeth) != 0; }
inline bool HasImm(Opcode op) { return (InfoOf(op).flags & kOpImm) != 0; }
inline bool HasAtomicEth(Opcode op) {
  return (InfoOf(op).flags & kOpAtomicEth) != 0;
}
inline bool HasAtomicAckEth(Opcode op) {
  return (InfoOf(op).flags & kOpAtomicAckEth) != 0;
}
inline bool HasIeth(Opcode op) { return (InfoOf(op).flags & kOpIeth) != 0; }
// True for opcodes a requester sends (handled by the peer's responder),
// reserved RC opcodes included.
inline bool IsRequest(Opcode op) {
  return (InfoOf(op).flags & kOpRequest) != 0;
}
// True when rdmaplane's queue pairs send and serve the opcode.
inline bool IsSupported(Opcode op) {
  return (InfoOf(op).flags & kOpSupported) != 0;
}
// True when the opcode may carry payload bytes.
inline bool CarriesPayload(Opcode op) {
  return (InfoOf(op).flags & kOpPayload) != 0;
}
inline const char* OpcodeName(Opcode op) { return InfoOf(op).name; }

// AETH syndromes (IBTA 9.7.5.1.3).
inline constexpr uint8_t kAethAck = 0x00;
inline constexpr uint8_t kAethRnrNak = 0x20;
inline constexpr uint8_t kAethNakPsnSeqError = 0x60;
inline constexpr uint8_t kAethNakInvalidRequest = 0x61;
inline constexpr uint8_t kAethNakRemoteAccess = 0x62;
inline constexpr uint8_t kAethNakRemoteOperational = 0x63;
// Credit field value meaning "no end-to-end flow control" (0b11111).
inline constexpr uint8_t kAethCreditsInvalid = 0x1F;
// An RNR NAK's syndrome: kAethRnrNak plus the 5-bit RNR timer code.
inline constexpr bool IsRnrNak(uint8_t syndrome) {
  return (syndrome >> 5) == 1;
}
// How long a requester waits after an RNR NAK with timer `code` (IBTA
// table 45: code 0 is 655.36 ms, 1..31 run from 0.01 to 491.52 ms).
uint64_t RnrTimerNs(uint8_t code);
// The smallest RNR timer code that waits at least `ns`.
uint8_t RnrTimerCode(uint64_t ns);

struct MacAddr {
  std::array<uint8_t, 6> bytes{};
  friend bool operator==(const MacAddr&, const MacAddr&) = default;
};

// Ethernet + IPv4 + UDP fields of a RoCEv2 frame (host byte order).
struct Path {
  MacAddr src_mac;
  MacAddr dst_mac;
  uint32_t src_ip = 0;  // host order, e.g. 10.0.0.1 == 0x0A000001
  uint32_t dst_ip = 0;
  uint16_t udp_src_port = 0xC000;
  uint8_t dscp_ecn = 0;
  uint8_t ttl = 64;
};

struct Bth {
  Opcode opcode = Opcode::kAcknowledge;
  bool solicited = false;
  bool mig_req = true;
  uint8_t pad_count = 0;  // filled in by the encoder
  uint16_t pkey = kDefaultPkey;
  bool fecn = false;
  bool becn = false;
  Qpn dest_qp;
  bool ack_req = false;
  Psn psn;
};

struct Reth {
  uint64_t va = 0;
  Rkey rkey;
  uint32_t dma_length = 0;
};

struct Aeth {
  uint8_t syndrome = kAethAck | kAethCreditsInvalid;
  uint32_t msn = 0;  // 24 bits
};

// Datagram extended transport header (IBTA 9.3.3): Q_Key, a reserved byte
// (written as 0, ignored when read), source QP.
struct Deth {
  uint32_t qkey = 0;
  Qpn src_qp;  // 24 bits
};

// Atomic extended transport header (IBA vol. 1, 9.3) of COMPARE SWAP and
// FETCH ADD: the 8-byte word at `va` in the region of `rkey`.
struct AtomicEth {
  // The IBA requires an 8-byte aligned address; a misaligned one is a
  // well-formed header that the responder refuses (NAK "invalid request"),
  // so the parser takes it as it is.
  uint64_t va = 0;
  Rkey rkey;
  uint64_t swap_add = 0;  // COMPARE SWAP: the new value; FETCH ADD: addend
  uint64_t compare = 0;   // COMPARE SWAP only; FETCH ADD ignores it
};

// Atomic acknowledge extended transport header (IBA vol. 1, 9.3): the
// target word as it was before the atomic operation.
struct AtomicAckEth {
  uint64_t orig_data = 0;
};

// Invalidate extended transport header (IBA vol. 1, 9.3): the R_Key the
// responder invalidates when the SEND completes.
struct Ieth {
  Rkey rkey;
};

// What the encoder needs besides the payload.
struct PacketHeaders {
  Path path;
  Bth bth;
  Reth reth;                    // used when HasReth(bth.opcode)
  Aeth aeth;                    // used when HasAeth(bth.opcode)
  Deth deth;                    // used when HasDeth(bth.opcode)
  AtomicEth atomic_eth;         // used when HasAtomicEth(bth.opcode)
  AtomicAckEth atomic_ack_eth;  // used when HasAtomicAckEth(bth.opcode)
  Ieth ieth;                    // used when HasIeth(bth.opcode)
  // ImmDt when HasImm(bth.opcode): its 4 bytes as they are on the wire,
  // in memory order (verbs' imm_data, which is big-endian, unchanged).
  uint32_t imm = 0;
};

// UDP source port for a QP: a hash of the QPN folded into 0xC000..0xFFFF, so
// that ECMP spreads connections while one connection keeps one path.
uint16_t UdpSourcePortForQpn(Qpn qpn);

// Length of the whole frame for `headers` with `payload_len` bytes.
size_t FrameLength(Opcode opcode, size_t payload_len);

// The longest frame a queue pair with path MTU `path_mtu` sends: a full
// payload behind the most headers any opcode carries with one, an RDMA
// WRITE ONLY with immediate data's RETH and ImmDt (4 bytes more than a
// WRITE FIRST's).
size_t MaxFrameLength(size_t path_mtu);

// Writes the frame (headers, payload, pad, ICRC) to `out`. Returns the frame
// length, or 0 when `out` is too small or the opcode cannot carry the payload.
size_t EncodeFrame(const PacketHeaders& headers,
                   std::span<const uint8_t> payload, std::span<uint8_t> out);

// Writes only the headers of a frame whose payload the caller places right
// after them (at the returned offset), then call FinishFrame.
size_t EncodeHeaders(const PacketHeaders& headers, size_t payload_len,
                     std::span<uint8_t> out);
// Adds pad and ICRC after a payload already in place; returns the frame length.
size_t FinishFrame(std::span<uint8_t> frame_without_trailer);

// For a frame whose payload stays in other buffers (zero-copy transmit):
// the ICRC over the headers (EncodeHeaders's output, `header_len` bytes),
// to be extended over each payload piece in order with ExtendIcrc (icrc.h);
// then EncodeTrailer writes the pad and ICRC that follow the payload to
// `out` and returns their length (0 when `out` is too small). Headers,
// payload and trailer together are the bytes EncodeFrame writes.
inline constexpr size_t kMaxTrailerLen = 3 + kIcrcLen;
uint32_t HeadersIcrc(std::span<const uint8_t> headers);
size_t EncodeTrailer(std::span<const uint8_t> headers, uint32_t icrc,
                     std::span<uint8_t> out);

// Why a frame was rejected. Every value has a counter in ParseCounters.
enum class ParseError : uint8_t {
  kOk = 0,
  kTruncated,
  kNotIpv4,
  kIpVersion,
  kIpOptions,
  kIpFragment,
  kIpChecksum,
  kIpLength,
  kNotUdp,
  kNotRocePort,
  kUdpLength,
  kBthVersion,
  // Not an opcode of the parser's transport: not RC for ParseFrame, not a
  // defined UC or UD opcode for ParseUcFrame and ParseDatagramFrame.
  kUnknownOpcode,
  kBadPad,
  kLengthMismatch,
  kBadIcrc,
  kNumReasons,
};
const char* ParseErrorName(ParseError e);

// A decoded frame. `payload` points into the buffer given to ParseFrame.
struct ParsedPacket {
  MacAddr src_mac;
  MacAddr dst_mac;
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t udp_src_port = 0;
  Bth bth;
  // Each extension header as read, or its default value when the opcode has
  // none.
  Reth reth;
  Aeth aeth;
  Deth deth;
  AtomicEth atomic_eth;
  AtomicAckEth atomic_ack_eth;
  Ieth ieth;
  uint32_t imm = 0;  // ImmDt as on the wire (see PacketHeaders::imm)
  std::span<const uint8_t> payload;  // without pad and ICRC
  // The frame's IPv4 header as received (a UD receive's GRH holds it).
  std::span<const uint8_t> ipv4_header;
};

struct ParseCounters {
  std::array<uint64_t, static_cast<size_t>(ParseError::kNumReasons)> by_reason{};
  uint64_t& operator[](ParseError e) { return by_reason[static_cast<size_t>(e)]; }
  uint64_t operator[](ParseError e) const {
    return by_reason[static_cast<size_t>(e)];
  }
};

// Decodes and validates `frame`. On kOk fills `out`. `counters`, if given, is
// incremented at the returned reason (kOk counts accepted frames). Accepts
// every RC opcode, also those rdmaplane does not serve and the reserved
// ones, so that the queue pair can refuse them as the IBA says (NAK "invalid
// request"); the extension headers the codec knows are read, the others
// (FLUSH's FETH) skipped by the lengths of OpcodeInfo. The frame must hold
// exactly the opcode's extension headers and payload: too few bytes for the
// headers is kTruncated, bytes after those of an opcode without payload
// kLengthMismatch, pad on such an opcode kBadPad. Field values are not
// judged here (an AtomicETH's alignment, an ATOMIC ACKNOWLEDGE's syndrome):
// that is the queue pair's part. Other transports' opcodes are
// kUnknownOpcode here: a UC or UD frame never reaches an RC queue pair.
ParseError ParseFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                      ParseCounters* counters = nullptr);

// The same checks for a frame of the UC transport (SEND and RDMA WRITE);
// reserved UC opcodes are kUnknownOpcode, as there is no NAK to send.
ParseError ParseUcFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                        ParseCounters* counters = nullptr);

// ParseFrame, ParseUcFrame or ParseDatagramFrame, as the opcode's transport
// says: a frame for a queue pair, which checks the transport against its
// own.
ParseError ParseQueuePairFrame(std::span<const uint8_t> frame,
                               ParsedPacket* out,
                               ParseCounters* counters = nullptr);

// The same checks for a UD SEND ONLY frame, with immediate data or not (the
// only UD opcodes); fills out->deth as well.
ParseError ParseDatagramFrame(std::span<const uint8_t> frame, ParsedPacket* out,
                              ParseCounters* counters = nullptr);

// RFC 1071 checksum of an IPv4 header.
uint16_t Ipv4HeaderChecksum(std::span<const uint8_t> header);

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_ROCE_H_
