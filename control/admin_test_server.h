// A stand-in for the daemon's control socket in tests: listens on a Unix
// socket path and hands each accepted connection, one at a time, to a
// handler on the server's thread; the server closes the connection after.
// Thread-safe.
#ifndef RDMAPLANE_CONTROL_ADMIN_TEST_SERVER_H_
#define RDMAPLANE_CONTROL_ADMIN_TEST_SERVER_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "api/shm/setup.h"
#include "control/status.h"

namespace rdmaplane::control {

// A socket path for `name` no longer than a Unix socket allows: under
// $TEST_TMPDIR when that is short enough, else under /tmp.
std::string ShortSocketPath(const std::string& name);

class FakeAdminServer {
 public:
  using Handler = std::function<void(int sock)>;

  // Listens on `path` (replacing a stale file); nullptr on failure.
  static std::unique_ptr<FakeAdminServer> Start(const std::string& path,
                                                Handler handler);
  // Answers every request like the daemon would, from `status`.
  static std::unique_ptr<FakeAdminServer> Answering(const std::string& path,
                                                    DaemonStatus status);
  ~FakeAdminServer();  // stops, joins, removes the socket file

  const std::string& path() const { return path_; }
  // Reads one request from `sock` (within 5 s) and records it; false on
  // anything but a well-formed message.
  bool ReadRequest(int sock, shm::SetupMessage* request);
  std::vector<shm::SetupMessage> requests() const;
  int connections() const;

 private:
  FakeAdminServer() = default;
  static std::unique_ptr<FakeAdminServer> Listen(const std::string& path);
  void Serve();

  std::string path_;
  Handler handler_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<shm::SetupMessage> requests_ ABSL_GUARDED_BY(mu_);
  int connections_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_ADMIN_TEST_SERVER_H_
