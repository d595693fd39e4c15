// Verbs the front end does not serve: each fails with the errno
// docs/verbs.md gives, and none reaches the real libibverbs.
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

#include "api/verbs/objects.h"

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

// --- Not served: refused with EOPNOTSUPP (docs/verbs.md) ------------------

int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }

}  // extern "C"

// --- Not served, from libibverbs' later versions ----------------------------

extern "C" {

// Importing objects shared through a command fd: this front end's objects
// live in a session of the process that made them.
ibv_context* ibv_import_device(int) {
  return Fail<ibv_context*>(EOPNOTSUPP, nullptr);
}
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
  return Fail<ibv_pd*>(EOPNOTSUPP, nullptr);
}
ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) {
  return Fail<ibv_mr*>(EOPNOTSUPP, nullptr);
}
ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
  return Fail<ibv_dm*>(EOPNOTSUPP, nullptr);
}
// Nothing can have been imported.
void ibv_unimport_pd(ibv_pd*) {}
void ibv_unimport_mr(ibv_mr*) {}
void ibv_unimport_dm(ibv_dm*) {}

// dma-buf memory belongs to a device driver; there is none here.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return Fail<ibv_mr*>(EOPNOTSUPP, nullptr);
}


// Enhanced connection establishment: no options to offer or accept
// (ibv_set_ece(3): EOPNOTSUPP).
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }

// No promise that data lands in order beyond what completions say.
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }

// The data port's MAC of a GID is resolved inside the daemon (ARP); it is
// not handed out.
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*,
                                uint16_t*) {
  return Fail<int>(EOPNOTSUPP, EOPNOTSUPP);
}

}  // extern "C"
