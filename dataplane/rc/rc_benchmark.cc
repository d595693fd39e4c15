// Throughput of the RC transport itself: RDMA WRITEs and READs between two
// QPs over a lossless, infinitely fast simulated link, so the figure is the
// CPU cost of segmentation, header build, ICRC, parse, placement and
// acknowledgement with both ends on one core.
#include <benchmark/benchmark.h>

#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

constexpr uint32_t kRegion = 4 << 20;
constexpr uint32_t kOutstanding = 16;

// One iteration posts one work request, keeping up to kOutstanding in
// flight; the link runs whenever the queue is full and until it drains at
// the end, so every counted byte was delivered and acknowledged.
void RunTransfers(benchmark::State& state, WrOpcode opcode) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  QpConfig config;
  config.pmtu = 4096;
  config.sq_depth = 64;
  config.max_inflight_packets = 256;
  config.ack_req_every = 32;
  testing::Fixture f(config, {}, {}, kRegion);
  std::vector<uint8_t> local = testing::Pattern(size, 1);
  const uint32_t slots = kRegion / size;
  uint64_t posted = 0;
  for (auto _ : state) {
    while (f.pair.a.qp->outstanding() >= kOutstanding) f.pair.Step(64);
    WorkRequest wr = testing::Fixture::Write(posted, local.data(), size,
                                             (posted % slots) * size,
                                             kWrSilentSuccess);
    wr.opcode = opcode;
    if (f.pair.a.qp->Post(wr) != PostResult::kOk) {
      state.SkipWithError("post failed");
      break;
    }
    ++posted;
  }
  if (!f.pair.RunUntilIdle(1'000'000'000)) state.SkipWithError("no drain");
  state.SetBytesProcessed(static_cast<int64_t>(posted) * size);
  state.counters["frames/op"] = static_cast<double>(
      f.pair.a_to_b.faults().frames + f.pair.b_to_a.faults().frames) / posted;
}

void BM_SimLinkWrite(benchmark::State& state) {
  RunTransfers(state, WrOpcode::kWrite);
}
BENCHMARK(BM_SimLinkWrite)->RangeMultiplier(4)->Range(4 << 10, 1 << 20);

void BM_SimLinkRead(benchmark::State& state) {
  RunTransfers(state, WrOpcode::kRead);
}
BENCHMARK(BM_SimLinkRead)->RangeMultiplier(16)->Range(4 << 10, 1 << 20);

}  // namespace
}  // namespace rdmaplane::rc
