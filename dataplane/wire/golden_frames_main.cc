// Writes the golden frames (golden_frames.h) as a classic pcap file for
// decoders such as tshark and scapy, plus a JSON file with the field values
// each frame was built from, so a checker can compare what they decode.
//
// Usage: golden_frames OUT.pcap OUT.json
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dataplane/wire/golden_frames.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

constexpr uint32_t kPcapMagic = 0xA1B2C3D4;  // microsecond timestamps
constexpr uint32_t kLinkTypeEthernet = 1;
constexpr uint32_t kSnapLen = 65535;
constexpr uint32_t kFirstTimestampSec = 1700000000;

// pcap files are written in the writer's byte order; this one is always
// little-endian, which readers recognize from the magic number.
void PutLe16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
void PutLe32(std::vector<uint8_t>& out, uint32_t v) {
  PutLe16(out, static_cast<uint16_t>(v));
  PutLe16(out, static_cast<uint16_t>(v >> 16));
}

std::vector<uint8_t> Pcap(const std::vector<GoldenFrame>& frames) {
  std::vector<uint8_t> out;
  PutLe32(out, kPcapMagic);
  PutLe16(out, 2);  // version 2.4
  PutLe16(out, 4);
  PutLe32(out, 0);  // GMT offset
  PutLe32(out, 0);  // timestamp accuracy
  PutLe32(out, kSnapLen);
  PutLe32(out, kLinkTypeEthernet);
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::vector<uint8_t>& f = frames[i].frame;
    PutLe32(out, kFirstTimestampSec);
    PutLe32(out, static_cast<uint32_t>(i * 10));    // microseconds
    PutLe32(out, static_cast<uint32_t>(f.size()));  // captured length
    PutLe32(out, static_cast<uint32_t>(f.size()));  // length on the wire
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

std::string Ipv4String(uint32_t ip) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xFF,
                (ip >> 8) & 0xFF, ip & 0xFF);
  return buf;
}

std::string MacString(const MacAddr& mac) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", mac.bytes[0],
                mac.bytes[1], mac.bytes[2], mac.bytes[3], mac.bytes[4],
                mac.bytes[5]);
  return buf;
}

const char* Bool(bool b) { return b ? "true" : "false"; }

// One JSON object per frame, in pcap order. Integers are plain JSON numbers
// (the checker reads them with Python's unbounded ints).
std::string Json(const std::vector<GoldenFrame>& frames) {
  std::string out = "[\n";
  char buf[512];
  for (size_t i = 0; i < frames.size(); ++i) {
    const GoldenFrame& g = frames[i];
    const PacketHeaders& h = g.headers;
    const Opcode op = h.bth.opcode;
    std::snprintf(
        buf, sizeof(buf),
        "  {\"name\": \"%s\", \"frame_len\": %zu, \"src_mac\": \"%s\", "
        "\"dst_mac\": \"%s\", \"src_ip\": \"%s\", \"dst_ip\": \"%s\", "
        "\"dscp_ecn\": %u, \"ttl\": %u, \"udp_src_port\": %u, "
        "\"opcode\": %u, \"opcode_name\": \"%s\", \"solicited\": %s, "
        "\"mig_req\": %s, \"pad\": %u, \"pkey\": %u, \"fecn\": %s, "
        "\"becn\": %s, \"dest_qp\": %u, \"ack_req\": %s, \"psn\": %u, "
        "\"payload_len\": %zu",
        g.name.c_str(), g.frame.size(), MacString(h.path.src_mac).c_str(),
        MacString(h.path.dst_mac).c_str(), Ipv4String(h.path.src_ip).c_str(),
        Ipv4String(h.path.dst_ip).c_str(), h.path.dscp_ecn, h.path.ttl,
        h.path.udp_src_port, static_cast<unsigned>(op), OpcodeName(op),
        Bool(h.bth.solicited), Bool(h.bth.mig_req), h.bth.pad_count, h.bth.pkey,
        Bool(h.bth.fecn), Bool(h.bth.becn), h.bth.dest_qp.value(),
        Bool(h.bth.ack_req), h.bth.psn.value(), g.payload.size());
    out += buf;
    if (HasReth(op)) {
      std::snprintf(buf, sizeof(buf),
                    ", \"reth\": {\"va\": %" PRIu64
                    ", \"rkey\": %u, \"dma_length\": %u}",
                    h.reth.va, h.reth.rkey.value(), h.reth.dma_length);
      out += buf;
    } else {
      out += ", \"reth\": null";
    }
    if (HasAeth(op)) {
      std::snprintf(buf, sizeof(buf),
                    ", \"aeth\": {\"syndrome\": %u, \"msn\": %u}",
                    h.aeth.syndrome, h.aeth.msn);
      out += buf;
    } else {
      out += ", \"aeth\": null";
    }
    out += ", \"payload_hex\": \"";
    for (uint8_t b : g.payload) {
      std::snprintf(buf, sizeof(buf), "%02x", b);
      out += buf;
    }
    out += i + 1 < frames.size() ? "\"},\n" : "\"}\n";
  }
  out += "]\n";
  return out;
}

bool WriteFile(const char* path, const void* data, size_t len) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "golden_frames: cannot open %s: %s\n", path,
                 std::strerror(errno));
    return false;
  }
  const bool ok = std::fwrite(data, 1, len, f) == len;
  return std::fclose(f) == 0 && ok;
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT.pcap OUT.json\n", argv[0]);
    return 2;
  }
  const std::vector<GoldenFrame> frames = MakeGoldenFrames();
  for (const GoldenFrame& g : frames) {
    if (g.frame.size() != FrameLength(g.headers.bth.opcode, g.payload.size())) {
      std::fprintf(stderr, "golden_frames: encoding %s failed\n",
                   g.name.c_str());
      return 1;
    }
  }
  const std::vector<uint8_t> pcap = Pcap(frames);
  const std::string json = Json(frames);
  if (!WriteFile(argv[1], pcap.data(), pcap.size()) ||
      !WriteFile(argv[2], json.data(), json.size())) {
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmaplane::wire

int main(int argc, char** argv) { return rdmaplane::wire::Main(argc, argv); }
