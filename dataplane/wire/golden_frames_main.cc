// Writes the golden frames (golden_frames.h) as a classic pcap file for
// decoders such as tshark and scapy, plus a JSON file with the field values
// each frame was built from, so a checker can compare what they decode. The
// RoCE frames (RC, UC, UD) come first, then the CM frames (rdmaplane's
// native ones, then the RDMA IP CM Service's: "service" says which), then
// ARP; each JSON object says which with "kind" ("roce", "cm" or "arp"). See
// golden_io.h.
//
// Usage: golden_frames OUT.pcap OUT.json
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/wire/arp.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/golden_frames.h"
#include "dataplane/wire/golden_io.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

// One JSON object per frame, in pcap order.
void AppendRoceJson(const std::vector<GoldenFrame>& frames,
                    std::vector<std::string>* objects) {
  for (const GoldenFrame& g : frames) objects->push_back(RoceJson(g));
}

void AppendCmJson(const std::vector<GoldenCmFrame>& frames,
                  std::vector<std::string>* objects) {
  char buf[1024];
  for (const GoldenCmFrame& g : frames) {
    const Path& p = g.path;
    const CmMessage& m = g.message;
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
        g.service_name.c_str());
    // Private data as it goes on the wire: the whole field, zero-filled.
    std::vector<uint8_t> private_data(CmPrivateDataCapacity(m.type), 0);
    std::copy_n(m.private_data.begin(), m.private_data_len,
                private_data.begin());
    char more[512];
    std::snprintf(more, sizeof(more),
                  ", \"remote_cm_response_timeout\": %u, "
                  "\"local_cm_response_timeout\": %u, \"max_cm_retries\": %u, "
                  "\"retry_count\": %u, \"rnr_retry_count\": %u, "
                  "\"packet_rate\": %u",
                  m.remote_cm_response_timeout, m.local_cm_response_timeout,
                  m.max_cm_retries, m.retry_count, m.rnr_retry_count,
                  m.packet_rate);
    std::string object = std::string(buf) + more;
    std::snprintf(more, sizeof(more),
                  ", \"service\": \"%s\", \"srq\": %d, "
                  "\"flow_control\": %d",
                  g.ip_cm_service ? "ip_cm" : "native", m.srq ? 1 : 0,
                  m.flow_control ? 1 : 0);
    object += more;
    // What SIDR carries instead of communication ids (IBA tables 114, 115):
    // the request id (in local_comm_id) and the partition (always the
    // default one); a SIDR REP the status, the QPN and the Q_Key.
    if (m.type == CmType::kSidrReq) {
      std::snprintf(more, sizeof(more),
                    ", \"sidr\": {\"request_id\": %u, \"pkey\": %u, "
                    "\"service_id\": %" PRIu64 "}",
                    m.local_comm_id, kDefaultPkey, m.service_id);
      object += more;
    } else if (m.type == CmType::kSidrRep) {
      std::snprintf(more, sizeof(more),
                    ", \"sidr\": {\"request_id\": %u, \"status\": %u, "
                    "\"qpn\": %u, \"service_id\": %" PRIu64 ", \"qkey\": %u}",
                    m.local_comm_id, m.sidr_status, m.qpn.value(), m.service_id,
                    m.qkey);
      object += more;
    }
    // The IP CM header as the frame was built (IPv4, the codec's version)
    // and the consumer's private data after it.
    if (g.ip_cm.has_value()) {
      std::snprintf(more, sizeof(more),
                    ", \"ip_cm\": {\"major_version\": %u, "
                    "\"minor_version\": %u, \"ip_version\": %u, "
                    "\"src_port\": %u, \"src_ip\": \"%s\", "
                    "\"dst_ip\": \"%s\", \"consumer_private_data_hex\": \"",
                    kIpCmMajorVersion, kIpCmMinorVersion, kIpCmIpv4,
                    g.ip_cm->src_port, Ipv4String(g.ip_cm->src_ip).c_str(),
                    Ipv4String(g.ip_cm->dst_ip).c_str());
      object += more + Hex(g.consumer_private_data) + "\"}";
    }
    objects->push_back(object + ", \"private_data_hex\": \"" +
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

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT.pcap OUT.json\n", argv[0]);
    return 2;
  }
  const std::vector<GoldenFrame> frames = MakeGoldenFrames();
  std::vector<GoldenCmFrame> cm_frames = MakeGoldenCmFrames();
  for (GoldenCmFrame& g : MakeGoldenIpCmFrames()) {
    cm_frames.push_back(std::move(g));
  }
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
