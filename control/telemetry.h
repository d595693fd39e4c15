// The daemon's status in DPDK telemetry (dpdk-telemetry.py, or any client
// of <EAL runtime dir>/dpdk_telemetry.v2):
//
//   /rdmaplane/status         {"version": ..., "pid": ..., "clients": 2, ...}
//   /rdmaplane/counters       {"port_rx_frames": 12345, ...}
//   /rdmaplane/clients        {"<session id>": {"pid": ..., ...}, ...}
//   /rdmaplane/connections    {"<connection id>": {"service": ..., ...}, ...}
//   /rdmaplane/registrations  {"<key>": {"session_id": ..., ...}, ...}
//
// Field names are those of control/status.h. DPDK 22.11 cannot put a dict
// in an array, so lists are dicts keyed by id. Its JSON writer mangles
// bytes outside printable ASCII, so strings are sent as printable ASCII:
// other bytes, and '%', become %XX; strings are cut at 127 bytes. A reply
// must fit in 16 KiB: entries that would not fit are left out and counted
// in an "omitted" entry (rdmaplanectl shows everything). Counter names are
// reduced to the characters telemetry allows (letters, digits, '_', '/').
//
// Thread-safe. The callbacks run on DPDK's telemetry threads, once the EAL
// is initialized (port::InitDpdk); registering before that is fine.
#ifndef RDMAPLANE_CONTROL_TELEMETRY_H_
#define RDMAPLANE_CONTROL_TELEMETRY_H_

#include <functional>
#include <string>
#include <string_view>

#include "control/status.h"

namespace rdmaplane::control {

// Registers the commands (once per process) and makes `source` answer them,
// replacing any earlier source. `source` is called under a lock that
// UnregisterTelemetrySource also takes: it must not call either function.
void RegisterTelemetry(std::function<DaemonStatus()> source);

// Forgets the source; once this returns no callback is using it any more,
// and the commands answer null (an error) until the next RegisterTelemetry.
// Call it before the daemon the source reads from stops.
void UnregisterTelemetrySource();

// `text` as telemetry sends it: printable ASCII with other bytes and '%'
// as %XX, at most 127 bytes (never a cut %XX).
std::string TelemetryString(std::string_view text);

// `name` with every character telemetry does not allow in a name replaced
// by '_'; at most 127 bytes; "_" when empty.
std::string TelemetryName(std::string_view name);

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_TELEMETRY_H_
