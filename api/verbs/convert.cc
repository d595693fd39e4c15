// What the verbs front end's files share: errnos of failed control calls,
// MTUs, GIDs and the node GUID, and eventfd counts taken back.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "api/status.h"
#include "api/verbs/objects.h"

namespace rdmaplane::verbs {

int ErrnoOf(const absl::Status& s) {
  switch (RdpCode(s)) {
    case RDP_ERR_INVALID:
      return EINVAL;
    case RDP_ERR_FAULT:
      return EFAULT;
    case RDP_ERR_NO_BUFFERS:
    case RDP_ERR_LIMIT:
      return ENOMEM;
    case RDP_ERR_PERMISSION:
      return EPERM;
    case RDP_ERR_TIMEOUT:
      return ETIMEDOUT;
    case RDP_ERR_NET_DOWN:
      return ENETDOWN;
    default:
      return EIO;
  }
}

void TakeBackCounts(int fd, uint64_t gone) {
  if (gone == 0) return;
  uint64_t count = 0;
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  if (read(fd, &count, sizeof(count)) == sizeof(count) && count > gone) {
    count -= gone;
    [[maybe_unused]] ssize_t n = write(fd, &count, sizeof(count));
  }
  fcntl(fd, F_SETFL, flags);
}

void ReportFailure(const absl::Status& why) {
  const char* debug = std::getenv("RDMAPLANE_VERBS_DEBUG");
  if (!why.ok() && debug != nullptr && debug[0] != '\0' &&
      std::strcmp(debug, "0") != 0) {
    std::fprintf(stderr, "rdmaplane verbs: %s\n",
                 std::string(why.message()).c_str());
  }
}

uint32_t RemoteFlagsOf(unsigned access) {
  static_assert(RDP_MEM_READ == shm::kAccessRead &&
                RDP_MEM_WRITE == shm::kAccessWrite);
  return ((access & IBV_ACCESS_REMOTE_READ) ? RDP_MEM_READ : 0) |
         ((access & IBV_ACCESS_REMOTE_WRITE) ? RDP_MEM_WRITE : 0) |
         ((access & IBV_ACCESS_REMOTE_ATOMIC) ? shm::kAccessAtomic : 0);
}

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

ibv_mtu MtuEnum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

ibv_gid GidOf(uint32_t ip) {
  ibv_gid g{};
  g.raw[10] = 0xFF;
  g.raw[11] = 0xFF;
  const uint32_t be = htonl(ip);
  std::memcpy(&g.raw[12], &be, 4);
  return g;
}

bool Ipv4OfGid(const ibv_gid& g, uint32_t* ip) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(g.raw, kPrefix, sizeof(kPrefix)) != 0) return false;
  uint32_t be;
  std::memcpy(&be, &g.raw[12], 4);
  *ip = ntohl(be);
  return *ip != 0;
}

uint64_t GuidOf(const shm::DeviceInfo& info) {
  const uint8_t* m = info.mac;
  const uint8_t eui[8] = {
      static_cast<uint8_t>(m[0] ^ 2), m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]};
  uint64_t guid;
  std::memcpy(&guid, eui, 8);
  return guid;  // network order, as ibv_device_attr holds it
}

}  // namespace rdmaplane::verbs
