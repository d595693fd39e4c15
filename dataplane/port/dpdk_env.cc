#include "dataplane/port/dpdk_env.h"

#include <pthread.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <sched.h>
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

// Whether the arguments choose the lcores (-l, -c, --lcores). Without a
// choice the EAL takes every CPU and pins the calling thread to the first,
// and every thread started later inherits that pin.
bool ChoosesLcores(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a.rfind("--lcores", 0) == 0 ||
           (a.size() >= 2 && a[0] == '-' && (a[1] == 'l' || a[1] == 'c'));
  });
}

// A memif vdev in memif's own zero-copy mode, which shares this process's
// packet memory with its peer by descriptor: one hugepage file per memory
// list (--single-file-segments).
bool MemifZeroCopy(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a.rfind("--vdev=net_memif", 0) == 0 &&
           a.find("zero-copy=yes") != std::string::npos;
  });
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
  }
  const bool single_file = HasArg(options.args, "--single-file-segments") ||
                           (options.hugepages && MemifZeroCopy(options.args));
  if (options.hugepages && !single_file) {
    // The hugepage files are unlinked once mapped: nothing is left in the
    // hugetlbfs mount when the process ends, however it ends. (Not with
    // --single-file-segments, which the EAL does not combine with it:
    // ShutdownDpdk removes those files.)
    args.push_back("--huge-unlink");
  }
  args.push_back("--file-prefix=" + (options.file_prefix.empty()
                                         ? absl::StrCat("rdmaplane-", getpid())
                                         : options.file_prefix));
  args.push_back("--log-level=lib.eal:warning");
  args.push_back("--log-level=lib.telemetry:error");
  args.insert(args.end(), options.args.begin(), options.args.end());
  if (single_file && !HasArg(options.args, "--single-file-segments")) {
    args.push_back("--single-file-segments");
  }
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
    // Without an lcore choice the caller keeps the CPUs it was given
    // (taskset, CPUAffinity=), and so do the threads it starts later.
    cpu_set_t given;
    const bool keep_cpus = !ChoosesLcores(args) &&
                           sched_getaffinity(0, sizeof(given), &given) == 0;
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0) {
      result = absl::UnavailableError(absl::StrCat(
          "DPDK EAL initialization failed: ", rte_strerror(rte_errno),
          options.hugepages ? " (are 2 MiB hugepages reserved?)" : ""));
      return;
    }
    if (keep_cpus) {
      pthread_setaffinity_np(pthread_self(), sizeof(given), &given);
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
