// rdmaplanectl: asks a running rdmaplaned what it is doing.
//
//   rdmaplanectl [--socket=PATH] [--json] [--timeout=5s] TOPIC
//
// TOPIC is status, clients, connections, registrations or counters. Exit
// status: 0 answered, 1 no answer (no daemon, permission, daemon error),
// 2 bad usage.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "api/shm/setup.h"
#include "control/admin.h"
#include "control/status.h"

ABSL_FLAG(std::string, socket, "",
          "the daemon's Unix socket (default: /run/rdmaplane/rdmaplane.sock "
          "as root, else $XDG_RUNTIME_DIR/rdmaplane.sock or "
          "/tmp/rdmaplane-<uid>.sock)");
ABSL_FLAG(bool, json, false, "answer in JSON instead of tables");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "how long to wait for the whole answer");

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

std::string Usage() {
  std::vector<std::string> topics(rdmaplane::control::kStatusTopics.begin(),
                                  rdmaplane::control::kStatusTopics.end());
  return absl::StrCat(
      "usage: rdmaplanectl [--socket=PATH] [--json] [--timeout=DURATION] "
      "TOPIC\n"
      "topics: ",
      absl::StrJoin(topics, ", "),
      "\n"
      "  --socket=PATH       the daemon's socket (default ",
      rdmaplane::shm::DefaultSocketPath(),
      ")\n"
      "  --json              JSON instead of tables\n"
      "  --timeout=DURATION  how long to wait for the answer (default 5s)\n");
}

int UsageError(const std::string& why) {
  std::fprintf(stderr, "rdmaplanectl: %s\n%s", why.c_str(), Usage().c_str());
  return kExitUsage;
}

// Sets this program's flags from argv (with absl's parsers, so values read
// as they would anywhere else) and collects the other arguments. Unlike
// absl::ParseCommandLine, a bad flag is a usage error (exit 2), and only
// this program's flags are accepted.
bool ParseArguments(int argc, char** argv, std::vector<std::string>* args,
                    bool* help, std::string* error) {
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      args->push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string value;
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "help" || name == "h") {
      *help = true;
      continue;
    }
    if (name == "nojson" && !has_value) {
      name = "json";
      value = "false";
    } else if (name == "json" && !has_value) {
      value = "true";
    } else if (name != "socket" && name != "timeout" && name != "json") {
      *error = "unknown flag " + arg;
      return false;
    } else if (!has_value) {
      if (i + 1 >= argc) {
        *error = "--" + name + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string why;
    if (flag == nullptr || !flag->ParseFrom(value, &why)) {
      *error = "--" + name + "=" + value + ": " + why;
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  bool help = false;
  std::string error;
  if (!ParseArguments(argc, argv, &args, &help, &error)) {
    return UsageError(error);
  }
  if (help) {
    std::fputs(Usage().c_str(), stdout);
    return kExitOk;
  }
  if (args.empty()) return UsageError("which topic?");
  if (args.size() > 1) return UsageError("one topic at a time");
  const std::string& topic = args[0];
  if (!rdmaplane::control::ValidTopic(topic)) {
    return UsageError("unknown topic '" + topic + "'");
  }
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return UsageError("--timeout must be positive");
  }
  std::string socket = absl::GetFlag(FLAGS_socket);
  if (socket.empty()) socket = rdmaplane::shm::DefaultSocketPath();
  const bool json = absl::GetFlag(FLAGS_json);

  const absl::StatusOr<std::string> answer =
      rdmaplane::control::QueryDaemon(socket, topic, json, timeout);
  if (!answer.ok()) {
    std::fprintf(stderr, "rdmaplanectl: %s\n",
                 std::string(answer.status().message()).c_str());
    return kExitFailed;
  }
  std::string out = *answer;
  if (!out.empty() && out.back() != '\n') out.push_back('\n');
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() ||
      std::fflush(stdout) != 0) {
    return kExitFailed;  // e.g. a closed pipe; nothing useful to say
  }
  return kExitOk;
}
