// Seeded random numbers for the fuzzing tests. A run's seed is new every
// run, so that runs explore instead of repeating one another; it is printed
// when first taken, and every fuzzing test names it with every failure.
// RDP_FUZZ_SEED=<seed> (under Bazel: --test_env=RDP_FUZZ_SEED=<seed>)
// replays a run. The loops that take it also take their length from
// RDP_FUZZ_ITERATIONS, for longer runs by hand.
//
// Thread-compatible.
#ifndef RDMAPLANE_TESTS_TESTING_FUZZ_H_
#define RDMAPLANE_TESTS_TESTING_FUZZ_H_

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace rdmaplane::testing {

// Parses the value of one of the variables below as a whole unsigned
// number (decimal, 0x hex or 0 octal); anything else, or a value past
// `max`, ends the process with a message naming the variable, so that a
// mistyped seed never quietly becomes another one.
inline uint64_t ParseFuzzEnv(const char* name, const char* value,
                             uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value, &end, 0);
  if (value[0] == '-' || value[0] == '+' || end == value || *end != '\0' ||
      errno == ERANGE || v > max) {
    std::fprintf(stderr,
                 "%s=\"%s\" is not a number from 0 to %llu (decimal or 0x "
                 "hex)\n",
                 name, value, static_cast<unsigned long long>(max));
    std::abort();
  }
  return v;
}

// A seed nobody chose: from the kernel's random source, mixed with the
// clock and the process id, so that two processes started together differ.
inline uint64_t NewFuzzSeed() {
  std::random_device device;
  uint64_t s = (uint64_t{device()} << 32) ^ device();
  s ^= static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  s ^= uint64_t{static_cast<uint32_t>(getpid())} << 17;
  return s;
}

// The run's seed: RDP_FUZZ_SEED when it is set, else a new one, the same
// for every call in one process. The first call prints it to stderr, where
// Bazel keeps it in the test's log.
inline uint64_t FuzzSeed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("RDP_FUZZ_SEED");
    const bool replay = env != nullptr && *env != '\0';
    const uint64_t s =
        replay ? ParseFuzzEnv("RDP_FUZZ_SEED", env, UINT64_MAX) : NewFuzzSeed();
    std::fprintf(stderr,
                 "fuzz seed 0x%llx%s (replay: RDP_FUZZ_SEED=0x%llx, under "
                 "Bazel --test_env=RDP_FUZZ_SEED=0x%llx)\n",
                 static_cast<unsigned long long>(s),
                 replay ? " from RDP_FUZZ_SEED" : ", new",
                 static_cast<unsigned long long>(s),
                 static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// Iterations of a fuzzing loop: RDP_FUZZ_ITERATIONS when it is set, else
// `fallback`.
inline int FuzzIterations(int fallback) {
  const char* env = std::getenv("RDP_FUZZ_ITERATIONS");
  if (env == nullptr || *env == '\0') return fallback;
  return static_cast<int>(ParseFuzzEnv("RDP_FUZZ_ITERATIONS", env, INT_MAX));
}

// Iteration i's own seed (splitmix64 of the run's seed and i), so that
// iteration i does the same whatever the iterations before it did, and a
// longer run repeats a shorter one first.
inline uint64_t IterationSeed(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : rng_(seed) {}
  uint64_t u64() { return rng_(); }
  uint32_t u32() { return static_cast<uint32_t>(rng_()); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool percent(uint32_t p) { return below(100) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }
  template <typename T, size_t N>
  const T& pick(const T (&items)[N]) {
    return items[below(N)];
  }

  // `n` random bytes; with `no_nul`, none of them NUL.
  std::string bytes(size_t n, bool no_nul = false) {
    std::string s(n, '\0');
    for (char& c : s) {
      c = static_cast<char>(below(256));
      if (no_nul && c == '\0') c = 'x';
    }
    return s;
  }

  // The `field` bytes of a NUL-padded text field made from the `valid` text:
  // the text itself, the text with garbage after its NUL, with one letter
  // of another case, with a byte more, cut short, random bytes, or the whole
  // field without a NUL.
  std::string text_field(std::string_view valid, size_t field) {
    std::string t(valid);
    switch (below(8)) {
      case 0:
        break;
      case 1:
        if (t.size() + 1 < field) {
          t += '\0';
          t += bytes(1 + below(field - t.size()));
        }
        break;
      case 2:
        if (!t.empty()) t[below(t.size())] ^= 0x20;
        break;
      case 3:
        t += percent(50) ? " " : "s";
        break;
      case 4:
        t.resize(below(t.size()));
        break;
      case 5:
        t = bytes(field, /*no_nul=*/true);
        break;
      case 6:
        t = bytes(1 + below(field - 1));
        break;
      default:
        t.assign(field, t.empty() ? 'x' : t[0]);
        break;
    }
    t.resize(field, '\0');
    return t;
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_FUZZ_H_
