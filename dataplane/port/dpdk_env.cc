#include "dataplane/port/dpdk_env.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace rdmaplane::port {
namespace {

bool HugetlbfsMounted() {
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    if (line.find(" hugetlbfs ") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> EalArguments(const EalOptions& options) {
  std::vector<std::string> args = {"rdmaplane"};
  if (!options.allow_pci) {
    args.push_back("--no-pci");
    // Virtual devices only: I/O addresses are virtual addresses. (As root
    // the EAL would otherwise pick physical addresses, and with 4 KiB pages
    // lay mbufs out one per page, which af_xdp's packet memory, registered
    // as one contiguous range, does not expect.)
    args.push_back("--iova-mode=va");
  }
  if (!options.hugepages) {
    args.push_back("--no-huge");
    args.push_back("-m");
    args.push_back(std::to_string(options.memory_mb));
  } else {
    // The hugepage files are unlinked once mapped: nothing is left in the
    // hugetlbfs mount when the process ends, however it ends.
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
    }
  });
  return result;
}

void ShutdownDpdk() {
  const std::string dir = rte_eal_get_runtime_dir();
  rte_eal_cleanup();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

}  // namespace rdmaplane::port
