#include "control/admin_test_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "control/admin.h"

namespace rdmaplane::control {

std::string ShortSocketPath(const std::string& name) {
  // The pid alone is not unique: sandboxed copies of a test (bazel
  // --runs_per_test) may all be pid 2 or so in their own namespaces and
  // share /tmp. A random tag tells them apart.
  static const uint64_t tag = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(tag));
  const std::string leaf = "/rdp-" + name + "-" + std::to_string(getpid()) +
                           "-" + std::string(hex, 8) + ".sock";
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir != nullptr && std::strlen(dir) + leaf.size() < 100) {
    return dir + leaf;
  }
  return "/tmp" + leaf;
}

std::unique_ptr<FakeAdminServer> FakeAdminServer::Listen(
    const std::string& path) {
  std::unique_ptr<FakeAdminServer> server(new FakeAdminServer());
  server->path_ = path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return nullptr;
  std::memcpy(addr.sun_path, path.data(), path.size());
  unlink(path.c_str());
  server->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server->listen_fd_ < 0 ||
      bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
           sizeof(addr)) != 0 ||
      listen(server->listen_fd_, 16) != 0 ||
      pipe2(server->stop_pipe_, O_CLOEXEC) != 0) {
    return nullptr;
  }
  return server;
}

std::unique_ptr<FakeAdminServer> FakeAdminServer::Start(const std::string& path,
                                                        Handler handler) {
  std::unique_ptr<FakeAdminServer> server = Listen(path);
  if (server == nullptr) return nullptr;
  server->handler_ = std::move(handler);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

std::unique_ptr<FakeAdminServer> FakeAdminServer::Answering(
    const std::string& path, DaemonStatus status) {
  std::unique_ptr<FakeAdminServer> server = Listen(path);
  if (server == nullptr) return nullptr;
  server->handler_ = [s = server.get(), status](int sock) {
    shm::SetupMessage request;
    if (!s->ReadRequest(sock, &request)) return;
    AnswerAdminRequest(sock, request, [&] { return status; });
  };
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

FakeAdminServer::~FakeAdminServer() {
  if (thread_.joinable()) {
    const char stop = 1;
    (void)!write(stop_pipe_[1], &stop, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, stop_pipe_[0], stop_pipe_[1]}) {
    if (fd >= 0) close(fd);
  }
  if (!path_.empty()) unlink(path_.c_str());
}

void FakeAdminServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++connections_;
    }
    // A slow handler delays a stop until it returns.
    handler_(sock);
    close(sock);
  }
}

bool FakeAdminServer::ReadRequest(int sock, shm::SetupMessage* request) {
  timeval tv{5, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int fd0 = -1, fd1 = -1;
  if (!shm::RecvSetup(sock, request, &fd0, &fd1)) return false;
  for (int fd : {fd0, fd1}) {
    if (fd >= 0) close(fd);
  }
  std::lock_guard<std::mutex> lock(mu_);
  requests_.push_back(*request);
  return true;
}

std::vector<shm::SetupMessage> FakeAdminServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

int FakeAdminServer::connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_;
}

}  // namespace rdmaplane::control
