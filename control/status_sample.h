// A DaemonStatus with every field set and service names that need escaping,
// shared by the status, admin and telemetry tests.
// Thread-compatible.
#ifndef RDMAPLANE_CONTROL_STATUS_SAMPLE_H_
#define RDMAPLANE_CONTROL_STATUS_SAMPLE_H_

#include <string>
#include <vector>

#include "control/status.h"

namespace rdmaplane::control {

// Quotes, backslashes, control characters, a NUL, UTF-8, markup, empty.
// All valid UTF-8.
const std::vector<std::string>& OddServiceNames();

// Two clients, one connection per odd service name (ids from 1), two
// registrations, three counters (one of them UINT64_MAX).
DaemonStatus SampleStatus();

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_STATUS_SAMPLE_H_
