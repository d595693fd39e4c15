// memcpy_bw: single-core memcpy bandwidth between buffers larger than the
// caches, the limit for any path that copies each byte once (as rdmaplane's
// engine does from a source buffer into a target buffer).
//
//   memcpy_bw --buffer_mib=64 --seconds=2
//   memcpy_bw --buffer_mib=64 --chunk=65536 --seconds=2
//
// Copies one buffer into another over and over (both touched beforehand, so
// no page faults are timed) for about --seconds, in --passes timed passes.
// By default each copy is a whole buffer, alternating direction. With
// --chunk=N each copy is N bytes, at offsets rotating over the buffers, the
// same offset in both, always from the first into the second: what
// rdmaplane's engine does for N-byte WRITEs spread over buffers of that
// size. The two differ on purpose: for a copy larger than about the
// last-level cache glibc's memcpy uses non-temporal stores, which a 64 KiB
// copy does not.
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
ABSL_FLAG(uint64_t, chunk, 0,
          "bytes per memcpy call, at offsets rotating over the buffers (0: "
          "whole buffers)");
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
  const uint64_t chunk_flag = absl::GetFlag(FLAGS_chunk);
  if (bytes == 0 || bytes > (uint64_t{4} << 30) || seconds <= 0 ||
      passes == 0 || chunk_flag > bytes) {
    std::fprintf(stderr,
                 "memcpy_bw: need buffer_mib 1..4096, seconds > 0, "
                 "passes > 0, chunk 0..the buffer's bytes\n");
    return 2;
  }
  const bool whole = chunk_flag == 0;
  const uint64_t chunk = whole ? bytes : chunk_flag;
  // Chunks per look at the clock: about 1 MiB of copying, so reading the
  // clock costs nothing next to the copies even for small chunks.
  const uint64_t batch = std::max<uint64_t>(1, (uint64_t{1} << 20) / chunk);
  std::vector<uint8_t> src(bytes), dst(bytes);
  // Touch both buffers (and warm the TLB) before timing anything.
  std::memset(src.data(), 0x5A, bytes);
  std::memset(dst.data(), 0, bytes);
  std::memcpy(dst.data(), src.data(), bytes);

  std::vector<double> gbps;
  const double per_pass = seconds / passes;
  uint64_t offset = 0;
  for (uint32_t p = 0; p < passes; ++p) {
    uint64_t copies = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      if (whole) {
        // Alternate direction so neither buffer stays hot in the cache.
        if (copies % 2 == 0) {
          std::memcpy(dst.data(), src.data(), bytes);
        } else {
          std::memcpy(src.data(), dst.data(), bytes);
        }
        ++copies;
      } else {
        for (uint64_t i = 0; i < batch; ++i) {
          if (offset + chunk > bytes) offset = 0;
          std::memcpy(dst.data() + offset, src.data() + offset, chunk);
          offset += chunk;
        }
        copies += batch;
      }
      elapsed = SecondsSince(start);
    } while (elapsed < per_pass);
    gbps.push_back(static_cast<double>(copies * chunk) / elapsed / 1e9);
  }
  if (src[bytes - 1] != 0x5A || dst[0] != 0x5A) {
    std::fprintf(stderr, "memcpy_bw: the copies did not happen\n");
    return 1;
  }
  std::vector<double> sorted = gbps;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double best = sorted.back();
  std::string how = "whole buffers";
  if (!whole) how = std::to_string(chunk) + "-byte copies rotating over them";
  std::printf(
      "memcpy_bw: %.2f GB/s median, %.2f GB/s best (%u passes, %u MiB "
      "buffers, %s, one core)\n",
      median, best, passes, absl::GetFlag(FLAGS_buffer_mib), how.c_str());
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::perror(path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"tool\": \"memcpy_bw\", \"units\": {\"gbps\": \"GB/s "
                 "(1e9 bytes per second)\"}, \"buffer_bytes\": %llu, "
                 "\"chunk_bytes\": %llu, \"passes\": %u, \"median_gbps\": "
                 "%.4f, \"best_gbps\": %.4f, \"pass_gbps\": [",
                 static_cast<unsigned long long>(bytes),
                 static_cast<unsigned long long>(chunk), passes, median, best);
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
