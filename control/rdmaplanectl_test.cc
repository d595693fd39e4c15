// rdmaplanectl as a process: its arguments, outputs and exit codes against a
// fake daemon socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/setup.h"
#include "control/admin.h"
#include "control/admin_test_server.h"
#include "control/status_sample.h"

namespace rdmaplane::control {
namespace {

std::string CtlPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir ? srcdir : ".") + "/" +
         (workspace ? workspace : "rdmaplane") + "/control/rdmaplanectl";
}

struct CtlRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs rdmaplanectl with `args`. With `no_file_override`, the child cannot
// ignore file modes even as root.
CtlRun Ctl(const std::vector<std::string>& args,
           bool no_file_override = false) {
  CtlRun run;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe";
    return run;
  }
  const std::string binary = CtlPath();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    if (no_file_override &&
        (prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0 ||
         prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) != 0)) {
      _exit(126);
    }
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    if (poll(fds, 2, 10000) <= 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

class RdmaplanectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeAdminServer::Answering(ShortSocketPath("ctl"), sample_);
    ASSERT_NE(server_, nullptr);
    flag_ = "--socket=" + server_->path();
  }
  const DaemonStatus sample_ = SampleStatus();
  std::unique_ptr<FakeAdminServer> server_;
  std::string flag_;
};

TEST_F(RdmaplanectlTest, EveryTopicAsTables) {
  for (std::string_view topic : kStatusTopics) {
    const CtlRun r = Ctl({flag_, std::string(topic)});
    EXPECT_EQ(r.exit_code, 0) << topic << ": " << r.err;
    EXPECT_EQ(r.out, RenderText(sample_, topic));
    EXPECT_EQ(r.err, "");
  }
  const std::vector<shm::SetupMessage> requests = server_->requests();
  ASSERT_EQ(requests.size(), kStatusTopics.size());
  for (const shm::SetupMessage& m : requests) {
    EXPECT_EQ(m.type, shm::kSetupAdmin);
    EXPECT_EQ(m.id, kAdminFormatText);
  }
}

TEST_F(RdmaplanectlTest, JsonEndsInANewline) {
  const CtlRun r = Ctl({"--json", flag_, "connections"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, RenderJson(sample_, "connections") + "\n");
  ASSERT_EQ(server_->requests().size(), 1u);
  EXPECT_EQ(server_->requests()[0].id, kAdminFormatJson);
  EXPECT_EQ(std::string(server_->requests()[0].text), "connections");
}

TEST_F(RdmaplanectlTest, FlagSpellings) {
  CtlRun r = Ctl({"--socket", server_->path(), "-json", "counters"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, RenderJson(sample_, "counters") + "\n");
  r = Ctl({"counters", flag_, "--json=false", "--timeout=2s"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, RenderText(sample_, "counters"));
  r = Ctl({flag_, "--json", "--nojson", "--", "status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, RenderText(sample_, "status"));
}

TEST_F(RdmaplanectlTest, UsageErrorsExitTwoWithoutAsking) {
  const std::vector<std::vector<std::string>> cases = {
      {flag_},
      {flag_, "bogus"},
      {flag_, "Status"},
      {flag_, "status", "clients"},
      {flag_, "--bogus", "status"},
      {flag_, "--timeout=soon", "status"},
      {flag_, "--timeout=-1s", "status"},
      {flag_, "--json=maybe", "status"},
      {flag_, "status", "--socket"},
      {"--flagfile=/dev/null", flag_, "status"},
  };
  for (const auto& args : cases) {
    const CtlRun r = Ctl(args);
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined;
    EXPECT_EQ(r.out, "") << joined;
    EXPECT_TRUE(StartsWith(r.err, "rdmaplanectl: ")) << joined << r.err;
    EXPECT_NE(r.err.find("\nusage: rdmaplanectl "), std::string::npos)
        << joined << r.err;
  }
  EXPECT_EQ(server_->connections(), 0);
  const CtlRun r = Ctl({flag_, "stats"});
  EXPECT_TRUE(StartsWith(r.err, "rdmaplanectl: unknown topic 'stats'\n"))
      << r.err;
}

TEST_F(RdmaplanectlTest, Help) {
  const CtlRun r = Ctl({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(StartsWith(r.out, "usage: rdmaplanectl ")) << r.out;
  EXPECT_NE(r.out.find("status, clients, connections, registrations, counters"),
            std::string::npos)
      << r.out;
  // The default socket is the one clients use.
  EXPECT_NE(r.out.find("(default " + shm::DefaultSocketPath() + ")"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(server_->connections(), 0);
}

TEST(RdmaplanectlErrorsTest, NoDaemon) {
  const std::string path = ShortSocketPath("ctl-none");
  unlink(path.c_str());
  const CtlRun r = Ctl({"--socket=" + path, "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "rdmaplanectl: no daemon at " + path + ": no such socket\n");
}

TEST(RdmaplanectlErrorsTest, StaleSocketIsConnectionRefused) {
  const std::string path = ShortSocketPath("ctl-stale");
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const CtlRun r = Ctl({"--socket=" + path, "status"});
  close(fd);
  unlink(path.c_str());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "rdmaplanectl: no daemon at " + path + ": connection refused\n");
}

TEST(RdmaplanectlErrorsTest, SocketPermissionDenied) {
  auto server = FakeAdminServer::Answering(ShortSocketPath("ctl-perm"), {});
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(chmod(server->path().c_str(), 0), 0);
  const CtlRun r = Ctl({"--socket=" + server->path(), "status"},
                       /*no_file_override=*/true);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "rdmaplanectl: cannot connect to " + server->path() +
                       ": permission denied\n");
  EXPECT_EQ(server->connections(), 0);
}

TEST(RdmaplanectlErrorsTest, DaemonPolicyRefusal) {
  auto server =
      FakeAdminServer::Start(ShortSocketPath("ctl-policy"), [](int sock) {
        shm::SetupMessage reply = shm::MakeSetup(shm::kSetupHelloReply);
        reply.status = shm::kStatusPermission;
        std::snprintf(reply.text, sizeof(reply.text),
                      "uid 1234 is not allowed by this daemon's policy");
        shm::SendSetup(sock, reply);
      });
  ASSERT_NE(server, nullptr);
  const CtlRun r = Ctl({"--socket=" + server->path(), "clients"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "rdmaplanectl: uid 1234 is not allowed by this daemon's policy\n");
}

TEST(RdmaplanectlErrorsTest, SilentDaemonTimesOut) {
  auto server =
      FakeAdminServer::Start(ShortSocketPath("ctl-silent"), [](int sock) {
        char buf[256];
        while (read(sock, buf, sizeof(buf)) > 0) {
        }
      });
  ASSERT_NE(server, nullptr);
  const CtlRun r =
      Ctl({"--socket=" + server->path(), "--timeout=200ms", "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(StartsWith(r.err, "rdmaplanectl: no answer from the daemon at "))
      << r.err;
}

}  // namespace
}  // namespace rdmaplane::control
