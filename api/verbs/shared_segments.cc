// shmdt, which the verbs front end stands in for: ibv_reg_mr moves the
// pages of a SysV shared memory segment onto shared memory of its own
// (docs/verbs.md, "Memory registration"), after which libc's shmdt no
// longer finds the attachment (EINVAL) or leaves the moved pages mapped.
// Applications that register such segments -- perftest's --use_hugepages,
// UCX's memory pools -- detach them with shmdt. The version node in
// verbs.map gives this definition libc's version, so that an application's
// reference (shmdt@GLIBC_2.2.5) binds here first under LD_PRELOAD.
#include <sys/shm.h>

#include "api/client_memory.h"

extern "C" int shmdt(const void* addr) {
  return rdmaplane::memory::DetachSharedSegment(addr);
}
