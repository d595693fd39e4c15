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

namespace rdmaplane::verbs {

int PostSrqRecv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  *bad_wr = wr;
  return EOPNOTSUPP;
}

ibv_mw* AllocMw(ibv_pd*, ibv_mw_type) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int BindMw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }
int DeallocMw(ibv_mw*) { return EOPNOTSUPP; }

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

// --- Not served: refused with EOPNOTSUPP (docs/verbs.md) ------------------

ibv_srq* ibv_create_srq(ibv_pd*, ibv_srq_init_attr*) {
  return Fail<ibv_srq*>(EOPNOTSUPP, nullptr);
}
int ibv_destroy_srq(ibv_srq*) { return EOPNOTSUPP; }
int ibv_resize_cq(ibv_cq*, int) { return EOPNOTSUPP; }
int ibv_rereg_mr(ibv_mr*, int, ibv_pd*, void*, size_t, int) {
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_INPUT;
}
ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
  return Fail<ibv_ah*>(EOPNOTSUPP, nullptr);
}
ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, uint8_t) {
  return Fail<ibv_ah*>(EOPNOTSUPP, nullptr);
}
int ibv_destroy_ah(ibv_ah*) { return EOPNOTSUPP; }
int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }

}  // extern "C"
