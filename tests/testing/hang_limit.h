// How long the test helpers wait for what a working daemon does in
// milliseconds (an answer, a completion, a session gone, a descriptor let
// go), and the wait bounded by it (WaitFor). Shared by the fixtures here and
// the tests that use them.
//
// Thread-safe (a constant).
#ifndef RDMAPLANE_TESTS_TESTING_HANG_LIMIT_H_
#define RDMAPLANE_TESTS_TESTING_HANG_LIMIT_H_

#include <chrono>
#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rdmaplane::testing {

// A wait bounded by it only turns a hang into a failure, and returns as soon
// as the state is there: generous, since ThreadSanitizer on two CPUs shared
// with builds stretches milliseconds into seconds.
inline constexpr absl::Duration kHangLimit = absl::Seconds(30);

// Polls `done` every millisecond until it holds; false once `timeout`
// passed, which only turns a hang into a failure.
// On the monotonic clock (a step of the wall clock fails no wait), and
// `done` is asked once more after `timeout` (the clock is read before each
// ask), so that a state reached while this thread was not scheduled counts.
inline bool WaitFor(const std::function<bool()>& done,
                    absl::Duration timeout = kHangLimit) {
  const auto end =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  while (true) {
    const bool late = std::chrono::steady_clock::now() > end;
    if (done()) return true;
    if (late) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_HANG_LIMIT_H_
