// Runs the RC transport between two endpoints over the simulated link and
// reports what happened: RDMA WRITE and READ of a buffer each way, with the
// link's loss, duplication and reordering, every byte verified.
//
//   sim_demo --bytes=1048576 --faults=loss=0.01,reorder=0.01,delay_us=5
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

ABSL_FLAG(uint32_t, bytes, 1 << 20, "bytes to write and read in each direction");
ABSL_FLAG(std::string, faults, "loss=0.01,dup=0.001,reorder=0.01,delay_us=5,jitter_us=1,reorder_us=30",
          "link faults, per direction (loss, dup, reorder, delay_us, "
          "jitter_us, reorder_us, seed)");
ABSL_FLAG(uint32_t, mtu, 1024, "path MTU: 256, 512, 1024, 2048 or 4096");
ABSL_FLAG(double, gbps, 10, "simulated line rate");

namespace rdmaplane::rc {
namespace {

int Run() {
  const uint32_t bytes = absl::GetFlag(FLAGS_bytes);
  if (bytes == 0 || bytes > (64u << 20)) {
    std::fprintf(stderr, "sim_demo: --bytes must be 1..67108864\n");
    return 2;
  }
  fault::FaultSpec faults;
  if (std::string err = fault::ParseFaultSpec(absl::GetFlag(FLAGS_faults), &faults);
      !err.empty()) {
    std::fprintf(stderr, "sim_demo: --faults: %s\n", err.c_str());
    return 2;
  }
  QpConfig config;
  config.pmtu = absl::GetFlag(FLAGS_mtu);
  config.retransmit_timeout_ns = 2'000'000;
  config.retry_count = 15;
  if (const char* err = RcQp::ValidateConfig(config)) {
    std::fprintf(stderr, "sim_demo: %s\n", err);
    return 2;
  }
  fault::FaultSpec back = faults;
  back.seed = faults.seed + 1;
  testing::Fixture f(config, faults, back, bytes, absl::GetFlag(FLAGS_gbps));

  const auto a_data = testing::Pattern(bytes, 1);
  const auto b_data = testing::Pattern(bytes, 2);
  std::vector<uint8_t> a_back(bytes), b_back(bytes);
  using testing::Fixture;
  // Each side writes its buffer into the other's region, then reads it back.
  f.pair.a.qp->Post(Fixture::Write(1, const_cast<uint8_t*>(a_data.data()), bytes, 0));
  f.pair.a.qp->Post(Fixture::Read(2, a_back.data(), bytes, 0));
  f.pair.b.qp->Post(Fixture::Write(1, const_cast<uint8_t*>(b_data.data()), bytes, 0, 0,
                                   testing::kKeyOnA));
  f.pair.b.qp->Post(Fixture::Read(2, b_back.data(), bytes, 0, 0, testing::kKeyOnA));
  if (!f.pair.RunUntilIdle(60'000'000'000ull)) {
    std::printf("demo: transfers did not finish\n");
    return 1;
  }
  bool ok = true;
  for (auto* side : {&f.pair.a, &f.pair.b}) {
    const char* name = side == &f.pair.a ? "A" : "B";
    for (const Completion& c : side->cq.completions) {
      std::printf("%s: %s of %u bytes: %s\n", name,
                  c.opcode == WrOpcode::kWrite ? "RDMA WRITE" : "RDMA READ",
                  c.byte_len, WcStatusName(c.status));
      ok = ok && c.status == WcStatus::kSuccess;
    }
    ok = ok && side->cq.completions.size() == 2;
  }
  const bool bytes_ok = f.b_region == a_data && f.a_region == b_data &&
                        a_back == a_data && b_back == b_data;
  std::printf("bytes verified at both destinations: %s\n", bytes_ok ? "yes" : "NO");
  for (auto* side : {&f.pair.a, &f.pair.b}) {
    const QpStats& s = side->qp->stats();
    std::printf(
        "%s: %llu frames sent, %llu retransmitted, %llu timeouts, %llu NAKs "
        "sent, %llu duplicates answered\n",
        side == &f.pair.a ? "A" : "B", (unsigned long long)s.tx_packets,
        (unsigned long long)s.retransmitted_packets,
        (unsigned long long)s.timeouts, (unsigned long long)s.naks_sent,
        (unsigned long long)s.duplicate_requests);
  }
  const auto& ab = f.pair.a_to_b.faults();
  const auto& ba = f.pair.b_to_a.faults();
  std::printf("link: %llu frames, %llu lost, %llu duplicated, %llu reordered; "
              "%.3f ms simulated\n",
              (unsigned long long)(ab.frames + ba.frames),
              (unsigned long long)(ab.dropped + ba.dropped),
              (unsigned long long)(ab.duplicated + ba.duplicated),
              (unsigned long long)(ab.reordered + ba.reordered),
              f.pair.clock.NowNs() / 1e6);
  ok = ok && bytes_ok && f.pair.rejected_frames == 0;
  std::printf("demo: %s\n", ok ? "ok (RoCEv2 RC over a simulated lossy link)"
                               : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace rdmaplane::rc

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return rdmaplane::rc::Run();
}
