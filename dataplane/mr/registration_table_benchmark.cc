// Costs of the registration table on one core: key lookup (hit and miss),
// a transfer pin (BeginUse + EndUse), the remote access check, a reader's
// quiescent point, and a control-plane register/deregister/reclaim cycle.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/mr/registration_table.h"

namespace rdmaplane::mr {
namespace {

constexpr uint32_t kConnection = 7;

// A table with `n` live registrations and their keys in random order, so the
// lookups walk slots in a cache-unfriendly order once n is large.
struct Filled {
  explicit Filled(uint32_t n) : table(n, 1), memory(4096) {
    for (uint32_t i = 0; i < n; ++i) {
      Registration r;
      r.owner = 1;
      r.connection = kConnection;
      r.address = uint64_t{i} << 12;
      r.length = 4096;
      r.host = memory.data();
      r.access = kAccessRemoteRead | kAccessRemoteWrite;
      keys.push_back(*table.Insert(r));
    }
    std::shuffle(keys.begin(), keys.end(), std::mt19937(1));
  }
  RegistrationTable table;
  std::vector<uint8_t> memory;
  std::vector<uint32_t> keys;
};

void BM_LookupHit(benchmark::State& state) {
  Filled f(static_cast<uint32_t>(state.range(0)));
  const size_t mask = f.keys.size() - 1;
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.table.Lookup(f.keys[i++ & mask]));
  }
}
BENCHMARK(BM_LookupHit)->Arg(1 << 10)->Arg(1 << 20);

// Stale tags of live slots: the same loads as a hit, then a key mismatch.
void BM_LookupMiss(benchmark::State& state) {
  Filled f(static_cast<uint32_t>(state.range(0)));
  for (uint32_t& key : f.keys) key ^= 0x80;  // a tag that is not the slot's
  const size_t mask = f.keys.size() - 1;
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.table.Lookup(f.keys[i++ & mask]));
  }
}
BENCHMARK(BM_LookupMiss)->Arg(1 << 10)->Arg(1 << 20);

// Keys past the capacity: rejected by the bounds check alone.
void BM_LookupOutOfRange(benchmark::State& state) {
  Filled f(1 << 10);
  uint32_t key = (1 << 10) << 8 | 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.table.Lookup(key));
    benchmark::DoNotOptimize(key);
  }
}
BENCHMARK(BM_LookupOutOfRange);

void BM_ResolveRemote(benchmark::State& state) {
  Filled f(1 << 10);
  const size_t mask = f.keys.size() - 1;
  size_t i = 0;
  std::vector<uint64_t> addresses;  // an address inside each key's range
  for (uint32_t key : f.keys)
    addresses.push_back(f.table.Lookup(key)->address + 64);
  for (auto _ : state) {
    const size_t k = i++ & mask;
    benchmark::DoNotOptimize(ResolveRemote(f.table, f.keys[k], kConnection,
                                           kAccessRemoteWrite, addresses[k],
                                           1024));
  }
}
BENCHMARK(BM_ResolveRemote);

void BM_BeginEndUse(benchmark::State& state) {
  Filled f(1 << 10);
  const size_t mask = f.keys.size() - 1;
  size_t i = 0;
  for (auto _ : state) {
    const uint32_t key = f.keys[i++ & mask];
    if (!f.table.BeginUse(key)) state.SkipWithError("pin failed");
    f.table.EndUse(key);
  }
}
BENCHMARK(BM_BeginEndUse);

void BM_QuiescentNoChange(benchmark::State& state) {
  RegistrationTable table(16, 1);
  for (auto _ : state) table.Quiescent(0);
}
BENCHMARK(BM_QuiescentNoChange);

// One registration lifetime on the control thread, with one reader passing a
// quiescent point each time so every slot is reclaimed.
void BM_InsertRemoveReclaim(benchmark::State& state) {
  RegistrationTable table(1 << 10, 1);
  std::vector<uint8_t> memory(4096);
  Registration r;
  r.owner = 1;
  r.connection = kConnection;
  r.length = memory.size();
  r.host = memory.data();
  r.access = kAccessRemoteRead;
  for (auto _ : state) {
    const std::optional<uint32_t> key = table.Insert(r);
    if (!key || table.Remove(*key) != RegistrationTable::RemoveResult::kOk) {
      state.SkipWithError("insert/remove failed");
      break;
    }
    table.Quiescent(0);
    benchmark::DoNotOptimize(table.Reclaim());
  }
}
BENCHMARK(BM_InsertRemoveReclaim);

}  // namespace
}  // namespace rdmaplane::mr
