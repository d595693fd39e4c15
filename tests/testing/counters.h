// Shared by the process-level tests: the resource counters a reclaimed
// client must give back, read from the in-process daemon's snapshot, and
// bounded waits on them.
#ifndef RDMAPLANE_TESTS_TESTING_COUNTERS_H_
#define RDMAPLANE_TESTS_TESTING_COUNTERS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "control/admin.h"
#include "control/daemon.h"
#include "control/json_reader.h"
#include "tests/testing/hang_limit.h"

namespace rdmaplane::testing {

struct Held {
  uint32_t sessions = 0;
  uint32_t registrations = 0;
  uint32_t connections = 0;
  uint32_t arenas = 0;
  bool operator==(const Held&) const = default;
};

inline Held HeldOf(const control::DaemonSnapshot& s) {
  return {s.sessions, s.registrations, s.connections, s.arenas};
}

inline std::ostream& operator<<(std::ostream& os, const Held& h) {
  return os << "{sessions " << h.sessions << ", registrations "
            << h.registrations << ", connections " << h.connections
            << ", arenas " << h.arenas << "}";
}

inline Held Plus(Held h, int sessions, int registrations, int connections,
                 int arenas) {
  h.sessions += sessions;
  h.registrations += registrations;
  h.connections += connections;
  h.arenas += arenas;
  return h;
}

// What the daemon holds once it has taken in everything done before the
// call. The gauges of Daemon::Snapshot lag: the control thread sets them at
// the end of its turn, after it answered (a hello, an arena). So the
// control thread is asked over its socket, as rdmaplanectl asks, and its
// "counters" answer carries the values it computes at that moment, in a
// turn that began after the call. The question's own connection counts as
// a session in the gauges (and holds two descriptors of this process) until
// the turn that answered it ends; the answer leaves it out. So the gauges
// are awaited to agree with the answer: the question is then gone too.
inline Held Settled(const control::Daemon& daemon) {
  absl::StatusOr<std::string> text = control::QueryDaemon(
      daemon.socket_path(), "counters", /*json=*/true, kHangLimit);
  if (!text.ok()) {
    ADD_FAILURE() << "the daemon did not answer: " << text.status();
    return HeldOf(daemon.Snapshot());
  }
  const control::Json counters = control::ParseOrDie(*text);
  auto get = [&](const char* name) {
    return static_cast<uint32_t>(counters[name].U64());
  };
  const Held held = {get("sessions"), get("registrations"),
                     get("connections"), get("arenas")};
  if (!WaitFor([&] { return HeldOf(daemon.Snapshot()) == held; })) {
    ADD_FAILURE() << "the daemon's gauges read " << HeldOf(daemon.Snapshot())
                  << ", its control thread counts " << held;
  }
  return held;
}

// Waits until the counters read `want`; reports what they read otherwise.
inline ::testing::AssertionResult CountersReach(
    const control::Daemon& daemon, const Held& want,
    absl::Duration timeout = kHangLimit) {
  if (WaitFor([&] { return HeldOf(daemon.Snapshot()) == want; }, timeout)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "daemon holds " << HeldOf(daemon.Snapshot()) << ", expected "
         << want;
}

// `field` of the daemon's connections status (a number, e.g. "posted":
// requests the engine took, or "rx_packets"), summed over its connections,
// asked over its socket as rdmaplanectl does. A daemon that does not answer
// fails the test (and the sum is 0), so that an expected 0 is never met by
// a query that failed.
inline uint64_t SumOverConnections(const control::Daemon& daemon,
                                   const std::string& field) {
  absl::StatusOr<std::string> text = control::QueryDaemon(
      daemon.socket_path(), "connections", /*json=*/true, kHangLimit);
  if (!text.ok()) {
    ADD_FAILURE() << "the daemon's connections status: " << text.status();
    return 0;
  }
  const control::Json list = control::ParseOrDie(*text);
  uint64_t total = 0;
  for (const control::Json& c : list.Array()) {
    total += c[field].U64();
  }
  return total;
}

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_COUNTERS_H_
