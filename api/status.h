// Conversions between rdp_status codes (the C API) and absl::Status (the
// C++ API). The rdp code rides along in the Status payload so it survives.
// Thread-safe.
#ifndef RDMAPLANE_API_STATUS_H_
#define RDMAPLANE_API_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "api/rdmaplane.h"

namespace rdmaplane {

// An error Status also becomes this thread's last error text
// (rdp_last_error).
absl::Status MakeStatus(int rdp_code, absl::string_view message);
// Sets this thread's last error text.
void SetLastError(absl::string_view message);
// RDP_OK for an ok Status; the carried code, or one derived from the
// canonical code, otherwise.
int RdpCode(const absl::Status& status);

}  // namespace rdmaplane

#endif  // RDMAPLANE_API_STATUS_H_
