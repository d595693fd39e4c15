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

// Polls `done` every millisecond until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& done,
                    absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// The counters once they stopped moving.
inline Held Settled(const control::Daemon& daemon) {
  Held last = HeldOf(daemon.Snapshot());
  for (int i = 0; i < 200; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
    const Held now = HeldOf(daemon.Snapshot());
    if (now == last) break;
    last = now;
  }
  return last;
}

// Waits until the counters read `want`; reports what they read otherwise.
inline ::testing::AssertionResult CountersReach(
    const control::Daemon& daemon, const Held& want,
    absl::Duration timeout = absl::Seconds(5)) {
  if (WaitFor([&] { return HeldOf(daemon.Snapshot()) == want; }, timeout)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "daemon holds " << HeldOf(daemon.Snapshot()) << ", expected "
         << want;
}

// `field` of the daemon's connections status (a number, e.g. "posted":
// requests the engine took, or "rx_packets"), summed over its connections,
// asked over its socket as rdmaplanectl does; 0 if the daemon does not
// answer.
inline uint64_t SumOverConnections(const control::Daemon& daemon,
                                   const std::string& field) {
  absl::StatusOr<std::string> text = control::QueryDaemon(
      daemon.socket_path(), "connections", /*json=*/true, absl::Seconds(5));
  if (!text.ok()) return 0;
  const control::Json list = control::ParseOrDie(*text);
  uint64_t total = 0;
  for (const control::Json& c : list.Array()) {
    total += c[field].U64();
  }
  return total;
}

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_COUNTERS_H_
