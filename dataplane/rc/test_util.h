// Shared helpers for RC tests: a SimPair with one registered region on each
// side and work-request builders.
#ifndef RDMAPLANE_DATAPLANE_RC_TEST_UTIL_H_
#define RDMAPLANE_DATAPLANE_RC_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/rc/sim_link.h"

namespace rdmaplane::rc::testing {

inline constexpr uint64_t kRemoteVa = 0x7f0000100000ull;
inline constexpr wire::Rkey kKeyOnB{0x1001};  // B's region, for A's requests
inline constexpr wire::Rkey kKeyOnA{0x2001};  // A's region, for B's requests

inline QpConfig SmallConfig() {
  QpConfig c;
  c.pmtu = 256;
  c.retransmit_timeout_ns = 100'000;
  c.retry_count = 7;
  c.max_inflight_packets = 64;
  c.ack_req_every = 8;
  return c;
}

inline wire::ParsedPacket Decode(std::span<const uint8_t> frame) {
  wire::ParsedPacket pkt;
  if (wire::ParseQueuePairFrame(frame, &pkt) != wire::ParseError::kOk) {
    pkt.bth.opcode = static_cast<wire::Opcode>(0xFF);
  }
  return pkt;
}

// A SimPair where each side exposes `region_bytes` of read/write/atomic
// memory to the other's QP.
struct Fixture {
  explicit Fixture(const QpConfig& config = SmallConfig(),
                   const fault::FaultSpec& a_to_b = {},
                   const fault::FaultSpec& b_to_a = {},
                   uint32_t region_bytes = 1 << 20, double gbps = 0)
      : pair(config, a_to_b, b_to_a, gbps),
        a_region(region_bytes, 0),
        b_region(region_bytes, 0) {
    pair.b.memory.Add({pair.b.qp->config().local_qpn, kKeyOnB, kRemoteVa,
                       b_region.data(), region_bytes, true, true, nullptr,
                       true});
    pair.a.memory.Add({pair.a.qp->config().local_qpn, kKeyOnA, kRemoteVa,
                       a_region.data(), region_bytes, true, true, nullptr,
                       true});
  }

  static WorkRequest Write(uint64_t id, uint8_t* src, uint32_t len,
                           uint64_t remote_offset, uint32_t flags = 0,
                           wire::Rkey rkey = kKeyOnB) {
    WorkRequest wr;
    wr.wr_id = id;
    wr.opcode = WrOpcode::kWrite;
    wr.flags = flags;
    wr.num_sge = 1;
    wr.sge[0] = {src, len};
    wr.remote_va = kRemoteVa + remote_offset;
    wr.rkey = rkey;
    return wr;
  }

  static WorkRequest Read(uint64_t id, uint8_t* dst, uint32_t len,
                          uint64_t remote_offset, uint32_t flags = 0,
                          wire::Rkey rkey = kKeyOnB) {
    WorkRequest wr = Write(id, dst, len, remote_offset, flags, rkey);
    wr.opcode = WrOpcode::kRead;
    return wr;
  }

  // COMPARE SWAP and FETCH ADD of the word `remote_offset` bytes into the
  // peer's region; the word as it was lands in *orig.
  static WorkRequest CompareSwap(uint64_t id, uint64_t* orig,
                                 uint64_t remote_offset, uint64_t compare,
                                 uint64_t swap, wire::Rkey rkey = kKeyOnB) {
    WorkRequest wr = Write(id, reinterpret_cast<uint8_t*>(orig), kAtomicBytes,
                           remote_offset, 0, rkey);
    wr.opcode = WrOpcode::kCompareSwap;
    wr.compare = compare;
    wr.swap_add = swap;
    return wr;
  }
  static WorkRequest FetchAdd(uint64_t id, uint64_t* orig,
                              uint64_t remote_offset, uint64_t add,
                              wire::Rkey rkey = kKeyOnB) {
    WorkRequest wr = Write(id, reinterpret_cast<uint8_t*>(orig), kAtomicBytes,
                           remote_offset, 0, rkey);
    wr.opcode = WrOpcode::kFetchAdd;
    wr.swap_add = add;
    return wr;
  }

  SimPair pair;
  std::vector<uint8_t> a_region;
  std::vector<uint8_t> b_region;
};

// A SEND of `len` bytes from `src` (with kWrImmediate, `imm` goes along).
inline WorkRequest Send(uint64_t id, uint8_t* src, uint32_t len,
                        uint32_t flags = 0, uint32_t imm = 0) {
  WorkRequest wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::kSend;
  wr.flags = flags;
  wr.num_sge = 1;
  wr.sge[0] = {src, len};
  wr.imm = imm;
  return wr;
}

// A receive request of one buffer.
inline WorkRequest Recv(uint64_t id, uint8_t* dst, uint32_t len) {
  WorkRequest wr;
  wr.wr_id = id;
  wr.num_sge = 1;
  wr.sge[0] = {dst, len};
  return wr;
}

// Steps until nothing moves and nothing is due. For UC and UD, whose
// requesters are done as soon as they have sent, "idle" must also mean an
// empty wire. False if it never came to rest.
inline bool RunUntilQuiet(SimPair& pair) {
  for (int i = 0; i < 1'000'000; ++i) {
    if (!pair.Step()) return true;
  }
  return false;
}

inline std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

}  // namespace rdmaplane::rc::testing

#endif  // RDMAPLANE_DATAPLANE_RC_TEST_UTIL_H_
