// The verbs front end's memory windows (ibv_alloc_mw(3), ibv_bind_mw(3)):
// the daemon keeps each window's slot and carries out binds and
// invalidations in order with the queue pair's other requests
// (control/memory_windows.h). libibverbs' inline ibv_alloc_mw, ibv_bind_mw
// and ibv_dealloc_mw call these through the context's ops.
#include <errno.h>

#include "api/status.h"
#include "api/verbs/objects.h"

namespace rdmaplane::verbs {

ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  if (pd == nullptr || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
    return Fail<ibv_mw*>(EINVAL, nullptr);
  }
  Pd* p = PdOf(pd);
  Context* c = Ctx(pd->context);
  std::lock_guard<std::mutex> lock(c->mu);
  auto rkey = c->client->AllocMw(p->id, static_cast<uint32_t>(type));
  if (!rkey.ok()) {
    return Fail<ibv_mw*>(ErrnoOf(rkey.status()), nullptr, rkey.status());
  }
  auto* mw = new ibv_mw{};
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = *rkey;
  mw->handle = *rkey;
  mw->type = type;
  ++p->users;  // ibv_dealloc_pd answers EBUSY while it has windows
  return mw;
}

// A type 1 window's bind: a BIND_MW work request under the next key
// (ibv_inc_rkey), which the window takes once it is posted; the caller
// restores the old key should the bind complete in error (ibv_bind_mw(3)).
// libibverbs' inline ibv_bind_mw already refused a type 2 window, an
// address without a region, and a region of another protection domain.
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (qp == nullptr || mw == nullptr || bind == nullptr ||
      mw->type != IBV_MW_TYPE_1 ||
      (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) != 0) {
    return EINVAL;
  }
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  if (int err = PostSend(qp, &wr, &bad); err != 0) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

int DeallocMw(ibv_mw* mw) {
  if (mw == nullptr) return EINVAL;
  Context* c = Ctx(mw->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (absl::Status s = c->client->DeallocMw(mw->rkey); !s.ok()) {
    return ErrnoOf(s);
  }
  --PdOf(mw->pd)->users;
  delete mw;
  return 0;
}

}  // namespace rdmaplane::verbs
