// A child process for tests: started with posix_spawn (or fork and exec,
// when it needs resource limits of its own), its stdin and stdout on pipes,
// killed and reaped on destruction if still running, so that a failed
// assertion leaves no process behind.
//
// Thread-compatible.
#ifndef RDMAPLANE_TESTS_TESTING_CHILD_PROCESS_H_
#define RDMAPLANE_TESTS_TESTING_CHILD_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace rdmaplane::testing {

// A binary of this workspace in the test's runfiles, e.g.
// "tests/lifecycle/target_client".
inline std::string RunfilePath(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir ? srcdir : ".") + "/" +
         (workspace ? workspace : "rdmaplane") + "/" + path;
}

class ChildProcess {
 public:
  // `open_files`: when not 0, the child's open-file limit (soft and hard).
  static std::unique_ptr<ChildProcess> Spawn(
      const std::vector<std::string>& argv, rlim_t open_files = 0) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return nullptr;
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      return nullptr;
    }
    std::vector<char*> args;
    for (const std::string& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    pid_t pid = -1;
    if (open_files != 0) {
      // Only async-signal-safe calls between fork and exec.
      pid = fork();
      if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        const rlimit files{open_files, open_files};
        setrlimit(RLIMIT_NOFILE, &files);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        signal(SIGPIPE, SIG_DFL);
        execve(args[0], args.data(), environ);
        _exit(127);
      }
    } else {
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
      posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
      // The test ignores SIGPIPE; the child should not inherit that.
      posix_spawnattr_t attr;
      posix_spawnattr_init(&attr);
      sigset_t defaults, none;
      sigemptyset(&defaults);
      sigaddset(&defaults, SIGPIPE);
      sigemptyset(&none);
      posix_spawnattr_setsigdefault(&attr, &defaults);
      posix_spawnattr_setsigmask(&attr, &none);
      posix_spawnattr_setflags(&attr,
                               POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
      if (posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ) !=
          0) {
        pid = -1;
      }
      posix_spawn_file_actions_destroy(&actions);
      posix_spawnattr_destroy(&attr);
    }
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
      close(in[1]);
      close(out[0]);
      return nullptr;
    }
    auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
    child->pid_ = pid;
    child->stdin_ = in[1];
    child->stdout_ = out[0];
    return child;
  }

  ~ChildProcess() {
    if (pid_ > 0) Kill();
    CloseStdin();
    if (stdout_ >= 0) close(stdout_);
  }

  pid_t pid() const { return pid_; }

  // The next line of the child's stdout without the newline; nullopt at end
  // of file or when `timeout` passes first.
  std::optional<std::string> ReadLine(
      absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time end = absl::Now() + timeout;
    while (true) {
      if (size_t nl = pending_.find('\n'); nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return line;
      }
      const int64_t left = absl::ToInt64Milliseconds(end - absl::Now());
      if (left <= 0) return std::nullopt;
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[256];
      const ssize_t n = read(stdout_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

  // The first line that starts with `prefix`, skipping others.
  std::optional<std::string> ReadLineStartingWith(
      const std::string& prefix, absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time end = absl::Now() + timeout;
    while (auto line = ReadLine(end - absl::Now())) {
      if (line->rfind(prefix, 0) == 0) return line;
    }
    return std::nullopt;
  }

  bool WriteLine(const std::string& line) {
    const std::string s = line + "\n";
    return write(stdin_, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  }

  void CloseStdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }

  // Reaps the child; returns its wait status.
  int Wait() {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  // SIGKILL, then reap; returns the wait status.
  int Kill() {
    kill(pid_, SIGKILL);
    return Wait();
  }

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string pending_;
};

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_CHILD_PROCESS_H_
