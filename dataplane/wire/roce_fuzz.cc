// Fuzz target for ParseFrame, ParseUcFrame and ParseDatagramFrame. Any input
// must be parsed by each without reading outside it, with a deterministic
// verdict counted exactly once; at most one of them may accept it (their
// opcodes are disjoint), and an accepted frame must re-encode (EncodeFrame)
// to the same bytes, up to the fields the parser deliberately ignores.
// Because random edits almost always break the IPv4 checksum or the ICRC,
// each input is also parsed with both recomputed, so that edits reach the
// checks behind them.
//
// Runs under libFuzzer (link with -fsanitize=fuzzer) or, as roce_fuzz_test,
// under fuzz_driver.cc with the golden frames as seeds.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "dataplane/wire/fuzz_driver.h"
#include "dataplane/wire/golden_frames.h"
#include "dataplane/wire/guarded_buffer.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

constexpr size_t kIpOffset = kEthHeaderLen;
constexpr size_t kUdpOffset = kIpOffset + kIpv4HeaderLen;
constexpr size_t kBthOffset = kUdpOffset + kUdpHeaderLen;

uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

void PutIcrc(uint8_t* p, uint32_t icrc) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(icrc >> (8 * i));
}

// Recomputes the IPv4 header checksum and, when the IPv4 total length fits
// the frame, the ICRC, so that a frame is rejected for other reasons only.
void FixChecksums(std::span<uint8_t> frame) {
  if (frame.size() < kBthOffset) return;
  uint8_t* ip = frame.data() + kIpOffset;
  Put16(ip + 10, Ipv4HeaderChecksum({ip, kIpv4HeaderLen}));
  const size_t ip_len = Get16(ip + 2);
  if (ip_len < kIpv4HeaderLen + kUdpHeaderLen + kBthLen + kIcrcLen ||
      kIpOffset + ip_len > frame.size()) {
    return;
  }
  PutIcrc(ip + ip_len - kIcrcLen, ComputeIcrc({ip, ip_len - kIcrcLen}));
}

// The bytes of the extension headers the codec reads and writes for `op`.
size_t KnownHeadersLen(Opcode op) {
  return (HasDeth(op) ? kDethLen : 0) + (HasReth(op) ? kRethLen : 0) +
         (HasAtomicEth(op) ? kAtomicEthLen : 0) + (HasImm(op) ? kImmDtLen : 0) +
         (HasIeth(op) ? kIethLen : 0) + (HasAeth(op) ? kAethLen : 0) +
         (HasAtomicAckEth(op) ? kAtomicAckEthLen : 0);
}

// Sets the bits the parser accepts with any value to what EncodeFrame
// writes: IPv4 identification, the DF and reserved flag bits (not MF or the
// fragment offset), UDP checksum, BTH reserved bits, the DETH's reserved
// byte, pad bytes and the extension headers the codec has no fields for
// (FLUSH's, which EncodeFrame writes as zeros), then recomputes the
// checksums. The parser has verified the checksums, so a frame that already
// had these values comes out unchanged.
void Canonicalize(std::span<uint8_t> frame, Opcode op, size_t pad) {
  const size_t known = KnownHeadersLen(op);
  std::memset(frame.data() + kBthOffset + kBthLen + known, 0,
              InfoOf(op).header_len - known);
  if (HasDeth(op)) frame[kBthOffset + kBthLen + 4] = 0;
  uint8_t* ip = frame.data() + kIpOffset;
  Put16(ip + 4, 0);
  ip[6] = static_cast<uint8_t>((ip[6] & 0x3F) | 0x40);
  Put16(frame.data() + kUdpOffset + 6, 0);
  frame[kBthOffset + 4] &= 0xC0;  // keep FECN and BECN
  frame[kBthOffset + 8] &= 0x80;  // keep AckReq
  std::memset(frame.data() + frame.size() - kIcrcLen - pad, 0, pad);
  FixChecksums(frame);
}

bool SamePacket(const ParsedPacket& a, const ParsedPacket& b) {
  return a.src_mac == b.src_mac && a.dst_mac == b.dst_mac &&
         a.src_ip == b.src_ip && a.dst_ip == b.dst_ip &&
         a.udp_src_port == b.udp_src_port && a.bth.opcode == b.bth.opcode &&
         a.bth.solicited == b.bth.solicited && a.bth.mig_req == b.bth.mig_req &&
         a.bth.pad_count == b.bth.pad_count && a.bth.pkey == b.bth.pkey &&
         a.bth.fecn == b.bth.fecn && a.bth.becn == b.bth.becn &&
         a.bth.dest_qp == b.bth.dest_qp && a.bth.ack_req == b.bth.ack_req &&
         a.bth.psn == b.bth.psn && a.reth.va == b.reth.va &&
         a.reth.rkey == b.reth.rkey && a.reth.dma_length == b.reth.dma_length &&
         a.aeth.syndrome == b.aeth.syndrome && a.aeth.msn == b.aeth.msn &&
         a.deth.qkey == b.deth.qkey && a.deth.src_qp == b.deth.src_qp &&
         a.atomic_eth.va == b.atomic_eth.va &&
         a.atomic_eth.rkey == b.atomic_eth.rkey &&
         a.atomic_eth.swap_add == b.atomic_eth.swap_add &&
         a.atomic_eth.compare == b.atomic_eth.compare &&
         a.atomic_ack_eth.orig_data == b.atomic_ack_eth.orig_data &&
         a.ieth.rkey == b.ieth.rkey && a.imm == b.imm &&
         a.payload.size() == b.payload.size() &&
         (a.payload.empty() || std::memcmp(a.payload.data(), b.payload.data(),
                                           a.payload.size()) == 0);
}

using Parser = ParseError (*)(std::span<const uint8_t>, ParsedPacket*,
                              ParseCounters*);

// One parser and the opcodes it may return.
struct Transport {
  Parser parse;
  bool (*takes)(uint8_t opcode);
};

constexpr Transport kTransports[] = {
    {&ParseFrame, [](uint8_t op) { return IsRcOpcode(op); }},
    {&ParseUcFrame,
     [](uint8_t op) {
       return IsUcOpcode(op) && IsDefined(static_cast<Opcode>(op));
     }},
    {&ParseDatagramFrame,
     [](uint8_t op) {
       return IsUdOpcode(op) && IsDefined(static_cast<Opcode>(op));
     }},
};

// Returns true when `t` accepted the frame.
bool CheckFrameWith(const Transport& t, std::span<const uint8_t> frame) {
  ParsedPacket pkt;
  ParseCounters counters;
  const ParseError verdict = t.parse(frame, &pkt, &counters);
  FUZZ_CHECK(verdict < ParseError::kNumReasons);
  uint64_t counted = 0;
  for (uint64_t c : counters.by_reason) counted += c;
  FUZZ_CHECK(counted == 1 && counters[verdict] == 1);
  ParsedPacket again;
  FUZZ_CHECK(t.parse(frame, &again, nullptr) == verdict);
  if (verdict != ParseError::kOk) return false;
  FUZZ_CHECK(SamePacket(pkt, again));

  // The accepted frame is the IPv4 packet; anything after it is Ethernet
  // padding.
  const size_t frame_len = kIpOffset + Get16(frame.data() + kIpOffset + 2);
  const Opcode op = pkt.bth.opcode;
  FUZZ_CHECK(frame_len <= frame.size());
  FUZZ_CHECK(t.takes(static_cast<uint8_t>(op)));
  FUZZ_CHECK(pkt.payload.empty() || CarriesPayload(op));
  FUZZ_CHECK(FrameLength(op, pkt.payload.size()) == frame_len);
  FUZZ_CHECK(pkt.bth.pad_count == (4 - pkt.payload.size() % 4) % 4);
  const uint8_t* payload_end =
      frame.data() + frame_len - kIcrcLen - pkt.bth.pad_count;
  FUZZ_CHECK(pkt.payload.data() + pkt.payload.size() == payload_end);
  FUZZ_CHECK(pkt.payload.data() >= frame.data() + kBthOffset + kBthLen);

  PacketHeaders h;
  h.path.src_mac = pkt.src_mac;
  h.path.dst_mac = pkt.dst_mac;
  h.path.src_ip = pkt.src_ip;
  h.path.dst_ip = pkt.dst_ip;
  h.path.udp_src_port = pkt.udp_src_port;
  h.path.dscp_ecn = frame[kIpOffset + 1];
  h.path.ttl = frame[kIpOffset + 8];
  h.bth = pkt.bth;
  h.reth = pkt.reth;
  h.aeth = pkt.aeth;
  h.deth = pkt.deth;
  h.atomic_eth = pkt.atomic_eth;
  h.atomic_ack_eth = pkt.atomic_ack_eth;
  h.ieth = pkt.ieth;
  h.imm = pkt.imm;
  std::vector<uint8_t> encoded(frame_len);
  FUZZ_CHECK(EncodeFrame(h, pkt.payload, encoded) == frame_len);

  std::vector<uint8_t> expected(frame.begin(), frame.begin() + frame_len);
  Canonicalize(expected, op, pkt.bth.pad_count);
  FUZZ_CHECK(encoded == expected);

  ParsedPacket reparsed;
  FUZZ_CHECK(t.parse(encoded, &reparsed, nullptr) == ParseError::kOk);
  FUZZ_CHECK(SamePacket(pkt, reparsed));
  return true;
}

void CheckFrame(std::span<const uint8_t> frame) {
  int accepted = 0;
  for (const Transport& t : kTransports) {
    if (CheckFrameWith(t, frame)) ++accepted;
  }
  FUZZ_CHECK(accepted <= 1);
}

}  // namespace

std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  std::vector<std::vector<uint8_t>> seeds;
  for (GoldenFrame& g : MakeGoldenFrames()) seeds.push_back(std::move(g.frame));
  return seeds;
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rdmaplane::wire::GuardedBuffer;
  const std::span<const uint8_t> input(data, size);
  rdmaplane::wire::CheckFrame(input);
  // A copy with valid checksums, also ending at a guard page.
  static GuardedBuffer* const fixed = new GuardedBuffer(1 << 16);
  std::vector<uint8_t> copy(input.begin(), input.end());
  rdmaplane::wire::FixChecksums(copy);
  rdmaplane::wire::CheckFrame(fixed->CopyBeforeGuard(copy));
  return 0;
}
