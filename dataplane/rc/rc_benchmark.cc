// Throughput of the RC transport itself: RDMA WRITEs between two QPs over a
// lossless, infinitely fast simulated link, so the figure is the CPU cost of
// segmentation, header build, ICRC, parse, placement and acknowledgement
// (both ends on one core).
#include <benchmark/benchmark.h>

#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

void BM_SimLinkWrite(benchmark::State& state) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  QpConfig config;
  config.pmtu = 4096;
  config.sq_depth = 64;
  config.max_inflight_packets = 256;
  config.ack_req_every = 32;
  testing::Fixture f(config, {}, {}, 4 << 20);
  auto src = testing::Pattern(size, 1);
  const uint32_t slots = (4u << 20) / size;
  uint64_t posted = 0;
  for (auto _ : state) {
    // Keep up to 16 writes outstanding; one iteration is one completed write.
    const size_t target = f.pair.a.cq.completions.size() + 1;
    while (f.pair.a.qp->outstanding() < 16) {
      const uint64_t offset = (posted % slots) * size;
      if (f.pair.a.qp->Post(testing::Fixture::Write(
              posted, src.data(), size, offset, 0)) != PostResult::kOk) {
        break;
      }
      ++posted;
    }
    while (f.pair.a.cq.completions.size() < target) f.pair.Step(64);
    if (f.pair.a.cq.completions.size() > 100000) f.pair.a.cq.completions.clear();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * size);
  state.counters["packets/write"] =
      static_cast<double>(f.pair.a.qp->stats().tx_packets) / posted;
}
BENCHMARK(BM_SimLinkWrite)->RangeMultiplier(4)->Range(4 << 10, 1 << 20);

void BM_SimLinkRead(benchmark::State& state) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  QpConfig config;
  config.pmtu = 4096;
  config.sq_depth = 64;
  testing::Fixture f(config, {}, {}, 4 << 20);
  std::vector<uint8_t> dst(size);
  uint64_t posted = 0;
  for (auto _ : state) {
    const size_t target = f.pair.a.cq.completions.size() + 1;
    while (f.pair.a.qp->outstanding() < 8) {
      if (f.pair.a.qp->Post(testing::Fixture::Read(posted, dst.data(), size,
                                                   0)) != PostResult::kOk) {
        break;
      }
      ++posted;
    }
    while (f.pair.a.cq.completions.size() < target) f.pair.Step(64);
    if (f.pair.a.cq.completions.size() > 100000) f.pair.a.cq.completions.clear();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * size);
}
BENCHMARK(BM_SimLinkRead)->RangeMultiplier(16)->Range(4 << 10, 1 << 20);

}  // namespace
}  // namespace rdmaplane::rc
