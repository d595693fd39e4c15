#include "dataplane/port/dpdk_env.h"

#include <dirent.h>
#include <pthread.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
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

// The address a memif server listens on, as getsockname gives its path:
// `socket` (default /run/memif.sock), in the abstract namespace (a
// leading NUL) unless socket-abstract=no. Empty for a memif client.
std::string MemifListenerName(std::string_view args) {
  if (DeviceArg(args, "role").value_or("server") == "client") return "";
  std::string name(DeviceArg(args, "socket").value_or("/run/memif.sock"));
  if (DeviceArg(args, "socket-abstract").value_or("yes") != "no") {
    name.insert(name.begin(), '\0');
  }
  return name;
}

// The listening AF_UNIX socket of this process bound to `name`, or -1.
int ListenerFd(const std::string& name) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN,
                   &listening, &len) != 0 ||
        listening == 0) {
      continue;
    }
    sockaddr_un addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr),
                    &addr_len) != 0 ||
        addr.sun_family != AF_UNIX) {
      continue;
    }
    const size_t path_len = addr_len - offsetof(sockaddr_un, sun_path);
    std::string bound(addr.sun_path, std::min(path_len, sizeof(addr.sun_path)));
    if (!bound.empty() && bound[0] != '\0') bound = bound.c_str();  // a path
    if (bound == name) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

// DPDK 22.11's memif, as a server, frees its listener when its last port
// closes (memif_socket_remove_device) without unregistering the
// listener's interrupt callback or closing its socket. A memif client
// that connects then (the peer daemon retrying, or starting) wakes that
// callback on freed memory in the EAL's interrupt thread: it spins on
// accept(-1) and, once rte_eal_cleanup unmaps DPDK's memory, crashes the
// process. So before the ports close, each memif server's listening
// socket is replaced, under the same descriptor number, by an eventfd
// that never becomes readable: the interrupt thread's epoll drops the
// socket (its last reference is gone), a connecting peer is refused, and
// the callback never runs again.
void QuietMemifListeners() {
  uint16_t id = 0;
  RTE_ETH_FOREACH_DEV(id) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(id, &info) != 0 || info.driver_name == nullptr ||
        std::strcmp(info.driver_name, "net_memif") != 0) {
      continue;
    }
    const rte_devargs* devargs = rte_dev_devargs(info.device);
    const std::string name = MemifListenerName(
        devargs != nullptr && devargs->args != nullptr ? devargs->args : "");
    if (name.empty()) continue;
    const int fd = ListenerFd(name);
    if (fd < 0) continue;
    const int quiet = eventfd(0, EFD_CLOEXEC);
    if (quiet < 0) continue;
    dup2(quiet, fd);
    close(quiet);
  }
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

std::optional<std::string_view> DeviceArg(std::string_view device,
                                          std::string_view key) {
  while (!device.empty()) {
    const size_t comma = device.find(',');
    const std::string_view arg = device.substr(0, comma);
    if (arg.size() > key.size() && arg.substr(0, key.size()) == key &&
        arg[key.size()] == '=') {
      return arg.substr(key.size() + 1);
    }
    if (comma == std::string_view::npos) break;
    device.remove_prefix(comma + 1);
  }
  return std::nullopt;
}

void ShutdownDpdk() {
  const std::string dir = rte_eal_get_runtime_dir();
  QuietMemifListeners();
  // The ports close now, while the listeners are quiet (rte_eal_cleanup
  // would close them too, unmapping DPDK's memory right after).
  uint16_t id = 0;
  RTE_ETH_FOREACH_DEV(id) { rte_eth_dev_close(id); }
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
