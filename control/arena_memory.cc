#include "control/arena_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <utility>

#include "control/bus_error_guard.h"
#include "control/log.h"
#include "dataplane/port/eth_port.h"

namespace rdmaplane::control {
size_t PageSizeOf(int fd) {
  struct statfs st {};
  if (fstatfs(fd, &st) == 0 && st.f_type == HUGETLBFS_MAGIC) {
    return static_cast<size_t>(st.f_bsize);
  }
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

absl::Status SealAgainstHoles(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError("not a memfd that takes seals");
  }
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
    return absl::OkStatus();
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0) {
    return absl::InvalidArgumentError(
        "memfd sealed with F_SEAL_SEAL: holes could be punched in it");
  }
  return absl::OkStatus();
}

ArenaMemory::~ArenaMemory() {
  Reap();
  if (!waiting_.empty()) {
    RDP_LOG(kWarning, "%zu client arenas still referenced by frames at exit",
            waiting_.size());
  }
}

std::unique_ptr<rc::MemoryOwner> ArenaMemory::Adopt(uint8_t* host,
                                                    uint64_t bytes, int fd) {
  return AdoptPages(host, bytes, PageSizeOf(fd));
}

std::unique_ptr<rc::MemoryOwner> ArenaMemory::AdoptPages(uint8_t* host,
                                                         uint64_t bytes,
                                                         size_t page_size) {
  const bool zero_copy =
      port_ != nullptr &&
      port_->RegisterExternalMemory(host, bytes, page_size);
  return std::make_unique<rc::MemoryOwner>(zero_copy);
}

void ArenaMemory::Release(uint8_t* host, uint64_t bytes, int fd,
                          std::unique_ptr<rc::MemoryOwner> owner) {
  waiting_.push_back({host, bytes, fd, std::move(owner)});
  Reap();
}

size_t ArenaMemory::Reap() {
  for (size_t i = 0; i < waiting_.size();) {
    Mapping& m = waiting_[i];
    if (m.owner != nullptr && m.owner->references() != 0) {
      ++i;
      continue;
    }
    Unmap(m);
    waiting_[i] = std::move(waiting_.back());
    waiting_.pop_back();
  }
  return waiting_.size();
}

void ArenaMemory::Unmap(Mapping& m) {
  // The device may read mapped memory until its frames are freed, so the
  // mapping for it goes only now.
  if (port_ != nullptr && m.owner != nullptr && m.owner->zero_copy()) {
    port_->UnregisterExternalMemory(m.host);
  }
  // A client's file mapped in place is watched for lost pages until now.
  BusErrorGuard::Unwatch(m.host);
  munmap(m.host, m.bytes);
  if (m.fd >= 0) close(m.fd);
}

}  // namespace rdmaplane::control
