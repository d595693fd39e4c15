// A main() for libFuzzer-style fuzz targets, so that each target also runs
// as an ordinary, bounded test without a fuzzing engine.
//
// A target defines LLVMFuzzerTestOneInput (and nothing else libFuzzer-
// specific, so it can be linked with -fsanitize=fuzzer instead) plus
// FuzzSeedCorpus below, and links the fuzz_driver library. The driver then:
//   - with no file arguments, runs every seed, then a fixed number of
//     seeded random mutations of the seeds (bit flips, byte and
//     16/32-bit field overwrites, truncations, insertions, erasures, and
//     splices of byte ranges between seeds at the same or any offset),
//     drawn from a new seed every run (printed, and named in a crash
//     report) unless -seed or RDP_FUZZ_SEED gives one;
//   - with file or directory arguments, replays exactly those inputs
//     (e.g. crash files written by this driver or by libFuzzer).
// Every input is handed to the target twice: ending at an inaccessible page
// and starting right after one (see guarded_buffer.h). When the target
// crashes or aborts, the driver writes the input to a crash-<n> file (in
// $TEST_UNDECLARED_OUTPUTS_DIR under Bazel, else the working directory) and
// prints its name.
//
// Flags: -runs=N (mutations, default 100000), -seed=S (default: a new
// seed, or RDP_FUZZ_SEED when it is set; see tests/testing/fuzz.h),
// -max_len=N (longest mutated input, default 16384).
#ifndef RDMAPLANE_DATAPLANE_WIRE_FUZZ_DRIVER_H_
#define RDMAPLANE_DATAPLANE_WIRE_FUZZ_DRIVER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

// An invariant of a fuzz target: when it does not hold, names it and
// aborts, which both libFuzzer and the driver report as a crash with the
// input that caused it.
#define FUZZ_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                  \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace rdmaplane::wire {

// Valid inputs the mutations start from; defined by each fuzz target.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus();

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_FUZZ_DRIVER_H_
