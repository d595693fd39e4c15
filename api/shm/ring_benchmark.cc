// Cost of moving one entry through an SpscRing:
//
//   BM_SameThread   push then pop on one thread: the ring's own instruction
//                   cost, with every cache line local.
//   BM_CrossCore    a producer thread pinned to CPU 0 and the consumer (the
//                   benchmark thread) pinned to CPU 1: throughput across
//                   cores, including the cache-line transfers of entries and
//                   indices. Time per iteration is ns per message.
//   BM_CrossCoreRoundTrip
//                   one request ring and one response ring between the two
//                   CPUs, one message in flight: the latency a control
//                   request pays twice.
//
// If pinning is refused (a cpuset without CPUs 0 and 1, one CPU), the
// benchmarks run unpinned and report pinned=0. The argument is the ring
// capacity.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/test_util.h"

namespace rdmaplane::shm {
namespace {

using testing::Backoff;
using testing::GuardedRegion;

struct Entry16 {
  uint64_t seq;
  uint64_t payload;
};
static_assert(sizeof(Entry16) == 16);

uint64_t& SeqOf(Entry16& entry) { return entry.seq; }
uint64_t& SeqOf(SendEntry& entry) { return entry.wr_id; }

bool PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Pins the calling thread to one CPU for its lifetime, then restores the
// affinity it had.
class ScopedPin {
 public:
  explicit ScopedPin(int cpu) {
    saved_ = pthread_getaffinity_np(pthread_self(), sizeof(old_), &old_) == 0;
    pinned_ = saved_ && PinCurrentThread(cpu);
  }
  ~ScopedPin() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof(old_), &old_);
  }
  ScopedPin(const ScopedPin&) = delete;
  ScopedPin& operator=(const ScopedPin&) = delete;

  bool pinned() const { return pinned_; }

 private:
  cpu_set_t old_;
  bool saved_ = false;
  bool pinned_ = false;
};

constexpr int kProducerCpu = 0;
constexpr int kConsumerCpu = 1;

template <typename T>
class RingMemory {
 public:
  explicit RingMemory(uint32_t capacity)
      : region_(SpscRing<T>::BytesFor(capacity)) {
    absl::StatusOr<SpscRing<T>> ring =
        SpscRing<T>::Create(region_.data(), region_.size(), capacity);
    if (ring.ok()) ring_ = *ring;
  }
  SpscRing<T>& ring() { return ring_; }

 private:
  GuardedRegion region_;
  SpscRing<T> ring_;
};

template <typename T>
void BM_SameThread(benchmark::State& state) {
  RingMemory<T> memory(static_cast<uint32_t>(state.range(0)));
  SpscRing<T>& ring = memory.ring();
  if (!ring.valid()) {
    state.SkipWithError("ring creation failed");
    return;
  }
  T in{};
  T out{};
  uint64_t seq = 0;
  for (auto _ : state) {
    SeqOf(in) = seq;
    if (!ring.TryPush(in) || ring.TryPop(&out) != PopResult::kOk ||
        SeqOf(out) != seq) {
      state.SkipWithError("ring misbehaved");
      break;
    }
    benchmark::DoNotOptimize(out);
    ++seq;
  }
  state.SetItemsProcessed(state.iterations());
}

template <typename T>
void BM_CrossCore(benchmark::State& state) {
  RingMemory<T> memory(static_cast<uint32_t>(state.range(0)));
  SpscRing<T>& ring = memory.ring();
  if (!ring.valid()) {
    state.SkipWithError("ring creation failed");
    return;
  }
  std::atomic<bool> stop{false};
  std::atomic<bool> producer_pinned{false};
  // Pushes until told to stop; whatever is left in the ring is discarded.
  // Through a handle of its own, as another process would hold.
  std::thread producer([&, own = ring]() mutable {
    producer_pinned.store(PinCurrentThread(kProducerCpu),
                          std::memory_order_relaxed);
    T entry{};
    uint64_t seq = 0;
    Backoff backoff;
    while (!stop.load(std::memory_order_relaxed)) {
      SeqOf(entry) = seq;
      if (own.TryPush(entry)) {
        ++seq;
        backoff.Reset();
      } else {
        backoff.Pause();
      }
    }
  });

  ScopedPin consumer_pin(kConsumerCpu);
  Backoff backoff;
  T out;
  uint64_t expected = 0;
  for (auto _ : state) {
    while (ring.TryPop(&out) != PopResult::kOk) backoff.Pause();
    backoff.Reset();
    if (SeqOf(out) != expected) {
      state.SkipWithError("entries lost or reordered");
      break;
    }
    ++expected;
  }
  stop.store(true, std::memory_order_relaxed);
  producer.join();
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * sizeof(T));
  state.counters["pinned"] =
      consumer_pin.pinned() && producer_pinned.load(std::memory_order_relaxed);
}

void BM_CrossCoreRoundTrip(benchmark::State& state) {
  const uint32_t capacity = static_cast<uint32_t>(state.range(0));
  RingMemory<Entry16> request_memory(capacity);
  RingMemory<Entry16> response_memory(capacity);
  SpscRing<Entry16>& requests = request_memory.ring();
  SpscRing<Entry16>& responses = response_memory.ring();
  if (!requests.valid() || !responses.valid()) {
    state.SkipWithError("ring creation failed");
    return;
  }
  std::atomic<bool> stop{false};
  std::atomic<bool> server_pinned{false};
  // Echoes each request back with its payload incremented, through handles
  // of its own, as another process would hold.
  std::thread server([&, own_requests = requests,
                      own_responses = responses]() mutable {
    server_pinned.store(PinCurrentThread(kProducerCpu),
                        std::memory_order_relaxed);
    Backoff backoff;
    Entry16 entry;
    while (!stop.load(std::memory_order_relaxed)) {
      if (own_requests.TryPop(&entry) != PopResult::kOk) {
        backoff.Pause();
        continue;
      }
      backoff.Reset();
      ++entry.payload;
      while (!own_responses.TryPush(entry)) backoff.Pause();
    }
  });

  ScopedPin client_pin(kConsumerCpu);
  Backoff backoff;
  uint64_t seq = 0;
  for (auto _ : state) {
    if (!requests.TryPush(Entry16{seq, seq})) {
      state.SkipWithError("request ring full");
      break;
    }
    Entry16 response;
    while (responses.TryPop(&response) != PopResult::kOk) backoff.Pause();
    backoff.Reset();
    if (response.seq != seq || response.payload != seq + 1) {
      state.SkipWithError("wrong response");
      break;
    }
    ++seq;
  }
  stop.store(true, std::memory_order_relaxed);
  server.join();
  state.SetItemsProcessed(state.iterations());
  state.counters["pinned"] =
      client_pin.pinned() && server_pinned.load(std::memory_order_relaxed);
}

BENCHMARK_TEMPLATE(BM_SameThread, Entry16)->Arg(1024);
BENCHMARK_TEMPLATE(BM_SameThread, SendEntry)->Arg(1024);
BENCHMARK_TEMPLATE(BM_CrossCore, Entry16)->Arg(256)->Arg(1024)->UseRealTime();
BENCHMARK_TEMPLATE(BM_CrossCore, SendEntry)->Arg(256)->Arg(1024)->UseRealTime();
BENCHMARK(BM_CrossCoreRoundTrip)->Arg(64)->UseRealTime();

}  // namespace
}  // namespace rdmaplane::shm
