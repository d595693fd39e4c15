// Fuzz target for the frame classifier and the CM and ARP parsers. Any input
// must be handled without reading outside it, and the verdicts must agree:
// a frame ParseCmFrame accepts is one ClassifyFrame calls kCm, ParseArp's are
// kArp, ParseFrame's are kRoce. An accepted CM or ARP message must encode
// again and parse back to the same message. As in roce_fuzz.cc, each input is
// also tried with its IPv4 checksum and ICRC recomputed, so that edits reach
// the checks behind them.
//
// Runs under libFuzzer (link with -fsanitize=fuzzer) or, as cm_fuzz_test,
// under fuzz_driver.cc with the golden CM, ARP and RC frames as seeds.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/wire/arp.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/fuzz_driver.h"
#include "dataplane/wire/golden_frames.h"
#include "dataplane/wire/guarded_buffer.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

constexpr size_t kIpOffset = kEthHeaderLen;

uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// Recomputes the IPv4 header checksum and, when the IPv4 total length fits
// the frame, the ICRC.
void FixChecksums(std::span<uint8_t> frame) {
  if (frame.size() < kOuterHeadersLen + kBthLen) return;
  uint8_t* ip = frame.data() + kIpOffset;
  Put16(ip + 10, Ipv4HeaderChecksum({ip, kIpv4HeaderLen}));
  const size_t ip_len = Get16(ip + 2);
  if (ip_len < kIpv4HeaderLen + kUdpHeaderLen + kBthLen + kIcrcLen ||
      kIpOffset + ip_len > frame.size()) {
    return;
  }
  const uint32_t icrc = ComputeIcrc({ip, ip_len - kIcrcLen});
  uint8_t* at = ip + ip_len - kIcrcLen;
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(icrc >> (8 * i));
}

bool SamePath(const Path& a, const Path& b) {
  return a.src_mac == b.src_mac && a.dst_mac == b.dst_mac &&
         a.src_ip == b.src_ip && a.dst_ip == b.dst_ip &&
         a.udp_src_port == b.udp_src_port && a.dscp_ecn == b.dscp_ecn &&
         a.ttl == b.ttl;
}

// The native connections' records (a REQ's service name, a REP's MTU):
// what the parser accepts stays inside the message and holds together, and
// a name that travelled whole is written back the same.
void CheckNative(const CmMessage& m) {
  NativeService named;
  if (ParseNativeRequest(m, &named)) {
    FUZZ_CHECK(named.length >= 1 && named.length <= kMaxServiceNameLen);
    FUZZ_CHECK(named.prefix.size() ==
               std::min<size_t>(named.length, kNativeNameBytes));
    const auto* begin = reinterpret_cast<const char*>(m.private_data.data());
    FUZZ_CHECK(named.prefix.data() >= begin &&
               named.prefix.data() + named.prefix.size() <=
                   begin + m.private_data.size());
    FUZZ_CHECK(!named.Text().empty());
    if (named.prefix.size() == named.length) {
      FUZZ_CHECK(named.Names(named.prefix));
      IpCmHeader h;
      FUZZ_CHECK(ParseIpCmHeader(m, &h));
      CmMessage again = m;
      const std::string name(named.prefix);
      FUZZ_CHECK(SetNativeRequest(name, h, &again));
      NativeService named_again;
      FUZZ_CHECK(ParseNativeRequest(again, &named_again));
      FUZZ_CHECK(named_again.Names(name));
    }
  }
  const uint8_t mtu = NativeReplyMtu(m);
  FUZZ_CHECK(mtu == 0 || IbMtuBytes(mtu) != 0);
}

void CheckFrame(std::span<const uint8_t> frame) {
  const FrameKind kind = ClassifyFrame(frame);

  CmMessage m;
  Path from;
  if (ParseCmFrame(frame, &m, &from)) {
    FUZZ_CHECK(kind == FrameKind::kCm);
    std::vector<uint8_t> encoded(kCmFrameLen);
    FUZZ_CHECK(EncodeCmFrame(from, m, encoded) == kCmFrameLen);
    CmMessage again;
    Path again_from;
    FUZZ_CHECK(ParseCmFrame(encoded, &again, &again_from));
    FUZZ_CHECK(again == m);
    FUZZ_CHECK(SamePath(again_from, from));
    // What the encoder writes is canonical: it encodes to itself.
    std::vector<uint8_t> twice(kCmFrameLen);
    FUZZ_CHECK(EncodeCmFrame(again_from, again, twice) == kCmFrameLen);
    FUZZ_CHECK(twice == encoded);
    CheckNative(m);
  }

  ArpMessage arp;
  if (ParseArp(frame, &arp)) {
    FUZZ_CHECK(kind == FrameKind::kArp);
    std::vector<uint8_t> encoded(kArpFrameLen);
    FUZZ_CHECK(EncodeArp(arp, encoded) == kArpFrameLen);
    ArpMessage again;
    FUZZ_CHECK(ParseArp(encoded, &again));
    FUZZ_CHECK(again == arp);
  }

  ParsedPacket pkt;
  if (ParseFrame(frame, &pkt) == ParseError::kOk) {
    FUZZ_CHECK(kind == FrameKind::kRoce);
  }
  if (ParseDatagramFrame(frame, &pkt) == ParseError::kOk) {
    FUZZ_CHECK(kind == FrameKind::kRoce || kind == FrameKind::kCm);
  }
}

}  // namespace

std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  std::vector<std::vector<uint8_t>> seeds;
  for (GoldenCmFrame& g : MakeGoldenCmFrames()) {
    seeds.push_back(std::move(g.frame));
  }
  for (GoldenArpFrame& g : MakeGoldenArpFrames()) {
    seeds.push_back(std::move(g.frame));
  }
  for (GoldenFrame& g : MakeGoldenFrames()) {
    if (g.frame.size() < 128) seeds.push_back(std::move(g.frame));
  }
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
