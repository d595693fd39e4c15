// The CPU's time-stamp counter, for counting the cycles an engine spends on
// work (a few cycles to read, unlike the clock). x86-64 with an invariant
// TSC, as every CPU DPDK supports there has.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_TSC_H_
#define RDMAPLANE_DATAPLANE_ENGINE_TSC_H_

#include <x86intrin.h>

#include <cstdint>

namespace rdmaplane::engine {

inline uint64_t ReadTsc() { return __rdtsc(); }

// Counter ticks per second, measured once against the monotonic clock
// (about 10 ms, on the first call).
uint64_t TscHz();

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_TSC_H_
