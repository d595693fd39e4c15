// pin_cost: the kernel's price for pinning memory, the baseline for
// rdmaplane's registration cache. A hardware RDMA NIC's registration
// (ibv_reg_mr) pins the pages with the kernel every time; rdmaplane
// registers arena memory as a table entry instead. This measures the least
// a pinning registration costs: mlock() and munlock() of an already touched
// buffer of --bytes, in nanoseconds per pair (the median of --passes).
//
//   pin_cost --bytes=4096 --seconds=1 --json=/tmp/pin.json
//
// The last stdout line is "pin_cost: <ns> ns per mlock+munlock of N bytes".
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

ABSL_FLAG(uint32_t, bytes, 4096, "size of the pinned buffer");
ABSL_FLAG(double, seconds, 1.0, "total time to measure for");
ABSL_FLAG(uint32_t, passes, 5, "timed passes (the median is reported)");
ABSL_FLAG(std::string, json, "", "also write the figures as JSON here");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "cost of pinning memory with mlock/munlock, per pair");
  absl::ParseCommandLine(argc, argv);
  const uint32_t bytes = absl::GetFlag(FLAGS_bytes);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const uint32_t passes = absl::GetFlag(FLAGS_passes);
  if (bytes == 0 || bytes > (64u << 20) || !(seconds > 0) || passes == 0) {
    std::fprintf(stderr,
                 "pin_cost: need bytes 1..64 MiB, seconds > 0, passes > 0\n");
    return 2;
  }
  void* buf = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    std::perror("pin_cost: mmap");
    return 1;
  }
  std::memset(buf, 0x5A, bytes);
  using Clock = std::chrono::steady_clock;
  const auto per_pass = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(seconds / passes));
  std::vector<double> ns;
  for (uint32_t p = 0; p < passes; ++p) {
    uint64_t pairs = 0;
    const Clock::time_point start = Clock::now();
    Clock::time_point now;
    do {
      for (int i = 0; i < 64; ++i) {
        if (mlock(buf, bytes) != 0 || munlock(buf, bytes) != 0) {
          std::fprintf(stderr, "pin_cost: mlock: %s\n", std::strerror(errno));
          return 1;
        }
      }
      pairs += 64;
      now = Clock::now();
    } while (now - start < per_pass);
    ns.push_back(std::chrono::duration<double, std::nano>(now - start).count() /
                 static_cast<double>(pairs));
  }
  munmap(buf, bytes);
  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::printf(
      "pin_cost: %.1f ns per mlock+munlock of %u bytes (median of %u)\n",
      median, bytes, passes);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::perror(path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"tool\": \"pin_cost\", \"units\": {\"ns\": \"nanoseconds "
                 "per mlock+munlock pair\"}, \"bytes\": %u, \"passes\": %u, "
                 "\"median_ns\": %.2f, \"best_ns\": %.2f}\n",
                 bytes, passes, median, sorted.front());
    if (std::fclose(f) != 0) {
      std::perror(path.c_str());
      return 1;
    }
  }
  return 0;
}
