// The character device files of the verbs front end's devices, for
// programs that look for them before they open a device: UCX takes a
// verbs device only when /dev/infiniband/<its dev_name> is a character
// device it may read and write (uct_ib_device_is_accessible), and a
// machine without the kernel's RDMA stack has no such file. stat and
// access, which the front end stands in for, answer for exactly those
// paths of rdmaplane's devices (uverbs0, uverbs1, ... as ibv_get_device_list
// lists them) when the file does not exist, as a uverbs device (major 231,
// minor 192 + its index) readable and writable by everyone; any other path,
// and a file that does exist, are the kernel's answer. The version nodes in
// verbs.map give these definitions libc's versions, so that a program's
// references (stat@GLIBC_2.33, access@GLIBC_2.2.5) bind here first under
// LD_PRELOAD. Nothing opens the files: the devices are opened through
// ibv_open_device.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>

#include "api/verbs/objects.h"

namespace rdmaplane::verbs {
namespace {

constexpr char kDeviceDir[] = "/dev/infiniband/";
constexpr unsigned kUverbsMajor = 231;
constexpr unsigned kUverbsFirstMinor = 192;

// The index of the device whose file `path` names, or -1.
int DeviceFileIndex(const char* path) {
  if (path == nullptr ||
      std::strncmp(path, kDeviceDir, sizeof(kDeviceDir) - 1) != 0) {
    return -1;
  }
  const char* name = path + sizeof(kDeviceDir) - 1;
  const std::vector<Device*>& devices = Devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (std::strcmp(name, devices[i]->dev.dev_name) == 0) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace
}  // namespace rdmaplane::verbs

extern "C" int stat(const char* path, struct stat* st) {
  // The kernel's answer first (newfstatat fills the struct stat of x86-64
  // and arm64 glibc as it is).
  const long r = syscall(SYS_newfstatat, AT_FDCWD, path, st, 0);
  if (r == 0 || errno != ENOENT) return static_cast<int>(r);
  const int index = rdmaplane::verbs::DeviceFileIndex(path);
  if (index < 0) return -1;  // errno: ENOENT
  std::memset(st, 0, sizeof(*st));
  st->st_mode = S_IFCHR | 0666;
  st->st_nlink = 1;
  st->st_rdev = makedev(
      rdmaplane::verbs::kUverbsMajor,
      rdmaplane::verbs::kUverbsFirstMinor + static_cast<unsigned>(index));
  st->st_blksize = 4096;
  return 0;
}

extern "C" int access(const char* path, int mode) {
  const long r = syscall(SYS_faccessat, AT_FDCWD, path, mode);
  if (r == 0 || errno != ENOENT) return static_cast<int>(r);
  if (rdmaplane::verbs::DeviceFileIndex(path) < 0) return -1;
  if ((mode & X_OK) != 0) {
    errno = EACCES;  // a device file is not executable
    return -1;
  }
  return 0;
}
