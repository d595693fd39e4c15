#include "api/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "api/shm/layout.h"

namespace rdmaplane {
namespace {

// The daemon speaks shm::StatusCode; clients see rdp_status.
static_assert(int{shm::kStatusOk} == int{RDP_OK} && int{shm::kStatusPending} == int{RDP_PENDING} &&
              int{shm::kStatusInvalid} == int{RDP_ERR_INVALID} &&
              int{shm::kStatusFault} == int{RDP_ERR_FAULT} &&
              int{shm::kStatusNoBuffers} == int{RDP_ERR_NO_BUFFERS} &&
              int{shm::kStatusNotConnected} == int{RDP_ERR_NOT_CONNECTED} &&
              int{shm::kStatusConnReset} == int{RDP_ERR_CONN_RESET} &&
              int{shm::kStatusConnAborted} == int{RDP_ERR_CONN_ABORTED} &&
              int{shm::kStatusAborted} == int{RDP_ERR_ABORTED} &&
              int{shm::kStatusRemoteResources} == int{RDP_ERR_REMOTE_RESOURCES} &&
              int{shm::kStatusNetDown} == int{RDP_ERR_NET_DOWN} &&
              int{shm::kStatusRefused} == int{RDP_ERR_REFUSED} &&
              int{shm::kStatusPermission} == int{RDP_ERR_PERMISSION} &&
              int{shm::kStatusTimeout} == int{RDP_ERR_TIMEOUT} &&
              int{shm::kStatusAgain} == int{RDP_ERR_AGAIN} &&
              int{shm::kStatusLimit} == int{RDP_ERR_LIMIT});

constexpr char kPayloadUrl[] = "rdmaplane/rdp_status";

absl::StatusCode CanonicalCode(int code) {
  switch (code) {
    case RDP_OK: return absl::StatusCode::kOk;
    case RDP_ERR_INVALID: return absl::StatusCode::kInvalidArgument;
    case RDP_ERR_FAULT: return absl::StatusCode::kOutOfRange;
    case RDP_ERR_NO_BUFFERS: return absl::StatusCode::kResourceExhausted;
    case RDP_ERR_NOT_CONNECTED: return absl::StatusCode::kFailedPrecondition;
    case RDP_ERR_CONN_RESET:
    case RDP_ERR_CONN_ABORTED:
    case RDP_ERR_NET_DOWN: return absl::StatusCode::kUnavailable;
    case RDP_ERR_ABORTED: return absl::StatusCode::kAborted;
    case RDP_ERR_REMOTE_RESOURCES: return absl::StatusCode::kOutOfRange;
    case RDP_ERR_REFUSED: return absl::StatusCode::kNotFound;
    case RDP_ERR_PERMISSION: return absl::StatusCode::kPermissionDenied;
    case RDP_ERR_TIMEOUT: return absl::StatusCode::kDeadlineExceeded;
    case RDP_ERR_AGAIN: return absl::StatusCode::kUnavailable;
    case RDP_ERR_LIMIT: return absl::StatusCode::kResourceExhausted;
    default: return absl::StatusCode::kUnknown;
  }
}

}  // namespace

namespace {
thread_local std::string last_error;
}  // namespace

void SetLastError(absl::string_view message) {
  last_error.assign(message.data(), message.size());
}

absl::Status MakeStatus(int rdp_code, absl::string_view message) {
  if (rdp_code == RDP_OK) return absl::OkStatus();
  SetLastError(message);
  absl::Status s(CanonicalCode(rdp_code), message);
  s.SetPayload(kPayloadUrl, absl::Cord(std::to_string(rdp_code)));
  return s;
}

int RdpCode(const absl::Status& status) {
  if (status.ok()) return RDP_OK;
  if (auto payload = status.GetPayload(kPayloadUrl)) {
    return std::stoi(std::string(*payload));
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: return RDP_ERR_INVALID;
    case absl::StatusCode::kResourceExhausted: return RDP_ERR_NO_BUFFERS;
    case absl::StatusCode::kPermissionDenied: return RDP_ERR_PERMISSION;
    case absl::StatusCode::kDeadlineExceeded: return RDP_ERR_TIMEOUT;
    case absl::StatusCode::kNotFound: return RDP_ERR_REFUSED;
    default: return RDP_ERR_NET_DOWN;
  }
}

}  // namespace rdmaplane

extern "C" const char* rdp_status_name(int status) {
  switch (status) {
    case RDP_OK: return "ok";
    case RDP_PENDING: return "pending";
    case RDP_ERR_INVALID: return "invalid";
    case RDP_ERR_FAULT: return "fault";
    case RDP_ERR_NO_BUFFERS: return "no buffers";
    case RDP_ERR_NOT_CONNECTED: return "not connected";
    case RDP_ERR_CONN_RESET: return "connection reset";
    case RDP_ERR_CONN_ABORTED: return "connection aborted";
    case RDP_ERR_ABORTED: return "operation aborted";
    case RDP_ERR_REMOTE_RESOURCES: return "remote resources";
    case RDP_ERR_NET_DOWN: return "daemon unreachable";
    case RDP_ERR_REFUSED: return "connection refused";
    case RDP_ERR_PERMISSION: return "permission denied";
    case RDP_ERR_TIMEOUT: return "timed out";
    case RDP_ERR_AGAIN: return "try again";
    case RDP_ERR_LIMIT: return "limit reached";
  }
  return "unknown status";
}

extern "C" const char* rdp_last_error(void) {
  return rdmaplane::last_error.c_str();
}
