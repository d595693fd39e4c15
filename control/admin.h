// Operator queries over the daemon's Unix control socket (the socket clients
// set up sessions on). rdmaplanectl connects and, instead of a hello, sends
// one shm::SetupMessage of type kSetupAdmin with text = topic and id = format
// (kAdminFormatText or kAdminFormatJson). The daemon answers with one
// kSetupAdminReply -- status (0, or an rdp_status code with text = reason)
// and length -- followed by exactly `length` bytes of the rendered answer,
// then closes the socket.
//
// Thread-safe (no shared state).
#ifndef RDMAPLANE_CONTROL_ADMIN_H_
#define RDMAPLANE_CONTROL_ADMIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/shm/setup.h"
#include "control/status.h"

namespace rdmaplane::control {

inline constexpr uint32_t kAdminFormatText = 0;
inline constexpr uint32_t kAdminFormatJson = 1;

// The largest answer QueryDaemon accepts.
inline constexpr uint64_t kMaxAdminAnswerBytes = 64ull << 20;

// --- Client side (rdmaplanectl) ----------------------------------------------

// Asks the daemon at `socket_path` for `topic` and returns the rendered
// answer. Everything -- connecting, sending, the whole answer -- finishes
// within `timeout`. Errors, with messages fit for an operator:
//   Unavailable       "no daemon at PATH: connection refused" (or "no such
//                     socket"); the daemon closed without answering
//   PermissionDenied  the socket's permissions or the daemon's policy
//   InvalidArgument   the daemon rejected the topic or format; the path or
//                     topic does not fit the protocol
//   DeadlineExceeded  no whole answer within `timeout`
//   DataLoss          a malformed or oversized answer
// Does not check `topic` itself: that is the daemon's word.
absl::StatusOr<std::string> QueryDaemon(const std::string& socket_path,
                                        std::string_view topic, bool json,
                                        absl::Duration timeout);

// --- Daemon side -------------------------------------------------------------

// The bytes of one kSetupAdminReply (`reason` cut to 63 bytes) followed by
// `body`, as they go on the stream socket.
std::string AdminAnswerBytes(int32_t status, std::string_view reason,
                             std::string_view body);

// The answer to one kSetupAdmin request: checks the format and topic
// (answering kStatusInvalid with a reason when they are wrong), calls
// `source` only for a valid request, and renders the topic. The daemon
// sends it without blocking (SessionServer).
std::string AdminAnswerFor(const shm::SetupMessage& request,
                           const std::function<DaemonStatus()>& source);

// Sends `bytes` on the stream socket `sock`, waiting while the peer does
// not read: gives up (false) when the peer takes nothing for `stall` or the
// whole answer is not out within `total`. False also if the peer is gone
// (no SIGPIPE). The caller closes `sock` afterwards either way. For a
// thread that may wait (tests' servers); the daemon's control thread never
// does.
bool SendAdminBytes(int sock, std::string_view bytes,
                    absl::Duration stall = absl::Milliseconds(100),
                    absl::Duration total = absl::Seconds(1));

// SendAdminBytes of AdminAnswerBytes.
bool SendAdminAnswer(int sock, int32_t status, std::string_view reason,
                     std::string_view body,
                     absl::Duration stall = absl::Milliseconds(100),
                     absl::Duration total = absl::Seconds(1));

// SendAdminBytes of AdminAnswerFor.
bool AnswerAdminRequest(int sock, const shm::SetupMessage& request,
                        const std::function<DaemonStatus()>& source);

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_ADMIN_H_
