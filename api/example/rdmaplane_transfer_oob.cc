#include "api/example/rdmaplane_transfer_oob.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rdmaplane_transfer {
namespace {

constexpr uint32_t kMagic = 0x54504452;  // "RDPT"
constexpr uint16_t kVersion = 1;
constexpr size_t kMessageBytes = 128;
constexpr size_t kTextBytes = 56;

void Put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void Encode(const Message& m, uint8_t* out) {
  std::memset(out, 0, kMessageBytes);
  Put(out, kMagic, 4);
  Put(out + 4, kVersion, 2);
  Put(out + 6, m.type, 2);
  Put(out + 8, m.status, 4);
  Put(out + 12, m.descriptor_length, 4);
  std::memcpy(out + 16, m.descriptor, RDP_DESCRIPTOR_BYTES);
  Put(out + 48, m.address, 8);
  Put(out + 56, m.size, 8);
  Put(out + 64, m.seed, 8);
  std::string text = m.text;
  if (text.size() > kTextBytes - 1)
    text = text.substr(0, kTextBytes - 4) + "...";
  std::memcpy(out + 72, text.data(), text.size());
}

bool Decode(const uint8_t* in, Message* m, std::string* error) {
  if (Get(in, 4) != kMagic) {
    *error = "the other end is not rdmaplane_transfer (bad magic)";
    return false;
  }
  if (const uint64_t v = Get(in + 4, 2); v != kVersion) {
    *error = absl::StrCat("the other end speaks version ", v, ", this one ",
                          kVersion);
    return false;
  }
  m->type = static_cast<uint16_t>(Get(in + 6, 2));
  m->status = static_cast<uint32_t>(Get(in + 8, 4));
  m->descriptor_length = static_cast<uint32_t>(Get(in + 12, 4));
  if (m->descriptor_length > RDP_DESCRIPTOR_BYTES) {
    *error = absl::StrCat("a descriptor of ", m->descriptor_length, " bytes");
    return false;
  }
  std::memcpy(m->descriptor, in + 16, RDP_DESCRIPTOR_BYTES);
  m->address = Get(in + 48, 8);
  m->size = Get(in + 56, 8);
  m->seed = Get(in + 64, 8);
  const char* text = reinterpret_cast<const char*>(in + 72);
  m->text.assign(text, strnlen(text, kTextBytes));
  return true;
}

void NoDelay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// "HOST:PORT" of a peer, IPv4-mapped addresses as IPv4.
std::string PeerName(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, a->sin6_addr.s6_addr + 12, host, sizeof(host));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    }
    port = ntohs(a->sin6_port);
  } else if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  }
  return HostPort(host, port);
}

}  // namespace

std::string Seconds(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Seconds(d), " s");
}

int WaitFd(int fd, short events, absl::Time deadline) {
  while (true) {
    int ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return 0;
      ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000));
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, ms);
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return -1;
  }
}

Channel::~Channel() { close(fd_); }

bool Channel::Send(const Message& m, absl::Duration timeout,
                   std::string* error) {
  uint8_t buf[kMessageBytes];
  Encode(m, buf);
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t done = 0; done < sizeof(buf);) {
    if (WaitFd(fd_, POLLOUT, deadline) != 1) {
      *error =
          absl::StrCat("cannot send to ", name_, " within ", Seconds(timeout));
      return false;
    }
    const ssize_t n = send(fd_, buf + done, sizeof(buf) - done, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) {
      *error = absl::StrCat("send to ", name_, ": ", std::strerror(errno));
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool Channel::Receive(Message* m, absl::Duration timeout, const char* what,
                      std::string* error) {
  uint8_t buf[kMessageBytes];
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t got = 0; got < sizeof(buf);) {
    const int w = WaitFd(fd_, POLLIN, deadline);
    if (w != 1) {
      *error = w == 0 ? absl::StrCat(name_, " sent no ", what, " within ",
                                     Seconds(timeout))
                      : absl::StrCat("poll: ", std::strerror(errno));
      return false;
    }
    const ssize_t n = recv(fd_, buf + got, sizeof(buf) - got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) {
      *error = n == 0 ? absl::StrCat(name_, " closed the connection")
                      : absl::StrCat("receive from ", name_, ": ",
                                     std::strerror(errno));
      return false;
    }
    got += static_cast<size_t>(n);
  }
  return Decode(buf, m, error);
}

bool Channel::Readable() {
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

std::string HostPort(const std::string& host, uint16_t port) {
  return host.find(':') == std::string::npos
             ? absl::StrCat(host, ":", port)
             : absl::StrCat("[", host, "]:", port);
}

bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port) {
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const size_t end = text.find(']');
    if (end == std::string::npos) return false;
    *host = text.substr(1, end - 1);
    if (end + 1 < text.size()) {
      if (text[end + 1] != ':') return false;
      port_text = text.substr(end + 2);
    }
  } else if (const size_t colon = text.find(':');
             colon != std::string::npos && text.rfind(':') == colon) {
    *host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  } else {
    *host = text;
  }
  uint32_t p;
  if (!port_text.empty() &&
      (!absl::SimpleAtoi(port_text, &p) || p == 0 || p > 65535)) {
    return false;
  }
  if (!port_text.empty()) *port = static_cast<uint16_t>(p);
  return !host->empty();
}

int ConnectTcp(const std::string& host, uint16_t port, absl::Duration timeout,
               std::string* error) {
  const std::string where = HostPort(host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                           &list);
      rc != 0) {
    *error = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc));
    return -1;
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (WaitFd(fd, POLLOUT, deadline) == 1) {
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err != 0) {
      why = err == ECONNREFUSED ? "connection refused"
            : err == ETIMEDOUT
                ? absl::StrCat("no answer within ", Seconds(timeout))
                : std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(list);
  if (fd < 0) {
    *error =
        absl::StrCat("no rdmaplane_transfer server at ", where, " (", why, ")");
    return -1;
  }
  NoDelay(fd);
  return fd;
}

int ListenTcp(uint16_t port, uint16_t* bound, std::string* error) {
  for (const int family : {AF_INET6, AF_INET}) {
    const int fd =
        socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 && family == AF_INET6) continue;
    if (fd < 0) {
      *error = absl::StrCat("socket: ", std::strerror(errno));
      return -1;
    }
    const int one = 1, zero = 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET6) {
      (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(port);
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(port);
      len = sizeof(*a);
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
        listen(fd, 16) != 0) {
      const int err = errno;
      close(fd);
      if (family == AF_INET6 && err == EADDRNOTAVAIL) continue;
      *error = absl::StrCat("cannot listen on out-of-band TCP port ", port,
                            ": ", std::strerror(err));
      return -1;
    }
    len = sizeof(ss);
    (void)getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    *bound = ntohs(ss.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  *error = "no IPv4 or IPv6 sockets";
  return -1;
}

int AcceptTcp(int listen_fd, std::string* peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return -1;
  NoDelay(fd);
  *peer = PeerName(ss);
  return fd;
}

}  // namespace rdmaplane_transfer
