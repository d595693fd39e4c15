// Why a connection ends, and what that means for its client: the one place
// that maps a close reason to the state the client sees and to the status
// every request it did not see complete ends with. An endpoint closes once;
// the first reason wins (Endpoint::Close).
//
// Pure functions: thread-safe.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_CLOSE_REASON_H_
#define RDMAPLANE_DATAPLANE_ENGINE_CLOSE_REASON_H_

#include <cstdint>

#include "api/shm/layout.h"

namespace rdmaplane::engine {

enum class CloseReason : uint8_t {
  // This end's client disconnected, closed its session, or exited.
  kClosedByClient,
  // The other end did (or its client exited), or the connection was
  // refused before it was accepted.
  kPeerClosed,
  // Retries exhausted, or the peer answered with a NAK the connection
  // cannot survive.
  kTransportError,
  // Our responder refused a request of the peer, an invalid one or an
  // access it may not make, and the connection broke.
  kRequestRefused,
  kAccessRefused,
  // The client corrupted its own rings (a completion could not be pushed,
  // a send ring index out of range).
  kClientBroke,
  // The daemon shuts down.
  kDaemonStopping,
};

struct CloseOutcome {
  shm::ConnectionState state;  // what posting then fails with
  int32_t status;              // how unfinished requests end
};

constexpr CloseOutcome OutcomeOf(CloseReason reason) {
  switch (reason) {
    case CloseReason::kClosedByClient:
      return {shm::kConnFree, shm::kStatusAborted};
    case CloseReason::kPeerClosed:
      return {shm::kConnReset, shm::kStatusConnReset};
    case CloseReason::kTransportError:
    case CloseReason::kClientBroke:
      return {shm::kConnAborted, shm::kStatusConnAborted};
    case CloseReason::kRequestRefused:
      return {shm::kConnRequestRefused, shm::kStatusConnAborted};
    case CloseReason::kAccessRefused:
      return {shm::kConnAccessRefused, shm::kStatusConnAborted};
    case CloseReason::kDaemonStopping:
      return {shm::kConnDaemonGone, shm::kStatusConnAborted};
  }
  return {shm::kConnAborted, shm::kStatusConnAborted};
}

// The transport broke the connection (whatever the QP's error was).
constexpr bool IsTransportBreak(CloseReason reason) {
  return reason == CloseReason::kTransportError ||
         reason == CloseReason::kRequestRefused ||
         reason == CloseReason::kAccessRefused;
}

constexpr const char* CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kClosedByClient:
      return "closed by its client";
    case CloseReason::kPeerClosed:
      return "closed by the peer";
    case CloseReason::kTransportError:
      return "transport error";
    case CloseReason::kRequestRefused:
      return "its responder refused an invalid request";
    case CloseReason::kAccessRefused:
      return "its responder refused an access";
    case CloseReason::kClientBroke:
      return "the client corrupted its rings";
    case CloseReason::kDaemonStopping:
      return "the daemon stopped";
  }
  return "closed";
}

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_CLOSE_REASON_H_
