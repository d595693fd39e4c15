// memcpy_bw: single-core memcpy bandwidth between buffers larger than the
// caches, the limit for any path that copies each byte once (as rdmaplane's
// engine does from a source buffer into a target buffer).
//
//   memcpy_bw --buffer_mib=64 --seconds=2
//
// Copies one buffer into another over and over (both touched beforehand, so
// no page faults are timed) for about --seconds, in --passes timed passes.
// Bandwidth counts each byte copied once (bytes copied / time), in GB/s
// (1e9 bytes per second). The last stdout line is
// "memcpy_bw: <median> GB/s median, <best> GB/s best ..."; --json FILE
// writes the same figures.
//
// Thread-compatible single-threaded tool; pin it with taskset to choose
// the core.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

ABSL_FLAG(uint32_t, buffer_mib, 64, "size of each buffer, MiB");
ABSL_FLAG(double, seconds, 2.0, "total time to copy for");
ABSL_FLAG(uint32_t, passes, 8, "timed passes (median and best reported)");
ABSL_FLAG(std::string, json, "", "also write the figures as JSON here");

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "single-core memcpy bandwidth between buffers larger than the caches");
  absl::ParseCommandLine(argc, argv);
  const uint64_t bytes = uint64_t{absl::GetFlag(FLAGS_buffer_mib)} << 20;
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const uint32_t passes = absl::GetFlag(FLAGS_passes);
  if (bytes == 0 || bytes > (uint64_t{4} << 30) || seconds <= 0 ||
      passes == 0) {
    std::fprintf(stderr,
                 "memcpy_bw: need buffer_mib 1..4096, seconds > 0, "
                 "passes > 0\n");
    return 2;
  }
  std::vector<uint8_t> src(bytes), dst(bytes);
  // Touch both buffers (and warm the TLB) before timing anything.
  std::memset(src.data(), 0x5A, bytes);
  std::memset(dst.data(), 0, bytes);
  std::memcpy(dst.data(), src.data(), bytes);

  std::vector<double> gbps;
  const double per_pass = seconds / passes;
  for (uint32_t p = 0; p < passes; ++p) {
    uint64_t copies = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      // Alternate direction so neither buffer stays hot in the cache.
      if (copies % 2 == 0) {
        std::memcpy(dst.data(), src.data(), bytes);
      } else {
        std::memcpy(src.data(), dst.data(), bytes);
      }
      ++copies;
      elapsed = SecondsSince(start);
    } while (elapsed < per_pass);
    gbps.push_back(static_cast<double>(copies * bytes) / elapsed / 1e9);
  }
  if (src[bytes - 1] != 0x5A || dst[0] != 0x5A) {
    std::fprintf(stderr, "memcpy_bw: the copies did not happen\n");
    return 1;
  }
  std::vector<double> sorted = gbps;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double best = sorted.back();
  std::printf(
      "memcpy_bw: %.2f GB/s median, %.2f GB/s best (%u passes, %u MiB "
      "buffers, one core)\n",
      median, best, passes, absl::GetFlag(FLAGS_buffer_mib));
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::perror(path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"tool\": \"memcpy_bw\", \"units\": {\"gbps\": \"GB/s "
                 "(1e9 bytes per second)\"}, \"buffer_bytes\": %llu, "
                 "\"passes\": %u, \"median_gbps\": %.4f, \"best_gbps\": "
                 "%.4f, \"pass_gbps\": [",
                 static_cast<unsigned long long>(bytes), passes, median, best);
    for (size_t i = 0; i < gbps.size(); ++i) {
      std::fprintf(f, "%s%.4f", i ? ", " : "", gbps[i]);
    }
    std::fprintf(f, "]}\n");
    if (std::fclose(f) != 0) {
      std::perror(path.c_str());
      return 1;
    }
  }
  return 0;
}
