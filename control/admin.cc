#include "control/admin.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "api/shm/layout.h"

namespace rdmaplane::control {
namespace {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(absl::Duration timeout)
      : infinite_(timeout == absl::InfiniteDuration()) {
    if (!infinite_) {
      const int64_t us =
          std::max<int64_t>(0, absl::ToInt64Microseconds(timeout));
      end_ = Clock::now() + std::chrono::microseconds(us);
    }
  }
  bool Expired() const { return !infinite_ && Clock::now() >= end_; }
  // For poll(2): -1 when infinite, else milliseconds left (rounded up).
  int PollMs() const {
    if (infinite_) return -1;
    const auto left = end_ - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
  }

 private:
  bool infinite_;
  Clock::time_point end_{};
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// 1: ready; 0: the deadline passed; -1: poll failed.
int WaitFor(int fd, short events, const Deadline& deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, deadline.PollMs());
    if (n > 0) return 1;
    if (n == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

enum class Io { kDone, kClosed, kTimeout, kError };

// Sends all of [data, data + size). kClosed: the peer is gone.
Io SendAll(int fd, const char* data, size_t size, const Deadline& deadline) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int ready = WaitFor(fd, POLLOUT, deadline);
      if (ready == 0) return Io::kTimeout;
      if (ready < 0) return Io::kError;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return Io::kClosed;
    return Io::kError;
  }
  return Io::kDone;
}

// Receives exactly `size` bytes. kClosed: end of stream (or reset) first.
Io RecvAll(int fd, char* data, size_t size, const Deadline& deadline) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      const int ready = WaitFor(fd, POLLIN, deadline);
      if (ready == 0) return Io::kTimeout;
      if (ready < 0) return Io::kError;
      continue;
    }
    if (errno == ECONNRESET) return Io::kClosed;
    return Io::kError;
  }
  return Io::kDone;
}

absl::Status ConnectError(int error, const std::string& path) {
  switch (error) {
    case ENOENT:
      return absl::UnavailableError(
          absl::StrCat("no daemon at ", path, ": no such socket"));
    case ECONNREFUSED:
      return absl::UnavailableError(
          absl::StrCat("no daemon at ", path, ": connection refused"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(
          absl::StrCat("cannot connect to ", path, ": permission denied"));
    default:
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", path, ": ", std::strerror(error)));
  }
}

// The daemon's rdp_status code as an absl::Status with its reason.
absl::Status DaemonError(int32_t status, const char* text) {
  std::string reason(text, strnlen(text, sizeof(shm::SetupMessage::text)));
  if (reason.empty()) reason = absl::StrCat("daemon error ", status);
  switch (status) {
    case shm::kStatusInvalid:
      return absl::InvalidArgumentError(reason);
    case shm::kStatusPermission:
      return absl::PermissionDeniedError(reason);
    case shm::kStatusNoBuffers:
      return absl::ResourceExhaustedError(reason);
    case shm::kStatusTimeout:
      return absl::DeadlineExceededError(reason);
    case shm::kStatusAgain:
      return absl::UnavailableError(reason);
    default:
      return absl::InternalError(reason);
  }
}

absl::Status IoError(Io io, const std::string& path, const char* what) {
  switch (io) {
    case Io::kClosed:
      return absl::UnavailableError(absl::StrCat(
          "the daemon at ", path, " closed the connection ", what));
    case Io::kTimeout:
      return absl::DeadlineExceededError(
          absl::StrCat("no answer from the daemon at ", path, " in time"));
    default:
      return absl::UnavailableError(absl::StrCat(
          "talking to the daemon at ", path, ": ", std::strerror(errno)));
  }
}

}  // namespace

absl::StatusOr<std::string> QueryDaemon(const std::string& socket_path,
                                        std::string_view topic, bool json,
                                        absl::Duration timeout) {
  const Deadline deadline(timeout);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path must be 1..", sizeof(addr.sun_path) - 1,
                     " bytes: '", socket_path, "'"));
  }
  shm::SetupMessage request = shm::MakeSetup(shm::kSetupAdmin);
  if (topic.size() >= sizeof(request.text) ||
      topic.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "topic must be shorter than ", sizeof(request.text), " bytes"));
  }
  std::memcpy(request.text, topic.data(), topic.size());
  request.id = json ? kAdminFormatJson : kAdminFormatText;
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  const Fd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (sock.get() < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  while (connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr),
                 sizeof(addr)) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {  // the daemon's accept queue is full
      if (deadline.Expired()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the daemon at ", socket_path, " accepts no connections"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    return ConnectError(errno, socket_path);
  }

  // A daemon that refuses this user answers and closes at once; the answer
  // is still there to read when sending fails.
  const Io sent = SendAll(sock.get(), reinterpret_cast<const char*>(&request),
                          sizeof(request), deadline);
  if (sent == Io::kTimeout || sent == Io::kError) {
    return IoError(sent, socket_path, "");
  }
  shm::SetupMessage reply;
  const Io got = RecvAll(sock.get(), reinterpret_cast<char*>(&reply),
                         sizeof(reply), deadline);
  if (got != Io::kDone) {
    return IoError(got, socket_path,
                   "without answering (does it serve admin queries?)");
  }
  if (reply.magic != shm::kSetupMagic || reply.version != shm::kSetupVersion) {
    return absl::DataLossError(
        absl::StrCat("malformed answer from ", socket_path));
  }
  if (reply.type == shm::kSetupHelloReply && reply.status != 0) {
    return DaemonError(reply.status, reply.text);  // refused at accept
  }
  if (reply.type != shm::kSetupAdminReply) {
    return absl::DataLossError(absl::StrCat("unexpected answer type ",
                                            reply.type, " from ", socket_path));
  }
  if (reply.status != 0) return DaemonError(reply.status, reply.text);
  if (reply.length > kMaxAdminAnswerBytes) {
    return absl::DataLossError(
        absl::StrCat("answer of ", reply.length, " bytes from ", socket_path,
                     " is larger than ", kMaxAdminAnswerBytes));
  }
  std::string body(static_cast<size_t>(reply.length), '\0');
  const Io read = RecvAll(sock.get(), body.data(), body.size(), deadline);
  if (read != Io::kDone) {
    return IoError(read, socket_path, "in the middle of its answer");
  }
  return body;
}

std::string AdminAnswerBytes(int32_t status, std::string_view reason,
                             std::string_view body) {
  shm::SetupMessage reply = shm::MakeSetup(shm::kSetupAdminReply);
  reply.status = status;
  reply.length = body.size();
  std::memcpy(reply.text, reason.data(),
              std::min(reason.size(), sizeof(reply.text) - 1));
  std::string bytes(reinterpret_cast<const char*>(&reply), sizeof(reply));
  bytes.append(body);
  return bytes;
}

bool SendAdminBytes(int sock, std::string_view bytes, absl::Duration stall,
                    absl::Duration total) {
  const Deadline all(total);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(sock, bytes.data() + sent, bytes.size() - sent,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (all.Expired()) return false;
    const Deadline quiet(stall);
    const bool all_first =
        all.PollMs() >= 0 &&
        (quiet.PollMs() < 0 || all.PollMs() < quiet.PollMs());
    const int ready = WaitFor(sock, POLLOUT, all_first ? all : quiet);
    if (ready <= 0) return false;  // the peer took nothing for a while
  }
  return true;
}

bool SendAdminAnswer(int sock, int32_t status, std::string_view reason,
                     std::string_view body, absl::Duration stall,
                     absl::Duration total) {
  return SendAdminBytes(sock, AdminAnswerBytes(status, reason, body), stall,
                        total);
}

std::string AdminAnswerFor(const shm::SetupMessage& request,
                           const std::function<DaemonStatus()>& source) {
  if (request.type != shm::kSetupAdmin) {
    return AdminAnswerBytes(shm::kStatusInvalid, "not an admin request", "");
  }
  const std::string_view topic(request.text,
                               strnlen(request.text, sizeof(request.text)));
  if (request.id != kAdminFormatText && request.id != kAdminFormatJson) {
    return AdminAnswerBytes(shm::kStatusInvalid,
                            absl::StrCat("unknown format ", request.id), "");
  }
  if (!ValidTopic(topic)) {
    std::string reason = "unknown topic '";
    reason.append(topic.substr(0, 24));
    reason += "'";
    return AdminAnswerBytes(shm::kStatusInvalid, reason, "");
  }
  const DaemonStatus status = source();
  const std::string body = request.id == kAdminFormatJson
                               ? RenderJson(status, topic)
                               : RenderText(status, topic);
  return AdminAnswerBytes(shm::kStatusOk, "", body);
}

bool AnswerAdminRequest(int sock, const shm::SetupMessage& request,
                        const std::function<DaemonStatus()>& source) {
  return SendAdminBytes(sock, AdminAnswerFor(request, source));
}

}  // namespace rdmaplane::control
