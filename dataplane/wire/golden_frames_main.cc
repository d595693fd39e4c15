// Writes the golden frames (golden_frames.h) as a classic pcap file for
// decoders such as tshark and scapy, plus a JSON file with the field values
// each frame was built from, so a checker can compare what they decode. The
// RC frames come first, then the CM frames, then ARP; each JSON object says
// which with "kind" ("roce", "cm" or "arp").
//
// Usage: golden_frames OUT.pcap OUT.json
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dataplane/wire/arp.h"
#include "dataplane/wire/cm.h"
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

std::vector<uint8_t> Pcap(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<uint8_t> out;
  PutLe32(out, kPcapMagic);
  PutLe16(out, 2);  // version 2.4
  PutLe16(out, 4);
  PutLe32(out, 0);  // GMT offset
  PutLe32(out, 0);  // timestamp accuracy
  PutLe32(out, kSnapLen);
  PutLe32(out, kLinkTypeEthernet);
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::vector<uint8_t>& f = frames[i];
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

std::string Hex(std::span<const uint8_t> bytes) {
  std::string out;
  char buf[3];
  for (uint8_t b : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    out += buf;
  }
  return out;
}

// One JSON object per frame, in pcap order. Integers are plain JSON numbers
// (the checker reads them with Python's unbounded ints).
void AppendRoceJson(const std::vector<GoldenFrame>& frames,
                    std::vector<std::string>* objects) {
  char buf[512];
  for (const GoldenFrame& g : frames) {
    std::string out;
    const PacketHeaders& h = g.headers;
    const Opcode op = h.bth.opcode;
    std::snprintf(
        buf, sizeof(buf),
        "  {\"name\": \"%s\", \"kind\": \"roce\", \"frame_len\": %zu, "
        "\"src_mac\": \"%s\", "
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
    out += ", \"payload_hex\": \"" + Hex(g.payload) + "\"}";
    objects->push_back(std::move(out));
  }
}

void AppendCmJson(const std::vector<GoldenCmFrame>& frames,
                  std::vector<std::string>* objects) {
  char buf[1024];
  for (const GoldenCmFrame& g : frames) {
    const Path& p = g.path;
    const CmMessage& m = g.message;
    const std::string service_name(ServiceNameFromPrivateData(m));
    std::snprintf(
        buf, sizeof(buf),
        "  {\"name\": \"%s\", \"kind\": \"cm\", \"frame_len\": %zu, "
        "\"src_mac\": \"%s\", \"dst_mac\": \"%s\", \"src_ip\": \"%s\", "
        "\"dst_ip\": \"%s\", \"dscp_ecn\": %u, \"ttl\": %u, "
        "\"udp_src_port\": %u, \"type\": %u, \"type_name\": \"%s\", "
        "\"transaction_id\": %" PRIu64
        ", \"local_comm_id\": %u, "
        "\"remote_comm_id\": %u, \"service_id\": %" PRIu64
        ", \"qpn\": %u, "
        "\"start_psn\": %u, \"path_mtu\": %u, \"responder_resources\": %u, "
        "\"initiator_depth\": %u, \"local_ack_timeout\": %u, "
        "\"target_ack_delay\": %u, \"local_ip\": \"%s\", "
        "\"remote_ip\": \"%s\", \"reject_reason\": %u, \"refers_to\": %u, "
        "\"service_timeout\": %u, \"service_name\": \"%s\"",
        g.name.c_str(), g.frame.size(), MacString(p.src_mac).c_str(),
        MacString(p.dst_mac).c_str(), Ipv4String(p.src_ip).c_str(),
        Ipv4String(p.dst_ip).c_str(), p.dscp_ecn, p.ttl, p.udp_src_port,
        static_cast<unsigned>(m.type), CmTypeName(m.type), m.transaction_id,
        m.local_comm_id, m.remote_comm_id, m.service_id, m.qpn.value(),
        m.start_psn.value(), m.path_mtu, m.responder_resources,
        m.initiator_depth, m.local_ack_timeout, m.target_ack_delay,
        Ipv4String(m.local_ip).c_str(), Ipv4String(m.remote_ip).c_str(),
        m.reject_reason, static_cast<unsigned>(m.refers_to), m.service_timeout,
        service_name.c_str());
    // Private data as it goes on the wire: the whole field, zero-filled.
    std::vector<uint8_t> private_data(CmPrivateDataCapacity(m.type), 0);
    std::copy_n(m.private_data.begin(), m.private_data_len,
                private_data.begin());
    objects->push_back(std::string(buf) + ", \"private_data_hex\": \"" +
                       Hex(private_data) + "\"}");
  }
}

void AppendArpJson(const std::vector<GoldenArpFrame>& frames,
                   std::vector<std::string>* objects) {
  char buf[512];
  for (const GoldenArpFrame& g : frames) {
    const ArpMessage& m = g.message;
    std::snprintf(
        buf, sizeof(buf),
        "  {\"name\": \"%s\", \"kind\": \"arp\", \"frame_len\": %zu, "
        "\"op\": %u, \"sender_mac\": \"%s\", \"sender_ip\": \"%s\", "
        "\"target_mac\": \"%s\", \"target_ip\": \"%s\"}",
        g.name.c_str(), g.frame.size(), m.op, MacString(m.sender_mac).c_str(),
        Ipv4String(m.sender_ip).c_str(), MacString(m.target_mac).c_str(),
        Ipv4String(m.target_ip).c_str());
    objects->push_back(buf);
  }
}

std::string JsonArray(const std::vector<std::string>& objects) {
  std::string out = "[\n";
  for (size_t i = 0; i < objects.size(); ++i) {
    out += objects[i];
    out += i + 1 < objects.size() ? ",\n" : "\n";
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
  const std::vector<GoldenCmFrame> cm_frames = MakeGoldenCmFrames();
  const std::vector<GoldenArpFrame> arp_frames = MakeGoldenArpFrames();
  std::vector<std::vector<uint8_t>> all;
  auto take = [&all](const std::string& name, const std::vector<uint8_t>& f,
                     size_t want_len) {
    if (f.size() != want_len) {
      std::fprintf(stderr, "golden_frames: encoding %s failed\n", name.c_str());
      return false;
    }
    all.push_back(f);
    return true;
  };
  for (const GoldenFrame& g : frames) {
    if (!take(g.name, g.frame,
              FrameLength(g.headers.bth.opcode, g.payload.size()))) {
      return 1;
    }
  }
  for (const GoldenCmFrame& g : cm_frames) {
    if (!take(g.name, g.frame, kCmFrameLen)) return 1;
  }
  for (const GoldenArpFrame& g : arp_frames) {
    if (!take(g.name, g.frame, kArpFrameLen)) return 1;
  }
  std::vector<std::string> objects;
  AppendRoceJson(frames, &objects);
  AppendCmJson(cm_frames, &objects);
  AppendArpJson(arp_frames, &objects);
  const std::vector<uint8_t> pcap = Pcap(all);
  const std::string json = JsonArray(objects);
  if (!WriteFile(argv[1], pcap.data(), pcap.size()) ||
      !WriteFile(argv[2], json.data(), json.size())) {
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmaplane::wire

int main(int argc, char** argv) { return rdmaplane::wire::Main(argc, argv); }
