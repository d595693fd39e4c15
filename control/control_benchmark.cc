// Costs of the control plane and of the shortest data-path round trips,
// through the real shared-memory rings and an in-process daemon:
//
//  * register + deregister round trips from a client (local memory, and RDMA
//    memory on a connection);
//  * re-registering an identical buffer (a cache hit), through the client
//    and directly on the RegistrationCache;
//  * one 8-byte write posted and waited for between two clients (latency),
//    and 64 KiB writes with 16 outstanding (throughput), over the engine's
//    in-process loopback link, with the engine polling adaptively or busily.
//
// Round trips cross threads (client -> control thread or engine -> client),
// so they are measured in wall-clock time.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/client.h"
#include "api/rdmaplane.h"
#include "control/daemon.h"
#include "control/registration_cache.h"
#include "dataplane/engine/engine.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::control {
namespace {

// A daemon on a private socket and two clients joined by one connection.
// Members are destroyed in reverse order: clients before the daemon.
struct Harness {
  explicit Harness(engine::PollMode mode = engine::PollMode::kAdaptive) {
    static std::atomic<int> counter{0};
    DaemonOptions options;
    options.poll_mode = mode;
    options.socket_path = "/tmp/rdp-bench-" + std::to_string(getpid()) + "-" +
                          std::to_string(counter++) + ".sock";
    daemon = std::make_unique<Daemon>(options);
    if (!daemon->Start().ok()) return;
    ClientOptions co;
    co.socket_path = options.socket_path;
    co.arena_bytes = 16u << 20;
    auto s = Client::Open(co);
    auto c = Client::Open(co);
    if (!s.ok() || !c.ok()) return;
    server = std::move(*s);
    client = std::move(*c);
    if (!server->Listen("bench").ok()) return;
    auto cc = client->Connect("bench");
    if (!cc.ok()) return;
    auto sc = server->Accept("bench", absl::Seconds(5));
    if (!sc.ok()) return;
    client_conn = *cc;
    server_conn = *sc;
    ok = true;
  }

  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<Client> server;
  std::unique_ptr<Client> client;
  rdp_conn server_conn = 0;
  rdp_conn client_conn = 0;
  bool ok = false;
};

// Skips the benchmark with a message when the harness did not come up.
bool Ready(const Harness& h, benchmark::State& state) {
  if (!h.ok) state.SkipWithError("cannot start the daemon or connect");
  return h.ok;
}

engine::PollMode ModeArg(const benchmark::State& state) {
  return state.range(0) == 0 ? engine::PollMode::kAdaptive
                             : engine::PollMode::kBusy;
}

void ModeArgs(benchmark::internal::Benchmark* b) {
  b->ArgName("busy")->Arg(0)->Arg(1);
}

// --- Control-plane round trips -----------------------------------------------

void BM_RegisterDeregisterMemory(benchmark::State& state) {
  Harness h;
  if (!Ready(h, state)) return;
  void* buf = h.client->Alloc(4096);
  for (auto _ : state) {
    auto key = h.client->RegisterMemory(buf, 4096, RDP_MEM_READWRITE);
    if (!key.ok() || !h.client->DeregisterMemory(*key).ok()) {
      state.SkipWithError("register/deregister failed");
      break;
    }
  }
}
BENCHMARK(BM_RegisterDeregisterMemory)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_RegisterDeregisterRdmaMemory(benchmark::State& state) {
  Harness h;
  if (!Ready(h, state)) return;
  void* buf = h.server->Alloc(4096);
  uint8_t desc[RDP_DESCRIPTOR_BYTES];
  for (auto _ : state) {
    uint32_t len = sizeof(desc);
    if (h.server->RegisterRdmaMemory(h.server_conn, buf, 4096,
                                     RDP_MEM_READWRITE, desc, &len) != RDP_OK ||
        h.server->DeregisterRdmaMemory(h.server_conn, desc, len) != RDP_OK) {
      state.SkipWithError("register/deregister failed");
      break;
    }
  }
}
BENCHMARK(BM_RegisterDeregisterRdmaMemory)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// --- Cache hits --------------------------------------------------------------

// Registering a buffer that is already registered, identically: the daemon
// bumps a reference count and returns the same key. One round trip each.
void BM_ReRegisterMemoryHit(benchmark::State& state) {
  Harness h;
  if (!Ready(h, state)) return;
  void* buf = h.client->Alloc(4096);
  auto first = h.client->RegisterMemory(buf, 4096, RDP_MEM_READWRITE);
  if (!first.ok()) {
    state.SkipWithError("register failed");
    return;
  }
  uint64_t hits = 0;
  for (auto _ : state) {
    auto key = h.client->RegisterMemory(buf, 4096, RDP_MEM_READWRITE);
    if (!key.ok() || *key != *first) {
      state.SkipWithError("not a cache hit");
      break;
    }
    ++hits;
  }
  // Untimed: drop the references taken above.
  for (uint64_t i = 0; i <= hits; ++i) (void)h.client->DeregisterMemory(*first);
}
BENCHMARK(BM_ReRegisterMemoryHit)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same hit on the daemon's side alone: RegistrationCache::Register finds
// the identical registration and bumps its count.
void BM_CacheRegisterHit(benchmark::State& state) {
  mr::RegistrationTable table(1 << 16, /*readers=*/1);
  RegistrationCache cache(&table);
  std::vector<uint8_t> memory(4096);
  mr::Registration r;
  r.owner = 1;
  r.connection = mr::kAnyConnection;
  r.address = 0x7f0000001000;
  r.length = memory.size();
  r.host = memory.data();
  r.access = mr::kAccessLocal;
  const std::optional<uint32_t> first = cache.Register(r);
  for (auto _ : state) {
    std::optional<uint32_t> key = cache.Register(r);
    benchmark::DoNotOptimize(key);
  }
  if (!first || cache.references(*first) != state.iterations() + 1) {
    state.SkipWithError("not a cache hit");
  }
}
BENCHMARK(BM_CacheRegisterHit);

// For contrast: a miss (new table entry) and its release, with the engine's
// quiescent point that lets the slot be reused.
void BM_CacheRegisterMissDeregister(benchmark::State& state) {
  mr::RegistrationTable table(1 << 16, /*readers=*/1);
  RegistrationCache cache(&table);
  std::vector<uint8_t> memory(4096);
  mr::Registration r;
  r.owner = 1;
  r.connection = mr::kAnyConnection;
  r.address = 0x7f0000001000;
  r.length = memory.size();
  r.host = memory.data();
  r.access = mr::kAccessLocal;
  for (auto _ : state) {
    std::optional<uint32_t> key = cache.Register(r);
    if (!key || cache.Deregister(1, mr::kAnyConnection, *key) !=
                    RegistrationCache::Release::kOk) {
      state.SkipWithError("register/deregister failed");
      break;
    }
    table.Quiescent(0);
  }
}
BENCHMARK(BM_CacheRegisterMissDeregister);

// --- Data path ---------------------------------------------------------------

// One 8-byte write, posted and waited for: with GetOverlappedResult's wait
// (a futex sleep and wake), or (arg poll:1) by polling it without waiting,
// which shows the engine's part without the wake-up.
void BM_Write8Latency(benchmark::State& state) {
  Harness h(ModeArg(state));
  if (!Ready(h, state)) return;
  const bool poll = state.range(1) != 0;
  auto* target = static_cast<uint8_t*>(h.server->Alloc(4096));
  auto* src = static_cast<uint8_t*>(h.client->Alloc(4096));
  uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t len = sizeof(desc);
  auto lkey = h.client->RegisterMemory(src, 4096, RDP_MEM_READWRITE);
  if (!lkey.ok() ||
      h.server->RegisterRdmaMemory(h.server_conn, target, 4096, RDP_MEM_WRITE,
                                   desc, &len) != RDP_OK) {
    state.SkipWithError("registration failed");
    return;
  }
  const rdp_sge sge{src, 8, *lkey};
  uint64_t n = 0;
  for (auto _ : state) {
    std::memcpy(src, &n, sizeof(n));
    rdp_overlapped ov{};
    int r = h.client->Write(h.client_conn, &sge, 1, desc, len, 0, 0, &ov);
    while (r == RDP_PENDING) {
      r = h.client->GetOverlappedResult(h.client_conn, &ov, !poll, nullptr);
    }
    if (r != RDP_OK) {
      state.SkipWithError(rdp_status_name(r));
      break;
    }
    ++n;
  }
  if (n > 0 && std::memcmp(target, &--n, sizeof(n)) != 0) {
    state.SkipWithError("the last write did not land");
  }
}
BENCHMARK(BM_Write8Latency)
    ->ArgNames({"busy", "poll"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// 64 KiB writes, 16 outstanding: each iteration reaps the oldest and posts
// the next.
void BM_Write64KThroughput(benchmark::State& state) {
  constexpr uint32_t kBytes = 64u << 10;
  constexpr uint32_t kDepth = 16;
  Harness h(ModeArg(state));
  if (!Ready(h, state)) return;
  auto* target = static_cast<uint8_t*>(h.server->Alloc(kDepth * kBytes));
  auto* src = static_cast<uint8_t*>(h.client->Alloc(kDepth * kBytes));
  std::memset(src, 0x5A, kDepth * kBytes);
  uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t len = sizeof(desc);
  auto lkey = h.client->RegisterMemory(src, kDepth * kBytes, RDP_MEM_READWRITE);
  if (!lkey.ok() ||
      h.server->RegisterRdmaMemory(h.server_conn, target, kDepth * kBytes,
                                   RDP_MEM_WRITE, desc, &len) != RDP_OK) {
    state.SkipWithError("registration failed");
    return;
  }
  rdp_overlapped ov[kDepth] = {};
  auto post = [&](uint32_t slot) {
    const rdp_sge sge{src + slot * kBytes, kBytes, *lkey};
    return h.client->Write(h.client_conn, &sge, 1, desc, len, slot * kBytes, 0,
                           &ov[slot]);
  };
  for (uint32_t i = 0; i < kDepth; ++i) {
    if (post(i) != RDP_PENDING) {
      state.SkipWithError("post failed");
      return;
    }
  }
  uint64_t i = 0;
  for (auto _ : state) {
    const uint32_t slot = i++ % kDepth;
    const int r =
        h.client->GetOverlappedResult(h.client_conn, &ov[slot], true, nullptr);
    if (r != RDP_OK || post(slot) != RDP_PENDING) {
      state.SkipWithError(rdp_status_name(r));
      break;
    }
  }
  for (uint32_t s = 0; s < kDepth; ++s) {
    h.client->GetOverlappedResult(h.client_conn, &ov[s], true, nullptr);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
  if (target[0] != 0x5A || target[kDepth * kBytes - 1] != 0x5A) {
    state.SkipWithError("the writes did not land");
  }
}
BENCHMARK(BM_Write64KThroughput)
    ->Apply(ModeArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rdmaplane::control
