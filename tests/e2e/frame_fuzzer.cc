// frame_fuzzer: a hostile peer on a daemon's data port. It joins the link as
// the memif client of one rdmaplaned (the memif server) and
//   1. asks for the daemon's MAC with ARP and expects the reply;
//   2. sends a well-formed CM REQ for a service nobody listens on and
//      expects a REJ with reason "invalid service id" naming its comm id;
//   3. sends --frames fuzzed frames: ARP, CM REQ/MRA/REJ/REP/RTU/DREQ/DREP
//      and RC WRITE/READ/ACK frames built with the wire codecs, sent as they
//      are or mutated (bit flips, byte runs, truncation, trailing bytes,
//      wrong ICRC, wrong lengths, header fields changed with checksum and
//      ICRC made right again so that deeper parsers see them), random bytes,
//      frames for random queue pairs;
//   4. checks that the daemon still answers ARP and still rejects a fresh
//      REQ.
// Everything the daemon sends back is received and counted throughout.
// --rate spreads the fuzzed frames over time (so that a test can use the
// daemon meanwhile); --linger_ms keeps the link up after the last check.
//
//   frame_fuzzer --memif=/tmp/x/memif.sock --file_prefix=fuzz --seed=7
//       --ip=10.0.0.2 --daemon_ip=10.0.0.1 --frames=20000
//
// The seed is printed first; the same seed sends the same frames. The last
// line is "frame_fuzzer: ok ..." (exit status 0) or "frame_fuzzer: FAILED
// ..." (exit status 1); 2 is bad usage or no DPDK port.
#include <arpa/inet.h>
#include <rte_ethdev.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"
#include "dataplane/wire/arp.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

ABSL_FLAG(std::string, memif, "",
          "socket name of the daemon's memif server (its --port socket=)");
ABSL_FLAG(std::string, file_prefix, "",
          "DPDK runtime folder name (other than the daemon's)");
ABSL_FLAG(std::string, ip, "10.0.0.2", "this peer's IPv4 address");
ABSL_FLAG(std::string, daemon_ip, "10.0.0.1", "the daemon's --ip");
ABSL_FLAG(uint32_t, frames, 20000, "fuzzed frames to send");
ABSL_FLAG(uint64_t, seed, 0, "random seed; 0: from the clock");
ABSL_FLAG(int32_t, link_timeout_s, 15, "bound on the memif link coming up");
ABSL_FLAG(uint32_t, rate, 0, "fuzzed frames per second; 0: as fast as it goes");
ABSL_FLAG(int32_t, linger_ms, 0,
          "keep the link up (receiving) this long before leaving it");

namespace {

// Frames the fuzzer queues before it makes the port send them.
constexpr uint32_t kBurst = 32;

namespace wire = rdmaplane::wire;
using rdmaplane::port::EthPort;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

bool ParseIp(const std::string& text, uint32_t* out) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// What came back from the daemon, by kind.
struct Received {
  uint64_t frames = 0;
  uint64_t arp_replies = 0;
  uint64_t cm[8] = {};  // by CmType - 0x10
  uint64_t cm_unparsed = 0;
  uint64_t roce = 0;
  uint64_t other = 0;
};

class Fuzzer {
 public:
  Fuzzer(EthPort* port, uint32_t my_ip, uint32_t daemon_ip, uint64_t seed)
      : port_(port), my_ip_(my_ip), daemon_ip_(daemon_ip), rng_(seed) {}

  // Steps 1 and 2 (and 4). Each returns an empty string or what failed.
  std::string ResolveDaemon();
  std::string ExpectRejectForUnknownService(const std::string& label);
  // A REQ as daemons sent them before the native connections spoke the IP
  // CM Service (service id 0x02 and the name's hash, the name's length and
  // the name as private data) gets a REJ that says to upgrade.
  std::string ExpectRejectForOldFormat();
  // Sends `req` until the daemon's REJ for it comes; its reason and words.
  std::string AwaitReject(wire::CmMessage* req, uint16_t* reason,
                          std::string* text);
  // Step 3.
  std::string Fuzz(uint32_t frames, uint32_t rate);
  std::string Summary() const;
  // Receives (and counts) whatever the daemon sent.
  void Poll() { Drain(); }

 private:
  // Receives whatever is there; `want`, if set, sees each frame and returns
  // true when it was the one awaited.
  bool Drain(const std::function<bool(std::span<const uint8_t>)>& want = {});
  // Waits up to `ns` for a frame `want` accepts.
  bool Await(uint64_t ns,
             const std::function<bool(std::span<const uint8_t>)>& want);
  // Sends one frame; while the daemon's ring is full, receives and retries
  // for at most 5 s (a daemon that stops receiving fails the run).
  bool Send(std::span<const uint8_t> frame);

  uint32_t Rand(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  bool Chance(uint32_t percent) { return Rand(100) < percent; }
  void RandomBytes(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng_());
  }
  wire::Path PathToDaemon();
  // A valid frame of a random kind; `kind` names it.
  size_t Template(std::span<uint8_t> out, const char** kind);
  size_t CmTemplate(std::span<uint8_t> out);
  size_t RcTemplate(std::span<uint8_t> out);
  // Recomputes the IPv4 header checksum and the ICRC of a RoCE-shaped
  // frame when its IP length fits in `len`.
  void Refinish(std::span<uint8_t> frame, size_t len);

  EthPort* port_;
  uint32_t my_ip_;
  uint32_t daemon_ip_;
  wire::MacAddr daemon_mac_;
  std::mt19937_64 rng_;
  Received received_;
  uint64_t sent_ = 0;
  uint64_t by_mutation_[10] = {};
  uint64_t by_kind_[4] = {};  // arp, cm, rc, raw
  uint32_t next_comm_id_ = 0x5A000000;
};

bool Fuzzer::Drain(const std::function<bool(std::span<const uint8_t>)>& want) {
  bool found = false;
  for (int turn = 0; turn < 64; ++turn) {
    const uint16_t n = port_->Receive([&](std::span<const uint8_t> f) {
      ++received_.frames;
      switch (wire::ClassifyFrame(f)) {
        case wire::FrameKind::kArp: {
          wire::ArpMessage m;
          if (wire::ParseArp(f, &m) && m.op == wire::kArpOpReply) {
            ++received_.arp_replies;
          }
          break;
        }
        case wire::FrameKind::kCm: {
          wire::CmMessage m;
          if (wire::ParseCmFrame(f, &m, nullptr)) {
            ++received_.cm[(static_cast<uint16_t>(m.type) - 0x10) & 7];
          } else {
            ++received_.cm_unparsed;
          }
          break;
        }
        case wire::FrameKind::kRoce:
          ++received_.roce;
          break;
        case wire::FrameKind::kOther:
          ++received_.other;
          break;
      }
      if (want && !found && want(f)) found = true;
    });
    if (n == 0) break;
  }
  port_->Flush();
  return found;
}

bool Fuzzer::Await(uint64_t ns,
                   const std::function<bool(std::span<const uint8_t>)>& want) {
  const uint64_t deadline = NowNs() + ns;
  while (NowNs() < deadline) {
    if (Drain(want)) return true;
    struct timespec pause = {0, 200'000};
    nanosleep(&pause, nullptr);
  }
  return false;
}

bool Fuzzer::Send(std::span<const uint8_t> frame) {
  const uint64_t deadline = NowNs() + 5'000'000'000ull;
  while (!port_->Send(frame)) {
    if (NowNs() > deadline) return false;
    Drain();
    port_->Flush();
  }
  ++sent_;
  if (port_->tx_pending() >= kBurst / 2) port_->Flush();
  return true;
}

wire::Path Fuzzer::PathToDaemon() {
  wire::Path p;
  p.src_mac = port_->mac();
  p.dst_mac = daemon_mac_;
  p.src_ip = my_ip_;
  p.dst_ip = daemon_ip_;
  p.udp_src_port = static_cast<uint16_t>(0xC000 | Rand(0x4000));
  return p;
}

std::string Fuzzer::ResolveDaemon() {
  wire::ArpMessage req{};
  req.op = wire::kArpOpRequest;
  req.sender_mac = port_->mac();
  req.sender_ip = my_ip_;
  req.target_ip = daemon_ip_;
  uint8_t frame[wire::kArpFrameLen];
  const size_t n = wire::EncodeArp(req, frame);
  for (int attempt = 0; attempt < 10; ++attempt) {
    if (!Send({frame, n})) return "the daemon takes no frames";
    port_->Flush();
    wire::MacAddr mac;
    const bool got = Await(300'000'000, [&](std::span<const uint8_t> f) {
      wire::ArpMessage m;
      if (!wire::ParseArp(f, &m) || m.op != wire::kArpOpReply ||
          m.sender_ip != daemon_ip_ || m.target_ip != my_ip_ ||
          m.target_mac != port_->mac()) {
        return false;
      }
      mac = m.sender_mac;
      return true;
    });
    if (got) {
      daemon_mac_ = mac;
      return "";
    }
  }
  return "no ARP reply from the daemon after 10 requests";
}

std::string Fuzzer::AwaitReject(wire::CmMessage* req, uint16_t* reason,
                                std::string* text) {
  const uint32_t comm_id = next_comm_id_++;
  req->type = wire::CmType::kReq;
  req->local_comm_id = comm_id;
  req->transaction_id = uint64_t{comm_id} << 32 | 1;
  req->qpn = wire::Qpn(0x1000 + Rand(0x1000));
  req->start_psn = wire::Psn(Rand(1u << 24));
  req->path_mtu = wire::kIbMtu1024;
  req->responder_resources = 16;
  req->initiator_depth = 16;
  req->local_ip = my_ip_;
  req->remote_ip = daemon_ip_;
  std::array<uint8_t, wire::kCmFrameLen> frame;
  const size_t n = wire::EncodeCmFrame(PathToDaemon(), *req, frame);
  if (n == 0) return "cannot encode the REQ";
  bool answered = false;
  for (int attempt = 0; attempt < 10 && !answered; ++attempt) {
    if (!Send({frame.data(), n})) return "the daemon takes no frames";
    port_->Flush();
    answered = Await(300'000'000, [&](std::span<const uint8_t> f) {
      wire::CmMessage m;
      if (!wire::ParseCmFrame(f, &m, nullptr) ||
          m.type != wire::CmType::kRej || m.remote_comm_id != comm_id) {
        return false;
      }
      *reason = m.reject_reason;
      text->clear();
      for (size_t i = 0; i < wire::CmPrivateDataCapacity(m.type) &&
                         m.private_data[i] != 0;
           ++i) {
        text->push_back(static_cast<char>(m.private_data[i]));
      }
      return true;
    });
  }
  if (!answered) return "no REJ for the REQ after 10 tries";
  return "";
}

std::string Fuzzer::ExpectRejectForUnknownService(const std::string& label) {
  wire::CmMessage req{};
  req.type = wire::CmType::kReq;
  const std::string service = "fuzz-nobody-" + label;
  wire::SetNativeRequest(service,
                         {.src_port = 0, .src_ip = my_ip_, .dst_ip = daemon_ip_},
                         &req);
  uint16_t reason = 0;
  std::string text;
  if (std::string e = AwaitReject(&req, &reason, &text); !e.empty()) {
    return e + " (to an unknown service)";
  }
  std::printf("frame_fuzzer: %s: REJ reason %u: %s\n", label.c_str(), reason,
              text.c_str());
  if (reason != wire::kRejInvalidServiceId) {
    return absl::StrCat("REJ reason ", reason, ", expected ",
                        wire::kRejInvalidServiceId, " (invalid service id)");
  }
  if (text.find(service) == std::string::npos) {
    return "the REJ does not name the service: " + text;
  }
  return "";
}

std::string Fuzzer::ExpectRejectForOldFormat() {
  wire::CmMessage req{};
  const std::string service = "fuzz-old";
  uint64_t hash = wire::NativeServiceHash(service);
  req.service_id = 0x0200000000000000 | (hash & 0x00FFFFFFFFFEFFFF);
  req.private_data[0] = static_cast<uint8_t>(service.size());
  std::memcpy(req.private_data.data() + 1, service.data(), service.size());
  req.private_data_len = static_cast<uint8_t>(1 + service.size());
  uint16_t reason = 0;
  std::string text;
  if (std::string e = AwaitReject(&req, &reason, &text); !e.empty()) {
    return e + " (of the old format)";
  }
  std::printf("frame_fuzzer: old format: REJ reason %u: %s\n", reason,
              text.c_str());
  if (reason != wire::kRejInvalidServiceId ||
      text != "peer rdmaplaned is newer: upgrade this one") {
    return absl::StrCat("an old-format REQ got REJ reason ", reason, ": ",
                        text);
  }
  return "";
}

size_t Fuzzer::CmTemplate(std::span<uint8_t> out) {
  static constexpr wire::CmType kTypes[] = {
      wire::CmType::kReq, wire::CmType::kMra,  wire::CmType::kRej,
      wire::CmType::kRep, wire::CmType::kRtu,  wire::CmType::kDreq,
      wire::CmType::kDrep};
  wire::CmMessage m{};
  m.type = kTypes[Rand(7)];
  m.transaction_id = rng_();
  // Mostly small comm ids: the daemon numbers its own from 1.
  m.local_comm_id = Chance(50) ? Rand(16) : static_cast<uint32_t>(rng_());
  m.remote_comm_id = Chance(50) ? Rand(16) : static_cast<uint32_t>(rng_());
  m.qpn = wire::Qpn(Chance(50) ? Rand(64) : Rand(1u << 24));
  m.start_psn = wire::Psn(Rand(1u << 24));
  m.path_mtu = static_cast<uint8_t>(1 + Rand(5));
  m.responder_resources = static_cast<uint8_t>(rng_());
  m.initiator_depth = static_cast<uint8_t>(rng_());
  m.local_ack_timeout = static_cast<uint8_t>(Rand(32));
  m.target_ack_delay = static_cast<uint8_t>(Rand(32));
  m.local_ip = Chance(80) ? my_ip_ : static_cast<uint32_t>(rng_());
  m.remote_ip = Chance(80) ? daemon_ip_ : static_cast<uint32_t>(rng_());
  m.reject_reason = static_cast<uint16_t>(Rand(40));
  m.refers_to = static_cast<wire::CmRefersTo>(Rand(3));
  m.service_timeout = static_cast<uint8_t>(Rand(32));
  if (m.type == wire::CmType::kReq && Chance(70)) {
    static constexpr const char* kNames[] = {"transfer", "transfer-0", "kill",
                                             "fuzz", "x"};
    std::string name = Chance(50) ? std::string(kNames[Rand(5)])
                                  : absl::StrCat("svc", Rand(1000));
    wire::SetNativeRequest(
        name, {.src_port = 0, .src_ip = m.local_ip, .dst_ip = m.remote_ip},
        &m);
  } else {
    const size_t cap = wire::CmPrivateDataCapacity(m.type);
    m.private_data_len = static_cast<uint8_t>(Rand(static_cast<uint32_t>(cap) + 1));
    RandomBytes(m.private_data.data(), m.private_data_len);
    if (m.type == wire::CmType::kReq) m.service_id = rng_();
  }
  wire::Path path = PathToDaemon();
  if (Chance(10)) path.dst_ip = static_cast<uint32_t>(rng_());
  if (Chance(10)) path.src_ip = static_cast<uint32_t>(rng_());
  return wire::EncodeCmFrame(path, m, out);
}

size_t Fuzzer::RcTemplate(std::span<uint8_t> out) {
  static constexpr wire::Opcode kOps[] = {
      wire::Opcode::kWriteFirst,         wire::Opcode::kWriteMiddle,
      wire::Opcode::kWriteLast,          wire::Opcode::kWriteOnly,
      wire::Opcode::kReadRequest,        wire::Opcode::kReadResponseFirst,
      wire::Opcode::kReadResponseMiddle, wire::Opcode::kReadResponseLast,
      wire::Opcode::kReadResponseOnly,   wire::Opcode::kAcknowledge};
  wire::PacketHeaders h;
  h.path = PathToDaemon();
  h.bth.opcode = kOps[Rand(10)];
  // Small QPNs are the ones the daemon hands out (2, 4, ...).
  h.bth.dest_qp = wire::Qpn(Chance(50) ? Rand(64) : Rand(1u << 24));
  h.bth.psn = wire::Psn(Rand(1u << 24));
  h.bth.ack_req = Chance(50);
  h.bth.solicited = Chance(10);
  h.path.udp_src_port = wire::UdpSourcePortForQpn(h.bth.dest_qp);
  h.reth.va = rng_();
  h.reth.rkey = wire::Rkey(static_cast<uint32_t>(rng_()));
  h.reth.dma_length = Chance(50) ? Rand(1u << 21) : static_cast<uint32_t>(rng_());
  static constexpr uint8_t kSyndromes[] = {
      wire::kAethAck | wire::kAethCreditsInvalid, wire::kAethRnrNak,
      wire::kAethNakPsnSeqError, wire::kAethNakInvalidRequest,
      wire::kAethNakRemoteAccess, wire::kAethNakRemoteOperational};
  h.aeth.syndrome = Chance(80) ? kSyndromes[Rand(6)] : static_cast<uint8_t>(rng_());
  h.aeth.msn = Rand(1u << 24);
  uint8_t payload[1024];
  size_t len = 0;
  if (wire::CarriesPayload(h.bth.opcode)) {
    len = Chance(30) ? 1024 : Rand(1025);
    RandomBytes(payload, len);
  }
  return wire::EncodeFrame(h, {payload, len}, out);
}

size_t Fuzzer::Template(std::span<uint8_t> out, const char** kind) {
  const uint32_t pick = Rand(100);
  if (pick < 15) {
    wire::ArpMessage m{};
    m.op = Chance(70) ? wire::kArpOpRequest : wire::kArpOpReply;
    RandomBytes(m.sender_mac.bytes.data(), 6);
    m.sender_mac.bytes[0] &= 0xFE;  // unicast, or ParseArp refuses it
    if (Chance(50)) m.sender_mac = port_->mac();
    m.sender_ip = Chance(50) ? my_ip_ : static_cast<uint32_t>(rng_());
    if (m.op == wire::kArpOpReply) m.target_mac = daemon_mac_;
    m.target_ip = Chance(70) ? daemon_ip_ : static_cast<uint32_t>(rng_());
    *kind = "arp";
    ++by_kind_[0];
    return wire::EncodeArp(m, out);
  }
  if (pick < 50) {
    *kind = "cm";
    ++by_kind_[1];
    return CmTemplate(out);
  }
  if (pick < 90) {
    *kind = "rc";
    ++by_kind_[2];
    return RcTemplate(out);
  }
  // Random bytes, behind an Ethernet header to the daemon about half of the
  // time, and behind IPv4/UDP to port 4791 about a quarter of the time.
  *kind = "raw";
  ++by_kind_[3];
  const size_t len = 1 + Rand(static_cast<uint32_t>(out.size()));
  RandomBytes(out.data(), len);
  if (len >= wire::kEthHeaderLen && Chance(50)) {
    std::memcpy(out.data(), daemon_mac_.bytes.data(), 6);
    std::memcpy(out.data() + 6, port_->mac().bytes.data(), 6);
    if (len >= wire::kOuterHeadersLen && Chance(50)) {
      uint8_t* ip = out.data() + wire::kEthHeaderLen;
      Put16(out.data() + 12, wire::kEtherTypeIpv4);
      ip[0] = 0x45;
      ip[9] = 17;
      Put16(ip + wire::kIpv4HeaderLen + 2, wire::kRoceUdpPort);
    }
  }
  return len;
}

void Fuzzer::Refinish(std::span<uint8_t> frame, size_t len) {
  if (len < wire::kOuterHeadersLen + wire::kBthLen + wire::kIcrcLen) return;
  uint8_t* ip = frame.data() + wire::kEthHeaderLen;
  const size_t ip_len = Get16(ip + 2);
  if (ip_len < wire::kIpv4HeaderLen + wire::kUdpHeaderLen + wire::kBthLen +
                   wire::kIcrcLen ||
      wire::kEthHeaderLen + ip_len > len) {
    return;
  }
  Put16(ip + 10, 0);
  Put16(ip + 10, wire::Ipv4HeaderChecksum({ip, wire::kIpv4HeaderLen}));
  wire::FinishFrame(frame.first(len));
}

std::string Fuzzer::Fuzz(uint32_t frames, uint32_t rate) {
  std::vector<uint8_t> buf(port_->max_frame());
  const uint64_t start = NowNs();
  for (uint32_t i = 0; i < frames; ++i) {
    if (rate != 0 && i % kBurst == 0) {
      const uint64_t due = start + uint64_t{i} * 1'000'000'000ull / rate;
      while (NowNs() < due) {
        Drain();
        struct timespec pause = {0, 200'000};
        nanosleep(&pause, nullptr);
      }
    }
    const char* kind = "";
    size_t len = Template(buf, &kind);
    if (len == 0) return absl::StrCat("frame ", i, ": a ", kind,
                                      " template did not encode");
    const uint32_t mutation = std::string_view(kind) == "raw" ? 0 : Rand(10);
    ++by_mutation_[mutation];
    switch (mutation) {
      case 0:  // as built: valid frames with unexpected contents
        break;
      case 1: {  // a few bit flips anywhere
        for (uint32_t k = 1 + Rand(8); k > 0; --k) {
          buf[Rand(static_cast<uint32_t>(len))] ^= static_cast<uint8_t>(1u << Rand(8));
        }
        break;
      }
      case 2: {  // bit flips behind the UDP header, checksums made right
        if (len > wire::kOuterHeadersLen + wire::kIcrcLen) {
          const uint32_t span = static_cast<uint32_t>(
              len - wire::kOuterHeadersLen - wire::kIcrcLen);
          for (uint32_t k = 1 + Rand(4); k > 0; --k) {
            buf[wire::kOuterHeadersLen + Rand(span)] ^=
                static_cast<uint8_t>(1u << Rand(8));
          }
        }
        Refinish(buf, len);
        break;
      }
      case 3:  // truncated
        len = 1 + Rand(static_cast<uint32_t>(len));
        break;
      case 4: {  // random bytes appended
        const size_t extra = Rand(static_cast<uint32_t>(buf.size() - len) + 1);
        RandomBytes(buf.data() + len, extra);
        len += extra;
        break;
      }
      case 5:  // wrong ICRC (or the end of an ARP frame's padding)
        buf[len - 1 - Rand(4)] ^= static_cast<uint8_t>(1 + Rand(255));
        break;
      case 6: {  // IP total length off, header checksum right
        if (len >= wire::kOuterHeadersLen) {
          uint8_t* ip = buf.data() + wire::kEthHeaderLen;
          Put16(ip + 2, static_cast<uint16_t>(Chance(50)
                                                  ? Get16(ip + 2) + Rand(9) - 4
                                                  : Rand(0x10000)));
          Put16(ip + 10, 0);
          Put16(ip + 10, wire::Ipv4HeaderChecksum({ip, wire::kIpv4HeaderLen}));
        }
        break;
      }
      case 7: {  // a run of random bytes in the transport headers or MAD
        const uint32_t at = Rand(static_cast<uint32_t>(len));
        const uint32_t run = std::min<uint32_t>(1 + Rand(16),
                                                static_cast<uint32_t>(len) - at);
        RandomBytes(buf.data() + at, run);
        if (Chance(50)) Refinish(buf, len);
        break;
      }
      case 8: {  // an odd opcode or QPN, checksums made right
        if (len >= wire::kOuterHeadersLen + wire::kBthLen) {
          uint8_t* bth = buf.data() + wire::kOuterHeadersLen;
          if (Chance(50)) {
            bth[0] = static_cast<uint8_t>(rng_());
          } else {
            bth[5] = static_cast<uint8_t>(rng_());
            bth[6] = static_cast<uint8_t>(rng_());
            bth[7] = static_cast<uint8_t>(rng_());
          }
          Refinish(buf, len);
        }
        break;
      }
      case 9:  // another ethertype
        if (len >= wire::kEthHeaderLen) {
          Put16(buf.data() + 12, static_cast<uint16_t>(rng_()));
        }
        break;
    }
    if (!Send({buf.data(), len})) {
      return absl::StrCat("the daemon took no frame for 5 s after ", i,
                          " fuzzed frames");
    }
    if (i % kBurst == 0) Drain();
  }
  port_->Flush();
  return "";
}

std::string Fuzzer::Summary() const {
  return absl::StrCat(
      "sent ", sent_, " frames (arp ", by_kind_[0], ", cm ", by_kind_[1],
      ", rc ", by_kind_[2], ", raw ", by_kind_[3], "; unchanged ",
      by_mutation_[0], ", bit flips ", by_mutation_[1], ", deep flips ",
      by_mutation_[2], ", truncated ", by_mutation_[3], ", extended ",
      by_mutation_[4], ", bad icrc ", by_mutation_[5], ", bad ip length ",
      by_mutation_[6], ", byte runs ", by_mutation_[7], ", opcode/qpn ",
      by_mutation_[8], ", ethertype ", by_mutation_[9], "); received ",
      received_.frames, " (arp replies ", received_.arp_replies, ", MRA ",
      received_.cm[1], ", REJ ", received_.cm[2], ", REP ", received_.cm[3],
      ", RTU ", received_.cm[4], ", DREQ ", received_.cm[5], ", DREP ",
      received_.cm[6], ", unparsed cm ", received_.cm_unparsed, ", roce ",
      received_.roce, ", other ", received_.other, ")");
}

int Run() {
  const std::string memif = absl::GetFlag(FLAGS_memif);
  const std::string prefix = absl::GetFlag(FLAGS_file_prefix);
  uint32_t my_ip = 0, daemon_ip = 0;
  if (memif.empty() || prefix.empty() ||
      !ParseIp(absl::GetFlag(FLAGS_ip), &my_ip) ||
      !ParseIp(absl::GetFlag(FLAGS_daemon_ip), &daemon_ip)) {
    std::fprintf(stderr,
                 "frame_fuzzer: need --memif, --file_prefix, --ip and "
                 "--daemon_ip\n");
    return 2;
  }
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = NowNs() ^ (uint64_t{static_cast<uint32_t>(getpid())} << 32);
  std::printf("frame_fuzzer: seed %llu\n", static_cast<unsigned long long>(seed));
  std::fflush(stdout);

  rdmaplane::port::EalOptions eal;
  eal.file_prefix = prefix;
  eal.memory_mb = 128;
  eal.args.push_back("--vdev=net_memif0,role=client,socket=" + memif);
  if (absl::Status s = rdmaplane::port::InitDpdk(eal); !s.ok()) {
    std::printf("frame_fuzzer: FAILED: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  int status = 1;
  {
    absl::StatusOr<uint16_t> id = rdmaplane::port::FindPort("net_memif0");
    if (!id.ok()) {
      std::printf("frame_fuzzer: FAILED: %s\n",
                  std::string(id.status().message()).c_str());
      rdmaplane::port::ShutdownDpdk();
      return 2;
    }
    rdmaplane::port::PortConfig pc;
    pc.port_id = *id;
    pc.mbufs = 4095;
    pc.rx_interrupts = false;
    pc.max_frame = static_cast<uint32_t>(
        wire::FrameLength(wire::Opcode::kWriteFirst, 1024));
    absl::StatusOr<std::unique_ptr<EthPort>> port = EthPort::Open(pc);
    if (!port.ok()) {
      std::printf("frame_fuzzer: FAILED: port: %s\n",
                  std::string(port.status().message()).c_str());
      rdmaplane::port::ShutdownDpdk();
      return 2;
    }
    std::string error;
    const uint64_t link_deadline =
        NowNs() + uint64_t(absl::GetFlag(FLAGS_link_timeout_s)) * 1'000'000'000ull;
    for (;;) {
      rte_eth_link link{};
      rte_eth_link_get_nowait(*id, &link);
      if (link.link_status == RTE_ETH_LINK_UP) break;
      if (NowNs() > link_deadline) {
        error = "the memif link did not come up";
        break;
      }
      struct timespec pause = {0, 10'000'000};
      nanosleep(&pause, nullptr);
    }
    Fuzzer fuzzer(port->get(), my_ip, daemon_ip, seed);
    const uint32_t frames = absl::GetFlag(FLAGS_frames);
    auto step = [&](const char* what, const std::function<std::string()>& fn) {
      if (!error.empty()) return;
      const uint64_t start = NowNs();
      error = fn();
      std::printf("frame_fuzzer: %s: %s (%.2f s)\n", what,
                  error.empty() ? "ok" : error.c_str(),
                  (NowNs() - start) / 1e9);
      std::fflush(stdout);
    };
    step("ARP before", [&] { return fuzzer.ResolveDaemon(); });
    step("REQ before", [&] { return fuzzer.ExpectRejectForUnknownService("before"); });
    step("old REQ", [&] { return fuzzer.ExpectRejectForOldFormat(); });
    step(absl::StrCat("fuzz ", frames, " frames").c_str(),
         [&] { return fuzzer.Fuzz(frames, absl::GetFlag(FLAGS_rate)); });
    step("ARP after", [&] { return fuzzer.ResolveDaemon(); });
    step("REQ after", [&] { return fuzzer.ExpectRejectForUnknownService("after"); });
    const uint64_t linger_until =
        NowNs() + uint64_t(absl::GetFlag(FLAGS_linger_ms)) * 1'000'000ull;
    while (NowNs() < linger_until) {
      fuzzer.Poll();
      struct timespec pause = {0, 1'000'000};
      nanosleep(&pause, nullptr);
    }
    std::printf("frame_fuzzer: %s\n", fuzzer.Summary().c_str());
    if (error.empty()) {
      std::printf("frame_fuzzer: ok: seed %llu, %u fuzzed frames, the daemon "
                  "answers\n",
                  static_cast<unsigned long long>(seed), frames);
      status = 0;
    } else {
      std::printf("frame_fuzzer: FAILED: seed %llu: %s\n",
                  static_cast<unsigned long long>(seed), error.c_str());
    }
  }
  rdmaplane::port::ShutdownDpdk();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a hostile memif peer of one rdmaplaned: ARP, CM and RC frames, valid "
      "and fuzzed, then checks that the daemon still answers");
  absl::ParseCommandLine(argc, argv);
  const int status = Run();
  std::fflush(stdout);
  return status;
}
