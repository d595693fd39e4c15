// How long the test helpers wait for what a working daemon does in
// milliseconds (an answer, a completion, a session gone, a descriptor let
// go). Shared by the fixtures here and the tests that use them.
//
// Thread-safe (a constant).
#ifndef RDMAPLANE_TESTS_TESTING_HANG_LIMIT_H_
#define RDMAPLANE_TESTS_TESTING_HANG_LIMIT_H_

#include "absl/time/time.h"

namespace rdmaplane::testing {

// A wait bounded by it only turns a hang into a failure, and returns as soon
// as the state is there: generous, since ThreadSanitizer on two CPUs shared
// with builds stretches milliseconds into seconds.
inline constexpr absl::Duration kHangLimit = absl::Seconds(30);

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_HANG_LIMIT_H_
