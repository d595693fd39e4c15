#include "dataplane/wire/golden_io.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <span>

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

const char* Bool(bool b) { return b ? "true" : "false"; }

}  // namespace

std::string Hex(std::span<const uint8_t> bytes) {
  std::string out;
  char buf[3];
  for (uint8_t b : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    out += buf;
  }
  return out;
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

// Integers are plain JSON numbers (the checker reads them with Python's
// unbounded ints).
std::string RoceJson(const GoldenFrame& g, const std::string& extra) {
  char buf[512];
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
      "\"header_len\": %u, \"payload_len\": %zu",
      g.name.c_str(), g.frame.size(), MacString(h.path.src_mac).c_str(),
      MacString(h.path.dst_mac).c_str(), Ipv4String(h.path.src_ip).c_str(),
      Ipv4String(h.path.dst_ip).c_str(), h.path.dscp_ecn, h.path.ttl,
      h.path.udp_src_port, static_cast<unsigned>(op), OpcodeName(op),
      Bool(h.bth.solicited), Bool(h.bth.mig_req), h.bth.pad_count, h.bth.pkey,
      Bool(h.bth.fecn), Bool(h.bth.becn), h.bth.dest_qp.value(),
      Bool(h.bth.ack_req), h.bth.psn.value(), InfoOf(op).header_len,
      g.payload.size());
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
  if (HasDeth(op)) {
    std::snprintf(buf, sizeof(buf),
                  ", \"deth\": {\"qkey\": %u, \"src_qp\": %u}", h.deth.qkey,
                  h.deth.src_qp.value());
    out += buf;
  } else {
    out += ", \"deth\": null";
  }
  if (HasAtomicEth(op)) {
    std::snprintf(buf, sizeof(buf),
                  ", \"atomic_eth\": {\"va\": %" PRIu64
                  ", \"rkey\": %u, \"swap_add\": %" PRIu64
                  ", \"compare\": %" PRIu64 "}",
                  h.atomic_eth.va, h.atomic_eth.rkey.value(),
                  h.atomic_eth.swap_add, h.atomic_eth.compare);
    out += buf;
  } else {
    out += ", \"atomic_eth\": null";
  }
  if (HasAtomicAckEth(op)) {
    std::snprintf(buf, sizeof(buf),
                  ", \"atomic_ack_eth\": {\"orig_data\": %" PRIu64 "}",
                  h.atomic_ack_eth.orig_data);
    out += buf;
  } else {
    out += ", \"atomic_ack_eth\": null";
  }
  if (HasIeth(op)) {
    std::snprintf(buf, sizeof(buf), ", \"ieth\": {\"rkey\": %u}",
                  h.ieth.rkey.value());
    out += buf;
  } else {
    out += ", \"ieth\": null";
  }
  if (HasImm(op)) {
    uint8_t imm[4];
    std::memcpy(imm, &h.imm, 4);
    out += ", \"imm_hex\": \"" + Hex({imm, imm + 4}) + "\"";
  } else {
    out += ", \"imm_hex\": null";
  }
  out += std::string(", \"other_peers\": ") + Bool(g.other_peers);
  out += ", \"payload_hex\": \"" + Hex(g.payload) + "\"" + extra + "}";
  return out;
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
    std::fprintf(stderr, "cannot open %s: %s\n", path, std::strerror(errno));
    return false;
  }
  const bool ok = std::fwrite(data, 1, len, f) == len;
  return std::fclose(f) == 0 && ok;
}

}  // namespace rdmaplane::wire
