// The answer to a control request: a status and, for an error, why (cut to
// the 63 characters a response holds). Thread-safe (a pure function).
#ifndef RDMAPLANE_CONTROL_REPLY_H_
#define RDMAPLANE_CONTROL_REPLY_H_

#include <cstdint>
#include <cstdio>
#include <string_view>

#include "api/shm/layout.h"

namespace rdmaplane::control {

inline shm::ControlResponse Reply(int32_t status,
                                  std::string_view message = "") {
  shm::ControlResponse r{};
  r.status = status;
  std::snprintf(r.message, sizeof(r.message), "%.*s",
                static_cast<int>(message.size()), message.data());
  return r;
}

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_REPLY_H_
