// Fuzz target for an RC queue pair fed frames from the wire: every frame
// that ParseFrame accepts goes to RcQp::HandleFrame, as the engine hands
// it one, and the QP is polled, its clock advanced and work requests posted
// in between, so the responder (writes, reads, sends, duplicates, NAKs)
// and the completer (ACKs, NAKs, read responses against posted requests)
// both see hostile peers. The QP runs as in qp_test.cc, on a simulated
// clock, a frame sink and test memory, without DPDK.
//
// Checked: no access outside the registered regions or the local buffers
// (AddressSanitizer; they are exactly sized heap blocks), every frame the
// QP sends parses, every posted request completes exactly once, once the
// QP is flushed no registration stays pinned, and SENDs with Invalidate
// keep their promises: each key invalidated is reported by exactly one
// successful receive, each refused one by a kInvalidateError receive,
// after which no receive completes (the QP is on its way to the error
// state).
//
// An input is a 6-byte prologue (the peer's first PSN and ours, 24 bits
// each, big-endian) followed by records, each starting with a byte whose low
// three bits say what it is:
//   0  a frame as received: 2-byte big-endian length, then its bytes;
//   1  the same, addressed to this QP (destination QPN and source IP set
//      to what the QP expects, as the engine's demultiplexing would);
//   2  Poll with a budget of (next byte % 64) + 1 frames;
//   3  time passes: the next two bytes in microseconds;
//   4  a work request: opcode, 2 bytes of length, 2 bytes of offset into
//      the peer's region, flags (5 bytes); a SEND with Invalidate names
//      the offset as its R_Key;
//   5  a receive request: 2 bytes of length;
//   6  Flush (the connection is torn down);
//   7  an immediate poll of 1 frame.
// A record cut short ends the input. dataplane/wire/corpus/make_corpus.py
// writes such inputs from the golden frames and from scapy's encoder.
//
// Runs under libFuzzer (--config=fuzz) or, as responder_fuzzer under gcc,
// replaying dataplane/rc/corpus/responder (see dataplane/wire/fuzz.bzl).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "dataplane/rc/interfaces.h"
#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/types.h"
#include "dataplane/wire/fuzz_driver.h"
#include "dataplane/wire/golden_frames.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::rc {
namespace {

// The addressing of the golden conversation (golden_frames.cc), so that
// its requests reach this QP's responder unchanged: this QP is the
// responder, the peer the requester.
constexpr wire::Qpn kLocalQpn(0x000123);
constexpr wire::Qpn kRemoteQpn(0x000011);
constexpr uint32_t kLocalIp = 0x0A000002;
constexpr uint32_t kPeerIp = 0x0A000001;
constexpr uint64_t kWriteVa = 0x00007F3A12340000;
constexpr uint64_t kReadVa = 0x00007F3A56780010;
constexpr wire::Rkey kWriteRkey(0x00012A05);  // read and write
constexpr wire::Rkey kReadRkey(0x80003B07);   // read only
// Keys this QP may invalidate (a SEND with Invalidate): the golden other
// peers' window key, which names no region here, and the write region's.
constexpr wire::Rkey kWindowRkey(0x00045A11);
constexpr uint32_t kWriteRegionBytes = 64 * 1024;
constexpr uint32_t kReadRegionBytes = 16 * 1024;
// The peer's region our own requests address (its responses are fuzzed).
constexpr uint64_t kPeerVa = 0x00007F0000100000;
constexpr wire::Rkey kPeerRkey(0x00001001);
constexpr uint32_t kMaxRequests = 64;

// Takes bytes from the input front to back.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool Take(size_t n, std::span<const uint8_t>* out) {
    if (in_.size() - at_ < n) return false;
    *out = in_.subspan(at_, n);
    at_ += n;
    return true;
  }
  bool Byte(uint8_t* v) {
    std::span<const uint8_t> b;
    if (!Take(1, &b)) return false;
    *v = b[0];
    return true;
  }
  bool Be(size_t n, uint32_t* v) {
    std::span<const uint8_t> b;
    if (!Take(n, &b)) return false;
    *v = 0;
    for (uint8_t x : b) *v = *v << 8 | x;
    return true;
  }

 private:
  std::span<const uint8_t> in_;
  size_t at_ = 0;
};

// Keeps every frame the QP sends long enough to check that it parses.
class CheckingSink : public FrameSink {
 public:
  std::span<uint8_t> Reserve(size_t max_len) override {
    buffer_.resize(max_len);
    return buffer_;
  }
  void Commit(size_t len) override {
    FUZZ_CHECK(len <= buffer_.size());
    wire::ParsedPacket pkt;
    const wire::ParseError verdict =
        wire::ParseFrame(std::span<const uint8_t>(buffer_.data(), len), &pkt);
    if (verdict != wire::ParseError::kOk) {
      std::fprintf(stderr, "the QP sent a frame that does not parse: %s\n",
                   wire::ParseErrorName(verdict));
      std::abort();
    }
    FUZZ_CHECK(pkt.bth.dest_qp == kRemoteQpn);
    ++sent_;
  }
  uint64_t sent() const { return sent_; }

 private:
  std::vector<uint8_t> buffer_;
  uint64_t sent_ = 0;
};

class CountingSink : public CompletionSink {
 public:
  void Complete(const Completion& c) override {
    FUZZ_CHECK(c.wr_id < kMaxRequests);
    FUZZ_CHECK(!done_[c.wr_id]);  // exactly once
    done_[c.wr_id] = true;
    ++completed_;
  }
  void CompleteRecv(const RecvCompletion& c) override {
    FUZZ_CHECK(!ended_);  // nothing after a SEND with Invalidate failed
    FUZZ_CHECK(!c.invalidated || c.status == WcStatus::kSuccess);
    if (c.invalidated) ++invalidated_;
    if (c.status == WcStatus::kInvalidateError) {
      ++invalidate_errors_;
      ended_ = true;
    }
    ++received_;
  }
  uint32_t completed() const { return completed_; }
  uint64_t invalidated() const { return invalidated_; }
  uint64_t invalidate_errors() const { return invalidate_errors_; }

 private:
  bool done_[kMaxRequests] = {};
  uint32_t completed_ = 0;
  uint32_t received_ = 0;
  uint64_t invalidated_ = 0;
  uint64_t invalidate_errors_ = 0;
  bool ended_ = false;
};

QpConfig FuzzConfig(uint32_t recv_psn, uint32_t send_psn) {
  QpConfig c;
  c.local_qpn = kLocalQpn;
  c.remote_qpn = kRemoteQpn;
  c.recv_psn = wire::Psn(recv_psn);
  c.send_psn = wire::Psn(send_psn);
  c.path.src_mac = wire::MacAddr{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
  c.path.dst_mac = wire::MacAddr{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
  c.path.src_ip = kLocalIp;
  c.path.dst_ip = kPeerIp;
  c.path.udp_src_port = wire::UdpSourcePortForQpn(kLocalQpn);
  c.pmtu = 1024;
  c.sq_depth = 16;
  c.rq_depth = 8;
  c.max_inflight_packets = 32;
  c.ack_req_every = 4;
  c.max_rd_atomic = 4;
  c.max_dest_rd_atomic = 4;
  c.retransmit_timeout_ns = 50'000;
  c.retry_count = 3;
  c.rnr_retry = 3;
  return c;
}

void Run(std::span<const uint8_t> input) {
  Reader in(input);
  uint32_t recv_psn = 0;
  uint32_t send_psn = 0;
  if (!in.Be(3, &recv_psn) || !in.Be(3, &send_psn)) return;

  // Exactly sized heap blocks: a byte outside them is an ASan report.
  auto write_region = std::make_unique<uint8_t[]>(kWriteRegionBytes);
  auto read_region = std::make_unique<uint8_t[]>(kReadRegionBytes);
  auto local = std::make_unique<uint8_t[]>(kWriteRegionBytes);
  SimClock clock;
  CheckingSink tx;
  TestMemory memory;
  memory.Add({kLocalQpn, kWriteRkey, kWriteVa, write_region.get(),
              kWriteRegionBytes, true, true});
  memory.Add({kLocalQpn, kReadRkey, kReadVa, read_region.get(),
              kReadRegionBytes, true, false});
  memory.AllowInvalidate(kLocalQpn, kWindowRkey);
  memory.AllowInvalidate(kLocalQpn, kWriteRkey);
  CountingSink cq;
  const QpConfig config = FuzzConfig(recv_psn, send_psn);
  FUZZ_CHECK(RcQp::ValidateConfig(config) == nullptr);
  RcQp qp(config, {&clock, &tx, &memory, &cq});

  uint32_t posted = 0;
  uint64_t recv_id = 0;
  uint8_t kind = 0;
  while (in.Byte(&kind)) {
    switch (kind & 7) {
      case 0:
      case 1: {
        uint32_t len = 0;
        std::span<const uint8_t> frame;
        if (!in.Be(2, &len) || !in.Take(len, &frame)) return;
        wire::ParsedPacket pkt;
        if (wire::ParseFrame(frame, &pkt) != wire::ParseError::kOk) break;
        if ((kind & 7) == 1) {
          pkt.bth.dest_qp = kLocalQpn;
          pkt.src_ip = kPeerIp;
        }
        qp.HandleFrame(pkt);
        break;
      }
      case 2: {
        uint8_t budget = 0;
        if (!in.Byte(&budget)) return;
        qp.Poll(budget % 64 + 1u);
        break;
      }
      case 3: {
        uint32_t us = 0;
        if (!in.Be(2, &us)) return;
        clock.Advance(uint64_t{us} * 1000);
        break;
      }
      case 4: {
        uint8_t op = 0;
        uint8_t flags = 0;
        uint32_t len = 0;
        uint32_t offset = 0;
        if (!in.Byte(&op) || !in.Be(2, &len) || !in.Be(2, &offset) ||
            !in.Byte(&flags)) {
          return;
        }
        if (posted == kMaxRequests) break;
        WorkRequest wr;
        wr.wr_id = posted;
        wr.opcode = static_cast<WrOpcode>(op % 3);
        // Flag bits as they come, unknown ones included: Post refuses those.
        wr.flags = flags & 0x3F;
        wr.num_sge = 1;
        wr.sge[0] = {local.get() + (offset % kWriteRegionBytes),
                     len % (kWriteRegionBytes - offset % kWriteRegionBytes)};
        wr.remote_va = kPeerVa + offset;
        wr.rkey = kPeerRkey;
        wr.imm = offset;
        wr.invalidate_rkey = wire::Rkey(offset);
        if (qp.Post(wr) == PostResult::kOk) ++posted;
        break;
      }
      case 5: {
        uint32_t len = 0;
        if (!in.Be(2, &len)) return;
        WorkRequest wr;
        wr.wr_id = recv_id++;
        wr.num_sge = 1;
        wr.sge[0] = {local.get(), len % kWriteRegionBytes};
        qp.PostRecv(wr);
        break;
      }
      case 6:
        qp.Flush();
        break;
      case 7:
        qp.Poll(1);
        break;
    }
  }
  // Whatever state the peer left it in, tearing down ends every request
  // and lets go of every registration.
  qp.Poll(64);
  qp.Flush();
  qp.Poll(64);
  FUZZ_CHECK(cq.completed() == posted);
  FUZZ_CHECK(memory.pins() == 0);
  FUZZ_CHECK(cq.invalidated() == memory.invalidations());
  FUZZ_CHECK(cq.invalidate_errors() ==
             memory.invalidate_calls() - memory.invalidations());
}

}  // namespace
}  // namespace rdmaplane::rc

namespace rdmaplane::wire {

// For the fuzz_driver's mutation mode: the golden requests to this QP,
// each followed by a poll, and the golden SENDs with Invalidate.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  std::vector<uint8_t> seed = {0, 0, 0, 0, 0, 0};
  bool first = true;
  for (const GoldenFrame& g : MakeGoldenFrames()) {
    if (g.headers.bth.dest_qp != Qpn(0x000123)) continue;
    if (first) {
      const uint32_t psn = g.headers.bth.psn.value();
      seed[0] = static_cast<uint8_t>(psn >> 16);
      seed[1] = static_cast<uint8_t>(psn >> 8);
      seed[2] = static_cast<uint8_t>(psn);
      first = false;
    }
    seed.push_back(0);
    seed.push_back(static_cast<uint8_t>(g.frame.size() >> 8));
    seed.push_back(static_cast<uint8_t>(g.frame.size()));
    seed.insert(seed.end(), g.frame.begin(), g.frame.end());
    seed.push_back(2);
    seed.push_back(8);
  }
  // The golden SENDs with Invalidate of the other peers (PSNs 52 to 54),
  // addressed to this QP with two receives posted: the first names
  // kWindowRkey, which this QP may invalidate; the second begins with a
  // SEND FIRST shorter than this QP's MTU, which it refuses.
  // (dataplane/rc/corpus/responder/scapy-send-invalidate* reach the rest.)
  std::vector<uint8_t> invalidate = {0, 0, 52, 0, 0, 0, 5, 0x10, 0, 5, 0x10, 0};
  for (const GoldenFrame& g : MakeGoldenFrames()) {
    const uint32_t psn = g.headers.bth.psn.value();
    if (g.headers.bth.dest_qp != Qpn(0x000126) || psn < 52 || psn > 54 ||
        !IsRequest(g.headers.bth.opcode)) {
      continue;
    }
    invalidate.push_back(1);
    invalidate.push_back(static_cast<uint8_t>(g.frame.size() >> 8));
    invalidate.push_back(static_cast<uint8_t>(g.frame.size()));
    invalidate.insert(invalidate.end(), g.frame.begin(), g.frame.end());
    invalidate.push_back(2);
    invalidate.push_back(8);
  }
  return {seed, invalidate};
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdmaplane::rc::Run({data, size});
  return 0;
}
