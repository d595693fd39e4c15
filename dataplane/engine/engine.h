// An engine: one thread that runs every connection endpoint it was given in
// a run-to-completion loop (frames in, client requests in, frames out,
// completions out, timers), with no locks and no allocation on the loop.
// Changes arrive as commands from the control plane, applied at the top of
// the loop. When idle, the engine spins for a while, then (adaptive mode)
// sleeps until a client rings its session's wake-up socket after posting to
// a sleeping engine, waking at least for the next retransmit timer.
//
// Thread-safety: AddPair/RemovePair/Stop are called from one control thread
// and block until the engine applied them; everything else is internal to
// the engine thread.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_ENGINE_H_
#define RDMAPLANE_DATAPLANE_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>

#include "api/shm/ring.h"
#include "dataplane/engine/endpoint.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::engine {

enum class PollMode { kBusy, kAdaptive };

struct EngineOptions {
  PollMode mode = PollMode::kAdaptive;
  uint32_t reader_index = 0;       // this engine's slot in the table
  uint32_t max_endpoints = 1024;
  uint32_t budget = 32;            // frames or requests per endpoint per turn
  uint32_t idle_spins = 20000;     // empty turns before sleeping
  uint64_t max_sleep_ns = 10'000'000;
};

struct EngineCounters {
  std::atomic<uint64_t> loops{0};
  std::atomic<uint64_t> sleeps{0};
  std::atomic<uint64_t> wakeups{0};
};

class Engine {
 public:
  Engine(mr::RegistrationTable* table, const EngineOptions& options);
  ~Engine();  // stops the thread

  void Start();
  void Stop();

  // Wires a and b to each other and starts serving both.
  void AddPair(Endpoint* a, Endpoint* b);
  // Stops serving `e` and its peer: e's outstanding work completes with
  // `status` / `state`, the peer's with `peer_status` / `peer_state`. The
  // caller may delete both once this returns.
  void RemovePair(Endpoint* e, int32_t status, shm::ConnectionState state,
                  int32_t peer_status, shm::ConnectionState peer_state);

  // The engine's end of one client session's wake-up socket pair (the
  // client sends on the other end). Per session, so that no client can
  // drain or saturate another's wake-ups. Thread-safe (epoll_ctl).
  void AddWakeFd(int read_fd);
  void RemoveWakeFd(int read_fd);
  const EngineCounters& counters() const { return counters_; }
  const rc::Clock* clock() const { return &clock_; }

 private:
  enum class CommandType : uint8_t { kAddPair, kRemovePair };
  struct Command {
    CommandType type;
    Endpoint* a;
    Endpoint* b;
    int32_t status;
    shm::ConnectionState state;
    int32_t peer_status;
    shm::ConnectionState peer_state;
    std::atomic<bool>* done;
  };

  void Run();
  void ApplyCommands();
  void Submit(const Command& c);
  void Sleep();

  mr::RegistrationTable* table_;
  EngineOptions options_;
  MonotonicClock clock_;
  int eventfd_ = -1;  // commands and Stop
  int epoll_fd_ = -1;  // eventfd_ and every session's wake-up socket
  struct AlignedDelete {
    void operator()(uint8_t* p) const {
      ::operator delete[](p, std::align_val_t(shm::kCacheLine));
    }
  };
  std::unique_ptr<uint8_t[], AlignedDelete> command_memory_;
  shm::SpscRing<Command> commands_;
  std::unique_ptr<Endpoint*[]> endpoints_;
  uint32_t count_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  EngineCounters counters_;
};

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_ENGINE_H_
