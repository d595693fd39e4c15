// RDMA WRITE and READ throughput between two RC queue pairs over two DPDK
// ports joined by rings (net_ring), with the payload copied into packet
// buffers or sent in place from registered memory (zero copy). Both ends run
// on one core, so the figure is the CPU cost per byte of the whole path:
// segmentation, headers, ICRC, mbufs, the ring, parsing and placement. Note
// that net_ring hands the receiver the sender's mbufs: a zero-copy frame
// reaches the receiver as a chain, which it linearizes (the copy a software
// device makes when it sends), where a copied frame is read in place.
//
// One command line:
//   bazel run //dataplane/port:eth_port_benchmark -- --benchmark_min_time=0.5
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>
#include <time.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"
#include "dataplane/rc/memory_owner.h"
#include "dataplane/rc/qp.h"
#include "dataplane/wire/icrc.h"

namespace rdmaplane::port {
namespace {

constexpr uint32_t kRegion = 4 << 20;
constexpr uint32_t kOutstanding = 8;
constexpr wire::Rkey kRkey{7};


class Region : public rc::RemoteMemory {
 public:
  Region(uint8_t* base, rc::MemoryOwner* owner) : base_(base), owner_(owner) {}
  rc::ResolvedMemory Resolve(wire::Qpn, wire::Rkey rkey, uint64_t va,
                             uint32_t len, rc::RemoteAccess) override {
    if (rkey != kRkey || va + len > kRegion) {
      return {rc::AccessCheck::kOutOfRange, nullptr};
    }
    return {rc::AccessCheck::kOk, base_ + va, owner_};
  }
  void Release(wire::Rkey) override {}

 private:
  uint8_t* base_;
  rc::MemoryOwner* owner_;
};

class Done : public rc::CompletionSink {
 public:
  void Complete(const rc::Completion& c) override {
    ++count;
    ok = ok && c.status == rc::WcStatus::kSuccess;
  }
  uint64_t count = 0;
  bool ok = true;
};

// range(0): message size; range(1): zero copy. The path MTU is 1024, the
// largest net_ring takes (it cannot raise its MTU), as for memif and
// af_packet.
void RunTransfers(benchmark::State& state, rc::WrOpcode opcode) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  const bool zero_copy = state.range(1) != 0;
  const uint32_t pmtu = 1024;
  static int run = 0;
  const std::string name = absl::StrCat("bm", run++);
  // Memory first: frames may point into it until the ports are gone.
  std::vector<uint8_t> local(kRegion, 0x5A), remote(kRegion, 0xA5);
  std::unique_ptr<rc::MemoryOwner> local_owner, remote_owner;
  rte_ring* ab = rte_ring_create((name + "ab").c_str(), 1024, 0,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* ba = rte_ring_create((name + "ba").c_str(), 1024, 0,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
  const int pa = rte_eth_from_rings((name + "a").c_str(), &ba, 1, &ab, 1, 0);
  const int pb = rte_eth_from_rings((name + "b").c_str(), &ab, 1, &ba, 1, 0);
  PortConfig c;
  c.mbufs = 8191;
  c.max_frame =
      static_cast<uint32_t>(wire::MaxFrameLength(pmtu));
  c.zero_copy_min_payload = zero_copy ? 1 : 0;
  PortConfig ca = c, cb = c;
  ca.port_id = static_cast<uint16_t>(pa);
  cb.port_id = static_cast<uint16_t>(pb);
  auto a = EthPort::Open(ca);
  auto b = EthPort::Open(cb);
  if (!a.ok() || !b.ok()) {
    state.SkipWithError(absl::StrCat("cannot open the ring ports: ",
                                     (a.ok() ? b : a).status().ToString())
                            .c_str());
    return;
  }
  local_owner = std::make_unique<rc::MemoryOwner>(
      (*a)->RegisterExternalMemory(local.data(), kRegion, 4096));
  remote_owner = std::make_unique<rc::MemoryOwner>(
      (*b)->RegisterExternalMemory(remote.data(), kRegion, 4096));
  {
    rc::SystemClock clock;
    Region mem_a(local.data(), local_owner.get());
    Region mem_b(remote.data(), remote_owner.get());
    Done done_a, done_b;
    rc::QpConfig qa;
    qa.pmtu = pmtu;
    qa.local_qpn = wire::Qpn(1);
    qa.remote_qpn = wire::Qpn(2);
    qa.send_psn = wire::Psn(100);
    qa.recv_psn = wire::Psn(200);
    qa.max_inflight_packets = 256;
    qa.ack_req_every = 32;
    qa.sq_depth = 64;
    qa.path.src_ip = 0x0A000001;
    qa.path.dst_ip = 0x0A000002;
    qa.path.src_mac = (*a)->mac();
    qa.path.dst_mac = (*b)->mac();
    rc::QpConfig qb = qa;
    std::swap(qb.local_qpn, qb.remote_qpn);
    std::swap(qb.send_psn, qb.recv_psn);
    std::swap(qb.path.src_ip, qb.path.dst_ip);
    std::swap(qb.path.src_mac, qb.path.dst_mac);
    rc::RcQp qp_a(qa, {&clock, a->get(), &mem_a, &done_a});
    rc::RcQp qp_b(qb, {&clock, b->get(), &mem_b, &done_b});
    auto deliver = [](rc::RcQp& qp) {
      return [&qp](std::span<const uint8_t> frame) {
        wire::ParsedPacket pkt;
        if (wire::ParseFrame(frame, &pkt) == wire::ParseError::kOk) {
          qp.HandleFrame(pkt);
        }
      };
    };
    auto step = [&] {
      (*a)->Receive(deliver(qp_a));
      (*b)->Receive(deliver(qp_b));
      qp_a.Poll(32);
      qp_b.Poll(32);
      (*a)->Flush();
      (*b)->Flush();
    };
    const uint32_t slots = kRegion / size;
    uint64_t posted = 0;
    for (auto _ : state) {
      while (qp_a.outstanding() >= kOutstanding) step();
      rc::WorkRequest wr;
      wr.wr_id = posted;
      wr.opcode = opcode;
      wr.flags = rc::kWrSilentSuccess;
      wr.num_sge = 1;
      const uint64_t offset = (posted % slots) * uint64_t{size};
      wr.sge[0] = {local.data() + offset, size, 0, local_owner.get()};
      wr.remote_va = offset;
      wr.rkey = kRkey;
      if (qp_a.Post(wr) != rc::PostResult::kOk) {
        state.SkipWithError("post failed");
        break;
      }
      ++posted;
    }
    const uint64_t end = clock.NowNs() + 10'000'000'000ull;
    while (qp_a.outstanding() > 0 && clock.NowNs() < end) step();
    if (qp_a.outstanding() > 0 || !done_a.ok) {
      state.SkipWithError("transfers did not complete");
    }
    state.SetBytesProcessed(static_cast<int64_t>(posted) * size);
    const PortCounters& sender =
        opcode == rc::WrOpcode::kWrite ? (*a)->counters() : (*b)->counters();
    state.counters["in_place/frame"] =
        sender.tx_frames == 0
            ? 0
            : static_cast<double>(sender.tx_zero_copy) / sender.tx_frames;
    // Let stale frames arrive, so that no mbuf points into the memory.
    for (int i = 0; i < 1000; ++i) step();
  }
  a->reset();
  b->reset();
  rte_eth_dev_close(static_cast<uint16_t>(pa));
  rte_eth_dev_close(static_cast<uint16_t>(pb));
  rte_ring_free(ab);
  rte_ring_free(ba);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t size : {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}) {
    for (int64_t zero_copy : {0, 1}) b->Args({size, zero_copy});
  }
  b->ArgNames({"bytes", "zero_copy"});
}

void BM_RingWrite(benchmark::State& state) {
  RunTransfers(state, rc::WrOpcode::kWrite);
}
BENCHMARK(BM_RingWrite)->Apply(Args);

void BM_RingRead(benchmark::State& state) {
  RunTransfers(state, rc::WrOpcode::kRead);
}
BENCHMARK(BM_RingRead)->Apply(Args);

// The sender's side alone, as with a device that reads frames by DMA: WRITE
// frames of range(2) bytes of payload (a message of range(0) bytes at a
// time) built and handed to the port, copied or in place; the other end of
// the ring frees them unread, as a NIC's completions would.
void BM_SendOnly(benchmark::State& state) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  const bool zero_copy = state.range(1) != 0;
  const uint32_t kPayload = static_cast<uint32_t>(state.range(2));
  static int run = 0;
  const std::string name = absl::StrCat("so", run++);
  std::vector<uint8_t> local(kRegion, 0x5A);
  std::unique_ptr<rc::MemoryOwner> owner;
  rte_ring* r = rte_ring_create((name + "r").c_str(), 1024, 0,
                                RING_F_SP_ENQ | RING_F_SC_DEQ);
  const int p = rte_eth_from_rings((name + "p").c_str(), &r, 1, &r, 1, 0);
  PortConfig c;
  c.port_id = static_cast<uint16_t>(p);
  // No MTU to raise: nothing receives these frames.
  c.mbuf_data_room =
      static_cast<uint16_t>(wire::MaxFrameLength(4096) +
                            RTE_PKTMBUF_HEADROOM);
  if (!zero_copy) c.zero_copy_min_payload = 0;
  auto port = EthPort::Open(c);
  if (!port.ok()) {
    state.SkipWithError(port.status().ToString().c_str());
    return;
  }
  owner = std::make_unique<rc::MemoryOwner>(
      (*port)->RegisterExternalMemory(local.data(), kRegion, 4096));
  wire::PacketHeaders h;
  h.path.src_ip = 0x0A000001;
  h.path.dst_ip = 0x0A000002;
  h.bth.opcode = wire::Opcode::kWriteMiddle;
  EthPort& tx = **port;
  const uint32_t slots = kRegion / size;
  uint64_t messages = 0;
  auto drain = [r] {
    void* burst[64];
    unsigned n;
    while ((n = rte_ring_dequeue_burst(r, burst, 64, nullptr)) > 0) {
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(burst), n);
    }
  };
  for (auto _ : state) {
    const uint8_t* msg = local.data() + (messages++ % slots) * uint64_t{size};
    for (uint32_t off = 0; off < size; off += kPayload) {
      std::span<uint8_t> buf;
      while ((buf = tx.Reserve(wire::FrameLength(h.bth.opcode, kPayload)))
                 .empty()) {
        drain();
      }
      const size_t header_len = wire::EncodeHeaders(h, kPayload, buf);
      const rc::PayloadPiece piece{msg + off, kPayload, owner.get()};
      if (zero_copy && tx.CanGather({&piece, 1})) {
        uint32_t icrc = wire::HeadersIcrc(buf.first(header_len));
        icrc = wire::ExtendIcrc(icrc, {piece.data, piece.len});
        uint8_t trailer[wire::kMaxTrailerLen];
        const size_t n =
            wire::EncodeTrailer(buf.first(header_len), icrc, trailer);
        tx.CommitGather(buf, header_len, {&piece, 1}, {trailer, n});
      } else {
        std::memcpy(buf.data() + header_len, piece.data, kPayload);
        tx.Commit(wire::FinishFrame(buf));
      }
    }
    tx.Flush();
    drain();
  }
  for (int i = 0; i < 4 && tx.tx_pending() > 0; ++i) {
    tx.Flush();
    drain();
  }
  state.SetBytesProcessed(static_cast<int64_t>(messages) * size);
  state.counters["in_place/frame"] =
      tx.counters().tx_frames == 0
          ? 0
          : static_cast<double>(tx.counters().tx_zero_copy) /
                tx.counters().tx_frames;
  port->reset();
  rte_eth_dev_close(static_cast<uint16_t>(p));
  rte_ring_free(r);
}
void SendArgs(benchmark::internal::Benchmark* b) {
  for (int64_t payload : {1024, 4096}) {
    for (int64_t size : {4 << 10, 64 << 10, 1 << 20}) {
      for (int64_t zero_copy : {0, 1}) b->Args({size, zero_copy, payload});
    }
  }
  b->ArgNames({"bytes", "zero_copy", "payload"});
}
BENCHMARK(BM_SendOnly)->Apply(SendArgs);

}  // namespace
}  // namespace rdmaplane::port

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  rdmaplane::port::EalOptions eal;
  eal.memory_mb = 512;
  if (!rdmaplane::port::InitDpdk(eal).ok()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  rdmaplane::port::ShutdownDpdk();
  return 0;
}
