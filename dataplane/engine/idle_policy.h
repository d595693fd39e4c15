// What an engine does after a turn of its loop: carry on, give its CPU away
// for a moment, or sleep. Kept apart from the engine, with the time passed
// in, so that the policy is tested without threads or clocks.
//
// Adaptive engines spin `idle_spins` empty turns back to back (a request
// arriving right after the last one is seen at once), then yield their CPU
// between turns until `idle_ns` have passed without work, then sleep. The
// yield costs one system call when nothing else wants the CPU; when a client
// or another daemon shares it, that thread runs at once instead of waiting
// for the engine's time slice to run out (milliseconds, on a machine with
// more pollers than cores). After a sleep that nothing interrupted (a nap
// that timed out), the engine sleeps again right after the spin: staying
// awake idle_ns after every nap would keep an idle engine busy. Busy
// engines own their core: they never yield or sleep.
//
// Thread-compatible: one engine thread owns an instance.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_IDLE_POLICY_H_
#define RDMAPLANE_DATAPLANE_ENGINE_IDLE_POLICY_H_

#include <cstdint>

namespace rdmaplane::engine {

enum class PollMode { kBusy, kAdaptive };

class IdlePolicy {
 public:
  enum class Action { kPoll, kYield, kSleep };

  IdlePolicy(PollMode mode, uint32_t idle_spins, uint64_t idle_ns)
      : mode_(mode), idle_spins_(idle_spins), idle_ns_(idle_ns) {}

  // After a turn that did `work` (frames, requests, commands), at `now_ns`.
  // Only adaptive turns past the spin read the clock, so callers may pass
  // a lazily read time through `now`.
  template <typename Now>
  Action AfterTurn(bool work, Now now) {
    if (work) {
      idle_ = 0;
      naps_ = 0;
      return Action::kPoll;
    }
    if (mode_ == PollMode::kBusy || ++idle_ <= idle_spins_) {
      return Action::kPoll;
    }
    const uint64_t now_ns = now();
    if (idle_ == idle_spins_ + 1) {
      sleep_at_ns_ = naps_ > 0 ? now_ns : now_ns + idle_ns_;
    }
    return now_ns < sleep_at_ns_ ? Action::kYield : Action::kSleep;
  }

  // After a kSleep: whether something woke the engine before its timeout.
  void AfterSleep(bool woken) {
    idle_ = 0;
    naps_ = woken ? 0 : naps_ + 1;
  }

  // Sleeps in a row that nothing interrupted (for the nap back-off).
  uint32_t naps() const { return naps_; }

 private:
  PollMode mode_;
  uint32_t idle_spins_;
  uint64_t idle_ns_;
  uint32_t idle_ = 0;  // empty turns in a row
  uint32_t naps_ = 0;
  uint64_t sleep_at_ns_ = 0;  // when this idle stretch ends in sleep
};

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_IDLE_POLICY_H_
