// Micro-benchmarks for the RoCEv2 wire codec: ICRC throughput next to
// memcpy of the same sizes, and the per-packet cost of EncodeFrame and
// ParseFrame for an ACK, a 64-byte WRITE and a 4 KiB WRITE.
//
// bazel run -c opt //dataplane/wire:roce_benchmark
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "dataplane/wire/icrc.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {
namespace {

std::vector<uint8_t> Bytes(size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
  return v;
}

// Source and destination of a copy in one page-aligned block, with
// (dst - src) % 4096 == skew. glibc 2.36 copies 4 KiB with REP MOVSB, which on
// this machine's AMD CPU slows down several times when the skew is small
// (page aliasing, glibc bug 30994), so the plain memcpy figures use a large
// skew and BM_MemcpyPageAliased shows the slow case.
class CopyBuffers {
 public:
  CopyBuffers(size_t len, size_t skew)
      : storage_(2 * Pages(len) + 3 * kPage),
        src_(AlignUp(storage_.data())),
        dst_(src_ + Pages(len) + kPage + skew) {
    for (size_t i = 0; i < len; ++i) src_[i] = static_cast<uint8_t>(i * 131);
  }
  const uint8_t* src() const { return src_; }
  uint8_t* dst() { return dst_; }

 private:
  static constexpr size_t kPage = 4096;
  static size_t Pages(size_t len) { return (len + kPage - 1) / kPage * kPage; }
  static uint8_t* AlignUp(uint8_t* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return p + ((kPage - a % kPage) % kPage);
  }

  std::vector<uint8_t> storage_;
  uint8_t* src_;
  uint8_t* dst_;
};

void MemcpyLoop(benchmark::State& state, size_t skew) {
  const size_t len = static_cast<size_t>(state.range(0));
  CopyBuffers buffers(len, skew);
  for (auto _ : state) {
    benchmark::DoNotOptimize(buffers.src());
    std::memcpy(buffers.dst(), buffers.src(), len);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
}

void BM_Memcpy(benchmark::State& state) { MemcpyLoop(state, 512); }
BENCHMARK(BM_Memcpy)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

void BM_MemcpyPageAliased(benchmark::State& state) { MemcpyLoop(state, 16); }
BENCHMARK(BM_MemcpyPageAliased)->Arg(4096);

// The ICRC of `len` bytes from the IPv4 header on: the masked-header block
// plus a plain CRC over the rest.
void BM_Icrc(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const std::vector<uint8_t> packet = Bytes(len);
  for (auto _ : state) {
    benchmark::DoNotOptimize(packet.data());
    benchmark::DoNotOptimize(ComputeIcrc(packet));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
}
BENCHMARK(BM_Icrc)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

// Plain CRC-32 (ISA-L), for the cost of the ICRC's header masking.
void BM_Crc32(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const std::vector<uint8_t> data = Bytes(len);
  for (auto _ : state) {
    benchmark::DoNotOptimize(data.data());
    benchmark::DoNotOptimize(Crc32(data));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
}
BENCHMARK(BM_Crc32)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

PacketHeaders Headers(Opcode op, size_t payload_len) {
  PacketHeaders h;
  h.path.src_mac = {{0x02, 0, 0, 0, 0, 1}};
  h.path.dst_mac = {{0x02, 0, 0, 0, 0, 2}};
  h.path.src_ip = 0x0A000001;
  h.path.dst_ip = 0x0A000002;
  h.path.udp_src_port = UdpSourcePortForQpn(Qpn(0x11));
  h.bth.opcode = op;
  h.bth.dest_qp = Qpn(0x123);
  h.bth.psn = Psn(1000);
  h.bth.ack_req = true;
  h.reth = {0x00007F3A12340000, Rkey(0x00012A05),
            static_cast<uint32_t>(payload_len)};
  h.aeth = {kAethAck | kAethCreditsInvalid, 42};
  return h;
}

void BM_EncodeFrame(benchmark::State& state, Opcode op, size_t payload_len) {
  const PacketHeaders h = Headers(op, payload_len);
  const std::vector<uint8_t> payload = Bytes(payload_len);
  std::vector<uint8_t> out(FrameLength(op, payload_len));
  for (auto _ : state) {
    benchmark::DoNotOptimize(EncodeFrame(h, payload, out));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * out.size()));
}
BENCHMARK_CAPTURE(BM_EncodeFrame, ack, Opcode::kAcknowledge, 0);
BENCHMARK_CAPTURE(BM_EncodeFrame, write_64, Opcode::kWriteOnly, 64);
BENCHMARK_CAPTURE(BM_EncodeFrame, write_4096, Opcode::kWriteOnly, 4096);

void BM_ParseFrame(benchmark::State& state, Opcode op, size_t payload_len) {
  const std::vector<uint8_t> payload = Bytes(payload_len);
  std::vector<uint8_t> frame(FrameLength(op, payload_len));
  if (EncodeFrame(Headers(op, payload_len), payload, frame) != frame.size()) {
    state.SkipWithError("EncodeFrame failed");
    return;
  }
  ParsedPacket pkt;
  ParseCounters counters;
  for (auto _ : state) {
    benchmark::DoNotOptimize(frame.data());
    benchmark::DoNotOptimize(ParseFrame(frame, &pkt, &counters));
    benchmark::DoNotOptimize(pkt);
  }
  if (counters[ParseError::kOk] != static_cast<uint64_t>(state.iterations())) {
    state.SkipWithError("ParseFrame rejected the frame");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * frame.size()));
}
BENCHMARK_CAPTURE(BM_ParseFrame, ack, Opcode::kAcknowledge, 0);
BENCHMARK_CAPTURE(BM_ParseFrame, write_64, Opcode::kWriteOnly, 64);
BENCHMARK_CAPTURE(BM_ParseFrame, write_4096, Opcode::kWriteOnly, 4096);

}  // namespace
}  // namespace rdmaplane::wire
