// Seeded random numbers for the fuzzing tests. Every fuzzing test takes its
// seed from RDP_FUZZ_SEED when it is set (and prints the seed with every
// failure), so that a failure can be replayed.
//
// Thread-compatible.
#ifndef RDMAPLANE_API_TESTING_FUZZ_H_
#define RDMAPLANE_API_TESTING_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

namespace rdmaplane::testing {

// The seed of a fuzzing test: RDP_FUZZ_SEED when it is set, else `fallback`.
inline uint64_t FuzzSeed(uint64_t fallback) {
  const char* env = std::getenv("RDP_FUZZ_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : fallback;
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

 private:
  std::mt19937_64 rng_;
};

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_API_TESTING_FUZZ_H_
