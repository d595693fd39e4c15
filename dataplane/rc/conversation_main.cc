// Captures what two RC queue pairs really send each other over the
// simulated link, for decoders written by others (golden_check.py runs
// scapy and tshark over it and checks the rules of the conversation: READ
// requests ask for an ACK, the MSNs each side sends never go back, read
// responses come FIRST, MIDDLE..., LAST or ONLY from a PSN that was asked
// for, a refused request gets its NAK).
//
// The conversation: A writes 600 bytes and reads 1000 from B at a 256-byte
// MTU; B's last READ response is lost once, and A writes twice more after
// B began to answer the READ, so that B's replay comes after it completed
// those writes. A SEND with Invalidate of two packets follows, whose key B
// invalidates. Then, from A's address, a WRITE of another partition (B
// drops it) and a FLUSH (which rdmaplane does not serve), which B refuses
// with NAK "invalid request" before its QP enters the error state.
//
// Usage: conversation_frames OUT.pcap OUT.json (the format of
// dataplane/wire/golden_frames_main.cc, with "from": "a", "b" or "test" in
// each object).
#include <cstdio>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"
#include "dataplane/wire/golden_frames.h"
#include "dataplane/wire/golden_io.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::rc {
namespace {

using testing::Fixture;
using wire::Opcode;

constexpr uint64_t kSecond = 1'000'000'000;

struct Captured {
  std::vector<uint8_t> frame;
  std::string from;
};

// What the codec parsed, in the form golden_io writes.
bool ToGolden(const Captured& c, size_t index, wire::GoldenFrame* g) {
  wire::ParsedPacket pkt;
  if (wire::ParseFrame(c.frame, &pkt) != wire::ParseError::kOk) return false;
  g->name = std::to_string(index) + "_" + c.from + "_" +
            wire::OpcodeName(pkt.bth.opcode);
  g->headers.path.src_mac = pkt.src_mac;
  g->headers.path.dst_mac = pkt.dst_mac;
  g->headers.path.src_ip = pkt.src_ip;
  g->headers.path.dst_ip = pkt.dst_ip;
  g->headers.path.udp_src_port = pkt.udp_src_port;
  g->headers.path.dscp_ecn = c.frame[wire::kEthHeaderLen + 1];
  g->headers.path.ttl = c.frame[wire::kEthHeaderLen + 8];
  g->headers.bth = pkt.bth;
  g->headers.reth = pkt.reth;
  g->headers.aeth = pkt.aeth;
  g->headers.ieth = pkt.ieth;
  g->payload.assign(pkt.payload.begin(), pkt.payload.end());
  g->frame = c.frame;
  return true;
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT.pcap OUT.json\n", argv[0]);
    return 2;
  }
  Fixture f;
  std::vector<Captured> capture;
  f.pair.a_to_b.tap = [&capture](std::span<const uint8_t> frame) {
    capture.push_back({{frame.begin(), frame.end()}, "a"});
  };
  f.pair.b_to_a.tap = [&capture](std::span<const uint8_t> frame) {
    capture.push_back({{frame.begin(), frame.end()}, "b"});
  };
  bool lost = false;
  f.pair.b_to_a.drop = [&lost](std::span<const uint8_t> frame) {
    if (!lost &&
        testing::Decode(frame).bth.opcode == Opcode::kReadResponseLast) {
      return lost = true;
    }
    return false;
  };
  std::vector<uint8_t> src = testing::Pattern(600, 1);
  std::vector<uint8_t> dst(1000);
  uint8_t byte = 7;
  if (f.pair.a.qp->Post(Fixture::Write(1, src.data(), 600, 0)) !=
          PostResult::kOk ||
      f.pair.a.qp->Post(Fixture::Read(2, dst.data(), 1000, 4096)) !=
          PostResult::kOk) {
    return 1;
  }
  const auto answered = [&capture] {
    for (const Captured& c : capture) {
      if (c.from == "b" &&
          testing::Decode(c.frame).bth.opcode == Opcode::kReadResponseFirst) {
        return true;
      }
    }
    return false;
  };
  if (!f.pair.RunUntil(answered, kSecond)) return 1;
  for (int i = 0; i < 2; ++i) {
    if (f.pair.a.qp->Post(Fixture::Write(3 + i, &byte, 1, 8192 + i)) !=
        PostResult::kOk) {
      return 1;
    }
  }
  if (!f.pair.RunUntilIdle(kSecond) || f.pair.a.cq.completions.size() != 4 ||
      !lost) {
    std::fprintf(stderr, "conversation_frames: the transfers did not finish\n");
    return 1;
  }
  for (const Completion& c : f.pair.a.cq.completions) {
    if (c.status != WcStatus::kSuccess) return 1;
  }
  const wire::Rkey window(0x3003);
  f.pair.b.memory.AllowInvalidate(f.pair.b.qp->config().local_qpn, window);
  std::vector<uint8_t> received(512);
  WorkRequest recv = testing::Recv(10, received.data(), received.size());
  WorkRequest send = testing::Send(5, src.data(), 300, kWrInvalidate);
  send.invalidate_rkey = window;
  if (f.pair.b.qp->PostRecv(recv) != PostResult::kOk ||
      f.pair.a.qp->Post(send) != PostResult::kOk ||
      !f.pair.RunUntilIdle(kSecond) || f.pair.b.cq.receives.size() != 1 ||
      !f.pair.b.cq.receives[0].invalidated ||
      f.pair.b.memory.invalidations() != 1) {
    std::fprintf(stderr, "conversation_frames: no SEND with Invalidate\n");
    return 1;
  }

  // Requests B must refuse, sent from A's address straight to B at its
  // expected PSN: one past the last PSN A used.
  const QpConfig& bc = f.pair.b.qp->config();
  wire::Psn next = bc.recv_psn;
  for (const Captured& c : capture) {
    if (c.from != "a") continue;
    const wire::ParsedPacket pkt = testing::Decode(c.frame);
    const uint32_t psns = pkt.bth.opcode == Opcode::kReadRequest
                              ? (pkt.reth.dma_length + bc.pmtu - 1) / bc.pmtu
                              : 1;
    if (pkt.bth.psn + psns > next) next = pkt.bth.psn + psns;
  }
  for (auto [op, pkey, payload] :
       {std::tuple{Opcode::kWriteOnly, uint16_t{0x8001}, 4u},
        std::tuple{Opcode::kFlush, wire::kDefaultPkey, 0u}}) {
    wire::PacketHeaders h;
    h.path = f.pair.a.qp->config().path;
    h.bth.opcode = op;
    h.bth.pkey = pkey;
    h.bth.dest_qp = bc.local_qpn;
    h.bth.psn = next;
    h.bth.ack_req = true;
    h.reth = {testing::kRemoteVa, testing::kKeyOnB, payload};
    const std::vector<uint8_t> body = testing::Pattern(payload, 9);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload));
    frame.resize(wire::EncodeFrame(h, body, frame));
    capture.push_back({frame, "test"});
    f.pair.b.qp->HandleFrame(testing::Decode(frame));
    f.pair.Step();
    f.pair.Step();
  }
  if (f.pair.b.qp->state() != QpState::kError ||
      f.pair.b.qp->stats().pkey_violations != 1) {
    std::fprintf(stderr, "conversation_frames: B did not refuse\n");
    return 1;
  }

  std::vector<std::vector<uint8_t>> frames;
  std::vector<std::string> objects;
  for (size_t i = 0; i < capture.size(); ++i) {
    wire::GoldenFrame g;
    if (!ToGolden(capture[i], i + 1, &g)) {
      std::fprintf(stderr, "conversation_frames: frame %zu does not parse\n",
                   i + 1);
      return 1;
    }
    frames.push_back(g.frame);
    objects.push_back(
        wire::RoceJson(g, ", \"from\": \"" + capture[i].from + "\""));
  }
  const std::vector<uint8_t> pcap = wire::Pcap(frames);
  const std::string json = wire::JsonArray(objects);
  if (!wire::WriteFile(argv[1], pcap.data(), pcap.size()) ||
      !wire::WriteFile(argv[2], json.data(), json.size())) {
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmaplane::rc

int main(int argc, char** argv) { return rdmaplane::rc::Main(argc, argv); }
