#include "dataplane/engine/tsc.h"

#include <time.h>

namespace rdmaplane::engine {
namespace {

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t Measure() {
  const uint64_t t0 = MonotonicNs();
  const uint64_t c0 = ReadTsc();
  uint64_t t1 = t0;
  while (t1 - t0 < 10'000'000) t1 = MonotonicNs();
  const uint64_t c1 = ReadTsc();
  const unsigned __int128 hz =
      static_cast<unsigned __int128>(c1 - c0) * 1'000'000'000u / (t1 - t0);
  return hz > 0 ? static_cast<uint64_t>(hz) : 1;
}

}  // namespace

uint64_t TscHz() {
  static const uint64_t hz = Measure();
  return hz;
}

}  // namespace rdmaplane::engine
