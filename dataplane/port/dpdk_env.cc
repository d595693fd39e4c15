#include "dataplane/port/dpdk_env.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace rdmaplane::port {
namespace {

// Mount points of hugetlbfs, from /proc/mounts.
std::vector<std::string> HugetlbfsMounts() {
  std::vector<std::string> dirs;
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string device, dir, type;
    if (fields >> device >> dir >> type && type == "hugetlbfs") {
      dirs.push_back(dir);
    }
  }
  return dirs;
}

bool HugetlbfsMounted() { return !HugetlbfsMounts().empty(); }

bool HasArg(const std::vector<std::string>& args, const std::string& arg) {
  return std::find(args.begin(), args.end(), arg) != args.end();
}

// With --single-file-segments the EAL keeps one hugepage file per memory
// list (<hugedir>/<prefix>map_<n>), which it neither unlinks nor removes at
// exit: ShutdownDpdk removes them, or the pages they hold stay taken.
struct HugeFiles {
  std::string prefix;  // empty: nothing to remove
  std::vector<std::string> dirs;
};
HugeFiles& Leftovers() {
  static HugeFiles files;
  return files;
}

}  // namespace

std::vector<std::string> EalArguments(const EalOptions& options) {
  std::vector<std::string> args = {"rdmaplane"};
  if (!options.allow_pci) {
    args.push_back("--no-pci");
    // Virtual devices only: I/O addresses are virtual addresses (as root
    // the EAL would otherwise pick physical ones, which nothing here needs
    // and which would keep mbufs from spanning 4 KiB pages).
    args.push_back("--iova-mode=va");
  }
  if (!options.hugepages) {
    args.push_back("--no-huge");
    args.push_back("-m");
    args.push_back(std::to_string(options.memory_mb));
  } else if (!HasArg(options.args, "--single-file-segments")) {
    // The hugepage files are unlinked once mapped: nothing is left in the
    // hugetlbfs mount when the process ends, however it ends. (Not with
    // --single-file-segments, which memif's zero-copy mode needs and the
    // EAL does not combine with it: the EAL removes its files at exit.)
    args.push_back("--huge-unlink");
  }
  args.push_back("--file-prefix=" +
                 (options.file_prefix.empty()
                      ? absl::StrCat("rdmaplane-", getpid())
                      : options.file_prefix));
  args.push_back("--log-level=lib.eal:warning");
  args.push_back("--log-level=lib.telemetry:error");
  args.insert(args.end(), options.args.begin(), options.args.end());
  return args;
}

absl::Status InitDpdk(const EalOptions& options) {
  static std::once_flag once;
  static absl::Status result;
  std::call_once(once, [&] {
    std::vector<std::string> args = EalArguments(options);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (options.hugepages && !HugetlbfsMounted()) {
      result = absl::FailedPreconditionError(
          "hugepages were asked for, but no hugetlbfs is mounted (mount -t "
          "hugetlbfs nodev /dev/hugepages, and reserve pages in "
          "/proc/sys/vm/nr_hugepages), or run without hugepages");
      return;
    }
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0) {
      result = absl::UnavailableError(absl::StrCat(
          "DPDK EAL initialization failed: ", rte_strerror(rte_errno),
          options.hugepages ? " (are 2 MiB hugepages reserved?)" : ""));
      return;
    }
    if (options.hugepages && HasArg(args, "--single-file-segments")) {
      HugeFiles& files = Leftovers();
      for (const std::string& a : args) {
        if (a.rfind("--file-prefix=", 0) == 0) files.prefix = a.substr(14);
        if (a.rfind("--huge-dir=", 0) == 0) files.dirs.push_back(a.substr(11));
      }
      if (files.dirs.empty()) files.dirs = HugetlbfsMounts();
    }
  });
  return result;
}

void ShutdownDpdk() {
  const std::string dir = rte_eal_get_runtime_dir();
  rte_eal_cleanup();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  HugeFiles& files = Leftovers();
  if (files.prefix.empty()) return;
  const std::string stem = files.prefix + "map_";
  for (const std::string& d : files.dirs) {
    for (const auto& entry : std::filesystem::directory_iterator(d, ec)) {
      if (entry.path().filename().string().rfind(stem, 0) == 0) {
        std::filesystem::remove(entry.path(), ec);
      }
    }
  }
  files = HugeFiles();
}

}  // namespace rdmaplane::port
