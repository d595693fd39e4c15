// "A client can kill the daemon": a client punches a hole in its own arena
// (hugetlb or regular), takes the freed hugepage with another mapping, and
// has its peer write into the registered region -- or reads from the hole
// as the source of its own write. The daemon seals every arena and session
// region it maps against holes (control/arena_memory.h), so the punch is
// refused, the transfers complete, and the daemon (in this process: a
// SIGBUS would end the test) stays up. Hugetlb cases reserve hugepages as
// root and give them back; without root they are skipped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "api/client.h"
#include "api/rdmaplane.h"
#include "tests/testing/test_util.h"

namespace rdmaplane {
namespace {

using testing::TestDaemon;

// The memfd behind the mapping that holds `p` (its inode, from
// /proc/self/maps, matched against /proc/self/fd), or -1.
int MemfdOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  unsigned long inode = 0;
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    unsigned long ino = 0;
    char perms[8], offset[32], dev[32];
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %31s %31s %lu", &lo, &hi,
                    perms, offset, dev, &ino) == 6 &&
        lo <= addr && addr < hi) {
      inode = ino;
      break;
    }
  }
  if (inode == 0) return -1;
  int found = -1;
  DIR* dir = opendir("/proc/self/fd");
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    struct stat st{};
    if (fd > 2 && fstat(fd, &st) == 0 && st.st_ino == inode) found = fd;
  }
  closedir(dir);
  return found;
}

// Reserves `pages` more 2 MiB hugepages for the test, and gives them back.
class Hugepages {
 public:
  explicit Hugepages(long pages) {
    std::ifstream in("/proc/sys/vm/nr_hugepages");
    if (geteuid() != 0 || !(in >> before_)) return;
    ok_ = Set(before_ + pages);
  }
  ~Hugepages() {
    if (ok_) Set(before_);
  }
  bool ok() const { return ok_; }

 private:
  static bool Set(long n) {
    std::ofstream out("/proc/sys/vm/nr_hugepages");
    out << n;
    return static_cast<bool>(out.flush());
  }
  long before_ = 0;
  bool ok_ = false;
};

// Maps (and keeps) every free hugepage, so that one punched out of an arena
// could not come back.
struct FreeHugepagesTaken {
  FreeHugepagesTaken() {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    long free_pages = 0;
    while (std::getline(meminfo, line)) {
      std::sscanf(line.c_str(), "HugePages_Free: %ld", &free_pages);
    }
    bytes = static_cast<size_t>(free_pages) << 21;
    if (bytes == 0) return;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE,
                   -1, 0);
    if (m != MAP_FAILED) mapping = m;
  }
  ~FreeHugepagesTaken() {
    if (mapping != nullptr) munmap(mapping, bytes);
  }
  void* mapping = nullptr;
  size_t bytes = 0;
};

class HolesTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Open(ClientOptions::Hugepages huge) {
    ClientOptions o;
    o.socket_path = daemon_.daemon->socket_path();
    o.arena_bytes = 4u << 20;
    o.hugepages = huge;
    auto c = Client::Open(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // The attack: `victim` holds the target (`hole_in_target`) or the source
  // of a write across the pair; it punches a hole in that arena and drops
  // its pages, then the write runs.
  void Attack(ClientOptions::Hugepages huge, bool hole_in_target) {
    std::unique_ptr<Client> server = Open(huge);
    std::unique_ptr<Client> client = Open(huge);
    ASSERT_TRUE(server != nullptr && client != nullptr);
    ASSERT_TRUE(server->Listen("holes").ok());
    auto c = client->Connect("holes");
    auto s = server->Accept("holes", absl::Seconds(5));
    ASSERT_TRUE(c.ok() && s.ok());
    constexpr uint32_t kBytes = 2u << 20;
    auto* target = static_cast<uint8_t*>(server->Alloc(kBytes));
    auto* source = static_cast<uint8_t*>(client->Alloc(kBytes));
    ASSERT_TRUE(target != nullptr && source != nullptr);
    if (huge == ClientOptions::Hugepages::kOn) {
      ASSERT_TRUE(server->hugepages() && client->hugepages());
    }
    std::memset(source, 0x7A, kBytes);
    uint8_t desc[RDP_DESCRIPTOR_BYTES];
    uint32_t len = sizeof(desc);
    ASSERT_EQ(server->RegisterRdmaMemory(*s, target, kBytes, RDP_MEM_WRITE,
                                         desc, &len),
              RDP_OK);
    auto lkey = client->RegisterMemory(source, kBytes, RDP_MEM_READ);
    ASSERT_TRUE(lkey.ok());
    uint8_t* victim = hole_in_target ? target : source;
    const int fd = MemfdOf(victim);
    ASSERT_GE(fd, 0) << "no memfd behind the arena";
    EXPECT_NE(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                        kBytes),
              0)
        << "a hole was punched in an arena the daemon maps";
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(madvise(victim, kBytes, MADV_REMOVE), 0)
        << "the arena's pages were removed";
    FreeHugepagesTaken taken;
    for (int round = 0; round < 4; ++round) {
      rdp_overlapped ov{};
      rdp_sge sge{source, kBytes, *lkey};
      ASSERT_EQ(client->Write(*c, &sge, 1, desc, len, 0, 0, &ov), RDP_PENDING);
      EXPECT_EQ(client->GetOverlappedResult(*c, &ov, true, nullptr), RDP_OK);
    }
    EXPECT_EQ(target[kBytes - 1], 0x7A);
  }

  TestDaemon daemon_{"holes"};
};

TEST_F(HolesTest, AHoleInAHugetlbTargetIsRefused) {
  Hugepages reserved(8);
  if (!reserved.ok()) GTEST_SKIP() << "reserving hugepages needs root";
  Attack(ClientOptions::Hugepages::kOn, /*hole_in_target=*/true);
}

TEST_F(HolesTest, AHoleInAHugetlbSourceIsRefused) {
  Hugepages reserved(8);
  if (!reserved.ok()) GTEST_SKIP() << "reserving hugepages needs root";
  Attack(ClientOptions::Hugepages::kOn, /*hole_in_target=*/false);
}

TEST_F(HolesTest, AHoleInARegularArenaIsRefused) {
  Attack(ClientOptions::Hugepages::kOff, /*hole_in_target=*/true);
  Attack(ClientOptions::Hugepages::kOff, /*hole_in_target=*/false);
}

TEST_F(HolesTest, AHoleInTheSessionRegionIsRefused) {
  std::unique_ptr<Client> client = Open(ClientOptions::Hugepages::kOff);
  ASSERT_NE(client, nullptr);
  int refused = 0, sessions = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (dirent* e = readdir(dir)) {
    char link[256];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (std::strstr(link, "memfd:rdmaplane-session") == nullptr) continue;
    ++sessions;
    const int fd = std::atoi(e->d_name);
    refused += fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                         4096) != 0;
  }
  closedir(dir);
  ASSERT_GT(sessions, 0);
  EXPECT_EQ(refused, sessions) << "a hole was punched in a session region";
  EXPECT_NE(client->Alloc(4096), nullptr) << "the session stopped working";
}

}  // namespace
}  // namespace rdmaplane
