// The answer to a control request: a status and, for an error, why (cut to
// the 63 characters a response holds), and the dotted text of an IPv4
// address (host order) that answers and log lines name. Thread-safe (pure
// functions).
#ifndef RDMAPLANE_CONTROL_REPLY_H_
#define RDMAPLANE_CONTROL_REPLY_H_

#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <string>
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

inline std::string IpText(uint32_t ip) {
  in_addr a{htonl(ip)};
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_REPLY_H_
