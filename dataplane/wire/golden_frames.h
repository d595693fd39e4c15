// A fixed set of RoCEv2 frames, one or more per RC opcode with extension
// headers and some of UC and UD, built with the codec in roce.h, plus the
// CM messages (cm.h) of rdmaplane's native connections and of the RDMA IP
// CM Service, and an ARP request and reply (arp.h). The
// golden-packet test feeds them to independent decoders (scapy, tshark); the
// fuzz test and benchmarks use the RoCE frames as seeds and inputs.
//
// Test-only. Thread-safe (pure functions).
#ifndef RDMAPLANE_DATAPLANE_WIRE_GOLDEN_FRAMES_H_
#define RDMAPLANE_DATAPLANE_WIRE_GOLDEN_FRAMES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/wire/arp.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {

struct GoldenFrame {
  std::string name;              // short description, unique in the set
  PacketHeaders headers;         // what was encoded (bth.pad_count filled in)
  std::vector<uint8_t> payload;  // without pad
  std::vector<uint8_t> frame;    // the encoded frame, exactly sized
  // Exchanged by two peers that serve every opcode (hardware RoCE NICs, say),
  // not by rdmaplane's queue pairs: the golden check expects no refusal of
  // the opcodes rdmaplane does not serve.
  bool other_peers = false;
};

// The frames of a short RC conversation between two QPs: a three-packet
// WRITE across the PSN wrap (its middle packet ECN-marked, with FECN/BECN and
// a lower TTL), single-packet WRITEs of 63, 4096 and 0 bytes, the requests
// of a three-packet READ and of a single-packet READ, the ACK of the writes
// and the READ responses; a WRITE after a lost PSN with its sequence NAK,
// the WRITE resent and acknowledged, the small READ again and its replayed
// response (a higher MSN); a FLUSH (which rdmaplane does not serve) with
// the NAK "invalid request" it gets, a WRITE to an unknown key with its NAK
// "remote access error", and a WRITE of another partition. Then, between
// other peers (GoldenFrame::other_peers) and their own queue pairs, opcodes
// with every extension header filled in: a COMPARE SWAP and a FETCH ADD with
// their ATOMIC ACKNOWLEDGEs, a SEND ONLY and a two-packet SEND ending with
// invalidation with their ACKs, a UC RDMA WRITE ONLY and UC SEND ONLY with
// immediate data, and a UD SEND ONLY with and without immediate data. Payload
// sizes give every pad count (0..3). Deterministic.
std::vector<GoldenFrame> MakeGoldenFrames();

struct GoldenCmFrame {
  std::string name;
  Path path;
  CmMessage message;           // what was encoded
  std::vector<uint8_t> frame;  // kCmFrameLen bytes
  // A message of the RDMA IP CM Service (MakeGoldenIpCmFrames), not of
  // rdmaplane's native connections.
  bool ip_cm_service = false;
  // A REQ or SIDR REQ of the IP CM Service: what its IP CM header says and
  // the consumer's private data after the header, as given to
  // SetIpCmPrivateData.
  std::optional<IpCmHeader> ip_cm;
  std::vector<uint8_t> consumer_private_data;
  // A native REQ: the service it names.
  std::string service_name;
};

// The CM exchange that would set up and tear down the connection of
// MakeGoldenFrames, as rdmaplane's native connections speak the IP CM
// Service (REQ to kNativeServiceId with the IP CM header and a service
// name, MRA, REP with the passive side's MTU, RTU, DREQ, DREP) and a REJ of
// a second REQ for an unknown service with a name longer than a REQ
// carries whole. Deterministic.
std::vector<GoldenCmFrame> MakeGoldenCmFrames();

// The RDMA IP CM Service (IBA Annex A11) as Linux's rdma_cm speaks it over
// RoCE and control/ip_cm.cc sends it: an rdma_cm connection to port 7471
// (RDMA_PS_TCP) set up and torn down (REQ with the IP CM header and the
// consumer's private data, MRA, REP, RTU, DREQ, DREP); a REQ to a port
// nobody listens on, rejected with reason 8 (invalid service id); a REQ the
// listening application rejects (reason 28, with its private data); and
// the SIDR REQ and SIDR REP that resolve an RDMA_PS_UDP port. Consumer
// private data are ASCII text naming their message. Deterministic.
std::vector<GoldenCmFrame> MakeGoldenIpCmFrames();

struct GoldenArpFrame {
  std::string name;
  ArpMessage message;
  std::vector<uint8_t> frame;  // kArpFrameLen bytes
};

// The requester asking for the responder's MAC address, and the answer.
std::vector<GoldenArpFrame> MakeGoldenArpFrames();

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_GOLDEN_FRAMES_H_
