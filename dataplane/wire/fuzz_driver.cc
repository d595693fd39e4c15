#include "dataplane/wire/fuzz_driver.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/wire/guarded_buffer.h"
#include "tests/testing/fuzz.h"

namespace rdmaplane::wire {
namespace {

struct Options {
  uint64_t runs = 100000;
  uint64_t seed = 0;  // 0: the run's seed (testing::FuzzSeed)
  size_t max_len = 16384;
  std::vector<std::string> paths;
};

// SplitMix64: tiny, fast, and the same sequence on every platform, unlike
// the standard distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0.
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

// Applies one random edit to `data`, keeping it at most `max_len` bytes.
class Mutator {
 public:
  Mutator(const std::vector<std::vector<uint8_t>>& seeds, size_t max_len,
          uint64_t seed)
      : seeds_(seeds), max_len_(max_len), rng_(seed) {}

  Rng& rng() { return rng_; }

  void Mutate(std::vector<uint8_t>& data) {
    if (data.empty()) {
      Insert(data);
      return;
    }
    using Edit = void (Mutator::*)(std::vector<uint8_t>&);
    static constexpr Edit kEdits[] = {
        &Mutator::FlipBit,    &Mutator::SetByte,          &Mutator::SetField16,
        &Mutator::SetField32, &Mutator::Truncate,         &Mutator::Insert,
        &Mutator::Erase,      &Mutator::SpliceSameOffset, &Mutator::Crossover,
    };
    (this->*kEdits[rng_.Below(std::size(kEdits))])(data);
    if (data.size() > max_len_) data.resize(max_len_);
  }

 private:
  void FlipBit(std::vector<uint8_t>& data) {
    data[rng_.Below(data.size())] ^= static_cast<uint8_t>(1u << rng_.Below(8));
  }

  void SetByte(std::vector<uint8_t>& data) {
    static constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x7F,
                                               0x80, 0xFF, 0x11};
    uint8_t v = rng_.Below(2) == 0
                    ? kInteresting[rng_.Below(std::size(kInteresting))]
                    : static_cast<uint8_t>(rng_.Next());
    data[rng_.Below(data.size())] = v;
  }

  // Big-endian, as in every header field a network parser reads. Values near
  // the input's own length hit length-field checks.
  void SetField16(std::vector<uint8_t>& data) {
    if (data.size() < 2) {
      FlipBit(data);
      return;
    }
    const uint16_t n = static_cast<uint16_t>(data.size());
    const uint16_t candidates[] = {0,
                                   1,
                                   0x7FFF,
                                   0x8000,
                                   0xFFFF,
                                   static_cast<uint16_t>(n - 14),
                                   static_cast<uint16_t>(n - 34),
                                   static_cast<uint16_t>(n - 14 + 4),
                                   static_cast<uint16_t>(n - 14 - 4),
                                   static_cast<uint16_t>(rng_.Next())};
    const uint16_t v = candidates[rng_.Below(std::size(candidates))];
    const size_t at = rng_.Below(data.size() - 1);
    data[at] = static_cast<uint8_t>(v >> 8);
    data[at + 1] = static_cast<uint8_t>(v);
  }

  void SetField32(std::vector<uint8_t>& data) {
    if (data.size() < 4) {
      FlipBit(data);
      return;
    }
    const uint32_t candidates[] = {0,
                                   1,
                                   0x7FFFFFFF,
                                   0x80000000,
                                   0xFFFFFFFF,
                                   0x00FFFFFF,
                                   static_cast<uint32_t>(rng_.Next())};
    const uint32_t v = candidates[rng_.Below(std::size(candidates))];
    const size_t at = rng_.Below(data.size() - 3);
    for (int i = 0; i < 4; ++i) {
      data[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
    }
  }

  void Truncate(std::vector<uint8_t>& data) {
    // Mostly short cuts: those probe the trailer and length checks.
    const size_t cut =
        rng_.Below(2) == 0 ? 1 + rng_.Below(8) : rng_.Below(data.size() + 1);
    data.resize(data.size() - std::min(cut, data.size()));
  }

  void Insert(std::vector<uint8_t>& data) {
    const size_t at = rng_.Below(data.size() + 1);
    const size_t len = 1 + rng_.Below(16);
    const uint8_t fill =
        rng_.Below(2) == 0 ? 0 : static_cast<uint8_t>(rng_.Next());
    data.insert(data.begin() + static_cast<ptrdiff_t>(at), len, fill);
  }

  void Erase(std::vector<uint8_t>& data) {
    const size_t at = rng_.Below(data.size());
    const size_t len = std::min(1 + rng_.Below(16), data.size() - at);
    data.erase(data.begin() + static_cast<ptrdiff_t>(at),
               data.begin() + static_cast<ptrdiff_t>(at + len));
  }

  // Copies a few bytes from the same offset of another seed: with inputs of
  // a common layout this swaps header fields between valid inputs.
  void SpliceSameOffset(std::vector<uint8_t>& data) {
    const std::vector<uint8_t>& other = seeds_[rng_.Below(seeds_.size())];
    const size_t common = std::min(data.size(), other.size());
    if (common == 0) {
      FlipBit(data);
      return;
    }
    const size_t at = rng_.Below(common);
    const size_t len = std::min(1 + rng_.Below(16), common - at);
    std::memcpy(data.data() + at, other.data() + at, len);
  }

  // Joins a prefix of this input to a suffix of another seed.
  void Crossover(std::vector<uint8_t>& data) {
    const std::vector<uint8_t>& other = seeds_[rng_.Below(seeds_.size())];
    const size_t keep = rng_.Below(data.size() + 1);
    const size_t from = rng_.Below(other.size() + 1);
    data.resize(keep);
    data.insert(data.end(), other.begin() + static_cast<ptrdiff_t>(from),
                other.end());
  }

  const std::vector<std::vector<uint8_t>>& seeds_;
  const size_t max_len_;
  Rng rng_;
};

// Crash reporting. The signal handler may only use async-signal-safe calls,
// so everything it needs is prepared before each input runs.

const uint8_t* g_input = nullptr;
size_t g_input_len = 0;
uint64_t g_input_number = 0;
const char* g_input_path = nullptr;  // set when replaying a file
char g_seed_text[64];                // " (mutation seed 0x...)"
char g_crash_prefix[4096];           // "<dir>/crash-"

void WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void WriteStr(int fd, const char* s) { WriteAll(fd, s, std::strlen(s)); }

void OnCrash(int sig) {
  if (g_input_path != nullptr) {
    WriteStr(STDERR_FILENO, "\nfuzz_driver: crashed on ");
    WriteStr(STDERR_FILENO, g_input_path);
    WriteStr(STDERR_FILENO, "\n");
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  char path[sizeof(g_crash_prefix) + 32];
  size_t len = std::strlen(g_crash_prefix);
  std::memcpy(path, g_crash_prefix, len);
  char digits[24];
  size_t nd = 0;
  uint64_t v = g_input_number;
  do {
    digits[nd++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (nd > 0) path[len++] = digits[--nd];
  path[len] = '\0';

  WriteStr(STDERR_FILENO, "\nfuzz_driver: crashed on input #");
  WriteStr(STDERR_FILENO, path + std::strlen(g_crash_prefix));
  WriteStr(STDERR_FILENO, g_seed_text);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    WriteAll(fd, g_input, g_input_len);
    close(fd);
    WriteStr(STDERR_FILENO, "; saved to ");
    WriteStr(STDERR_FILENO, path);
    WriteStr(STDERR_FILENO, " (replay: pass that path as an argument)");
  }
  WriteStr(STDERR_FILENO, "\ninput hex:");
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < g_input_len && i < 512; ++i) {
    char b[4] = {i % 32 == 0 ? '\n' : ' ', kHex[g_input[i] >> 4],
                 kHex[g_input[i] & 15], '\0'};
    WriteStr(STDERR_FILENO, b);
  }
  WriteStr(STDERR_FILENO, g_input_len > 512 ? "\n...\n" : "\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashHandler() {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::snprintf(g_crash_prefix, sizeof(g_crash_prefix), "%s/crash-",
                dir != nullptr ? dir : ".");
  // An alternate stack, so that stack overflows are reported too.
  static char alt_stack[64 * 1024];
  stack_t ss = {};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  sigaltstack(&ss, nullptr);
  struct sigaction sa = {};
  sa.sa_handler = OnCrash;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) {
    sigaction(sig, &sa, nullptr);
  }
}

// Runs the target on `input` at both edges of the guarded buffer.
void RunOne(GuardedBuffer& buffer, const std::vector<uint8_t>& input,
            uint64_t number) {
  g_input = input.data();
  g_input_len = input.size();
  g_input_number = number;
  std::span<uint8_t> copy = buffer.CopyBeforeGuard(input);
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
  copy = buffer.CopyAfterGuard(input);
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

bool ParseFlag(std::string_view arg, std::string_view name, uint64_t* value) {
  if (arg.substr(0, name.size()) != name) return false;
  const std::string digits(arg.substr(name.size()));
  char* end = nullptr;
  *value = std::strtoull(digits.c_str(), &end, 0);
  if (digits.empty() || *end != '\0') {
    std::fprintf(stderr, "fuzz_driver: bad flag %s\n",
                 std::string(arg).c_str());
    std::exit(2);
  }
  return true;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    uint64_t v = 0;
    if (ParseFlag(arg, "-runs=", &o.runs) ||
        ParseFlag(arg, "-seed=", &o.seed)) {
      continue;
    }
    if (ParseFlag(arg, "-max_len=", &v)) {
      o.max_len = static_cast<size_t>(v);
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      std::fprintf(stderr, "fuzz_driver: unknown flag %s\n", argv[i]);
      std::exit(2);
    }
    o.paths.emplace_back(arg);
  }
  return o;
}

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz_driver: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int Replay(const Options& o, GuardedBuffer& buffer) {
  std::vector<std::filesystem::path> files;
  for (const std::string& p : o.paths) {
    if (std::filesystem::is_directory(p)) {
      for (const auto& entry : std::filesystem::directory_iterator(p)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.emplace_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  uint64_t n = 0;
  for (const auto& f : files) {
    std::fprintf(stderr, "fuzz_driver: replaying %s\n", f.c_str());
    g_input_path = f.c_str();
    RunOne(buffer, ReadFile(f), n++);
  }
  g_input_path = nullptr;
  std::fprintf(stderr, "fuzz_driver: %zu inputs replayed, no failure\n",
               files.size());
  return 0;
}

int Main(int argc, char** argv) {
  Options o = ParseOptions(argc, argv);
  InstallCrashHandler();
  GuardedBuffer buffer(std::max<size_t>(o.max_len, 1 << 16));
  if (!o.paths.empty()) return Replay(o, buffer);

  const std::vector<std::vector<uint8_t>> seeds = FuzzSeedCorpus();
  if (seeds.empty()) {
    std::fprintf(stderr, "fuzz_driver: the target has no seed inputs\n");
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  uint64_t number = 0;
  for (const std::vector<uint8_t>& s : seeds) RunOne(buffer, s, number++);

  if (o.seed == 0) o.seed = rdmaplane::testing::FuzzSeed();
  std::fprintf(stderr,
               "fuzz_driver: mutation seed 0x%llx (replay: -seed=0x%llx)\n",
               static_cast<unsigned long long>(o.seed),
               static_cast<unsigned long long>(o.seed));
  std::snprintf(g_seed_text, sizeof(g_seed_text), " (mutation seed 0x%llx)",
                static_cast<unsigned long long>(o.seed));
  Mutator mutator(seeds, o.max_len, o.seed);
  std::vector<uint8_t> input;
  for (uint64_t i = 0; i < o.runs; ++i) {
    // Half the time keep mutating the previous input to reach deeper edits.
    if (input.empty() || mutator.rng().Below(2) == 0) {
      input = seeds[mutator.rng().Below(seeds.size())];
    }
    const size_t edits = 1 + mutator.rng().Below(4);
    for (size_t e = 0; e < edits; ++e) mutator.Mutate(input);
    RunOne(buffer, input, number++);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::fprintf(stderr,
               "fuzz_driver: %zu seeds and %llu mutations (seed 0x%llx) ran "
               "without failure in %.2f s\n",
               seeds.size(), static_cast<unsigned long long>(o.runs),
               static_cast<unsigned long long>(o.seed), secs);
  return 0;
}

}  // namespace
}  // namespace rdmaplane::wire

int main(int argc, char** argv) { return rdmaplane::wire::Main(argc, argv); }
